"""ResourceFlavor parsing and Kueue's flavor/pod compatibility rules (reference section 1)."""

from __future__ import annotations

import pytest

from fairshare.errors import QueueConfigError
from fairshare.flavor import (
    NodeSelectorRequirement,
    PodPlacement,
    Taint,
    Toleration,
    flavor_fits_pod,
    node_matches_flavor,
    parse_resource_flavor,
)
from k8s_semantics.taints import tolerates


def test_weights_both_shapes_and_default() -> None:
    a = parse_resource_flavor({"metadata": {"name": "h100"}, "spec": {"resourceWeights": {"nvidia.com/gpu": "8"}}}, "f")
    b = parse_resource_flavor({"name": "spot", "fairSharing": {"resourceWeights": {"nvidia.com/gpu": 0.5}}}, "f")
    c = parse_resource_flavor({"name": "half", "resourceWeights": {"cpu": "500m"}}, "f")
    assert a.weight("nvidia.com/gpu") == 8.0 and a.weight("cpu") == 1.0
    assert b.weight("nvidia.com/gpu") == 0.5
    assert c.weight("cpu") == 0.5


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"name": "x", "spec": {"resourceWeights": {"cpu": "0"}}}, "flavors[1].spec.resourceWeights.cpu: must be > 0"),
        ({"name": "x", "spec": {"fairSharing": {"resourceWeights": {"cpu": -1}}}}, "fairSharing.resourceWeights.cpu"),
        ({"name": "x", "spec": {"fairSharing": {"resourceWeights": {"cpu": "2"}}}}, "must be a number"),
        ({"spec": {}}, "flavors[1].metadata.name: required"),
        ({"name": "x", "spec": {"nodeTaints": [{"key": "k", "effect": "Bad"}]}}, "nodeTaints[0].effect"),
        ({"name": "x", "spec": {"nodeLabels": {str(i): "v" for i in range(9)}}}, "nodeLabels: at most 8"),
    ],
)
def test_validation_names_field(raw: dict[str, object], message: str) -> None:
    with pytest.raises(QueueConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_resource_flavor(raw, "flavors[1]")


def test_toleration_rules() -> None:
    taint = Taint("spot", "true", "NoSchedule")
    assert tolerates(Toleration(operator="Exists"), taint)
    assert tolerates(Toleration("spot", "Equal", "true"), taint)
    assert not tolerates(Toleration("spot", "Equal", "false"), taint)
    assert not tolerates(Toleration("spot", "Exists", effect="NoExecute"), taint)
    assert tolerates(Toleration("gen", "Gt", "3"), Taint("gen", "5"))
    assert not tolerates(Toleration("gen", "Lt", "3"), Taint("gen", "5"))


def test_flavor_taints_tolerations_and_labels() -> None:
    spot = parse_resource_flavor(
        {
            "name": "spot",
            "spec": {
                "nodeLabels": {"instance-type": "spot"},
                "nodeTaints": [
                    {"key": "spot", "value": "true", "effect": "NoSchedule"},
                    {"key": "soft", "effect": "PreferNoSchedule"},
                ],
            },
        },
        "f",
    )
    assert node_matches_flavor({"instance-type": "spot", "zone": "a"}, spot)
    assert not node_matches_flavor({"instance-type": "on-demand"}, spot)
    assert "untolerated taint spot" in (flavor_fits_pod(spot, PodPlacement()) or "")
    tol = (Toleration("spot", "Exists"),)
    # PreferNoSchedule taints are ignored; keys not in the flavor's labels are dropped from the selector.
    assert flavor_fits_pod(spot, PodPlacement(node_selector={"zone": "b"}, tolerations=tol)) is None
    assert flavor_fits_pod(spot, PodPlacement(node_selector={"instance-type": "od"}, tolerations=tol)) is not None
    # The flavor's own tolerations count toward its taints.
    self_tolerating = parse_resource_flavor(
        {
            "name": "s",
            "spec": {
                "nodeTaints": [{"key": "k", "effect": "NoExecute"}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
            },
        },
        "f",
    )
    assert flavor_fits_pod(self_tolerating, PodPlacement()) is None


def test_affinity_filtered_to_flavor_keys() -> None:
    spot = parse_resource_flavor({"name": "spot", "spec": {"nodeLabels": {"instance-type": "spot"}}}, "f")
    wrong = (NodeSelectorRequirement("instance-type", "In", ("od",)),)
    right = (NodeSelectorRequirement("instance-type", "In", ("spot",)),)
    other_key = (NodeSelectorRequirement("zone", "In", ("a",)),)
    assert flavor_fits_pod(spot, PodPlacement(affinity_terms=(wrong,))) is not None
    assert flavor_fits_pod(spot, PodPlacement(affinity_terms=(wrong, right))) is None  # terms are ORed
    # A term that loses every expression drops the whole required affinity.
    assert flavor_fits_pod(spot, PodPlacement(affinity_terms=(wrong, other_key))) is None
