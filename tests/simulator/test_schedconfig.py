"""Reading KubeSchedulerConfiguration files: effective score plugins and weights, args, extender weight.

The merge rules were checked by hand against kube-scheduler 1.36.2 (``--write-config-to`` and the
errors it prints); these tests pin them.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from scoring.balanced import NodeResourcesBalancedAllocation
from scoring.intree import NodeResourcesFit, ResourceSpec, ScoringStrategyType
from simulator.schedconfig import (
    API_VERSION,
    CONSTANT_SCORE_PLUGINS,
    DEFAULT_SCHEDULER_CONFIG,
    SCORE_PLUGINS,
    SchedulerConfigError,
    load_scheduler_config,
    parse_scheduler_config,
    resolve_scheduler_config,
)
from tests.scoring.builders import ctr, pod

ROOT = Path(__file__).resolve().parents[2]
LOW_WEIGHT = ROOT / "tests" / "fixtures" / "low-weight-profile" / "kube-scheduler-config.yaml"
GPU = "nvidia.com/gpu"
EXTENDER = {"urlPrefix": "http://127.0.0.1:8888", "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 5}
DEFAULT_SCORES = [
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    ("VolumeBinding", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 1),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
]


def config(*profiles: dict[str, Any], extenders: list[dict[str, Any]] | None = None, **top: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "KubeSchedulerConfiguration", **top}
    if profiles:
        data["profiles"] = list(profiles)
    data["extenders"] = [EXTENDER] if extenders is None else extenders
    return data


def scores(data: dict[str, Any], profile: str | None = None) -> list[tuple[str, int]]:
    return [(p.name, p.weight) for p in parse_scheduler_config(data, "test.yaml", profile).score_plugins]


def test_kube_scheduler_defaults_without_profiles() -> None:
    # 1.36: the seven resource/affinity/spread/image plugins plus VolumeBinding and DynamicResources,
    # which also implement Score (weight unset -> 1) and give simulated pods no score at all.
    parsed = parse_scheduler_config(config(), "test.yaml")
    assert parsed.profile == "default-scheduler"
    assert [(p.name, p.weight) for p in parsed.score_plugins] == DEFAULT_SCORES
    assert [p.name for p in parsed.score_plugins if p.modelled] == [
        "NodeResourcesFit",
        "NodeResourcesBalancedAllocation",
    ]
    assert parsed.fit_args.type is ScoringStrategyType.LEAST_ALLOCATED
    assert parsed.balanced_args.resources == (ResourceSpec("cpu"), ResourceSpec("memory"))
    assert parsed.extender_weight == 5
    assert set(CONSTANT_SCORE_PLUGINS) | {"NodeResourcesFit", "NodeResourcesBalancedAllocation"} == SCORE_PLUGINS


def test_the_shipped_profile_leaves_resource_scoring_to_the_extender() -> None:
    shipped = load_scheduler_config(DEFAULT_SCHEDULER_CONFIG)
    assert shipped.profile == "gpu-scheduler"
    assert [(p.name, p.weight) for p in shipped.score_plugins] == [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("VolumeBinding", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("ImageLocality", 1),
    ]
    assert shipped.extender_weight == 200
    assert shipped.percentage_of_nodes_to_score == 100
    # Only NodeResourcesFit (MostAllocated on GPUs) is modelled: it breaks the extender's ties, towards
    # the node with more GPUs in use.
    ((fit, weight),) = [(p.plugin, p.weight) for p in shipped.scoring().plugins]
    assert type(fit).__name__ == "NodeResourcesFit" and weight == 1
    assert [r.name for r in shipped.fit_args.resources] == [GPU]
    # One priority step (10 x 200) outweighs every in-tree plugin left at its maximum (100 x 12).
    assert shipped.scoring().extender_points(1) > 100 * sum(p.weight for p in shipped.score_plugins)


def test_a_low_weight_profile_scores_resources_in_tree_next_to_a_weight_one_extender() -> None:
    low = load_scheduler_config(LOW_WEIGHT)
    assert low.weight("NodeResourcesFit") == 1 and low.weight("NodeResourcesBalancedAllocation") == 1
    assert low.fit_args.ignored_resources == (GPU,)
    assert low.extender_weight == 1
    plugins = low.scoring().plugins
    assert [type(p.plugin) for p in plugins] == [NodeResourcesFit, NodeResourcesBalancedAllocation]
    assert [p.weight for p in plugins] == [1, 1]


def test_score_disabled_star_keeps_only_explicit_score_plugins_with_their_weights() -> None:
    profile = {
        "plugins": {
            "score": {
                "disabled": [{"name": "*"}],
                "enabled": [{"name": "NodeResourcesFit", "weight": 7}, {"name": "ImageLocality", "weight": 0}],
            }
        }
    }
    assert scores(config(profile)) == [("NodeResourcesFit", 7), ("ImageLocality", 1)]  # 0 means 1


def test_an_explicit_score_entry_overrides_the_multipoint_weight() -> None:
    profile = {"plugins": {"score": {"enabled": [{"name": "TaintToleration", "weight": 10}]}}}
    result = dict(scores(config(profile)))
    assert result["TaintToleration"] == 10 and result["NodeAffinity"] == 2 and len(result) == len(DEFAULT_SCORES)


def test_multipoint_enabled_replaces_a_default_in_place_and_disabled_removes_it() -> None:
    profile = {
        "plugins": {
            "multiPoint": {
                "enabled": [{"name": "NodeResourcesBalancedAllocation", "weight": 4}],
                "disabled": [{"name": "ImageLocality"}, {"name": "NotAPlugin"}],  # unknown disabled names are fine
            }
        }
    }
    result = scores(config(profile))
    assert ("NodeResourcesBalancedAllocation", 4) in result and "ImageLocality" not in dict(result)
    assert [name for name, _ in result][-1] == "NodeResourcesBalancedAllocation"  # kept its place


def test_multipoint_disabled_star_drops_every_default() -> None:
    profile = {
        "plugins": {
            "multiPoint": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit", "weight": 2}]},
            "score": {"disabled": [{"name": "NodeResourcesFit"}]},
        }
    }
    assert scores(config(profile)) == []  # enabled in multiPoint, disabled at score
    profile["plugins"].pop("score")
    assert scores(config(profile)) == [("NodeResourcesFit", 2)]


def test_plugin_config_args_and_profile_selection() -> None:
    first = {"schedulerName": "first"}
    second = {
        "schedulerName": "gpu",
        "pluginConfig": [
            {
                "name": "NodeResourcesFit",
                "args": {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": GPU, "weight": 3}]}},
            },
            {"name": "NodeResourcesBalancedAllocation", "args": {"resources": [{"name": GPU}]}},
            {"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 5}},  # not ours: ignored
        ],
    }
    data = config(first, second)
    assert parse_scheduler_config(data, "x").profile == "first"
    gpu = parse_scheduler_config(data, "x", "gpu")
    assert gpu.fit_args.type is ScoringStrategyType.MOST_ALLOCATED
    assert gpu.fit_args.resources == (ResourceSpec(GPU, 3),)
    assert gpu.balanced_args.resources == (ResourceSpec(GPU),)
    with pytest.raises(
        SchedulerConfigError, match=r"x: profiles: no profile with schedulerName 'nope' \(have: first, gpu\)"
    ):
        parse_scheduler_config(data, "x", "nope")


def test_extender_without_prioritize_adds_nothing_and_managed_resources_limit_the_pods() -> None:
    assert parse_scheduler_config(config(extenders=[{"urlPrefix": "u", "filterVerb": "f"}]), "x").extender_weight == 0
    managed = dict(EXTENDER, managedResources=[{"name": GPU, "ignoredByScheduler": False}])
    parsed = parse_scheduler_config(config(extenders=[managed]), "x")
    assert parsed.interested(pod(ctr({"cpu": "1", GPU: "1"})))
    assert not parsed.interested(pod(ctr({"cpu": "1"})))  # kube-scheduler does not ask the extender
    assert parse_scheduler_config(config(), "x").interested(pod(ctr({"cpu": "1"})))  # no managedResources: every pod


def _with(path: str, value: Any) -> dict[str, Any]:
    """A valid config with one field set (dotted path; numbers index lists)."""
    data = copy.deepcopy(config({"schedulerName": "p", "plugins": {"score": {"enabled": []}}}))
    parts = path.split(".")
    target: Any = data
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    last = parts[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _with("apiVersion", "kubescheduler.config.k8s.io/v1beta3"),
            r"apiVersion: 'kubescheduler\.config\.k8s\.io/v1beta3'",
        ),
        (_with("bogusField", 1), r"\(top level\): unknown field\(s\) \['bogusField'\]"),
        (
            _with("profiles.0.plugins.score.enabled", [{"name": "NodePorts"}]),
            r"score\.enabled\[0\]\.name: plugin 'NodePorts' does not extend ScorePlugin",
        ),
        (
            _with("profiles.0.plugins.score.enabled", [{"name": "MyPlugin"}]),
            r"'MyPlugin' is not an in-tree plugin of kube-scheduler 1\.36",
        ),
        (
            _with("profiles.0.plugins.multiPoint", {"enabled": [{"name": "MyPlugin"}]}),
            r"multiPoint\.enabled\[0\]\.name: 'MyPlugin'",
        ),
        (
            _with("profiles.0.plugins.score.enabled", [{"name": "ImageLocality", "weight": -1}]),
            r"score\.enabled\[0\]\.weight: must be an integer in 0\.\.",
        ),
        (
            _with("profiles.0.plugins.score.enabled", [{"name": "ImageLocality", "weight": 2**31}]),
            r"weight: must be an integer",
        ),
        (
            _with("profiles.0.plugins.score.enabled", [{"name": "ImageLocality", "wieght": 1}]),
            r"score\.enabled\[0\]: unknown field\(s\) \['wieght'\]",
        ),
        (
            _with("profiles.0.plugins.score.enabled", [{"name": "ImageLocality"}, {"name": "ImageLocality"}]),
            r"enabled\[1\]\.name: plugin 'ImageLocality' already registered",
        ),
        (_with("profiles.0.plugins.scores", {}), r"profiles\[0\]\.plugins: unknown field\(s\) \['scores'\]"),
        (
            _with("profiles.0.pluginConfig", [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesFit"}]),
            r"profiles\[0\]\.pluginConfig\[1\]\.name: duplicate value 'NodeResourcesFit'",
        ),
        (
            _with(
                "profiles.0.pluginConfig", [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Most"}}}]
            ),
            r"test\.yaml: profiles\[0\]\.pluginConfig\[0\]\.args\.scoringStrategy\.type: 'Most' is not one of",
        ),
        (
            _with(
                "profiles.0.pluginConfig",
                [{"name": "NodeResourcesBalancedAllocation", "args": {"resources": [{"name": "cpu", "weight": 3}]}}],
            ),
            r"pluginConfig\[0\]\.args\.resources\[0\]\.weight: must be 1",
        ),
        (_with("extenders.0", dict(EXTENDER, weight=0)), r"extenders\[0\]\.weight: 0: must have a positive weight"),
        (_with("extenders", [EXTENDER, EXTENDER]), r"extenders: 2 extenders have a prioritizeVerb"),
        (_with("extenders", []), r"extenders: no extender configured"),
        (_with("extenders.0", dict(EXTENDER, url="x")), r"extenders\[0\]: unknown field\(s\) \['url'\]"),
    ],
)
def test_errors_name_the_file_and_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SchedulerConfigError, match=message):
        parse_scheduler_config(data, "test.yaml")


def test_files_errors(tmp_path: Path) -> None:
    with pytest.raises(SchedulerConfigError, match=r"cannot read scheduler config .*missing\.yaml"):
        load_scheduler_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("profiles: [", encoding="utf-8")
    with pytest.raises(SchedulerConfigError, match=r"bad\.yaml: invalid YAML"):
        load_scheduler_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(config()), encoding="utf-8")
    assert load_scheduler_config(good, source="shown").source == "shown"


def test_default_path_resolves_from_the_package_not_the_working_directory(tmp_path: Path) -> None:
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        path = resolve_scheduler_config(None)
    finally:
        os.chdir(here)
    assert path == ROOT / "deploy" / "kube-scheduler-config.yaml" and path.is_absolute() and path.is_file()
    assert resolve_scheduler_config("none") is None and resolve_scheduler_config("None") is None
    assert resolve_scheduler_config("other.yaml") == Path("other.yaml")


def test_missing_default_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(
        "simulator.schedconfig.DEFAULT_SCHEDULER_CONFIG", tmp_path / "deploy" / "kube-scheduler-config.yaml"
    )
    with pytest.raises(SchedulerConfigError, match=r"is not there .*--scheduler-config FILE.*--scheduler-config none"):
        resolve_scheduler_config(None)
