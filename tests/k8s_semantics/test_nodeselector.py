"""Node selector edge cases, by component-helpers' rules (the one implementation the allocator and
the flavor checks share)."""

from __future__ import annotations

import pytest

from k8s_semantics.nodeselector import (
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    node_selector_matches,
    requirement_matches,
    term_matches,
)

LABELS = {"zone": "a", "gen": "5", "odd": "1_0", "spaced": " 7", "empty": ""}


@pytest.mark.parametrize(
    ("key", "operator", "values", "matches"),
    [
        ("zone", "In", ("a", "b"), True),
        ("zone", "In", ("b",), False),
        ("missing", "In", ("a",), False),
        ("zone", "In", (), False),
        ("zone", "NotIn", ("b",), True),
        ("missing", "NotIn", ("b",), True),
        ("zone", "NotIn", ("a",), False),
        ("zone", "NotIn", (), False),  # NotIn needs values: an invalid requirement matches nothing
        ("zone", "Exists", (), True),
        ("empty", "Exists", (), True),  # an empty label value still exists
        ("missing", "Exists", (), False),
        ("zone", "Exists", ("a",), False),  # Exists with values is invalid
        ("missing", "DoesNotExist", (), True),
        ("zone", "DoesNotExist", (), False),
        ("missing", "DoesNotExist", ("x",), False),  # DoesNotExist with values is invalid
        ("gen", "Gt", ("3",), True),
        ("gen", "Gt", ("5",), False),
        ("gen", "Lt", ("7",), True),
        ("gen", "Lt", ("+6",), True),  # strconv.ParseInt accepts a sign
        ("gen", "Gt", ("-1",), True),
        ("gen", "Gt", ("3", "4"), False),  # exactly one value
        ("gen", "Gt", (), False),
        ("gen", "Gt", ("3.5",), False),  # not an integer
        ("odd", "Gt", ("1",), False),  # Python's int() would read "1_0" as 10; ParseInt does not
        ("spaced", "Gt", ("1",), False),  # nor " 7"
        ("zone", "Gt", ("1",), False),
        ("missing", "Lt", ("9",), False),
        ("zone", "Equals", ("a",), False),  # unknown operator
    ],
)
def test_requirement(key: str, operator: str, values: tuple[str, ...], matches: bool) -> None:
    assert requirement_matches(NodeSelectorRequirement(key, operator, values), LABELS) is matches


def test_terms_or_requirements_and() -> None:
    zone_a = NodeSelectorRequirement("zone", "In", ("a",))
    gen_high = NodeSelectorRequirement("gen", "Gt", ("9",))
    named = NodeSelectorRequirement("metadata.name", "In", ("n1",))
    assert term_matches(NodeSelectorTerm((zone_a,)), "n1", LABELS)
    assert not term_matches(NodeSelectorTerm((zone_a, gen_high)), "n1", LABELS)
    assert term_matches(NodeSelectorTerm((zone_a,), (named,)), "n1", LABELS)
    assert not term_matches(NodeSelectorTerm((zone_a,), (named,)), "n2", LABELS)
    assert not term_matches(NodeSelectorTerm(), "n1", LABELS)  # an empty term matches no node
    selector = NodeSelector((NodeSelectorTerm((gen_high,)), NodeSelectorTerm((zone_a,))))
    assert node_selector_matches(selector, "n1", LABELS)
    assert not node_selector_matches(NodeSelector(()), "n1", LABELS)
    assert node_selector_matches(None, "n1", LABELS)


@pytest.mark.parametrize(
    ("field", "matches"),
    [
        (NodeSelectorRequirement("metadata.name", "NotIn", ("n2",)), True),
        (NodeSelectorRequirement("metadata.name", "NotIn", ("n1",)), False),
        (NodeSelectorRequirement("metadata.name", "Exists"), False),  # In and NotIn only
        (NodeSelectorRequirement("metadata.uid", "In", ("n1",)), False),  # metadata.name only
    ],
)
def test_match_fields(field: NodeSelectorRequirement, matches: bool) -> None:
    assert term_matches(NodeSelectorTerm(match_fields=(field,)), "n1", LABELS) is matches
