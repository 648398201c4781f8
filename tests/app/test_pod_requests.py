"""A pod's requests as the watch cache keeps them (app/cluster/objects.py): parsed once per distinct
set of container requests, and never a stale answer for a pod whose requests differ."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cluster import objects
from app.cluster.objects import ObjectError, pod_from_obj
from scoring.resources import container_extended_requests, pod_resources

_REQUESTS = st.sampled_from([{}, {"cpu": "500m"}, {"cpu": "1", "memory": "1Gi"}, {"example.com/gpu": "1"}])
_LIMITS = st.sampled_from([{}, {"cpu": "2"}, {"example.com/gpu": "2"}])


def _container(draw: st.DrawFn, init: bool) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": draw(st.sampled_from(["main", "side"])),
        "image": "registry.k8s.io/pause:3.10",
        # Per pod in a cluster: the ServiceAccount token's mount has a random name.
        "volumeMounts": [{"name": f"kube-api-access-{draw(st.integers(0, 9))}", "mountPath": "/var/run"}],
        "resources": {"requests": draw(_REQUESTS), "limits": draw(_LIMITS)},
    }
    if init and draw(st.booleans()):
        container["restartPolicy"] = "Always"  # a sidecar: summed, not maxed
    return container


@st.composite
def pod_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [_container(draw, False) for _ in range(draw(st.integers(1, 2)))],
        "initContainers": [_container(draw, True) for _ in range(draw(st.integers(0, 2)))],
    }
    if draw(st.booleans()):
        spec["overhead"] = {"cpu": draw(st.sampled_from(["100m", "250m"]))}
    if draw(st.booleans()):
        spec["resources"] = {"requests": {"cpu": draw(st.sampled_from(["3", "4"]))}}
    return spec


def _pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": name}, "spec": spec}


@settings(max_examples=150, deadline=None)
@given(st.lists(pod_specs(), min_size=2, max_size=8))
def test_the_kept_requests_are_the_pods_own(specs: list[dict[str, Any]]) -> None:
    """Pods come in any order; each one's requests are what parsing its own spec gives."""
    for i, spec in enumerate(specs):
        pod = pod_from_obj(_pod(f"p{i}", spec))
        assert pod.resources == pod_resources(spec)
        assert pod.extended_requests == container_extended_requests(spec)


def test_fields_of_one_pod_alone_do_not_parse_the_requests_again(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[object] = []

    def counting(spec: Any) -> Any:
        parsed.append(spec)
        return pod_resources(spec)

    monkeypatch.setattr(objects, "_requests_memo", type(objects._requests_memo)())
    monkeypatch.setattr(objects, "pod_resources", counting)
    for i in range(5):
        container = {
            "name": "main",
            "image": f"registry.example/app:{i}",
            "env": [{"name": "POD", "value": f"p{i}"}],
            "volumeMounts": [{"name": f"kube-api-access-{i:05d}", "mountPath": "/var/run/secrets"}],
            "resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
        }
        pod = pod_from_obj(_pod(f"p{i}", {"containers": [container]}))
        assert pod.resources.requests == {"cpu": 500, "nvidia.com/gpu": 1}
    assert len(parsed) == 1
    container["resources"]["requests"]["cpu"] = "1"  # a request that differs is parsed
    assert pod_from_obj(_pod("other", {"containers": [container]})).resources.requests["cpu"] == 1000
    assert len(parsed) == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"containers": "main"}, "must be lists"),
        ({"containers": ["main"]}, "containers must be objects"),
        ({"containers": [{"name": "main", "resources": {"requests": {"cpu": "lots"}}}]}, "requests[cpu]"),
    ],
)
def test_a_malformed_spec_is_still_an_error_naming_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ObjectError, match=message.replace("[", r"\[").replace("]", r"\]")):
        pod_from_obj(_pod("bad", spec))
