"""KubeSchedulerConfiguration files, read the way kube-scheduler 1.36 reads them, for the simulator.

An adapter: YAML in, a small frozen ``SchedulerConfig`` out (one profile's effective score plugins
and weights, the NodeResourcesFit and NodeResourcesBalancedAllocation args, the extender's
prioritize weight), and ``SchedulerConfig.scoring()`` builds the pure ``scoring.kube_scheduler``
arithmetic from it. What is applied, as kube-scheduler does it:

* the default plugins (``DEFAULT_MULTI_POINT``), merged with the profile's ``multiPoint`` (disabled
  names or ``"*"`` drop defaults; enabled entries replace a default in place with their weight, or
  are appended);
* the ``score`` extension point: a plugin explicitly enabled there is a score plugin with that
  weight; otherwise every multiPoint plugin that implements Score and is not disabled at ``score``
  (by name or ``"*"``) is one, with its multiPoint weight. A weight of 0 or none means 1;
* ``pluginConfig`` args of NodeResourcesFit and NodeResourcesBalancedAllocation, defaulted and
  validated (``scoring.intree`` / ``scoring.balanced``);
* ``extenders``: the one with a ``prioritizeVerb`` adds ``priority · weight · 10``; one without
  adds nothing. ``managedResources`` limits the pods it is asked about.

The file is decoded strictly, as kube-scheduler does: unknown fields are errors, each naming the
field path (``profiles[0].plugins.score.enabled[1].weight: ...``).

Only NodeResourcesFit and NodeResourcesBalancedAllocation are modelled. The other score plugins give
every node the same score for the simulator's pods and so cannot change the choice:
``CONSTANT_SCORE_PLUGINS`` says why for each (no taints, affinity, spread constraints, images,
volumes or claims on simulated pods and nodes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.yamlfile import read_yaml
from scoring import balanced, intree
from scoring.framework import ArgsError, PodInfo
from scoring.kube_scheduler import KubeSchedulerScore, WeightedPlugin

__all__ = [
    "API_VERSION",
    "CONSTANT_SCORE_PLUGINS",
    "DEFAULT_MULTI_POINT",
    "DEFAULT_SCHEDULER_CONFIG",
    "MODELLED_SCORE_PLUGINS",
    "SCORE_PLUGINS",
    "SchedulerConfig",
    "SchedulerConfigError",
    "ScorePluginWeight",
    "load_scheduler_config",
    "load_scheduler_config_argument",
    "parse_scheduler_config",
    "resolve_scheduler_config",
]

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
DEFAULT_SCHEDULER_NAME = "default-scheduler"
# The shipped profile, found from the package so that any working directory works.
DEFAULT_SCHEDULER_CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "kube-scheduler-config.yaml"
NONE = "none"

# kube-scheduler 1.36's default multiPoint plugins, in order, with their weights (0 = unset).
# DynamicResources is there because DynamicResourceAllocation is on by default (GA).
DEFAULT_MULTI_POINT: tuple[tuple[str, int], ...] = (
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 0),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
    ("NodeDeclaredFeatures", 0),
)

MODELLED_SCORE_PLUGINS = (intree.NAME, balanced.NAME)
# The other in-tree plugins that implement Score in 1.36, and why each one gives every node the same
# score for a simulated pod (so the simulator leaves them out: a constant cannot change the winner).
CONSTANT_SCORE_PLUGINS: Mapping[str, str] = {
    "TaintToleration": "simulated nodes have no taints",
    "NodeAffinity": "simulated pods have no preferred node affinity (the GPU model is a hard filter)",
    "PodTopologySpread": "simulated pods have no spread constraints and no owner for the system defaults",
    "InterPodAffinity": "simulated pods have no pod affinity or anti-affinity",
    "ImageLocality": "simulated nodes report no images",
    "VolumeBinding": "simulated pods have no PersistentVolumeClaims",
    "DynamicResources": "simulated pods have no ResourceClaims (the extender allocates claims)",
}
SCORE_PLUGINS = frozenset((*MODELLED_SCORE_PLUGINS, *CONSTANT_SCORE_PLUGINS))
# In-tree plugins of 1.36 without a Score extension.
_OTHER_PLUGINS = frozenset(
    {
        "SchedulingGates",
        "PrioritySort",
        "NodeUnschedulable",
        "NodeName",
        "NodePorts",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeZone",
        "DefaultPreemption",
        "DefaultBinder",
        "NodeDeclaredFeatures",
        "GangScheduling",
        "PodGroupPodsCount",
        "TopologyPlacement",
    }
)
_KNOWN_PLUGINS = SCORE_PLUGINS | _OTHER_PLUGINS

_TOP_LEVEL = (
    "apiVersion",
    "kind",
    "parallelism",
    "leaderElection",
    "clientConnection",
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
    "extenders",
    "delayCacheUntilActive",
)
_PROFILE = ("schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig")
_EXTENSION_POINTS = (
    "multiPoint",
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "placementGenerate",
    "placementScore",
)
_EXTENDER = (
    "urlPrefix",
    "filterVerb",
    "preemptVerb",
    "prioritizeVerb",
    "weight",
    "bindVerb",
    "enableHTTPS",
    "tlsConfig",
    "httpTimeout",
    "nodeCacheCapable",
    "managedResources",
    "ignorable",
)
_INT32_MAX = 2**31 - 1


class SchedulerConfigError(ValueError):
    """A scheduler configuration the simulator cannot use; the message names the file and field."""


@dataclass(frozen=True, slots=True)
class ScorePluginWeight:
    name: str
    weight: int

    @property
    def modelled(self) -> bool:
        return self.name in MODELLED_SCORE_PLUGINS


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """One profile of a KubeSchedulerConfiguration, as far as choosing a node goes."""

    source: str  # the file, as given
    profile: str  # schedulerName
    score_plugins: tuple[ScorePluginWeight, ...]  # effective, in kube-scheduler's order
    fit_args: intree.NodeResourcesFitArgs
    balanced_args: balanced.NodeResourcesBalancedAllocationArgs
    extender_weight: int  # 0: the extender has no prioritizeVerb (adds nothing)
    extender_managed_resources: frozenset[str] = frozenset()  # empty: every pod is sent
    percentage_of_nodes_to_score: int | None = None

    def weight(self, plugin: str) -> int | None:
        return next((entry.weight for entry in self.score_plugins if entry.name == plugin), None)

    def interested(self, pod: PodInfo) -> bool:
        """Whether kube-scheduler calls the extender for ``pod`` (``IsInterested``): always without
        ``managedResources``, else when the pod requests or limits one of them."""
        if not self.extender_managed_resources:
            return True
        return any(name in self.extender_managed_resources for name in pod.resources.requests)

    def scoring(self) -> KubeSchedulerScore:
        """The modelled score plugins with their weights and the extender weight."""
        plugins: list[WeightedPlugin] = []
        for entry in self.score_plugins:
            if entry.name == intree.NAME:
                plugins.append(WeightedPlugin(intree.NodeResourcesFit(self.fit_args), entry.weight))
            elif entry.name == balanced.NAME:
                plugins.append(
                    WeightedPlugin(balanced.NodeResourcesBalancedAllocation(self.balanced_args), entry.weight)
                )
        return KubeSchedulerScore(plugins, self.extender_weight)

    def describe(self) -> str:
        """For reports: file and profile, the modelled score plugins, the constant ones, the extender weight."""

        def listed(modelled: bool) -> str:
            return ", ".join(f"{p.name} {p.weight}" for p in self.score_plugins if p.modelled == modelled) or "none"

        return (
            f"{self.source}, profile {self.profile}: in-tree scores modelled: {listed(True)}; "
            f"alike on every simulated node: {listed(False)}; extender weight {self.extender_weight}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "profile": self.profile,
            "scorePlugins": [{"name": p.name, "weight": p.weight, "modelled": p.modelled} for p in self.score_plugins],
            "extenderWeight": self.extender_weight,
        }


# ---------------------------------------------------------------------------------------- parsing
def _mapping(raw: Any, path: str, fields: tuple[str, ...]) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SchedulerConfigError(f"{path}: must be a mapping")
    unknown = sorted(set(raw) - set(fields), key=str)
    if unknown:
        raise SchedulerConfigError(f"{path}: unknown field(s) {unknown}")
    return raw


def _list(raw: Any, path: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SchedulerConfigError(f"{path}: must be a list")
    return raw


def _int32(raw: Any, path: str, *, minimum: int) -> int:
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or not minimum <= raw <= _INT32_MAX:
        raise SchedulerConfigError(f"{path}: must be an integer in {minimum}..{_INT32_MAX}, got {raw!r}")
    return raw


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    weight: int  # 0 = unset
    path: str


def _plugin_set(raw: Any, path: str) -> tuple[list[_Entry], set[str]]:
    """(enabled entries, disabled names) of one extension point."""
    plugin_set = _mapping(raw, path, ("enabled", "disabled"))
    sets: dict[str, list[_Entry]] = {}
    for key in ("enabled", "disabled"):
        entries = []
        for index, plugin in enumerate(_list(plugin_set.get(key), f"{path}.{key}")):
            field = f"{path}.{key}[{index}]"
            plugin = _mapping(plugin, field, ("name", "weight"))
            name = plugin.get("name")
            if not isinstance(name, str) or not name:
                raise SchedulerConfigError(f"{field}.name: must be a non-empty string, got {name!r}")
            # Negative weights: kube-scheduler refuses them ("total score ... could overflow").
            entries.append(_Entry(name, _int32(plugin.get("weight"), f"{field}.weight", minimum=0), field))
        sets[key] = entries
    return sets["enabled"], {entry.name for entry in sets["disabled"]}


def _merge(defaults: list[_Entry], enabled: list[_Entry], disabled: set[str]) -> list[_Entry]:
    """kube-scheduler's mergePluginSet: defaults minus disabled (all with "*"), custom entries
    replacing a default in place, the other custom entries appended."""
    custom = {entry.name: entry for entry in enabled}
    merged: list[_Entry] = []
    replaced: set[str] = set()
    if "*" not in disabled:
        for entry in defaults:
            if entry.name in disabled:
                continue
            if entry.name in custom:
                entry = custom[entry.name]
                replaced.add(entry.name)
            merged.append(entry)
    merged += [entry for entry in enabled if entry.name not in replaced]
    return merged


def _known(entry: _Entry) -> None:
    if entry.name not in _KNOWN_PLUGINS:
        raise SchedulerConfigError(
            f"{entry.path}.name: {entry.name!r} is not an in-tree plugin of kube-scheduler 1.36; "
            "the simulator cannot model it"
        )


def _score_plugins(plugins: Mapping[str, Any], path: str) -> tuple[ScorePluginWeight, ...]:
    """The profile's effective score plugins and weights (mergePlugins, expandMultiPointPlugins, getScoreWeights)."""
    multi_enabled, multi_disabled = _plugin_set(plugins.get("multiPoint"), f"{path}.multiPoint")
    score_enabled, score_disabled = _plugin_set(plugins.get("score"), f"{path}.score")
    defaults = [_Entry(name, weight, "default") for name, weight in DEFAULT_MULTI_POINT]
    multi_point = _merge(defaults, multi_enabled, multi_disabled)
    for entry in multi_point:
        _known(entry)
    chosen: dict[str, int] = {}
    for entry in score_enabled:
        _known(entry)
        if entry.name not in SCORE_PLUGINS:
            raise SchedulerConfigError(f"{entry.path}.name: plugin {entry.name!r} does not extend ScorePlugin")
        if entry.name in chosen:
            raise SchedulerConfigError(f"{entry.path}.name: plugin {entry.name!r} already registered as ScorePlugin")
        chosen[entry.name] = entry.weight or 1
    if "*" not in score_disabled:
        expanded: set[str] = set()
        for entry in multi_point:
            if entry.name not in SCORE_PLUGINS or entry.name in score_disabled or entry.name in chosen:
                continue  # not a score plugin, disabled at score, or configured there explicitly
            if entry.name in expanded:
                raise SchedulerConfigError(
                    f"{path}.multiPoint: plugin {entry.name!r} already registered as ScorePlugin"
                )
            expanded.add(entry.name)
        for entry in multi_point:  # the first multiPoint entry of a name gives its weight
            if entry.name in expanded and entry.name not in chosen:
                chosen[entry.name] = entry.weight or 1
    return tuple(ScorePluginWeight(name, weight) for name, weight in chosen.items())


def _plugin_args(raw: Any, path: str) -> dict[str, tuple[Any, str]]:
    """``pluginConfig`` as {plugin name: (args, path of the args)}; duplicates are errors."""
    found: dict[str, tuple[Any, str]] = {}
    for index, item in enumerate(_list(raw, path)):
        field = f"{path}[{index}]"
        item = _mapping(item, field, ("name", "args"))
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise SchedulerConfigError(f"{field}.name: must be a non-empty string, got {name!r}")
        if name in found:
            raise SchedulerConfigError(f"{field}.name: duplicate value {name!r}")
        found[name] = (item.get("args"), f"{field}.args")
    return found


def _extender(raw: Any, path: str) -> tuple[int, frozenset[str]]:
    """(prioritize weight, managed resource names) of the extender the simulator plays."""
    extenders = _list(raw, path)
    if not extenders:
        raise SchedulerConfigError(f"{path}: no extender configured; kube-scheduler would never call the extender")
    prioritizing: list[tuple[int, frozenset[str]]] = []
    managed_of_all: list[frozenset[str]] = []
    binders = 0
    for index, extender in enumerate(extenders):
        field = f"{path}[{index}]"
        extender = _mapping(extender, field, _EXTENDER)
        weight = _int32(extender.get("weight"), f"{field}.weight", minimum=-(2**31))
        binders += bool(extender.get("bindVerb"))
        managed: set[str] = set()
        for position, resource in enumerate(_list(extender.get("managedResources"), f"{field}.managedResources")):
            entry = _mapping(resource, f"{field}.managedResources[{position}]", ("name", "ignoredByScheduler"))
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                raise SchedulerConfigError(f"{field}.managedResources[{position}].name: must be a non-empty string")
            managed.add(name)
        managed_of_all.append(frozenset(managed))
        if extender.get("prioritizeVerb"):
            if weight <= 0:
                raise SchedulerConfigError(f"{field}.weight: {weight}: must have a positive weight applied to it")
            prioritizing.append((weight, frozenset(managed)))
    if binders > 1:
        raise SchedulerConfigError(f"{path}: found {binders} extenders implementing bind; only one can")
    if len(prioritizing) > 1:
        raise SchedulerConfigError(
            f"{path}: {len(prioritizing)} extenders have a prioritizeVerb; the simulator plays one extender"
        )
    if prioritizing:
        return prioritizing[0]
    return 0, managed_of_all[0] if len(managed_of_all) == 1 else frozenset()


def _profile(profiles: list[Any], name: str | None) -> tuple[int, Mapping[str, Any]]:
    if not profiles:
        profiles = [{}]  # kube-scheduler's default: one profile, default-scheduler, default plugins
    parsed = [_mapping(p, f"profiles[{i}]", _PROFILE) for i, p in enumerate(profiles)]
    names = []
    for index, profile in enumerate(parsed):
        scheduler_name = profile.get("schedulerName", DEFAULT_SCHEDULER_NAME if len(parsed) == 1 else None)
        if not isinstance(scheduler_name, str) or not scheduler_name:
            raise SchedulerConfigError(f"profiles[{index}].schedulerName: must be a non-empty string")
        names.append(scheduler_name)
    if name is None:
        return 0, parsed[0]
    if name not in names:
        raise SchedulerConfigError(f"profiles: no profile with schedulerName {name!r} (have: {', '.join(names)})")
    index = names.index(name)
    return index, parsed[index]


def parse_scheduler_config(data: Any, source: str, profile: str | None = None) -> SchedulerConfig:
    """Read one profile (``profile`` = its schedulerName; the first when None) of a parsed file."""
    try:
        return _parse(data, source, profile)
    except (SchedulerConfigError, ArgsError) as exc:
        raise SchedulerConfigError(f"{source}: {exc}") from None


def _parse(data: Any, source: str, profile_name: str | None) -> SchedulerConfig:
    top = _mapping(data, "(top level)", _TOP_LEVEL)
    if top.get("apiVersion") != API_VERSION:
        raise SchedulerConfigError(f"apiVersion: {top.get('apiVersion')!r} is not {API_VERSION}")
    if top.get("kind") != KIND:
        raise SchedulerConfigError(f"kind: {top.get('kind')!r} is not {KIND}")
    index, profile = _profile(_list(top.get("profiles"), "profiles"), profile_name)
    path = f"profiles[{index}]"
    plugins = _mapping(profile.get("plugins"), f"{path}.plugins", _EXTENSION_POINTS)
    for point in _EXTENSION_POINTS:
        if point not in ("multiPoint", "score"):
            _plugin_set(plugins.get(point), f"{path}.plugins.{point}")  # shape only
    score_plugins = _score_plugins(plugins, f"{path}.plugins")
    args = _plugin_args(profile.get("pluginConfig"), f"{path}.pluginConfig")
    fit_raw, fit_path = args.get(intree.NAME, (None, ""))
    balanced_raw, balanced_path = args.get(balanced.NAME, (None, ""))
    weight, managed = _extender(top.get("extenders"), "extenders")
    percentage = profile.get("percentageOfNodesToScore", top.get("percentageOfNodesToScore"))
    if percentage is not None and (isinstance(percentage, bool) or not isinstance(percentage, int)):
        raise SchedulerConfigError(f"{path}.percentageOfNodesToScore: must be an integer, got {percentage!r}")
    return SchedulerConfig(
        source=source,
        profile=profile.get("schedulerName") or DEFAULT_SCHEDULER_NAME,
        score_plugins=score_plugins,
        fit_args=intree.NodeResourcesFitArgs.parse(fit_raw, fit_path),
        balanced_args=balanced.NodeResourcesBalancedAllocationArgs.parse(balanced_raw, balanced_path),
        extender_weight=weight,
        extender_managed_resources=managed,
        percentage_of_nodes_to_score=percentage,
    )


def load_scheduler_config(
    path: str | Path, profile: str | None = None, *, source: str | None = None
) -> SchedulerConfig:
    """Read ``path``; ``source`` is how reports name it (default: the path as given)."""
    data = read_yaml(path, "scheduler config", SchedulerConfigError)
    return parse_scheduler_config(data, source or str(path), profile)


def resolve_scheduler_config(argument: str | None) -> Path | None:
    """``--scheduler-config``: None = the shipped deploy/kube-scheduler-config.yaml (found from the
    package, any working directory), ``none`` = no scheduler config (the extender alone decides)."""
    if argument is not None and argument.strip().lower() == NONE:
        return None
    if argument is not None:
        return Path(argument)
    if not DEFAULT_SCHEDULER_CONFIG.is_file():
        raise SchedulerConfigError(
            f"the default scheduler config {DEFAULT_SCHEDULER_CONFIG} is not there (deploy/ is not part of an "
            "installed package); pass --scheduler-config FILE, or --scheduler-config none for the extender alone"
        )
    return DEFAULT_SCHEDULER_CONFIG


def load_scheduler_config_argument(argument: str | None, profile: str | None = None) -> SchedulerConfig | None:
    """What ``--scheduler-config`` / ``--profile`` select: None for ``none``; reports name the
    default file by its repository path."""
    path = resolve_scheduler_config(argument)
    if path is None:
        if profile:
            raise SchedulerConfigError("--profile needs a scheduler config (not --scheduler-config none)")
        return None
    default = argument is None and path == DEFAULT_SCHEDULER_CONFIG
    return load_scheduler_config(
        path, profile, source="deploy/kube-scheduler-config.yaml (default)" if default else None
    )
