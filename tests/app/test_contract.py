"""Replay every request a real kube-scheduler 1.36 sent (tests/fixtures/kube-scheduler-wire) through
the HTTP app, phase by phase in the captured order, and check shape and semantics of each answer.

The cluster is the capture's: n1, n2 (4 CPU, 16Gi, 4 nvidia.com/gpu), n3 and n4 (8 CPU, no GPUs);
n3 publishes a ResourceSlice (pool n3: gpu-0, gpu-1) of driver gpu.example.com, selected by the
DeviceClass of the same name, and ResourceClaim default/gpu-claim-a asks for one such device.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from allocator import allocation_to_obj
from app.cluster.objects import node_from_obj
from app.http.server import create_app
from app.http.serving import build_server
from app.service import ExtenderService
from tests.app.serverutil import running
from tests.conftest import WIRE_FIXTURES, device_class_obj, make_service, slice_obj

INDEX = json.loads((WIRE_FIXTURES / "index.json").read_text())
PHASES: dict[str, list[dict[str, Any]]] = defaultdict(list)
for _entry in sorted(INDEX, key=lambda e: (e["phase"], e["seq"])):
    PHASES[_entry["phase"]].append(_entry)

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def _request(entry: dict[str, Any]) -> bytes:
    return (WIRE_FIXTURES / f"{entry['file']}.request.json").read_bytes()


def _captured_nodes() -> list[dict[str, Any]]:
    """Every Node object the scheduler sent in NodeList mode (n1..n4)."""
    nodes: dict[str, dict[str, Any]] = {}
    for path in WIRE_FIXTURES.glob("*nodecache-false*.request.json"):
        body = json.loads(path.read_bytes())
        for item in (body.get("Nodes") or {}).get("items") or []:
            nodes[item["metadata"]["name"]] = item
    return list(nodes.values())


def _captured_claim(phase: str) -> dict[str, Any]:
    """The claim as the scheduler wrote it in that phase (after its bind)."""
    return json.loads((WIRE_FIXTURES / f"resourceclaim-dra-claim-{phase}.json").read_bytes())


def _captured_dra(phase: str) -> list[dict[str, Any]]:
    """The DRA objects of the capture, with the claim as it was before anyone allocated it."""
    objects = [
        device_class_obj("gpu.example.com"),
        slice_obj("n3-gpu.example.com", [{"name": "gpu-0"}, {"name": "gpu-1"}], node="n3", pool="n3"),
    ]
    if (WIRE_FIXTURES / f"resourceclaim-dra-claim-{phase}.json").exists():
        claim = _captured_claim(phase)
        claim["metadata"].pop("finalizers")
        claim.pop("status")
        objects.append(claim)
    return objects


def _expected_filter(entry: dict[str, Any]) -> tuple[set[str], dict[str, str], dict[str, str]]:
    """Our verdicts: GPU pods fit n1/n2; n4 advertises no nvidia.com/gpu (it serves GPUs through a
    DRA DeviceClass with extendedResourceName, which the DRA issue adds), so a GPU pod is refused there."""
    candidates = set(entry["candidateNodes"])
    if entry["pod"] == "draext-a":
        return set(), {}, {"n4": "Insufficient nvidia.com/gpu"}
    return candidates, {}, {}  # dra-a: its claim can be allocated on n3, the only candidate


def test_every_fixture_is_replayed() -> None:
    requests = {p.name.removesuffix(".request.json") for p in WIRE_FIXTURES.glob("*.request.json")}
    assert requests == {e["file"] for e in INDEX}
    assert len(requests) == 50


def test_captured_cluster() -> None:
    nodes = {n.name: n for n in map(node_from_obj, _captured_nodes())}
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    assert nodes["n1"].allocatable["nvidia.com/gpu"] == 4
    assert "nvidia.com/gpu" not in nodes["n4"].allocatable


@pytest.fixture(params=["asgi", "socket"])
def client_for_transport(request: pytest.FixtureRequest, client_for: Any) -> Iterator[Any]:
    """The app through ASGI, or the served app over a socket: there the server's HTTP protocol
    answers the verbs itself (app.http.verb_protocol), and must answer exactly as the ASGI route."""
    if request.param == "asgi":
        yield client_for
        return
    with contextlib.ExitStack() as stack:

        def build(service: ExtenderService) -> httpx.Client:
            server = stack.enter_context(
                running(build_server(create_app(service), service.config.server, "127.0.0.1", 0))
            )
            return stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{server.port}"))

        yield build


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_replay_phase(phase: str, client_for_transport: Any) -> None:
    service = make_service(_captured_nodes(), dra=_captured_dra(phase))
    client = client_for_transport(service)
    cache_mode = phase.endswith("nodecache-true")
    for entry in PHASES[phase]:
        body = _request(entry)
        sent = json.loads(body)
        response = client.post(entry["httpPath"], content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 200, entry["file"]
        answer = response.json()
        verb = entry["verb"]
        if verb == "filter":
            _check_filter(entry, sent, answer, cache_mode)
        elif verb == "prioritize":
            # every candidate in order, but those scored 0 (kube-scheduler counts a host not listed as 0)
            hosts, scores = service.priorities(body)
            assert list(hosts) == entry["candidateNodes"]
            assert answer == [{"Host": h, "Score": s} for h, s in zip(hosts, scores.tolist(), strict=True) if s > 0]
            for host in answer:
                assert type(host["Score"]) is int and 1 <= host["Score"] <= 10
        elif verb == "bind":
            if entry["pod"] == "draext-a":
                assert "no longer fits" in answer["Error"] and "Insufficient nvidia.com/gpu" in answer["Error"]
            else:
                assert answer == {"Error": ""}, entry["file"]
                uid = sent["PodUID"]
                assert service.cache.pods[uid].node_name == entry["bindNode"]
                if entry["pod"] == "dra-a":
                    _check_claim_like_the_scheduler(service, phase)
        elif verb == "preempt":
            _check_preempt(entry, sent, answer, cache_mode)
            # The capture force-deleted the victim on the node the preemptor then went to.
            nominated = next(e for e in PHASES[phase] if e["seq"] == entry["seq"] + 1)["candidateNodes"][0]
            for victim in answer["NodeNameToMetaVictims"][nominated]["Pods"]:
                service.cache.delete_pod(victim["UID"])
        service.cache.check_invariants()
    assert not service.cache.ledger  # every bind was confirmed (snapshot mode binds at once)


def _check_filter(entry: dict[str, Any], sent: dict[str, Any], answer: dict[str, Any], cache_mode: bool) -> None:
    assert set(answer) == FILTER_KEYS
    assert answer["Error"] == ""
    if cache_mode:
        assert answer["Nodes"] is None
        passed = answer["NodeNames"]
    else:
        assert answer["NodeNames"] is None
        assert set(answer["Nodes"]) == {"metadata", "items"}
        # Node objects are echoed unchanged.
        sent_items = {item["metadata"]["name"]: item for item in sent["Nodes"]["items"]}
        for item in answer["Nodes"]["items"]:
            assert item == sent_items[item["metadata"]["name"]]
        passed = [item["metadata"]["name"] for item in answer["Nodes"]["items"]]
    failed, unresolvable = answer["FailedNodes"], answer["FailedAndUnresolvableNodes"]
    everyone = set(passed) | set(failed) | set(unresolvable)
    assert everyone == set(entry["candidateNodes"]), "every candidate gets exactly one verdict"
    assert len(passed) + len(failed) + len(unresolvable) == len(everyone)
    assert (set(passed), failed, unresolvable) == _expected_filter(entry), entry["file"]


def _check_claim_like_the_scheduler(service: Any, phase: str) -> None:
    """We write the claim as kube-scheduler's DynamicResources plugin did (minus its timestamp)."""
    captured = _captured_claim(phase)
    claim = service.cache.dra.claims["default/gpu-claim-a"]
    assert claim.allocation is not None
    ours = allocation_to_obj(claim.allocation)
    theirs = captured["status"]["allocation"]
    theirs.pop("allocationTimestamp")
    assert ours == theirs
    reserved = [{"name": r.name, "resource": r.resource, "uid": r.uid} for r in claim.reserved_for]
    assert reserved == captured["status"]["reservedFor"]
    assert list(claim.finalizers) == captured["metadata"]["finalizers"]


def _check_preempt(entry: dict[str, Any], sent: dict[str, Any], answer: dict[str, Any], cache_mode: bool) -> None:
    assert set(answer) == {"NodeNameToMetaVictims"}
    proposed = sent["NodeNameToMetaVictims"] if cache_mode else sent["NodeNameToVictims"]
    expected = {
        node: {
            "Pods": [{"UID": pod["UID"] if cache_mode else pod["metadata"]["uid"]} for pod in victims["Pods"]],
            "NumPDBViolations": victims["NumPDBViolations"],
        }
        for node, victims in proposed.items()
    }
    # high-1 asks for 1 of 4 GPUs: it fits our managed resources on both nodes, so the scheduler's
    # victims stand (kube-scheduler already judged cpu, which made it preempt).
    assert answer["NodeNameToMetaVictims"] == expected
    captured = json.loads((WIRE_FIXTURES / f"{entry['file']}.response.json").read_bytes())
    assert answer == captured
