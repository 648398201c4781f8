"""Properties of the search on small random cases, checked against a brute-force search.

Whatever order the search uses, these must hold: it finds a solution exactly when one exists
(brute force over every choice of subrequests and every assignment of distinct devices says
whether one does); any solution it returns respects what was asked (selectors, counts, distinct
devices, devices in use, matchAttribute within a claim); and the first request of the pod uses
its first subrequest that appears in any solution (subrequests are tried in order, each fully).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import (
    Allocated,
    DeviceID,
    NodeRef,
    ResourceClaim,
    SliceIndex,
    Unschedulable,
    parse_resource_slice,
)
from tests.allocator.builders import DRIVER, NODE, allocate, claim, exactly, first_available, gpu, slice_obj, sub

MODELS = ("A", "B")

Alternative = tuple[int, str | None]  # (count, model or None for any)


@dataclass(frozen=True)
class Case:
    devices: tuple[tuple[str, int], ...]  # (model, tier) per device g0, g1, ...
    taken: frozenset[int]  # indices of devices already allocated
    claims: tuple[tuple[tuple[Alternative, ...], ...], ...]  # claim -> request -> alternatives
    match_tier: tuple[bool, ...]  # per claim: matchAttribute on tier over all its requests


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(1, 5))
    devices = tuple((draw(st.sampled_from(MODELS)), draw(st.integers(1, 2))) for _ in range(n))
    taken = frozenset(draw(st.sets(st.integers(0, n - 1), max_size=2)))
    alternative = st.tuples(st.integers(1, 2), st.sampled_from((None, *MODELS)))
    request = st.lists(alternative, min_size=1, max_size=2).map(tuple)
    claims = tuple(draw(st.lists(st.lists(request, min_size=1, max_size=2).map(tuple), min_size=1, max_size=2)))
    match = tuple(draw(st.booleans()) for _ in claims)
    return Case(devices, taken, claims, match)


def selectors(model: str | None) -> list[str]:
    return [f'device.attributes["{DRIVER}"].model == "{model}"'] if model else []


def build(case: Case) -> list[ResourceClaim]:
    """One claim per entry; a request with two alternatives is a firstAvailable with subrequests s0, s1."""
    out = []
    for c, requests in enumerate(case.claims):
        reqs: list[dict[str, Any]] = []
        for r, alternatives in enumerate(requests):
            if len(alternatives) == 1:
                count, model = alternatives[0]
                reqs.append(exactly(f"r{r}", *selectors(model), count=count))
            else:
                subs = [sub(f"s{j}", *selectors(model), count=count) for j, (count, model) in enumerate(alternatives)]
                reqs.append(first_available(f"r{r}", *subs))
        constraints = [{"matchAttribute": f"{DRIVER}/tier"}] if case.match_tier[c] else []
        out.append(claim(f"c{c}", *reqs, constraints=constraints))
    return out


def feasible_choices(case: Case) -> list[tuple[int, ...]]:
    """Brute force: every choice of alternatives (one per request, pod order) that some assignment of
    distinct free devices satisfies."""
    requests = [(c, alternatives) for c, reqs in enumerate(case.claims) for alternatives in reqs]
    free = [i for i in range(len(case.devices)) if i not in case.taken]
    found = []
    for choice in itertools.product(*(range(len(alts)) for _, alts in requests)):
        slots = []
        for (c, alternatives), j in zip(requests, choice, strict=True):
            count, model = alternatives[j]
            slots += [(c, model)] * count
        for chosen in itertools.permutations(free, len(slots)):
            pairs = list(zip(slots, chosen, strict=True))
            if any(model is not None and case.devices[d][0] != model for (_, model), d in pairs):
                continue
            tiers: dict[int, set[int]] = {}
            for (c, _), d in pairs:
                tiers.setdefault(c, set()).add(case.devices[d][1])
            if all(len(tiers.get(c, set())) <= 1 for c in range(len(case.claims)) if case.match_tier[c]):
                found.append(choice)
                break
    return found


@settings(max_examples=150, deadline=None)
@given(cases(), st.permutations(range(5)), st.integers(0, 5))
def test_the_search_finds_a_valid_solution_exactly_when_one_exists(case: Case, order: list[int], wanted: int) -> None:
    """With or without a preference (the first ``wanted`` of ``order``): a preference changes which
    devices, never whether a solution is found, nor which subrequest is used."""
    devices = [gpu(f"g{i}", model=model, tier=tier) for i, (model, tier) in enumerate(case.devices)]
    taken = frozenset(DeviceID(DRIVER, NODE, f"g{i}") for i in case.taken)
    prefer = [DeviceID(DRIVER, NODE, f"g{i}") for i in order[:wanted]]
    outcome = allocate([slice_obj("s", devices)], *build(case), allocated=taken, prefer=prefer)
    assert isinstance(outcome, Allocated | Unschedulable)
    choices = feasible_choices(case)
    assert isinstance(outcome, Allocated) == bool(choices)
    if not isinstance(outcome, Allocated):
        return
    seen: set[int] = set()
    first_choice = None
    for c, (result, requests) in enumerate(zip(outcome.results, case.claims, strict=True)):
        for r, alternatives in enumerate(requests):
            names = {d.request for d in result.devices if d.request.split("/")[0] == f"r{r}"}
            assert len(names) == 1  # one alternative per request
            [name] = names
            j = int(name.split("/s")[1]) if "/" in name else 0
            if first_choice is None:
                first_choice = j
            count, model = alternatives[j]
            got = [int(d.device[1:]) for d in result.devices if d.request == name]
            assert len(got) == count
            assert all(i not in case.taken and (model is None or case.devices[i][0] == model) for i in got)
        indices = [int(d.device[1:]) for d in result.devices]
        assert len(set(indices)) == len(indices)
        assert not seen & set(indices)
        seen |= set(indices)
        if case.match_tier[c]:
            assert len({case.devices[i][1] for i in indices}) == 1
    assert first_choice == min(choice[0] for choice in choices)


# ---------------------------------------------------------------------------------------- SliceIndex memo

Op = tuple[str, int, dict[str, Any]]  # ("upsert" | "delete" | "look", slice number, slice_obj kwargs / labels)

slice_kwargs = st.fixed_dictionaries(
    {
        "scope": st.sampled_from(("node-1", "node-2", "rack-r1", "all")),
        "pool": st.sampled_from(("p", "q")),
        "generation": st.integers(1, 2),
        "count": st.integers(1, 2),
        "pool_priority": st.integers(0, 1),
        "priority": st.integers(-1, 1),
    }
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.integers(0, 3), slice_kwargs),
        st.tuples(st.just("delete"), st.integers(0, 3), st.just({})),
        st.tuples(st.just("look"), st.just(0), st.fixed_dictionaries({"rack": st.sampled_from(("r1", "r2"))})),
    ),
    max_size=12,
)


def make_slice(number: int, kwargs: dict[str, Any]) -> dict[str, Any]:
    scope = kwargs["scope"]
    args = {k: v for k, v in kwargs.items() if k != "scope"}
    if scope.startswith("node-"):
        args["node"] = scope
    elif scope == "rack-r1":
        args["node_selector"] = {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]
        }
    else:
        args["all_nodes"] = True
    return slice_obj(f"s{number}", [gpu(f"d{number}")], **args)


def view(idx: SliceIndex, node: NodeRef) -> tuple[object, ...]:
    pools = idx.pools_for(node)
    gathered = tuple((p.id, p.generation, p.priority, p.incomplete, p.invalid) for p in pools.gathered)
    return gathered, tuple(str(c.id) for c in pools.candidates)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_memoised_pools_always_equal_a_fresh_gathering(operations: list[Op]) -> None:
    memo = SliceIndex()
    current: dict[str, dict[str, Any]] = {}
    labels = {"rack": "r1"}
    for kind, number, payload in operations:
        if kind == "upsert":
            obj = make_slice(number, payload)
            current[obj["metadata"]["name"]] = obj
            memo.upsert(parse_resource_slice(obj))
        elif kind == "delete":
            current.pop(f"s{number}", None)
            memo.delete(f"s{number}")
        else:
            labels = dict(payload)
        fresh = SliceIndex()
        for obj in current.values():
            fresh.upsert(parse_resource_slice(obj))
        for node in (NodeRef("node-1", labels), NodeRef("node-2", {"rack": "r2"})):
            assert view(memo, node) == view(fresh, node)


# ---------------------------------------------------------------------------------------- admin access

AdminRequest = tuple[int, str | None, bool]  # (count, model or any, admin access)


@dataclass(frozen=True)
class AdminCase:
    devices: tuple[str, ...]  # model per device
    taken: frozenset[int]
    claims: tuple[tuple[AdminRequest, ...], ...]


@st.composite
def admin_cases(draw: st.DrawFn) -> AdminCase:
    n = draw(st.integers(1, 3))
    devices = tuple(draw(st.sampled_from(MODELS)) for _ in range(n))
    taken = frozenset(draw(st.sets(st.integers(0, n - 1), max_size=2)))
    request = st.tuples(st.integers(1, 2), st.sampled_from((None, *MODELS)), st.booleans())
    claims = draw(st.lists(st.lists(request, min_size=1, max_size=2).map(tuple), min_size=1, max_size=2))
    return AdminCase(devices, taken, tuple(claims))


def admin_feasible(case: AdminCase) -> bool:
    """Brute force over every device per slot (repeats allowed), with the rules of reference section 5:
    a device is used at most once per claim; non-admin uses are free devices used by no other
    non-admin slot; admin uses may take allocated devices and devices other claims use."""
    slots = [
        (c, model, admin) for c, reqs in enumerate(case.claims) for count, model, admin in reqs for _ in range(count)
    ]
    for chosen in itertools.product(range(len(case.devices)), repeat=len(slots)):
        pairs = list(zip(slots, chosen, strict=True))
        if any(model is not None and case.devices[d] != model for (_, model, _), d in pairs):
            continue
        per_claim = [(c, d) for (c, _, _), d in pairs]
        if len(set(per_claim)) != len(per_claim):
            continue
        plain = [d for (_, _, admin), d in pairs if not admin]
        if len(set(plain)) != len(plain) or any(d in case.taken for d in plain):
            continue
        return True
    return False


@settings(max_examples=150, deadline=None)
@given(admin_cases())
def test_admin_access_search_finds_a_solution_exactly_when_one_exists(case: AdminCase) -> None:
    devices = [gpu(f"g{i}", model=model) for i, model in enumerate(case.devices)]
    taken = frozenset(DeviceID(DRIVER, NODE, f"g{i}") for i in case.taken)
    claims = [
        claim(
            f"c{c}",
            *(
                exactly(f"r{r}", *selectors(model), count=count, admin_access=admin)
                for r, (count, model, admin) in enumerate(reqs)
            ),
        )
        for c, reqs in enumerate(case.claims)
    ]
    outcome = allocate([slice_obj("s", devices)], *claims, allocated=taken)
    assert isinstance(outcome, Allocated | Unschedulable)
    assert isinstance(outcome, Allocated) == admin_feasible(case)
    if not isinstance(outcome, Allocated):
        return
    plain: list[int] = []
    for result in outcome.results:
        used = [int(d.device[1:]) for d in result.devices]
        assert len(set(used)) == len(used)
        plain += [int(d.device[1:]) for d in result.devices if not d.admin_access]
    assert len(set(plain)) == len(plain)
    assert not set(plain) & case.taken
