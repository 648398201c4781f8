"""Property tests: score ranges, the extender mapping, and a hand-written oracle of the reference formulas."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.fitplus import NodeResourcesFitPlus, NodeResourcesFitPlusArgs
from scoring.framework import NodeInfo, PodInfo, combine_scores
from scoring.priority_scale import absolute as to_extender_priority
from scoring.resources import PodResources, pod_resources
from scoring.scarce import ScarceResourceAvoidance, ScarceResourceAvoidanceArgs

NAMES = ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", "hugepages-1Gi", "example.com/foo", "pods"]
SCORED = [n for n in NAMES if n != "pods"]
TYPES = ["MostAllocated", "LeastAllocated"]

amounts = st.integers(min_value=0, max_value=10**13)
small = st.integers(min_value=0, max_value=64)


def _node(alloc: dict[str, int], requested: dict[str, int], nz_cpu: int, nz_mem: int) -> NodeInfo:
    return NodeInfo(
        name="n",
        allocatable=alloc,
        requested=requested,
        non_zero_cpu=nz_cpu,
        non_zero_memory=nz_mem,
        allocatable_types=NodeInfo.types_of(alloc),
    )


def _pod(requests: dict[str, int], nz_cpu: int, nz_mem: int) -> PodInfo:
    return PodInfo(uid="u", namespace="ns", name="p", resources=PodResources(requests, nz_cpu, nz_mem))


def _oracle_fitplus(
    config: dict[str, tuple[str, int]],
    alloc: dict[str, int],
    requested: dict[str, int],
    nz_cpu: int,
    nz_mem: int,
    pod_req: dict[str, int],
    pod_nz_cpu: int,
    pod_nz_mem: int,
) -> int:
    """Reference section 3, restated independently of scoring/."""
    total = wsum = 0
    for name, (kind, weight) in config.items():
        if name == "pods" or pod_req.get(name, 0) <= 0:
            continue
        node_req = {"cpu": nz_cpu, "memory": nz_mem}.get(name, requested.get(name, 0))
        amount = {"cpu": pod_nz_cpu, "memory": pod_nz_mem}.get(name, pod_req.get(name, 0))
        req, cap = node_req + amount, alloc.get(name, 0)
        if cap == 0:
            s = 0
        elif kind == "MostAllocated":
            s = min(req, cap) * 100 // cap
        else:
            s = 0 if req > cap else (cap - req) * 100 // cap
        total += s * weight
        wsum += weight
    return 100 if wsum == 0 else total // wsum


@settings(max_examples=300, deadline=None)
@given(
    config=st.dictionaries(
        st.sampled_from(NAMES),
        st.tuples(st.sampled_from(TYPES), st.integers(min_value=1, max_value=100)),
        min_size=1,
    ),
    alloc=st.dictionaries(st.sampled_from(NAMES), amounts),
    requested=st.dictionaries(st.sampled_from(NAMES), amounts),
    pod_req=st.dictionaries(st.sampled_from(NAMES), amounts),
    nz=st.tuples(amounts, amounts, amounts, amounts),
)
def test_fitplus_in_range_and_matches_oracle(
    config: dict[str, tuple[str, int]],
    alloc: dict[str, int],
    requested: dict[str, int],
    pod_req: dict[str, int],
    nz: tuple[int, int, int, int],
) -> None:
    node_nz_cpu, node_nz_mem, pod_nz_cpu, pod_nz_mem = nz
    raw = {"resources": {n: {"type": t, "weight": w} for n, (t, w) in config.items()}}
    plugin = NodeResourcesFitPlus(NodeResourcesFitPlusArgs.parse(raw))
    score = plugin.score(_pod(pod_req, pod_nz_cpu, pod_nz_mem), _node(alloc, requested, node_nz_cpu, node_nz_mem))
    assert isinstance(score, int)
    assert 0 <= score <= 100
    assert score == _oracle_fitplus(config, alloc, requested, node_nz_cpu, node_nz_mem, pod_req, pod_nz_cpu, pod_nz_mem)


@settings(max_examples=300, deadline=None)
@given(
    alloc=st.dictionaries(st.sampled_from([*NAMES, "rdma/hca", "requests.x/y"]), small),
    pod_req=st.dictionaries(st.sampled_from([*NAMES, "rdma/hca"]), small),
    scarce=st.lists(st.sampled_from([*SCORED, "rdma/hca", "amd.com/gpu"]), min_size=1, unique=True),
)
def test_sra_in_range_and_matches_oracle(alloc: dict[str, int], pod_req: dict[str, int], scarce: list[str]) -> None:
    plugin = ScarceResourceAvoidance(ScarceResourceAvoidanceArgs.parse({"resources": scarce}))
    score = plugin.score(_pod(pod_req, 0, 0), _node(alloc, {}, 0, 0))
    assert isinstance(score, int)
    assert 0 <= score <= 100
    # oracle (reference section 4)
    scored = {*SCORED, "rdma/hca"}
    n = {k for k, v in alloc.items() if v > 0 and k in scored}
    p = {k for k, v in pod_req.items() if v > 0 and k in scored}
    d = n - p
    s = d & set(scarce)
    expected = 100 if not d or not s else (len(d) - len(s)) * 100 // len(d)
    assert score == expected


@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_to_extender_priority_always_0_to_10(score: int) -> None:
    priority = to_extender_priority(score)
    assert type(priority) is int
    assert 0 <= priority <= 10
    if 0 <= score <= 100:
        # within range it is round-half-up of score / 10
        assert priority * 10 - 5 <= score < priority * 10 + 5 or (priority == 10 and score == 100)


@given(
    st.lists(st.tuples(st.integers(min_value=1, max_value=100), st.integers(min_value=0, max_value=100)), min_size=1)
)
def test_combine_scores_stays_in_range(pairs: list[tuple[int, int]]) -> None:
    combined = combine_scores(pairs)
    assert min(s for _, s in pairs) <= combined <= max(s for _, s in pairs)
    assert 0 <= to_extender_priority(combined) <= 10


def _container_strategy() -> st.SearchStrategy[dict[str, Any]]:
    cpu = st.one_of(st.none(), st.integers(min_value=0, max_value=8000).map(lambda m: f"{m}m"))
    mem = st.one_of(st.none(), st.integers(min_value=0, max_value=4096).map(lambda m: f"{m}Mi"))
    sidecar = st.booleans()

    def build(c: str | None, m: str | None, side: bool) -> dict[str, Any]:
        req = {k: v for k, v in (("cpu", c), ("memory", m)) if v is not None}
        out: dict[str, Any] = {"name": "c", "resources": {"requests": req}}
        if side:
            out["restartPolicy"] = "Always"
        return out

    return st.builds(build, cpu, mem, sidecar)


@settings(max_examples=200, deadline=None)
@given(
    containers=st.lists(_container_strategy(), min_size=1, max_size=4),
    inits=st.lists(_container_strategy(), max_size=4),
)
def test_non_zero_never_below_plain_requests(containers: list[dict[str, Any]], inits: list[dict[str, Any]]) -> None:
    for c in containers:
        c.pop("restartPolicy", None)  # restartPolicy only means "sidecar" on init containers
    pr = pod_resources({"containers": containers, "initContainers": inits})
    assert pr.non_zero_cpu >= pr.requests.get("cpu", 0)
    assert pr.non_zero_memory >= pr.requests.get("memory", 0)
    # the sum of regular containers is a lower bound of the aggregate
    assert pr.requests.get("cpu", 0) >= sum(int(c["resources"]["requests"].get("cpu", "0m")[:-1]) for c in containers)


# KEP-753 oracle on exact micro-core amounts, rounded once (MilliValue of the total).
_micro = st.one_of(st.none(), st.integers(min_value=0, max_value=3_000_000))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _oracle_cpu_micro(containers: list[int | None], inits: list[tuple[int | None, bool]], default: int | None) -> int:
    def eff(v: int | None) -> int:
        if v is None:
            return default or 0
        return v

    total = sum(eff(v) for v in containers)
    sidecars = 0
    peak = 0
    for value, is_sidecar in inits:
        if is_sidecar:
            total += eff(value)
            sidecars += eff(value)
            peak = max(peak, sidecars)
        else:
            peak = max(peak, eff(value) + sidecars)
    return _ceil_div(max(total, peak), 1000)  # micro-cores -> milli-cores, rounded up once


@settings(max_examples=300, deadline=None)
@given(
    containers=st.lists(_micro, min_size=1, max_size=4),
    inits=st.lists(st.tuples(_micro, st.booleans()), max_size=5),
)
def test_cpu_aggregation_matches_kep753_oracle(
    containers: list[int | None], inits: list[tuple[int | None, bool]]
) -> None:
    def as_container(value: int | None, sidecar: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"name": "c", "resources": {"requests": {} if value is None else {"cpu": f"{value}u"}}}
        if sidecar:
            out["restartPolicy"] = "Always"
        return out

    spec = {
        "containers": [as_container(v) for v in containers],
        "initContainers": [as_container(v, s) for v, s in inits],
    }
    pr = pod_resources(spec)
    assert pr.requests.get("cpu", 0) == _oracle_cpu_micro(containers, inits, None)
    assert pr.non_zero_cpu == _oracle_cpu_micro(containers, inits, 100_000)  # 100m = 100000u
