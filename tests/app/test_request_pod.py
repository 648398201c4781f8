"""A request's Pod that the cache holds at the same version is the cache's pod (not parsed again);
any other version, or a pod the cache knows as bound, is parsed from the request."""

from __future__ import annotations

import copy
import json
from typing import Any

from app.cluster.objects import pod_from_obj
from app.http import wire
from tests.conftest import filter_body, make_service, node_obj, pod_obj


def _versioned(pod: dict[str, Any], version: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["resourceVersion"] = version
    return pod


def test_pod_identity_reads_uid_and_version_and_tolerates_what_it_cannot_read() -> None:
    pod = _versioned(pod_obj("p", uid="u-1"), "42")
    assert wire.pod_identity(json.dumps(pod).encode()) == ("u-1", "42")
    assert wire.pod_identity(b'{"metadata": {"uid": 7}}') == ("", "")
    assert wire.pod_identity(b"{}") == ("", "")
    assert wire.pod_identity(b"not json") == ("", "")


def test_the_same_version_is_the_cached_pod_a_newer_one_is_parsed() -> None:
    watched = _versioned(pod_obj("p", gpus=1, uid="u-1"), "10")
    service = make_service([node_obj("g1", gpus=4), node_obj("g2", gpus=4)])
    service.cache.upsert_pod(pod_from_obj(watched))
    cached = service.cache.pods["u-1"]

    assert service.pod_info(wire.decode_extender_args(filter_body(watched, ["g1"])).pod_raw) is cached

    newer = _versioned(watched, "11")
    newer["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    parsed = service.pod_info(wire.decode_extender_args(filter_body(newer, ["g1"])).pod_raw)
    assert parsed is not cached and parsed.resources.requests["nvidia.com/gpu"] == 2


def test_a_pod_the_cache_holds_bound_or_without_a_version_is_parsed() -> None:
    bound = _versioned(pod_obj("b", gpus=1, uid="u-b", node="g1"), "5")
    unversioned = pod_obj("n", gpus=1, uid="u-n")
    service = make_service([node_obj("g1", gpus=4)], pods=[bound, unversioned])
    for pod in (bound, unversioned):
        raw = wire.decode_extender_args(filter_body(pod, ["g1"])).pod_raw
        assert service.pod_info(raw) is not service.cache.pods[pod["metadata"]["uid"]]


def test_filter_answers_alike_from_the_cached_pod_and_from_the_request() -> None:
    pod = _versioned(pod_obj("p", gpus=2, uid="u-1"), "3")
    nodes = [node_obj("g1", gpus=1), node_obj("g2", gpus=4), node_obj("c1", gpus=None)]
    cold = make_service(nodes)
    warm = make_service(nodes, pods=[pod])
    body = filter_body(pod, ["g1", "g2", "c1"])
    assert warm.filter(body) == cold.filter(body)
    assert warm.filter(body)["NodeNames"] == ["g2"]
