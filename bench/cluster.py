"""Synthetic, deterministic GPU clusters for the benchmarks.

Why synthetic: the extender's cost scales with the node count and with how big each Node object is
on the wire (NodeList mode echoes whole Nodes, managedFields and image lists included), so the
generated objects mimic what a real EKS ``kubectl get nodes,pods -o json`` returns: ~10 KB Nodes,
about ten pods per node (daemonsets, GPU jobs, services with sidecars, a few completed jobs).
The same seed always gives the same bytes, so runs on different commits compare like for like.

    python -m bench.cluster --nodes 5000 --out /tmp/cluster-5000.json
"""

from __future__ import annotations

import argparse
import json
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "GPU",
    "IMAGE_REPOS",
    "Obj",
    "build_cluster",
    "container_spec",
    "encode",
    "iter_cluster",
    "name_suffix",
    "random_uid",
    "write_cluster",
]

Obj = dict[str, Any]
Edit = Callable[[int, Obj, list[Obj]], None]  # (node index, node, its pods), changed in place
GPU = "nvidia.com/gpu"
EPOCH = datetime(2026, 9, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Shape:
    """One node pool: an instance type and its share of the cluster."""

    pool: str
    instance: str
    cpu: int
    memory_gi: int
    share: float
    gpus: int = 0
    product: str = ""
    gpu_memory_mib: int = 0
    hugepages_2mi_gi: int = 0


# 10% 8-GPU, 30% 4-GPU, 60% CPU-only, as in a typical mixed training/inference cluster.
SHAPES = (
    Shape("h100", "p5.48xlarge", 192, 2048, 0.04, 8, "NVIDIA-H100-80GB-HBM3", 81559),
    Shape("a100", "p4d.24xlarge", 96, 1152, 0.06, 8, "NVIDIA-A100-SXM4-40GB", 40960),
    Shape("l4", "g6.12xlarge", 48, 192, 0.15, 4, "NVIDIA-L4", 23034),
    Shape("t4", "g4dn.12xlarge", 48, 192, 0.15, 4, "Tesla-T4", 15360),
    Shape("general", "m6i.16xlarge", 64, 256, 0.30),
    Shape("compute", "c6i.8xlarge", 32, 64, 0.15),
    Shape("memory", "r6i.8xlarge", 32, 256, 0.15, hugepages_2mi_gi=8),
)

IMAGE_REPOS = [
    ("nvcr.io/nvidia/pytorch", "24.05-py3", 9_800_000_000),
    ("nvcr.io/nvidia/tritonserver", "24.05-py3", 7_400_000_000),
    ("vllm/vllm-openai", "v0.6.0", 5_100_000_000),
    ("nvcr.io/nvidia/k8s-device-plugin", "v0.16.2", 120_000_000),
    ("nvcr.io/nvidia/k8s/dcgm-exporter", "3.3.7-3.5.0-ubuntu22.04", 340_000_000),
    ("nvcr.io/nvidia/gpu-feature-discovery", "v0.8.2", 75_000_000),
    ("nvcr.io/nvidia/cuda", "12.4.1-base-ubuntu22.04", 240_000_000),
    ("602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/kube-proxy", "v1.30.3-eksbuild.5", 36_000_000),
    ("602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni", "v1.18.3-eksbuild.1", 48_000_000),
    ("602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-ebs-csi-driver", "v1.34.0", 80_000_000),
    ("602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause", "3.5", 299_000),
    ("quay.io/prometheus/node-exporter", "v1.8.2", 12_000_000),
    ("cr.fluentbit.io/fluent/fluent-bit", "3.1.7", 38_000_000),
    ("docker.io/istio/proxyv2", "1.23.0", 95_000_000),
    ("docker.io/library/nginx", "1.27.1", 71_000_000),
    ("docker.io/library/redis", "7.4.0", 45_000_000),
    ("docker.io/library/postgres", "16.4", 160_000_000),
    ("docker.io/apache/spark", "3.5.2", 680_000_000),
    ("docker.io/library/python", "3.12-slim", 52_000_000),
    ("ghcr.io/example/checkout-api", "2.14.1", 210_000_000),
    ("ghcr.io/example/search-indexer", "0.9.33", 420_000_000),
    ("ghcr.io/example/feature-store", "1.2.0", 310_000_000),
    ("ghcr.io/example/batch-etl", "2026.08.30", 880_000_000),
    ("ghcr.io/example/embeddings", "3.1.4", 6_200_000_000),
    ("registry.k8s.io/metrics-server/metrics-server", "v0.7.2", 19_000_000),
    ("registry.k8s.io/coredns/coredns", "v1.11.3", 16_000_000),
]


def random_uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _ts(rng: random.Random, max_days: float = 60.0) -> str:
    return (EPOCH + timedelta(seconds=rng.uniform(0, max_days * 86400))).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fields(value: Any) -> Obj:
    """The fieldsV1 set an apply/update of ``value`` owns, as the API server writes it."""
    if not isinstance(value, dict):
        return {}
    out: Obj = {".": {}} if value else {}
    for key, item in value.items():
        if isinstance(item, list) and item and isinstance(item[0], dict) and "type" in item[0]:
            out[f"f:{key}"] = {".": {}, **{f'k:{{"type":"{e["type"]}"}}': _fields(e) for e in item}}
        else:
            out[f"f:{key}"] = _fields(item)
    return out


def _managed(manager: str, when: str, fields: Obj, subresource: str = "") -> Obj:
    entry: Obj = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": when,
        "fieldsType": "FieldsV1",
        # Only the maps a manager owns carry ".": not the top level nor metadata/spec/status.
        "fieldsV1": {k: {i: j for i, j in v.items() if i != "."} for k, v in _fields(fields).items() if k != "."},
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _images(rng: random.Random, gpu: bool) -> list[Obj]:
    repos = [r for r in IMAGE_REPOS if gpu or not r[0].startswith("nvcr.io")]
    chosen = rng.sample(repos, min(20, len(repos)))
    return [
        {
            "names": [f"{repo}@sha256:{rng.getrandbits(256):064x}", f"{repo}:{tag}"],
            "sizeBytes": int(size * rng.uniform(0.97, 1.03)),
        }
        for repo, tag, size in chosen
    ]


def _node(rng: random.Random, name: str, ip: str, shape: Shape) -> Obj:
    zone = rng.choice("abc")
    created = _ts(rng)
    heartbeat = (EPOCH + timedelta(days=61, seconds=rng.uniform(0, 40))).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": shape.instance,
        "beta.kubernetes.io/os": "linux",
        "eks.amazonaws.com/capacityType": rng.choice(("ON_DEMAND", "ON_DEMAND", "SPOT")),
        "eks.amazonaws.com/nodegroup": f"{shape.pool}-ng",
        "eks.amazonaws.com/nodegroup-image": "ami-0c2ab3b8efb09f272",
        "failure-domain.beta.kubernetes.io/region": "us-west-2",
        "failure-domain.beta.kubernetes.io/zone": f"us-west-2{zone}",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": shape.instance,
        "topology.kubernetes.io/region": "us-west-2",
        "topology.kubernetes.io/zone": f"us-west-2{zone}",
        "topology.ebs.csi.aws.com/zone": f"us-west-2{zone}",
    }
    gpu_labels = {}
    if shape.gpus:
        gpu_labels = {
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.runtime.major": "12",
            "nvidia.com/cuda.runtime.minor": "4",
            "nvidia.com/gfd.timestamp": str(1756700000 + rng.randrange(5_000_000)),
            "nvidia.com/gpu.compute.major": "8" if shape.pool != "t4" else "7",
            "nvidia.com/gpu.count": str(shape.gpus),
            "nvidia.com/gpu.family": {"h100": "hopper", "t4": "turing"}.get(shape.pool, "ampere"),
            "nvidia.com/gpu.machine": shape.instance,
            "nvidia.com/gpu.memory": str(shape.gpu_memory_mib),
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": shape.product,
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/mig.capable": str(shape.pool in ("a100", "h100")).lower(),
        }
    reserved_mcpu = 70 + shape.cpu * 10  # EKS kube-reserved grows with the core count
    mem_ki = shape.memory_gi * 1024 * 1024 - rng.randrange(2_000_000, 6_000_000)
    hugepages_ki = shape.hugepages_2mi_gi * 1024 * 1024
    capacity = {
        "cpu": str(shape.cpu),
        "ephemeral-storage": "209702892Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": f"{shape.hugepages_2mi_gi}Gi" if hugepages_ki else "0",
        "memory": f"{mem_ki}Ki",
        "pods": "110" if not shape.gpus else "250",
    }
    allocatable = {
        **capacity,
        "cpu": f"{shape.cpu * 1000 - reserved_mcpu}m",
        "ephemeral-storage": "192188443124",
        "memory": f"{mem_ki - hugepages_ki - 1_500_000}Ki",
    }
    if shape.gpus:
        capacity[GPU] = allocatable[GPU] = str(shape.gpus)
    conditions = [
        {"type": kind, "status": "False", "reason": f"KubeletHas{reason}", "message": message}
        for kind, reason, message in (
            ("MemoryPressure", "SufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "SufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
    conditions.append(ready)
    for condition in conditions:
        condition.update(lastHeartbeatTime=heartbeat, lastTransitionTime=created)
    status = {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": ip},
            {"type": "InternalDNS", "address": name},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": f"{rng.getrandbits(128):032x}",
            "systemUUID": f"ec2{rng.getrandbits(116):029x}",
            "bootID": random_uid(rng),
            "kernelVersion": "5.10.223-212.873.amzn2.x86_64",
            "osImage": "Amazon Linux 2",
            "containerRuntimeVersion": "containerd://1.7.20",
            "kubeletVersion": "v1.30.2-eks-1552ad0",
            "kubeProxyVersion": "v1.30.2-eks-1552ad0",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": _images(rng, bool(shape.gpus)),
    }
    spec: Obj = {"providerID": f"aws:///us-west-2{zone}/i-0{rng.getrandbits(64):016x}"}
    if shape.gpus:
        spec["taints"] = [{"key": GPU, "value": "present", "effect": "NoSchedule"}]
    annotations = {
        "alpha.kubernetes.io/provided-node-ip": ip,
        "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": spec["providerID"].rsplit("/", 1)[1]}),
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    ttl = {"node.alpha.kubernetes.io/ttl": "0"}
    kubelet_status = {k: v for k, v in status.items() if k != "images"} | {"images": {}}
    managed = [
        _managed("kubelet", created, {"metadata": {"annotations": annotations, "labels": labels}, "spec": spec}),
        _managed("kube-controller-manager", created, {"metadata": {"annotations": ttl}}),
        _managed("kubelet", heartbeat, {"status": kubelet_status}, "status"),
    ]
    if gpu_labels:
        managed.append(_managed("gpu-feature-discovery", created, {"metadata": {"labels": gpu_labels}}))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": random_uid(rng),
            "resourceVersion": str(rng.randrange(10_000_000, 99_999_999)),
            "creationTimestamp": created,
            "labels": labels | gpu_labels,
            "annotations": annotations,
            "managedFields": managed,
        },
        "spec": spec,
        "status": status,
    }


def container_spec(name: str, image: str, requests: dict[str, str], gpus: int = 0) -> Obj:
    limits = {"memory": requests["memory"]} if "memory" in requests else {}
    if gpus:
        requests = {**requests, GPU: str(gpus)}
        limits[GPU] = str(gpus)
    return {
        "name": name,
        "image": image,
        "resources": {"requests": requests, "limits": limits},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }


def _pod(rng: random.Random, app: str, namespace: str, node: str, containers: list[Obj], **spec: Any) -> Obj:
    """A bound pod of a DaemonSet (kube-system) or a ReplicaSet; some batch pods have completed."""
    daemon = namespace == "kube-system"
    owner = app if daemon else f"{app}-{rng.getrandbits(32):08x}"
    gpu = any(GPU in c["resources"]["requests"] for c in containers)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{owner}-{name_suffix(rng)}",
            "namespace": namespace,
            "uid": random_uid(rng),
            "resourceVersion": str(rng.randrange(10_000_000, 99_999_999)),
            "creationTimestamp": _ts(rng),
            "labels": {"app.kubernetes.io/name": app, "pod-template-hash": f"{rng.getrandbits(40):010x}"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet" if daemon else "ReplicaSet",
                    "name": owner,
                    "uid": random_uid(rng),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "gpu-scheduler" if gpu else "default-scheduler",
            "containers": containers,
            "restartPolicy": "Always",
            "serviceAccountName": "default",
            "priority": 0,
            **spec,
        },
        "status": {
            "phase": "Succeeded" if namespace == "batch" and rng.random() < 0.2 else "Running",
            "qosClass": "Burstable",
            "startTime": _ts(rng),
        },
    }


_DAEMONSETS = [
    ("kube-proxy", 7, {"cpu": "100m"}),
    ("aws-node", 8, {"cpu": "25m"}),
    ("ebs-csi-node", 9, {"cpu": "10m", "memory": "40Mi"}),
    ("node-exporter", 11, {"cpu": "100m", "memory": "128Mi"}),
    ("fluent-bit", 12, {"cpu": "50m", "memory": "100Mi"}),
]
_GPU_DAEMONSETS = [("nvidia-device-plugin", 3, {}), ("dcgm-exporter", 4, {"cpu": "100m", "memory": "512Mi"})]
# (image index, millicores, MiB): the service deployments that fill CPU capacity.
_SERVICES = [(19, 500, 1024), (20, 2000, 4096), (21, 1000, 8192), (17, 4000, 16384), (22, 250, 512)]


def name_suffix(rng: random.Random) -> str:
    return "".join(rng.choices("bcdfghjklmnpqrstvwxz2456789", k=5))


def _cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _mem(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _pods_for(rng: random.Random, node: str, shape: Shape, keep_free: bool) -> list[Obj]:
    """About ten pods: daemonsets, GPU jobs up to a random GPU use, then services that still fit."""
    pods = []
    for ds, image, requests in _DAEMONSETS + (_GPU_DAEMONSETS if shape.gpus else []):
        container = container_spec(ds, ":".join(IMAGE_REPOS[image][:2]), dict(requests))
        pods.append(_pod(rng, ds, "kube-system", node, [container], priorityClassName="system-node-critical"))
    cpu_left, mem_left = shape.cpu * 850, shape.memory_gi * 870  # millicores, MiB: ~85% of allocatable
    free_gpus = shape.gpus if keep_free else rng.choice((0, shape.gpus // 2, shape.gpus, rng.randrange(shape.gpus + 1)))
    used = shape.gpus - free_gpus
    while used > 0:
        gpus = min(used, rng.choice((1, 1, 2, 4, 8)))
        used -= gpus
        trainer = gpus >= 4
        cpu = min(gpus * 1000 * rng.choice((4, 6, 8)), cpu_left * gpus // shape.gpus)
        mem = min(gpus * 1024 * rng.choice((24, 32, 48)), mem_left * gpus // shape.gpus)
        cpu_left, mem_left = cpu_left - cpu, mem_left - mem
        app = "llm-train" if trainer else "vllm-serve"
        container = container_spec(
            "trainer" if trainer else "server",
            ":".join(IMAGE_REPOS[0 if trainer else 2][:2]),
            {"cpu": _cpu(cpu), "memory": _mem(mem)},
            gpus,
        )
        extra: Obj = {"tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]}
        if rng.random() < 0.5:  # a classic init container: counts by max, not sum
            pull = container_spec("model-pull", ":".join(IMAGE_REPOS[18][:2]), {"cpu": "2", "memory": "4Gi"})
            extra["initContainers"] = [pull]
        namespace = "ml-train" if trainer else "ml-serve"
        pods.append(_pod(rng, app, namespace, node, [container], priority=1000, **extra))
    target = 10 + rng.randrange(-2, 3)
    for _ in range(40):
        if len(pods) >= target:
            break
        image, cpu, mem = rng.choice(_SERVICES)
        sidecar = rng.random() < 0.3  # native sidecar (KEP-753): its requests add to the pod's
        need_cpu, need_mem = cpu + 100 * sidecar, mem + 128 * sidecar
        if need_cpu > cpu_left or need_mem > mem_left:
            continue
        cpu_left, mem_left = cpu_left - need_cpu, mem_left - need_mem
        app = IMAGE_REPOS[image][0].rsplit("/", 1)[1]
        containers = [container_spec(app, ":".join(IMAGE_REPOS[image][:2]), {"cpu": _cpu(cpu), "memory": _mem(mem)})]
        extra = {}
        if sidecar:
            proxy = container_spec("istio-proxy", ":".join(IMAGE_REPOS[13][:2]), {"cpu": "100m", "memory": "128Mi"})
            extra["initContainers"] = [{**proxy, "restartPolicy": "Always"}]
        namespace = rng.choice(("shop", "search", "batch", "data"))
        pods.append(_pod(rng, app, namespace, node, containers, **extra))
    return pods


def iter_cluster(n: int, seed: int = 1) -> Iterator[tuple[Obj, list[Obj]]]:
    """Yield (node, its pods) for ``n`` nodes; the mix follows SHAPES exactly, in a seeded order."""
    rng = random.Random(seed)
    counts = [max(1, round(n * s.share)) if n >= len(SHAPES) else 0 for s in SHAPES]
    counts[4] += n - sum(counts)  # rounding slack goes to the general-purpose pool
    order = [shape for shape, count in zip(SHAPES, counts, strict=True) for _ in range(max(count, 0))]
    order = (order + [SHAPES[4]] * n)[:n]
    rng.shuffle(order)
    hosts = rng.sample(range(1, 1 << 22), n)
    fresh: set[str] = set()
    for shape, host in zip(order, hosts, strict=True):
        ip = f"10.{16 + (host >> 16)}.{(host >> 8) & 255}.{host & 255}"
        name = f"ip-{ip.replace('.', '-')}.us-west-2.compute.internal"
        keep_free = shape.gpus == 8 and shape.pool not in fresh  # at least one empty node per 8-GPU pool
        fresh.add(shape.pool)
        yield _node(rng, name, ip, shape), _pods_for(rng, name, shape, keep_free)


def _edited(n: int, seed: int, edit: Edit | None) -> Iterator[tuple[Obj, list[Obj]]]:
    for index, (node, node_pods) in enumerate(iter_cluster(n, seed)):
        if edit is not None:
            edit(index, node, node_pods)
        yield node, node_pods


def build_cluster(n: int, seed: int = 1, edit: Edit | None = None) -> Obj:
    """The whole cluster as one v1 List (nodes first, like ``kubectl get nodes,pods -o json``).

    ``edit`` may change each node and its pods (e.g. queue labels) without touching the seeded draws.
    """
    nodes, pods = [], []
    for node, node_pods in _edited(n, seed, edit):
        nodes.append(node)
        pods.extend(node_pods)
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": nodes + pods}


def encode(obj: Any) -> bytes:
    """Compact JSON, as Go's encoding/json writes it."""
    return json.dumps(obj, separators=(",", ":")).encode()


def write_cluster(path: str | Path, n: int, seed: int = 1, edit: Edit | None = None) -> list[str]:
    """Stream the List to ``path`` (nodes, then pods) without holding every dict; return node names."""
    names: list[str] = []
    pods: list[bytes] = []
    with open(path, "wb") as out:
        out.write(b'{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":""},"items":[')
        for node, node_pods in _edited(n, seed, edit):
            out.write((b"," if names else b"") + encode(node))
            names.append(node["metadata"]["name"])
            pods.extend(encode(pod) for pod in node_pods)
        for pod in pods:
            out.write(b"," + pod)
        out.write(b"]}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--out", required=True, help="output file (JSON v1 List)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    names = write_cluster(args.out, args.nodes, args.seed)
    size = Path(args.out).stat().st_size
    print(f"wrote {args.out}: {len(names)} nodes, {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
