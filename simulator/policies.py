"""The policies the simulator compares: each a list of score plugins of the extender configuration,
so every baseline runs through the same filter → prioritize → bind code as the shipped default.

* ``fitplus-sra``: the plugins of the base configuration (``--config``, default: the built-in one);
* ``least-allocated``: kube-scheduler's default NodeResourcesFit (LeastAllocated, cpu and memory);
* ``most-allocated``: MostAllocated on cpu, memory and ``nvidia.com/gpu``;
* ``random``: no score plugin: every feasible node ties and kube-scheduler's random tie-break picks;
* the FGD paper's baselines (Weng et al., USENIX ATC'23), from its artifact's definitions:
  ``dot-product`` (DotProduct), ``gpu-packing`` (GpuPacking), ``best-fit`` (BestFit),
  ``clustering`` (GpuClustering) and ``fgd`` (GpuFragmentation with the paper's sigmoid, the
  artifact's GPU choice inside the node, ``deviceChoice: LeastFragmentation``, and its scheduler's
  rule among equal scores, the smallest node name: ``tieBreak: {lowestName: true}``);
* ``fgd-best-fit``: ours of the previous round: GpuFragmentation at an even resolution (15 expected
  milli-GPUs per point, weight 19) with BestFit (weight 1) breaking its near-ties;
* ``fgd-cpu-balance``: ours (docs/simulate.md): ``fgd-best-fit`` plus GpuCpuBalance (weight 10,
  10 milli-GPUs per point) with the trace's cpu per GPU, so no GPU is left without cpu;
* ``shipped``: the plugins, ``priorityScale``, ``tieBreak``, ``filterReturns`` and ``deviceChoice``
  of ``deploy/extender-config.yaml`` as they are (ours with the openb default trace's workload,
  ScarceResourceAvoidance for pods that ask for no GPU, the best nodes' ties broken towards the most
  allocated GPUs, and /filter passing only its best nodes, so kube-scheduler asks /prioritize only
  when several tie);
* ``shipped-own``: ``shipped`` with the trace's own per-cluster values (GpuFragmentation's
  ``workload``, GpuCpuBalance's ``cpuPerGpu``), what an operator puts there for their cluster.

The fragmentation plugins need the *target workload*: the trace's task types (cpu, per-GPU milli,
GPU count), most frequent first until they cover 95 % of the pods, each with its pod count as
popularity (``workload``); GpuCpuBalance the milli-CPU the trace's GPU pods ask per whole GPU
(``cpu_per_gpu``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from app.config import ExtenderConfiguration
from app.yamlfile import read_yaml
from simulator.metrics import POPULARITY, pod_milli
from simulator.trace import GPU, SimPod

__all__ = [
    "FIT_RESOURCES",
    "POLICIES",
    "POLICY_SETTINGS",
    "SHIPPED_SETTINGS",
    "cpu_per_gpu",
    "policy_config",
    "policy_plugins",
    "shipped_config",
    "workload",
]

# The simulated cluster has no kube-scheduler in front: the extender checks cpu and memory too.
FIT_RESOURCES = ("cpu", "memory", GPU)

Plugins = list[dict[str, Any]]


def workload(pods: Iterable[SimPod], popularity: float = POPULARITY) -> list[dict[str, int]]:
    """The trace's task types as GpuFragmentation's ``workload`` arg: most frequent first until they
    cover ``popularity`` of the pods; popularity = pods of the type."""
    counts = Counter((pod.cpu_milli, pod_milli(pod), pod.gpus) for pod in pods)
    total = sum(counts.values())
    chosen: list[dict[str, int]] = []
    covered = 0
    for (cpu, milli, gpus), count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if covered >= popularity * total:
            break
        chosen.append({"cpu": cpu, "gpuMilli": milli, "gpus": gpus, "popularity": count})
        covered += count
    return chosen


def cpu_per_gpu(pods: Iterable[SimPod]) -> int:
    """GpuCpuBalance's ``cpuPerGpu``: the milli-CPU the GPU pods ask per whole GPU they take (1 when
    none asks for cpu, the least the arg allows)."""
    cpu = milli = 0
    for pod in pods:
        if pod.gpus:
            cpu += pod.cpu_milli
            milli += pod.gpus * pod_milli(pod)
    return max(1, round(cpu * 1000 / milli)) if milli else 1


def _fit_plus(strategy: str, resources: Sequence[str]) -> Plugins:
    args = {"resources": {r: {"type": strategy, "weight": 1} for r in resources}}
    return [{"name": "NodeResourcesFitPlus", "args": args}]


def _fgd(pods: Sequence[SimPod]) -> Plugins:
    return [{"name": "GpuFragmentation", "args": {"workload": workload(pods)}}]


def _fgd_best_fit(pods: Sequence[SimPod]) -> Plugins:
    args = {"workload": workload(pods), "mapping": "Linear", "milliPerPoint": 15}
    return [{"name": "GpuFragmentation", "weight": 19, "args": args}, {"name": "BestFit", "weight": 1}]


def _fgd_cpu_balance(pods: Sequence[SimPod]) -> Plugins:
    balance = {"name": "GpuCpuBalance", "weight": 10, "args": {"cpuPerGpu": cpu_per_gpu(pods), "milliPerPoint": 10}}
    return [*_fgd_best_fit(pods), balance]


SHIPPED_CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "extender-config.yaml"


def shipped_config() -> dict[str, Any]:
    """The shipped ConfigMap's ``config.yaml``."""
    configmap = read_yaml(SHIPPED_CONFIG, "the shipped extender config", ValueError)
    try:
        config = yaml.safe_load(configmap["data"]["config.yaml"])
    except (KeyError, TypeError, yaml.YAMLError) as exc:
        raise ValueError(f"{SHIPPED_CONFIG}: no data.config.yaml: {exc!r}") from None
    if not isinstance(config, dict) or "plugins" not in config:
        raise ValueError(f"{SHIPPED_CONFIG}: data.config.yaml has no plugins")
    return config


# What ``shipped`` takes from the shipped config besides its plugins (what changes placement, or
# which verbs kube-scheduler calls).
SHIPPED_SETTINGS = ("priorityScale", "tieBreak", "filterReturns", "deviceChoice")


def _shipped(_: Sequence[SimPod]) -> Plugins:
    plugins: Plugins = shipped_config()["plugins"]
    return plugins


def _shipped_own(pods: Sequence[SimPod]) -> Plugins:
    """The shipped plugins with the trace's own per-cluster values, as an operator derives them
    (``kube-gpu-extender workload``): GpuFragmentation's ``workload``, GpuCpuBalance's ``cpuPerGpu``."""
    plugins = _shipped(pods)
    for plugin in plugins:
        if plugin["name"] == "GpuFragmentation":
            plugin["args"] = {**plugin.get("args", {}), "workload": workload(pods)}
        elif plugin["name"] == "GpuCpuBalance":
            plugin["args"] = {**plugin.get("args", {}), "cpuPerGpu": cpu_per_gpu(pods)}
    return plugins


_PLUGINS: Mapping[str, Callable[[Sequence[SimPod]], Plugins]] = {
    "least-allocated": lambda _: _fit_plus("LeastAllocated", ("cpu", "memory")),
    "most-allocated": lambda _: _fit_plus("MostAllocated", ("cpu", "memory", GPU)),
    "random": lambda _: [],
    "dot-product": lambda _: [{"name": "DotProduct"}],
    "gpu-packing": lambda _: [{"name": "GpuPacking"}],
    "best-fit": lambda _: [{"name": "BestFit"}],
    "clustering": lambda _: [{"name": "GpuClustering"}],
    "fgd": _fgd,
    "fgd-best-fit": _fgd_best_fit,
    "fgd-cpu-balance": _fgd_cpu_balance,
    "shipped": _shipped,
    "shipped-own": _shipped_own,
}
POLICIES = ("fitplus-sra", *_PLUGINS)
# What a policy sets besides its plugins: for fgd the FGD artifact's GPU choice inside the node and
# its scheduler's rule among equal scores (the smallest node name).
POLICY_SETTINGS: Mapping[str, Mapping[str, Any]] = {
    "fgd": {"deviceChoice": "LeastFragmentation", "priorityScale": "Candidates", "tieBreak": {"lowestName": True}}
}


def policy_plugins(policy: str, pods: Sequence[SimPod] = ()) -> Plugins | None:
    """The policy's plugins (None: the base configuration's)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    factory = _PLUGINS.get(policy)
    return None if factory is None else factory(pods)


def policy_config(base: ExtenderConfiguration, policy: str, pods: Sequence[SimPod] = ()) -> ExtenderConfiguration:
    """``base`` with the policy's plugins (the target workload from ``pods``) and cpu/memory/GPU fit,
    validated like any config file."""
    plugins = policy_plugins(policy, pods)
    data = base.model_dump(mode="json")
    data["managedResources"] = list(dict.fromkeys([*FIT_RESOURCES, *base.managed_resource_names]))
    if plugins is not None:
        data["plugins"] = plugins
    data.update(POLICY_SETTINGS.get(policy, {}))
    if policy in ("shipped", "shipped-own"):
        shipped = shipped_config()
        data.update({key: shipped.get(key) for key in SHIPPED_SETTINGS if key in shipped})
    return ExtenderConfiguration.model_validate(data)
