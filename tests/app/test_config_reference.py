"""The configuration reference is generated from the models and the models say what the parsers read."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from app.config import parse_config
from app.config_reference import PAGE, main, render, sections
from app.config_schema import PLUGIN_ARGS, QueuesSection, TieBreakConfig
from fairshare.config import parse_queue_config
from scoring.devices import FIRST_FIT
from scoring.profile import SCORE_PLUGINS
from scoring.tie_break import TieBreak


def test_the_committed_page_is_what_the_code_generates() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), "run: python -m app.config_reference"
    assert main(["--check"]) == 0


def test_a_stale_page_fails_the_check(tmp_path: Any) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(render().replace("assumeTTLSeconds", "assumeTtl"), encoding="utf-8")
    assert main(["--check", "--out", str(stale)]) == 1


def test_every_field_has_a_type_default_and_meaning() -> None:
    rows = [(s.path, row) for s in sections() for row in s.rows]
    assert len(rows) > 100
    missing = [f"{path}: {row[0]}" for path, row in rows if not all(cell.strip() for cell in row)]
    assert not missing, f"fields without a description: {missing}"


def test_every_plugin_has_its_args_documented() -> None:
    assert set(PLUGIN_ARGS) == {*SCORE_PLUGINS, "FlavorFairness"}


# ----------------------------------------------------------------------------- the models vs the parsers
class Recorder(dict[str, Any]):
    """A mapping that records which keys a parser reads, for the model it stands for."""

    def __init__(self, model: type[BaseModel], data: dict[str, Any], seen: dict[type[BaseModel], set[str]]) -> None:
        super().__init__(data)
        self.model, self.seen = model, seen
        seen.setdefault(model, set())

    def _read(self, key: object) -> None:
        self.seen[self.model].add(str(key))

    def get(self, key: str, default: Any = None) -> Any:
        self._read(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self._read(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._read(key)
        return super().__contains__(key)


def _models(annotation: Any) -> Iterator[Any]:
    """The non-None alternatives of an annotation."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for option in typing.get_args(annotation):
            if option is not type(None):
                yield from _models(option)
    else:
        yield annotation


def _wrap(annotation: Any, value: Any, seen: dict[type[BaseModel], set[str]]) -> Any:
    for option in _models(annotation):
        origin = typing.get_origin(option)
        if isinstance(option, type) and issubclass(option, BaseModel) and isinstance(value, dict):
            fields = option.model_fields
            return Recorder(option, {k: _wrap(fields[k].annotation, v, seen) for k, v in value.items()}, seen)
        if origin is list and isinstance(value, list):
            (item,) = typing.get_args(option)
            return [_wrap(item, v, seen) for v in value]
        if origin is dict and isinstance(value, dict):
            _, item = typing.get_args(option)
            return {k: _wrap(item, v, seen) for k, v in value.items()}
    return value


def _check(model: type[BaseModel], example: dict[str, Any], parse: Any) -> None:
    model.model_validate(example)  # the example is in the documented shape
    seen: dict[type[BaseModel], set[str]] = {}
    parse(_wrap(model, example, seen))
    for read_by, keys in seen.items():
        documented = set(read_by.model_fields)
        assert keys == documented, (
            f"{read_by.__name__}: the parser reads {sorted(keys)}, documents {sorted(documented)}"
        )


FULL_ARGS: dict[str, dict[str, Any]] = {
    "NodeResourcesFitPlus": {"resources": {"nvidia.com/gpu": {"type": "MostAllocated", "weight": 2}}},
    "ScarceResourceAvoidance": {"resources": ["nvidia.com/gpu"]},
    "GpuFragmentation": {
        "resource": "nvidia.com/gpu",
        "workload": [{"cpu": 4000, "gpuMilli": 500, "gpus": 1, "popularity": 3}],
        "mapping": "Linear",
        "milliPerPoint": 15,
    },
    "GpuPacking": {"resource": "nvidia.com/gpu"},
    "BestFit": {"resource": "nvidia.com/gpu"},
    "DotProduct": {"resource": "nvidia.com/gpu"},
    "GpuClustering": {"resource": "nvidia.com/gpu"},
    "GpuCpuBalance": {"resource": "nvidia.com/gpu", "cpuPerGpu": 10882, "milliPerPoint": 10},
    "GpuModelBalance": {"resource": "nvidia.com/gpu", "label": "nvidia.com/gpu.product"},
    "IdleGpuAvoidance": {"resource": "nvidia.com/gpu"},
}


@pytest.mark.parametrize("plugin", sorted(FULL_ARGS))
def test_each_plugins_args_model_names_exactly_what_its_parser_reads(plugin: str) -> None:
    _check(PLUGIN_ARGS[plugin], FULL_ARGS[plugin], lambda raw: SCORE_PLUGINS[plugin](raw, "args", FIRST_FIT))


def test_the_tie_break_model_names_what_its_parser_reads() -> None:
    _check(TieBreakConfig, {"mostAllocated": ["nvidia.com/gpu"], "lowestName": True}, TieBreak.parse)


FULL_QUEUES: dict[str, Any] = {
    "resourceFlavors": [
        {
            "metadata": {"name": "a100"},
            "spec": {
                "nodeLabels": {"gpu": "a100"},
                "nodeTaints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}],
                "tolerations": [{"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}],
                "resourceWeights": {"nvidia.com/gpu": "8"},
            },
        },
        {"metadata": {"name": "l4"}, "spec": {"fairSharing": {"resourceWeights": {"nvidia.com/gpu": 1}}}},
    ],
    "cohorts": [
        {"metadata": {"name": "root"}, "spec": {"fairSharing": {"weight": 1}}},
        {
            "metadata": {"name": "org"},
            "spec": {
                "parentName": "root",
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "l4",
                                "resources": [
                                    {
                                        "name": "nvidia.com/gpu",
                                        "nominalQuota": 2,
                                        "borrowingLimit": 1,
                                        "lendingLimit": 0,
                                    }
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    ],
    "clusterQueues": [
        {
            "metadata": {"name": "research"},
            "spec": {
                "cohortName": "org",
                "cohort": "org",
                "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                "fairSharing": {"weight": 2},
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}],
                    }
                ],
            },
        }
    ],
    "localQueues": [{"metadata": {"name": "training", "namespace": "ml"}, "spec": {"clusterQueue": "research"}}],
    "kaiQueues": [
        {"metadata": {"name": "top"}, "spec": {"priority": 100}},
        {
            "metadata": {"name": "team"},
            "spec": {
                "parentQueue": "top",
                "resources": {"nvidia.com/gpu": {"quota": 4, "limit": 8, "overQuotaWeight": 2}},
            },
        },
    ],
    "fairSharing": {
        "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
        "priorityBasedFairShare": True,
        "kValue": 1.5,
    },
    "watchKueue": False,
    "deviceClassMappings": [{"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.example.com"]}],
    "reclaim": {
        "mode": "dry-run",
        "evictionsPerMinute": 5,
        "minRuntimeSeconds": 60,
        "intervalSeconds": 5,
        "retryAfterSeconds": 30,
        "leaderLease": "kube-system/gpu-scheduler",
    },
}


def test_the_queues_model_names_what_the_queue_parsers_read() -> None:
    _check(QueuesSection, FULL_QUEUES, parse_queue_config)


def test_the_full_examples_are_valid_configurations() -> None:
    plugins = [{"name": name, "args": args} for name, args in FULL_ARGS.items()]
    parse_config({"plugins": plugins, "queues": FULL_QUEUES, "tieBreak": {"mostAllocated": ["nvidia.com/gpu"]}})
