"""core/v1 NodeSelector matching (slice relevance, allocated claims), as nodeaffinity does it."""

from __future__ import annotations

from typing import Any

import pytest

from allocator import NodeRef, ParseError, node_selector_matches, node_selector_to_obj, parse_node_selector

NODE = NodeRef("node-1", {"rack": "r1", "gpus": "8", "odd": "1_0"})


def selector(*requirements: dict[str, Any], fields: bool = False) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchFields" if fields else "matchExpressions": list(requirements)}]}


def matches(obj: dict[str, Any], node: NodeRef = NODE) -> bool:
    return node_selector_matches(parse_node_selector(obj), node)


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        ({"key": "rack", "operator": "In", "values": ["r1", "r2"]}, True),
        ({"key": "rack", "operator": "In", "values": ["r2"]}, False),
        ({"key": "zone", "operator": "In", "values": ["z"]}, False),
        ({"key": "rack", "operator": "NotIn", "values": ["r2"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["z"]}, True),  # a missing label is "not in"
        ({"key": "rack", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "Exists"}, False),
        ({"key": "zone", "operator": "DoesNotExist"}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["8"]}, False),
        ({"key": "gpus", "operator": "Lt", "values": ["16"]}, True),
        ({"key": "rack", "operator": "Gt", "values": ["1"]}, False),  # not an integer label
        ({"key": "rack", "operator": "Near", "values": ["r1"]}, False),  # unknown operator
    ],
)
def test_match_expressions(requirement: dict[str, Any], expected: bool) -> None:
    assert matches(selector(requirement)) is expected


def test_gt_needs_a_go_integer_label() -> None:
    # strconv.ParseInt rejects "1_0"; Python's int() would read it as 10 (> 5).
    assert not matches(selector({"key": "odd", "operator": "Gt", "values": ["5"]}))


def test_requirements_of_a_term_are_anded_and_terms_ored() -> None:
    both = {"key": "rack", "operator": "In", "values": ["r1"]}, {"key": "gpus", "operator": "In", "values": ["4"]}
    assert not matches(selector(*both))
    ored = {
        "nodeSelectorTerms": [
            {"matchExpressions": [both[1]]},
            {"matchExpressions": [both[0]]},
        ]
    }
    assert matches(ored)


def test_match_fields_only_know_the_node_name() -> None:
    assert matches(selector({"key": "metadata.name", "operator": "In", "values": ["node-1"]}, fields=True))
    assert not matches(selector({"key": "metadata.name", "operator": "NotIn", "values": ["node-1"]}, fields=True))
    assert not matches(selector({"key": "metadata.uid", "operator": "In", "values": ["node-1"]}, fields=True))


def test_an_empty_term_matches_no_node() -> None:
    assert not matches({"nodeSelectorTerms": [{}]})


def test_no_selector_matches_every_node() -> None:
    assert node_selector_matches(None, NODE)


def test_a_requirement_without_operator_is_a_parse_error_naming_the_path() -> None:
    with pytest.raises(ParseError, match=r"nodeSelector\.nodeSelectorTerms\[0\]\.matchExpressions\[0\]\.operator"):
        parse_node_selector(selector({"key": "rack"}))


def test_to_obj_round_trips() -> None:
    obj = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}],
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}],
            },
            {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
        ]
    }
    parsed = parse_node_selector(obj)
    assert parsed is not None
    assert node_selector_to_obj(parsed) == obj
