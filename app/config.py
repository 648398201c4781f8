"""The extender's configuration file (YAML), validated at load with messages that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.http.auth import read_token
from app.http.tls import check_readable, check_tls_files
from app.pipeline.fairness import FLAVOR_FAIRNESS
from app.yamlfile import read_yaml
from fairshare.config import QueueConfig, parse_queue_config
from scoring.best_scored import FEASIBLE, FilterReturns
from scoring.devices import DeviceChoice
from scoring.framework import ArgsError, ScorePlugin
from scoring.managed_fit import ManagedResourcesFit
from scoring.priority_scale import CANDIDATES, PriorityScale
from scoring.profile import Profile, ScorePluginSpec, build_placer, build_score_plugin
from scoring.tie_break import TieBreak

__all__ = ["API_VERSION", "KIND", "ConfigError", "ExtenderConfiguration", "PluginConfig", "load_config", "parse_config"]

API_VERSION: Final = "kube-gpu-extender.io/v1alpha1"
KIND: Final = "ExtenderConfiguration"


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class PluginConfig(_Strict):
    name: str = Field(
        description="A score plugin: NodeResourcesFitPlus, ScarceResourceAvoidance, GpuFragmentation, GpuCpuBalance, "
        "GpuModelBalance, IdleGpuAvoidance, BestFit, GpuPacking, DotProduct, GpuClustering, or FlavorFairness "
        "(needs the queues section)."
    )
    weight: int = Field(1, gt=0, description="Profile weight of this plugin in the combined score.")
    args: dict[str, Any] = Field(default_factory=dict, description="The plugin's own arguments (below).")


class ManagedResource(_Strict):
    name: str = Field(description="The extended resource name, e.g. nvidia.com/gpu.")
    ignoredByScheduler: bool = Field(
        False,
        description="Whether kube-scheduler's NodeResourcesFit ignores this resource (its ignoredResources). "
        "False, as the shipped profile: a node kube-scheduler passed that the extender finds short means the "
        "extender's cache lags kube-scheduler's, and filter waits for it (cache.catchUpSeconds).",
    )


class CacheConfig(_Strict):
    notReadyPolicy: Literal["Fail", "PassAll"] = Field(
        "Fail",
        description="What /filter does before the first sync or while the watch is stale: answer with Error "
        "(kube-scheduler retries the pod later) or let every node pass the extender's checks.",
    )
    staleAfterSeconds: float = Field(30.0, gt=0, description="A watch broken this long makes the cache stale.")
    assumeTTLSeconds: float = Field(
        300.0, gt=0, description="How long a bound pod stays assumed if the watch never confirms it."
    )
    catchUpSeconds: float = Field(
        0.5,
        ge=0,
        description="When filter would leave a pod with no node and the cache may lag kube-scheduler's (it "
        "rejected this pod before and has not changed since, or a node kube-scheduler passed is short of a "
        "resource both count), wait this long for the cache to change and judge once more. 0 turns it off.",
    )
    requeueAfterSeconds: float = Field(
        1.0,
        ge=0,
        description="When the cache frees capacity (a pod gone, a node added or grown, devices or quota freed) "
        "after filter left a pod with no node, and kube-scheduler has not asked about the pod again within this "
        "long, write a condition into the pod's status so kube-scheduler retries it (cluster mode). Each pod is "
        "asked for at most once per interval, doubling from this value up to 5 minutes. 0 turns it off.",
    )


class TLSConfig(_Strict):
    """Serve HTTPS; names follow kube-scheduler's extender ``tlsConfig`` (certFile, keyFile, caFile)."""

    certFile: str = Field(description="PEM server certificate (chain); reloaded when the file changes.")
    keyFile: str = Field(description="PEM private key of certFile; reloaded when the file changes.")
    clientCAFile: str | None = Field(
        None, description="PEM CA bundle: when set, every client must present a certificate it signed (mTLS)."
    )

    @field_validator("certFile", "keyFile", "clientCAFile")
    @classmethod
    def _readable(cls, value: str | None) -> str | None:
        if value is not None:
            check_readable(value)
        return value

    @model_validator(mode="after")
    def _parse(self) -> TLSConfig:
        check_tls_files(self.certFile, self.keyFile, self.clientCAFile)
        return self


class ServerConfig(_Strict):
    pathPrefix: str = Field("", description="Prefix of the extender verbs, e.g. /scheduler -> /scheduler/filter.")
    maxRequestBytes: int = Field(64 * 1024 * 1024, gt=0, description="Larger request bodies are refused unread.")
    decisionHistory: int = Field(200, ge=0, description="How many recent decisions /debug keeps.")
    shutdownGracePeriodSeconds: float = Field(
        10.0, ge=0, description="On SIGTERM, how long in-flight requests (binds) may finish before they are cut."
    )
    tls: TLSConfig | None = Field(None, description="HTTPS (and optionally mTLS) instead of plain HTTP.")
    debugTokenFile: str | None = Field(
        None, description="File holding the bearer token /debug, /debug/explain and /metrics require."
    )

    @field_validator("debugTokenFile")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None:
            read_token(value)
        return value

    @model_validator(mode="after")
    def _one_debug_guard(self) -> ServerConfig:
        if self.debugTokenFile is not None and self.tls is not None and self.tls.clientCAFile is not None:
            raise ValueError(
                "debugTokenFile: not used with tls.clientCAFile (every connection already presents a verified "
                "client certificate); set one of them"
            )
        return self

    @field_validator("pathPrefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        value = value.rstrip("/")
        if value and not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value


class DraConfig(_Strict):
    enabled: bool = Field(
        True,
        description="Allocate DRA ResourceClaims (resource.k8s.io/v1) in filter and bind. Requires kube-scheduler's "
        "DynamicResources plugin to be disabled in the profile; turn off on clusters without resource.k8s.io/v1.",
    )
    proposalTTLSeconds: float = Field(
        60.0, gt=0, description="How long /bind may reuse the devices /filter chose on a node for a pod."
    )
    bindingTimeoutSeconds: float = Field(
        3.0,
        gt=0,
        le=600,
        description="How long /bind waits, after writing the allocation, for the binding conditions of the "
        "devices it allocated (DRADeviceBindingConditions) to become True before it undoes the allocation and "
        "answers an Error. Keep it below kube-scheduler's extender httpTimeout (5s as shipped), or "
        "kube-scheduler gives up on /bind first. kube-scheduler's own plugin waits up to 600s.",
    )


class GangsConfig(_Strict):
    enabled: bool = Field(
        True,
        description="Place the pods of a group all together or not at all, and inside one topology domain when "
        "asked: Kubernetes 1.36 PodGroups (scheduling.k8s.io/v1alpha2, gang policy), scheduler-plugins "
        "coscheduling PodGroups (scheduling.x-k8s.io/v1alpha1) and Kueue pod groups, with Kueue's topology "
        "annotations. Pods of no group are not affected.",
    )
    holdSeconds: float = Field(
        300.0,
        gt=0,
        le=3600,
        description="How long a group's plan holds room on its nodes for members not bound yet, counted from the "
        "plan and from each member bound since; then the room goes back and the group is planned again. A "
        "coscheduling PodGroup's scheduleTimeoutSeconds replaces it for that group.",
    )
    topologyLevels: list[str] = Field(
        default_factory=list,
        description="The cluster's topology levels: node label keys from the widest domain to the narrowest, e.g. "
        "[example.com/block, example.com/rack, kubernetes.io/hostname]. A preferred topology falls back through "
        "the wider levels before it places a group anywhere; without levels, straight to anywhere.",
    )

    @field_validator("topologyLevels")
    @classmethod
    def _levels(cls, value: list[str]) -> list[str]:
        for index, key in enumerate(value):
            if not key:
                raise ValueError(f"[{index}]: empty label key")
            if key in value[:index]:
                raise ValueError(f"[{index}]: duplicate level {key!r}")
        return value


def _default_plugins() -> list[PluginConfig]:
    return [
        PluginConfig(
            name="NodeResourcesFitPlus",
            weight=1,
            args={
                "resources": {
                    "nvidia.com/gpu": {"type": "MostAllocated", "weight": 2},
                    "cpu": {"type": "LeastAllocated", "weight": 1},
                    "memory": {"type": "LeastAllocated", "weight": 1},
                }
            },
        ),
        PluginConfig(name="ScarceResourceAvoidance", weight=1, args={"resources": ["nvidia.com/gpu"]}),
    ]


def _default_managed_resources() -> list[str | ManagedResource]:
    return ["nvidia.com/gpu"]


class ExtenderConfiguration(_Strict):
    apiVersion: Literal["kube-gpu-extender.io/v1alpha1"] = Field(API_VERSION, description="The file's format.")
    kind: Literal["ExtenderConfiguration"] = Field(KIND, description="The file's kind.")
    managedResources: list[str | ManagedResource] = Field(
        default_factory=_default_managed_resources,
        description="Resources /filter checks against each node's allocatable minus what bound and assumed pods "
        "request (default [nvidia.com/gpu]); a name or {name, ignoredByScheduler}.",
    )
    plugins: list[PluginConfig] = Field(
        default_factory=_default_plugins,
        description="The score plugins, in order; a node's score is their integer weighted mean. Default: "
        "NodeResourcesFitPlus (GPUs MostAllocated weight 2, cpu and memory LeastAllocated) and "
        "ScarceResourceAvoidance on nvidia.com/gpu, weight 1 each.",
    )
    priorityScale: PriorityScale = Field(
        CANDIDATES,
        description="How the profile's 0..100 node scores become /prioritize's 0..10: Candidates (relative to the "
        "nodes of the request: the best gets 10, every other node at most 9) or Absolute (each node alone, "
        "rounded to the nearest ten). See scoring/priority_scale.py.",
    )
    tieBreak: dict[str, Any] | None = Field(
        None,
        description="Among the nodes the profile scores highest, which keep the best priority: unset, all of "
        "them (kube-scheduler picks one at random); {mostAllocated: [nvidia.com/gpu]}, for a pod that asks for "
        "one of those device resources, only the nodes whose devices would be most allocated after it; "
        "{lowestName: true}, then only the node with the smallest name (a fixed node order), or {random: true}, "
        "one of them drawn per request (kube-scheduler's own pick, taken by the extender). Needs "
        "priorityScale: Candidates. See scoring/tie_break.py.",
    )
    deviceChoice: Literal["FirstFit", "LeastFragmentation"] = Field(
        "FirstFit",
        description="Which devices of the chosen node a pod takes, for the plugins that score the node after the "
        "pod (GpuFragmentation, GpuPacking) and for the DRA allocator, which takes them first among devices of "
        "equal priority: FirstFit (the first devices in the allocator's order with enough left) or "
        "LeastFragmentation (a share of one device goes to the device that leaves the node least fragmented for "
        "the GpuFragmentation plugin's workload, as the FGD paper's binder; whole devices by first fit). See "
        "scoring/devices.py.",
    )
    filterReturns: FilterReturns = Field(
        FEASIBLE,
        description="Which nodes /filter lets through: Feasible (every node that passes) or BestScored (only "
        "those the profile scores highest: with one node left kube-scheduler takes it without scoring, "
        "with several it scores them and picks one). See scoring/best_scored.py.",
    )
    filterFailures: Literal["Always", "WhenUnschedulable"] = Field(
        "Always",
        description="When /filter names a reason for each node it rejects (FailedNodes, "
        "FailedAndUnresolvableNodes): Always, or WhenUnschedulable (only when no node passes: kube-scheduler "
        "reads the reasons only then, for its FailedScheduling event and preemption; otherwise a 1,000-node "
        "answer carries up to 1,000 reasons nobody reads). Keep Always behind a second filtering extender.",
    )
    cache: CacheConfig = Field(default_factory=CacheConfig, description="The watch-fed cache and the assume ledger.")
    server: ServerConfig = Field(default_factory=ServerConfig, description="The HTTP server.")
    dra: DraConfig = Field(default_factory=DraConfig, description="Dynamic Resource Allocation (ResourceClaims).")
    gangs: GangsConfig = Field(default_factory=GangsConfig, description="Gang scheduling and topology for PodGroups.")
    # Validated by fairshare.config; its shape is documented by app.config_schema.QueuesSection.
    queues: dict[str, Any] | None = Field(
        None,
        description="Queues and fair sharing (Kueue ClusterQueues over ResourceFlavors, KAI queues); off when unset.",
    )

    @property
    def managed_resource_names(self) -> list[str]:
        return [r if isinstance(r, str) else r.name for r in self.managedResources]

    @property
    def scheduler_counted_resources(self) -> list[str]:
        """Managed resources kube-scheduler's NodeResourcesFit counts too (not ignoredByScheduler)."""
        return [
            r if isinstance(r, str) else r.name
            for r in self.managedResources
            if isinstance(r, str) or not r.ignoredByScheduler
        ]

    @model_validator(mode="after")
    def _check(self) -> ExtenderConfiguration:
        names = self.managed_resource_names
        for index, name in enumerate(names):
            if not name:
                raise ValueError(f"managedResources[{index}]: empty resource name")
            if name in names[:index]:
                raise ValueError(f"managedResources[{index}]: duplicate resource name {name!r}")
        seen: set[str] = set()
        for index, plugin in enumerate(self.plugins):
            if plugin.name in seen:
                raise ValueError(f"plugins[{index}].name: duplicate plugin {plugin.name!r}")
            seen.add(plugin.name)
        self.build_profile()  # plugin args are validated by the plugins themselves
        if self.tie_break() is not None and self.priorityScale != CANDIDATES:
            raise ValueError(f"tieBreak: needs priorityScale: {CANDIDATES} (got {self.priorityScale})")
        self.queue_config()
        return self

    def tie_break(self) -> TieBreak | None:
        if self.tieBreak is None:
            return None
        try:
            return TieBreak.parse(self.tieBreak)
        except ArgsError as exc:
            raise ValueError(str(exc)) from None

    def queue_config(self) -> QueueConfig | None:
        return None if self.queues is None else parse_queue_config(self.queues)

    def build_profile(self, flavor_fairness: ScorePlugin | None = None) -> Profile:
        """The scheduling profile. ``FlavorFairness`` reads queue state, so the pipeline passes it in
        (``app.pipeline.fairness.FlavorFairness``, built only when queues are on); without it the
        plugin is only validated (no args, needs ``queues:``) and left out."""
        try:
            placer = build_placer(DeviceChoice(self.deviceChoice), [(p.name, p.args) for p in self.plugins])
        except ArgsError as exc:
            raise ValueError(str(exc)) from None
        scorers = []
        for i, p in enumerate(self.plugins):
            if p.name == FLAVOR_FAIRNESS:
                if p.args:
                    raise ValueError(f"plugins[{i}].args: {FLAVOR_FAIRNESS} takes no args")
                if self.queues is None:
                    raise ValueError(f"plugins[{i}].name: {FLAVOR_FAIRNESS} needs the queues section")
                if flavor_fairness is not None:
                    scorers.append(ScorePluginSpec(flavor_fairness, p.weight))
                continue
            try:
                plugin = build_score_plugin(p.name, p.args, f"plugins[{i}]", placer)
            except ArgsError as exc:
                raise ValueError(str(exc)) from None
            scorers.append(ScorePluginSpec(plugin, p.weight))
        return Profile([ManagedResourcesFit(self.managed_resource_names)], scorers, placer)


def _format_validation_error(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"]).lstrip(".") or "(root)"
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}" if where != "(root)" else message)
    return "; ".join(lines)


def parse_config(data: Any) -> ExtenderConfiguration:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("configuration must be a YAML mapping")
    try:
        return ExtenderConfiguration.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc)) from None


def load_config(path: str | Path | None) -> ExtenderConfiguration:
    """Load and validate a config file; ``None`` gives the built-in defaults (the seed's example)."""
    if path is None:
        return ExtenderConfiguration()
    data = read_yaml(path, "config", ConfigError)
    if data is None:
        # An empty file is most likely a mistake (a ConfigMap key mounted empty, a wrong path to
        # /dev/null): running on the defaults would hide it.
        raise ConfigError(
            f"{path}: the file is empty; write a configuration (see examples/config.yaml) "
            "or leave --config out for the built-in defaults"
        )
    try:
        return parse_config(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
