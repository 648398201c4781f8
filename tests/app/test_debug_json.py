"""Non-finite numbers in the /debug documents: written as "+Inf", "-Inf" or "NaN", never null, so a
strict JSON parser reads them and a reader can tell +Inf from "unknown"."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from app.http import wire
from tests.app.test_fairness import COHORT_9, running
from tests.conftest import make_service, node_obj


def strict_json(text: str) -> Any:
    """json.loads that refuses the non-standard Infinity/NaN literals Python would otherwise accept."""

    def refuse(literal: str) -> Any:
        raise ValueError(f"non-standard JSON literal {literal}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_floats_become_strings_at_any_depth() -> None:
    doc = {"a": math.inf, "b": [-math.inf, 1.5, {"c": math.nan}], "d": (0.0, None, "x", 3)}
    assert strict_json(wire.encode_debug(doc).decode()) == {
        "a": "+Inf",
        "b": ["-Inf", 1.5, {"c": "NaN"}],
        "d": [0.0, None, "x", 3],
    }


def test_debug_queues_shows_a_zero_weight_borrower_as_plus_inf(client_for: Any) -> None:
    """cq-p1 (fairSharing.weight 0) borrows 8 of the cohort's 9 GPUs (nominal 0): Kueue's share is +Inf
    (MaxInt64 when rounded); cq-p2 borrows nothing (0)."""
    section = copy.deepcopy(COHORT_9)
    section["clusterQueues"][0]["spec"]["fairSharing"] = {"weight": 0}
    pods = running("w", 4, gpus=2, node="n1", namespace="p1", queue="lq", first_priority=1)
    service = make_service([node_obj("n1", gpus=9)], pods, config={"queues": section})
    response = client_for(service).get("/debug/queues")
    nodes = strict_json(response.text)["nodes"]
    assert nodes["cq/cq-p1"]["weightedShare"] == "+Inf"
    assert nodes["cq/cq-p1"]["weightedShareRounded"] == 9223372036854775807
    assert nodes["cq/cq-p1"]["unweightedShare"] == "+Inf"
    assert nodes["cq/cq-p2"]["weightedShare"] == 0.0
