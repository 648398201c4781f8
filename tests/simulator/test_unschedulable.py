"""The simulator's shortcut for pods like one that found no node (``simulator.unschedulable``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from app.config import load_config
from app.service import ExtenderService
from simulator import sharing
from simulator.inflate import renamed
from simulator.simulate import simulate
from simulator.trace import KIND_ONE_GPU, SimPod
from simulator.unschedulable import UnschedulableShapes, shape
from tests.simulator.test_simulate import trace


def _filters(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the service's filter calls (one list entry per call)."""
    calls: list[int] = []
    original = ExtenderService.filter_passed

    def counted(self: ExtenderService, body: bytes) -> list[str]:
        calls.append(1)
        return original(self, body)

    monkeypatch.setattr(ExtenderService, "filter_passed", counted)
    return calls


@pytest.mark.parametrize("mode", ["inflate", "fill"])
@pytest.mark.parametrize("policy", ["shipped", "random"])
def test_a_run_places_the_same_pods_with_fewer_filter_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, policy: str
) -> None:
    # Three pod shapes on a cluster they overfill (inflated to 2.5 x its GPUs): once full, the
    # later pods of a failed shape are answered without the filter.
    nodes, pods = trace(
        tmp_path,
        "".join(f"n{i},16000,65536,2,T4\n" for i in range(4)),
        "".join(
            f"s{i},2000,2048,1,500,,LS,Running,{i},,{i}\nw{i},4000,4096,1,1000,,LS,Running,{i},,{i}\n"
            f"m{i},1000,1024,2,1000,,LS,Running,{i},,{i}\n"
            for i in range(4)
        ),
    )
    config = load_config(None)
    calls = _filters(monkeypatch)
    fast = simulate(policy, config, nodes, pods, mode=mode, seed=3, target=2.5)
    fast_calls = len(calls)
    monkeypatch.setattr(UnschedulableShapes, "known", lambda self, key: False)
    calls.clear()
    full = simulate(policy, config, nodes, pods, mode=mode, seed=3, target=2.5)
    failures = sum(full.failed.values())
    assert failures > 3  # the check below is about something
    assert 0 < len(calls) - fast_calls < failures  # the first failure of each shape called the filter
    assert fast.placements == full.placements
    assert fast.failed == full.failed and fast.placed == full.placed
    assert fast.curve == full.curve and fast.first_gpu_failure == full.first_gpu_failure


def test_a_deletion_frees_room_for_a_shape_that_failed_before(tmp_path: Path) -> None:
    # first holds the only GPU from 0 to 10; second (same shape) fails at 1; third (same shape again)
    # comes at 20, after the deletion: it must be tried, and fits.
    nodes, pods = trace(
        tmp_path,
        "a,8000,16384,1,T4\n",
        "first,1000,1024,1,1000,,LS,Running,0,10,0\nsecond,1000,1024,1,1000,,LS,Running,1,,1\n"
        "third,1000,1024,1,1000,,LS,Running,20,,20\n",
    )
    for mode_sharing in ("dra", "none"):
        result = simulate("fitplus-sra", load_config(None), nodes, pods, mode="replay", sharing=mode_sharing)
        assert result.placements == {"third": "a"}
        assert result.failed[KIND_ONE_GPU] == 1 and result.placed[KIND_ONE_GPU] == 2


def _labelled(pod: SimPod, labels: dict[str, str]) -> SimPod:
    body = msgspec.json.decode(pod.body)
    body["metadata"]["labels"] = labels
    return replace(pod, body=msgspec.json.encode(body))


def _pod(tmp_path: Path, row: str) -> SimPod:
    _, pods = trace(tmp_path, "a,8000,16384,1,T4\n", row)
    return sharing.with_claim(pods[0])


def test_the_shape_leaves_out_names_and_keeps_every_demand(tmp_path: Path) -> None:
    base = _pod(tmp_path, "p,1000,1024,1,500,,LS,Running,0,,0\n")
    copy = sharing.with_claim(renamed(_pod(tmp_path, "p,1000,1024,1,500,,LS,Running,0,,0\n"), "p-c7"))
    assert copy.body != base.body and shape(copy) == shape(base)  # another name, uid and claim name
    others = [
        "p,2000,1024,1,500,,LS,Running,0,,0\n",  # cpu
        "p,1000,2048,1,500,,LS,Running,0,,0\n",  # memory
        "p,1000,1024,1,600,,LS,Running,0,,0\n",  # the share of the GPU
        "p,1000,1024,2,1000,,LS,Running,0,,0\n",  # GPUs
        "p,1000,1024,1,500,V100,LS,Running,0,,0\n",  # the GPU model
    ]
    shapes = {shape(_pod(tmp_path, row)) for row in others}
    assert len(shapes) == len(others) and shape(base) not in shapes
    labelled = _labelled(base, {"queue": "team-a"})
    assert shape(labelled) != shape(base)
    assert shape(replace(base, namespace="other")) != shape(base)


def test_the_shapes_are_forgotten_when_room_is_freed() -> None:
    shapes = UnschedulableShapes()
    assert not shapes.known("k")
    shapes.failed("k")
    assert shapes.known("k") and shapes.skipped == 1
    shapes.freed()
    assert not shapes.known("k")


def test_pods_of_a_queue_or_a_pod_group_are_always_filtered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Their verdicts move with other queues' usage and the group's plan: never answered from a shape.
    nodes, pods = trace(
        tmp_path, "a,8000,16384,1,T4\n", "".join(f"p{i},1000,1024,1,1000,,LS,Running,{i},,{i}\n" for i in range(4))
    )
    for label in ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/pod-group-name"):
        labelled = [_labelled(pod, {label: "a"}) for pod in pods]
        calls = _filters(monkeypatch)
        result = simulate("random", load_config(None), nodes, labelled, sharing="none")
        assert result.failed[KIND_ONE_GPU] == 3 and len(calls) == 4, label


def test_a_pod_the_filter_cannot_read_fails_without_stopping_the_run(tmp_path: Path) -> None:
    nodes, pods = trace(tmp_path, "a,8000,16384,1,T4\n", "p,1000,1024,1,1000,,LS,Running,0,,0\n")
    body = msgspec.json.decode(pods[0].body)
    body["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    broken = replace(pods[0], body=msgspec.json.encode(body))
    result = simulate("random", load_config(None), nodes, [broken, broken, pods[0]], sharing="none")
    assert result.failed[KIND_ONE_GPU] == 2 and result.placed[KIND_ONE_GPU] == 1
