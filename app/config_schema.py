"""The shapes of the configuration sections that the pure packages validate themselves: score plugin
``args``, ``tieBreak`` and ``queues``. The extender never validates with these models (the parsers in
``scoring/`` and ``fairshare/`` do, with their own field-naming errors); they exist so that the
configuration reference (``app.config_reference``) documents every field from code, and a test
checks that each model names exactly the fields its parser reads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fairshare.config import ReclaimConfig
from fairshare.kai import DEFAULT_PRIORITY
from fairshare.preemption import DEFAULT_STRATEGIES
from scoring.cpu_balance import DEFAULT_MILLI_PER_POINT as CPU_BALANCE_MILLI_PER_POINT
from scoring.devices import DEFAULT_RESOURCE
from scoring.model_balance import DEFAULT_LABEL as MODEL_LABEL

__all__ = ["PLUGIN_ARGS", "QueuesSection", "TieBreakConfig"]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_RESOURCE = Field(
    DEFAULT_RESOURCE,
    description="The device resource the plugin places (an extended resource served by a device "
    "plugin, or by DRA through a DeviceClass's extendedResourceName).",
)


# ------------------------------------------------------------------------------------------ plugin args
class ResourceStrategy(_Doc):
    type: Literal["MostAllocated", "LeastAllocated"] = Field(
        description="MostAllocated packs (min(requested, allocatable)·100 // allocatable); LeastAllocated spreads "
        "((allocatable - requested)·100 // allocatable, 0 when over-committed). Case-sensitive, as upstream."
    )
    weight: int = Field(1, gt=0, description="Weight of this resource in the plugin's weighted mean.")


class NodeResourcesFitPlusArgs(_Doc):
    resources: dict[str, ResourceStrategy] = Field(
        description="Resource name → strategy. Only resources the pod requests (> 0) and listed here are scored; "
        "a pod requesting none of them scores 100 everywhere."
    )


class ScarceResourceAvoidanceArgs(_Doc):
    resources: list[str] = Field(
        description="The scarce resource types (e.g. nvidia.com/gpu). A node scores lower the larger the share of "
        "its resource types the pod does not request that are scarce; the plugin sits out for a pod that asks for "
        "every one of them."
    )


class TaskType(_Doc):
    cpu: int = Field(0, ge=0, description="Milli-CPU the task type asks for.")
    gpuMilli: int = Field(
        0, ge=0, le=1000, description="Milli-GPUs per device (1000: a whole device); 0 with gpus 0: a CPU-only type."
    )
    gpus: int = Field(0, ge=0, description="Devices the task type asks for; 0 with gpuMilli 0 for a CPU-only type.")
    popularity: int = Field(ge=1, description="Relative frequency of the type in the workload.")


class GpuFragmentationArgs(_Doc):
    resource: str = _RESOURCE
    workload: list[TaskType] = Field(
        description="The target workload's task types. Derive it from your cluster's pods with "
        "`kube-gpu-extender workload --from-cluster` (or `--pods <list>`)."
    )
    mapping: Literal["Sigmoid", "Linear"] = Field(
        "Sigmoid",
        description="How the drop in expected fragmentation ΔF becomes 0..100: Sigmoid, the FGD paper's "
        "int(100·sigmoid(ΔF/1000W)); Linear, clamp(50 + ΔF // (W·milliPerPoint), 0, 100).",
    )
    milliPerPoint: int = Field(
        10, gt=0, description="Linear mapping: expected milli-GPUs of fragmentation per score point."
    )


class DeviceResourceArgs(_Doc):
    resource: str = _RESOURCE


class GpuCpuBalanceArgs(_Doc):
    resource: str = _RESOURCE
    cpuPerGpu: int = Field(
        gt=0,
        description="Milli-CPU your GPU pods ask per whole device (required; printed by "
        "`kube-gpu-extender workload --from-cluster` or `--pods <list>`). A node's device needs the smaller of "
        "this and the node's own allocatable cpu per device.",
    )
    milliPerPoint: int = Field(CPU_BALANCE_MILLI_PER_POINT, gt=0, description="Stranded milli-GPUs per score point.")


class GpuModelBalanceArgs(_Doc):
    resource: str = _RESOURCE
    label: str = Field(
        MODEL_LABEL,
        description="The node label whose value is the node's GPU model (NVIDIA GPU feature discovery sets "
        "nvidia.com/gpu.product). Nodes without it score 50.",
    )


class NoArgs(_Doc):
    """The plugin takes no args."""


# Plugin name -> the shape of its args (every plugin the registry knows, plus FlavorFairness).
PLUGIN_ARGS: dict[str, type[BaseModel]] = {
    "NodeResourcesFitPlus": NodeResourcesFitPlusArgs,
    "ScarceResourceAvoidance": ScarceResourceAvoidanceArgs,
    "GpuFragmentation": GpuFragmentationArgs,
    "GpuPacking": DeviceResourceArgs,
    "BestFit": DeviceResourceArgs,
    "DotProduct": DeviceResourceArgs,
    "GpuClustering": DeviceResourceArgs,
    "GpuCpuBalance": GpuCpuBalanceArgs,
    "GpuModelBalance": GpuModelBalanceArgs,
    "IdleGpuAvoidance": DeviceResourceArgs,
    "FlavorFairness": NoArgs,
}


class TieBreakConfig(_Doc):
    mostAllocated: list[str] | None = Field(
        None,
        description="Device resources (not cpu, memory, pods or hugepages). For a pod asking for one of them, of "
        "the nodes the profile scores highest only those whose devices would be most allocated after the pod "
        "keep priority 10; the others get 9.",
    )
    lowestName: bool = Field(
        False,
        description="Of the nodes left at 10 (after mostAllocated), only the one with the lexicographically "
        "smallest name keeps it, for every pod: a fixed node order, the rule of the FGD paper's artifact "
        "(its kube-scheduler takes the smallest name among equal totals). Set mostAllocated, lowestName or both.",
    )
    random: bool = Field(
        False,
        description="Of the nodes left at 10 (after mostAllocated), one drawn at random per request keeps it, as "
        "kube-scheduler would pick among equal totals: BestScored then passes a single node, so kube-scheduler "
        "neither scores nor calls /prioritize for the pod. Not for a pod with soft preferences (preferred node or "
        "pod (anti-)affinity, ScheduleAnyway topology spread, a ReplicaSet, StatefulSet or ReplicationController "
        "controller) nor among nodes one of which has a PreferNoSchedule taint: those ties stay for "
        "kube-scheduler's score plugins. Not with lowestName.",
    )


# ------------------------------------------------------------------------------------------------ queues
class ObjectMeta(_Doc):
    name: str = Field(description="The object's name.")
    namespace: str | None = Field(None, description="LocalQueues only: the namespace whose pods use the queue.")


class Toleration(_Doc):
    key: str = Field("", description="Taint key; empty with operator Exists tolerates every taint.")
    operator: Literal["Equal", "Exists", "Lt", "Gt"] = Field("Equal", description="As a pod's toleration.")
    value: str = Field("", description="Taint value compared by Equal.")
    effect: str = Field("", description="Taint effect; empty matches every effect.")


class NodeTaint(_Doc):
    key: str = Field(description="Taint key.")
    value: str = Field("", description="Taint value.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(description="Taint effect.")


class FlavorFairSharing(_Doc):
    resourceWeights: dict[str, float] | None = Field(
        None, description="Resource → weight (> 0) of this flavor in the weighted dominant resource share."
    )


class ResourceFlavorSpec(_Doc):
    nodeLabels: dict[str, str] | None = Field(None, description="The nodes of this flavor carry all these labels.")
    nodeTaints: list[NodeTaint] | None = Field(None, description="Taints the flavor's nodes carry.")
    tolerations: list[Toleration] | None = Field(None, description="Tolerations added to pods admitted to this flavor.")
    resourceWeights: dict[str, str | float] | None = Field(
        None,
        description="Resource → weight (> 0, a quantity or a number): one of the two shapes of the flavor's "
        "weight in the weighted DRS. Setting both shapes on one flavor is an error.",
    )
    fairSharing: FlavorFairSharing | None = Field(None, description="The other shape of the flavor's weights.")


class ResourceFlavor(_Doc):
    metadata: ObjectMeta = Field(description="metadata.name names the flavor.")
    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec, description="Kueue's ResourceFlavor spec.")


class ResourceQuota(_Doc):
    name: str = Field(description="One of the group's coveredResources.")
    nominalQuota: float | str = Field(0, description="The quota the ClusterQueue owns.")
    borrowingLimit: float | str | None = Field(
        None, description="At most this much above nominal may be borrowed from the cohort (only with a cohort)."
    )
    lendingLimit: float | str | None = Field(
        None, description="At most this much of nominal may be lent to the cohort (only with a cohort)."
    )


class FlavorQuotas(_Doc):
    name: str = Field(description="A ResourceFlavor of resourceFlavors.")
    resources: list[ResourceQuota] = Field(description="Exactly the group's coveredResources.")


class ResourceGroup(_Doc):
    coveredResources: list[str] = Field(description="1-64 resource names; a resource belongs to one group.")
    flavors: list[FlavorQuotas] = Field(description="1-64 flavors, tried in this order.")


class QueueFairSharing(_Doc):
    weight: float = Field(
        1.0, description="Share weight of the queue or cohort: a weight of 0 makes any borrowing infinitely costly."
    )


class QueuePreemption(_Doc):
    reclaimWithinCohort: Literal["Never", "LowerPriority", "Any"] = Field(
        "Never", description="Which workloads of other ClusterQueues of the cohort may be preempted to reclaim quota."
    )
    withinClusterQueue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        "Never", description="Which workloads of the same ClusterQueue may be preempted."
    )


class ClusterQueueSpec(_Doc):
    cohortName: str | None = Field(None, description="The cohort the queue borrows from and lends to.")
    cohort: str | None = Field(None, description="Kueue v1beta1's name for cohortName (read when cohortName is unset).")
    resourceGroups: list[ResourceGroup] | None = Field(None, description="At most 16 groups of quotas.")
    preemption: QueuePreemption | None = Field(None, description="Kueue's preemption policy.")
    fairSharing: QueueFairSharing | None = Field(None, description="Fair-sharing weight.")


class ClusterQueue(_Doc):
    metadata: ObjectMeta = Field(description="metadata.name names the ClusterQueue.")
    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec, description="Kueue's ClusterQueue spec.")


class CohortSpec(_Doc):
    parentName: str | None = Field(None, description="The parent cohort (hierarchical cohorts).")
    resourceGroups: list[ResourceGroup] | None = Field(None, description="The cohort's own quotas.")
    fairSharing: QueueFairSharing | None = Field(None, description="Fair-sharing weight.")


class Cohort(_Doc):
    metadata: ObjectMeta = Field(description="metadata.name names the cohort.")
    spec: CohortSpec = Field(default_factory=CohortSpec, description="Kueue's Cohort spec (v1beta2).")


class LocalQueueSpec(_Doc):
    clusterQueue: str = Field(description="The ClusterQueue this LocalQueue submits to.")


class LocalQueue(_Doc):
    metadata: ObjectMeta = Field(
        description="metadata.name and metadata.namespace: pods of the namespace "
        "labelled kueue.x-k8s.io/queue-name: NAME use it."
    )
    spec: LocalQueueSpec = Field(description="Kueue's LocalQueue spec.")


class KaiQueueResource(_Doc):
    quota: float = Field(0.0, ge=-1, description="Deserved quota; -1 = unlimited.")
    limit: float = Field(-1.0, ge=-1, description="Hard limit; -1 = unlimited.")
    overQuotaWeight: float = Field(1.0, ge=0, description="Share of the capacity left over after deserved quotas.")


class KaiQueueSpec(_Doc):
    priority: int = Field(DEFAULT_PRIORITY, description="Queue priority: higher is served first in the division.")
    parentQueue: str | None = Field(None, description="The parent queue (KAI divides top-down along the tree).")
    resources: dict[str, KaiQueueResource] | None = Field(None, description="Resource name → quotas.")


class KaiQueue(_Doc):
    metadata: ObjectMeta = Field(
        description="metadata.name names the queue; pods use it with the label kai.scheduler/queue: NAME."
    )
    spec: KaiQueueSpec = Field(default_factory=KaiQueueSpec, description="KAI's Queue spec (scheduling.run.ai/v2).")


class FairSharingOptions(_Doc):
    preemptionStrategies: list[Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]] = Field(
        list(DEFAULT_STRATEGIES),  # type: ignore[arg-type]  # the parser's own default, two valid names
        description="Kueue's fair-sharing preemption strategies, in order: [LessThanOrEqualToFinalShare], "
        "[LessThanInitialShare] or both in that order.",
    )
    priorityBasedFairShare: bool = Field(
        False, description="KAI: divide over-quota capacity by queue priority first (KAI's priority-based fair share)."
    )
    kValue: float = Field(1.0, description="KAI: the k of the fair-share division's usage decay.")


class DeviceClassMapping(_Doc):
    name: str = Field(description="The resource the devices count as in queues (e.g. nvidia.com/gpu).")
    deviceClassNames: list[str] = Field(description="DeviceClasses whose allocated devices count as `name`.")


_RECLAIM = ReclaimConfig()


class ReclaimOptions(_Doc):
    mode: Literal["off", "dry-run", "on"] = Field(
        _RECLAIM.mode,  # type: ignore[arg-type]  # the parser's default, one of RECLAIM_MODES
        description="off; dry-run: decide and report, evict nothing; on: evict through the Eviction API.",
    )
    evictionsPerMinute: int = Field(
        _RECLAIM.evictions_per_minute, ge=1, description="Victim workloads per rolling minute (a gang counts once)."
    )
    minRuntimeSeconds: float = Field(
        _RECLAIM.min_runtime_seconds, ge=0, description="A pod bound less long ago is never a victim (nor is its gang)."
    )
    intervalSeconds: float = Field(_RECLAIM.interval_seconds, ge=0.1, description="One reclaim round every ...")
    retryAfterSeconds: float = Field(
        _RECLAIM.retry_after_seconds,
        ge=0,
        description="A refused eviction (PodDisruptionBudget 429, API error) is tried again after this long.",
    )
    leaderLease: str = Field(
        _RECLAIM.leader_lease,
        description="namespace/name of kube-scheduler's leader-election Lease: only the replica whose "
        'kube-scheduler holds it reclaims; "" = every replica.',
    )


class QueuesSection(_Doc):
    resourceFlavors: list[ResourceFlavor] | None = Field(None, description="Kueue ResourceFlavors.")
    cohorts: list[Cohort] | None = Field(
        None, description="Kueue Cohorts; a cohort a ClusterQueue names without defining it is created implicitly."
    )
    clusterQueues: list[ClusterQueue] | None = Field(None, description="Kueue ClusterQueues.")
    localQueues: list[LocalQueue] | None = Field(None, description="Kueue LocalQueues.")
    kaiQueues: list[KaiQueue] | None = Field(None, description="KAI queues (a tree through parentQueue).")
    fairSharing: FairSharingOptions | None = Field(None, description="Fair-sharing options (Kueue and KAI).")
    watchKueue: bool = Field(
        False,
        description="Read Kueue's own ResourceFlavors, Cohorts, ClusterQueues, LocalQueues and Workloads from the "
        "API server (cluster mode) instead of the lists above.",
    )
    deviceClassMappings: list[DeviceClassMapping] | None = Field(
        None, description="Kueue's deviceClassMappings: DRA devices of these classes count as a resource in queues."
    )
    reclaim: ReclaimOptions | None = Field(None, description="The reclaimer that gives lent quota back (evicts pods).")
