"""Pending pods and the extender request bodies (ExtenderArgs, ExtenderBindingArgs) for the benchmarks,
and the node kube-scheduler takes from a /prioritize answer."""

from __future__ import annotations

import random
from typing import Any

from bench.cluster import GPU, IMAGE_REPOS, Obj, container_spec, name_suffix, random_uid

__all__ = [
    "PENDING_KINDS",
    "bind_body",
    "chosen_host",
    "filter_body_names",
    "filter_body_nodes",
    "pending_pod",
    "pending_pods",
    "reordered",
]

PENDING_KINDS = ("gpu-1", "gpu-2", "gpu-8", "cpu")
_PENDING = {
    "gpu-1": ("ml-serve", "vllm-llama3-8b", 2, {"cpu": "8", "memory": "48Gi"}, 1),
    "gpu-2": ("ml-train", "bert-finetune", 0, {"cpu": "16", "memory": "128Gi"}, 2),
    "gpu-8": ("ml-train", "llama3-70b-pretrain", 0, {"cpu": "90", "memory": "900Gi", "ephemeral-storage": "200Gi"}, 8),
    "cpu": ("shop", "checkout-api", 19, {"cpu": "500m", "memory": "1Gi"}, 0),
}


def pending_pod(kind: str, uid: str | None = None, name: str | None = None) -> Obj:
    """A whole pending v1 Pod as kube-scheduler sends it (status included, managedFields dropped)."""
    namespace, app, image, requests, gpus = _PENDING[kind]
    rng = random.Random(kind)
    containers = [container_spec("main", ":".join(IMAGE_REPOS[image][:2]), dict(requests), gpus)]
    spec: Obj = {
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "gpu-scheduler" if gpus else "default-scheduler",
        "tolerations": [
            {"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            for t in ("not-ready", "unreachable")
        ],
        "priority": 1000 if gpus else 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if gpus:
        spec["tolerations"].append({"key": GPU, "operator": "Exists", "effect": "NoSchedule"})
        spec["initContainers"] = [
            container_spec("model-pull", ":".join(IMAGE_REPOS[18][:2]), {"cpu": "2", "memory": "4Gi"})
        ]
    else:
        proxy = container_spec("istio-proxy", ":".join(IMAGE_REPOS[13][:2]), {"cpu": "100m", "memory": "128Mi"})
        spec["initContainers"] = [{**proxy, "restartPolicy": "Always"}]
    return {
        "metadata": {
            "name": name or f"{app}-{rng.getrandbits(32):08x}-{name_suffix(rng)}",
            "namespace": namespace,
            "uid": uid or random_uid(rng),
            "resourceVersion": str(rng.randrange(10_000_000, 99_999_999)),
            "generation": 1,
            "creationTimestamp": "2026-11-01T12:00:00Z",
            "labels": {"app.kubernetes.io/name": app, "pod-template-hash": f"{rng.getrandbits(40):010x}"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-6d4c8f", "uid": random_uid(rng)},
            ],
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def pending_pods() -> list[Obj]:
    """One pod of each kind: 1 GPU (inference), 2 GPU, a whole 8-GPU node, and a CPU-only service."""
    return [pending_pod(kind) for kind in PENDING_KINDS]


def filter_body_names(pod: Obj, names: list[str]) -> Obj:
    """ExtenderArgs with ``nodeCacheCapable: true``: names only, the unused key null."""
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def reordered(names: list[str], count: int, seed: int) -> list[list[str]]:
    """``count`` candidate lists: ``names`` as given, then shuffled copies (seeded). kube-scheduler's
    parallel filter lists the feasible nodes in a new order for each pod, so the extender cannot
    reuse the rows it found for the last list."""
    rng = random.Random(seed)
    orders = [names]
    for _ in range(count - 1):
        orders.append(rng.sample(names, len(names)))
    return orders


def filter_body_nodes(pod: Obj, nodes: list[Obj]) -> Obj:
    """ExtenderArgs with ``nodeCacheCapable: false``: a whole v1 NodeList.

    Items carry no apiVersion/kind, as kube-scheduler sends them (informer objects have an empty
    TypeMeta; see the wire captures).
    """
    items = [{k: v for k, v in node.items() if k not in ("apiVersion", "kind")} for node in nodes]
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}


def bind_body(pod: Obj, node: str) -> Obj:
    """ExtenderBindingArgs."""
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}


def chosen_host(answer: Any, candidates: list[str], rng: random.Random) -> str | None:
    """The node kube-scheduler would take from a ``/prioritize`` answer about ``candidates`` (the
    extender's weight alone): the highest score, ties at random, a candidate the answer leaves out
    scoring 0. None when ``answer`` is not a HostPriorityList of those candidates (an entry that is
    not one of them, a host twice, a score outside 0..10)."""
    if not isinstance(answer, list) or not candidates:
        return None
    allowed = set(candidates)
    scores: dict[str, int] = {}
    for entry in answer:
        host = entry.get("Host") if isinstance(entry, dict) else None
        score = entry.get("Score") if isinstance(entry, dict) else None
        if host not in allowed or host in scores or type(score) is not int or not 0 <= score <= 10:
            return None
        scores[host] = score
    best = max(scores.values(), default=0)
    return rng.choice([name for name in candidates if scores.get(name, 0) == best])
