"""Flavor-label signatures read by row of the node table agree with the lookup by name, through
node additions, relabelling and deletions; the queue hooks answer the same either way."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cluster.cache import ClusterCache
from app.cluster.objects import node_from_obj, pod_from_obj
from app.pipeline.node_signatures import NodeSignatures
from tests.app.test_fairness import story1
from tests.conftest import in_queue, labelled, make_service, pod_obj

KEYS = ("gpu-type", "lifecycle")
LABELS = [{}, {"gpu-type": "a10"}, {"gpu-type": "a10", "lifecycle": "spot"}, {"gpu-type": "h100"}, {"zone": "x"}]
# (node index, labels index or None for a deletion)
CHANGES = st.lists(st.tuples(st.integers(0, 7), st.one_of(st.none(), st.integers(0, len(LABELS) - 1))), max_size=30)


def _agree(cache: ClusterCache, signatures: NodeSignatures) -> None:
    table = cache.table
    by_row = signatures.by_row(table)
    names = list(table.index)
    rows = np.array([table.index[n] for n in names], dtype=np.intp)
    assert by_row[rows].tolist() == signatures.lookup(names).tolist()
    free = sorted(set(range(len(table.labels))) - set(rows.tolist()))
    assert (by_row[free] == -1).all()


@settings(max_examples=60, deadline=None)
@given(CHANGES)
def test_signatures_by_row_agree_with_the_lookup_by_name(changes: list[tuple[int, int | None]]) -> None:
    cache = ClusterCache()
    signatures = NodeSignatures(KEYS)
    for index, labels in changes:
        name = f"n{index}"
        if labels is None:
            cache.delete_node(name)
            signatures.set_node(name, None)
        else:
            cache.upsert_node(node_from_obj(labelled(name, LABELS[labels])))
            signatures.set_node(name, LABELS[labels])
        _agree(cache, signatures)


def test_the_ids_by_row_are_kept_until_a_signature_or_the_rows_change() -> None:
    cache = ClusterCache()
    signatures = NodeSignatures(KEYS)
    for name, labels in (("a", LABELS[1]), ("b", LABELS[3])):
        cache.upsert_node(node_from_obj(labelled(name, labels)))
        signatures.set_node(name, labels)
    first = signatures.by_row(cache.table)
    signatures.set_node("a", {**LABELS[1], "zone": "y"})  # a label no flavor reads: the same signature
    assert signatures.by_row(cache.table) is first
    cache.upsert_node(node_from_obj(labelled("a", LABELS[3])))
    signatures.set_node("a", LABELS[3])
    moved = signatures.by_row(cache.table)
    assert moved is not first and moved[cache.table.index["a"]] == moved[cache.table.index["b"]]
    cache.upsert_node(node_from_obj(labelled("c", LABELS[0])))  # a new row, no signature set yet
    assert signatures.by_row(cache.table)[cache.table.index["c"]] == -1


def test_queue_filter_and_scores_answer_the_same_by_row_and_by_name() -> None:
    nodes = [
        labelled("spot-1", {"gpu-type": "a10", "lifecycle": "spot"}),
        labelled("spot-2", {"gpu-type": "a10", "lifecycle": "spot"}),
        labelled("h100-1", {"gpu-type": "h100"}, gpus=32),
        labelled("plain", {}),
    ]
    service = make_service(nodes, [], config=story1())
    fairness = service.fairness
    assert fairness is not None
    table = service.cache.table
    names = ["h100-1", "plain", "spot-2", "spot-1"]
    rows = np.array([table.index[n] for n in names], dtype=np.intp)
    # scores and rejections differ per flavor; the last two: a LocalQueue missing, and team-b's
    for queue, gpus, namespace in (
        ("training", 1, "team-a"),
        ("training", 40, "team-a"),
        ("lq-b", 2, "team-a"),
        ("lq-b", 2, "team-b"),
    ):
        pod = pod_from_obj(in_queue(pod_obj("p", gpus=gpus, namespace=namespace, uid="p"), queue))
        assert fairness.scores(pod, names, rows).tolist() == fairness.scores(pod, names).tolist()
        assert fairness.filter(pod, names, rows) == fairness.filter(pod, names)
