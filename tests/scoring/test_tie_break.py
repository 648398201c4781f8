"""tieBreak: the best nodes' tie broken towards the most allocated devices. Hand-worked keys, args
errors naming the field, the batch twin equal to the scalar definition (hypothesis), and the
priorities and BestScored nodes it leaves."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.best_scored import best_scored
from scoring.framework import ArgsError, NodeInfo, PodInfo
from scoring.priority_scale import break_ties, break_ties_by_name, candidates
from scoring.resources import PodResources
from scoring.table import NodeTable
from scoring.tie_break import (
    MostAllocatedKeys,
    NameRanks,
    TieBreak,
    chosen_batch,
    drawn_batch,
    lowest_name,
    lowest_name_batch,
    most_allocated,
    most_allocated_batch,
    random_applies,
    winners,
)
from tests.scoring.builders import named_batch
from tests.scoring.test_gpu_sharing_plugins import GPU, claim_pod, dra_node, gpu_nodes, gpu_pods, plugin_node

RESOURCES = (GPU,)


def test_key_is_most_allocated_after_the_pod_in_milli_devices() -> None:
    # 8 devices, 1.46 used; a 500-milli share: (1460 + 500) * 100 // 8000 = 24
    assert most_allocated(claim_pod(1, 500), dra_node([1000, 460, 0, 0, 0, 0, 0, 0]), RESOURCES) == 24
    # device plugin: 1 of 8 used, a 1-GPU pod: 2000 * 100 // 8000 = 25; an empty node 12
    one_gpu = PodInfo("u", "ns", "p", PodResources({"cpu": 1000, GPU: 1}, 1000, 0))
    assert most_allocated(one_gpu, plugin_node(8, 1), RESOURCES) == 25
    assert most_allocated(one_gpu, plugin_node(8, 0), RESOURCES) == 12
    assert most_allocated(one_gpu, plugin_node(0, 0), RESOURCES) == 0  # no such device there
    assert most_allocated(one_gpu, plugin_node(2, 2), RESOURCES) == 100  # capped at the node's total


def test_no_key_for_a_pod_that_asks_for_none_of_the_resources() -> None:
    cpu_pod = PodInfo("u", "ns", "p", PodResources({"cpu": 1000}, 1000, 0))
    assert most_allocated(cpu_pod, plugin_node(8, 1), RESOURCES) is None
    _, batch = named_batch([plugin_node(8, 1)])
    assert most_allocated_batch(cpu_pod, batch, RESOURCES) is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([GPU], "tieBreak: must be a mapping with 'mostAllocated'"),
        ({"mostAllocated": []}, "tieBreak.mostAllocated: must be a non-empty list"),
        ({"mostAllocated": GPU}, "tieBreak.mostAllocated: must be a non-empty list"),
        ({"mostAllocated": [GPU, ""]}, "tieBreak.mostAllocated[1]: must be a non-empty resource name"),
        ({"mostAllocated": ["cpu"]}, "tieBreak.mostAllocated[0]: 'cpu' is not a device resource"),
        ({"mostAllocated": [GPU, GPU]}, "tieBreak.mostAllocated[1]: duplicate resource name"),
        ({"mostAllocated": [GPU], "leastAllocated": [GPU]}, "tieBreak: unknown field(s) ['leastAllocated']"),
        ({}, "tieBreak: set 'mostAllocated', 'lowestName: true' or 'random: true', or one of them with it"),
        (
            {"lowestName": False},
            "tieBreak: set 'mostAllocated', 'lowestName: true' or 'random: true', or one of them with it",
        ),
        ({"lowestName": "yes"}, "tieBreak.lowestName: must be true or false, got 'yes'"),
    ],
)
def test_args_errors_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ArgsError) as error:
        TieBreak.parse(raw)
    assert message in str(error.value)


def test_only_the_best_nodes_with_the_highest_key_keep_10() -> None:
    # Scores 80, 80, 80, 70: the three best get 10; keys 25, 37, 37, 90 leave 10 to the two at 37.
    priorities = candidates([80, 80, 80, 70])
    assert priorities == [10, 10, 10, 0]
    assert break_ties(priorities, [25, 37, 37, 90]) == [9, 10, 10, 0]  # a node below the best never wins
    assert winners(best_scored([80, 80, 80, 70]), [25, 37, 37, 90]) == [False, True, True, False]
    assert break_ties([10, 10], [12, 12]) == [10, 10]  # still tied: kube-scheduler picks
    assert break_ties([], []) == []


def test_lowest_name_alone_or_after_most_allocated() -> None:
    assert TieBreak.parse({"lowestName": True}) == TieBreak((), True)
    assert TieBreak.parse({"mostAllocated": [GPU], "lowestName": True}) == TieBreak((GPU,), True)
    assert TieBreak.parse({"mostAllocated": [GPU]}) == TieBreak((GPU,), False)
    # of the best nodes (the first three), only the smallest name keeps 10
    assert lowest_name([True, True, True, False], ["n2", "n10", "n3", "a"]) == [False, True, False, False]
    assert break_ties_by_name([10, 10, 10, 4], ["n2", "n10", "n3", "a"]) == [9, 10, 9, 4]
    assert lowest_name([], []) == []


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "n1", "n10", "n2", "z"])), max_size=12))
def test_lowest_name_batch_is_the_definition(entries: list[tuple[bool, str]]) -> None:
    """The mask twin reads only the best positions and keeps what ``lowest_name`` keeps (repeated
    names included)."""
    best, names = [b for b, _ in entries], [n for _, n in entries]
    assert lowest_name_batch(np.array(best, dtype=np.bool_), names).tolist() == lowest_name(best, names)


NAMES = ["a", "b", "n1", "n10", "n2", "z", "gpu-0", "gpu-00"]


@given(
    st.lists(st.sampled_from(NAMES), min_size=1, unique=True),
    st.lists(st.sampled_from(NAMES), unique=True),
    st.lists(st.tuples(st.sampled_from(NAMES), st.booleans()), unique_by=lambda entry: entry[0]),
)
def test_name_ranks_keep_what_lowest_name_keeps(
    first: list[str], removed: list[str], asked: list[tuple[str, bool]]
) -> None:
    """Among known nodes the rank of each row's name picks the node ``lowest_name`` picks, also after
    nodes left the table and others took their rows (the ranks are worked out again)."""
    table, ranks = NodeTable(capacity=2), NameRanks()
    for name in first:
        table.upsert(NodeInfo(name, {"cpu": 1000}))
    ranks.of(table)  # kept: later reads must see the table's new names
    for name in removed:
        table.remove(name)
    for name, _ in asked:
        table.upsert(NodeInfo(name, {"cpu": 1000}))
    names, best = [name for name, _ in asked], [is_best for _, is_best in asked]
    batch = table.batch(names)
    assert batch is not None and batch.all_known
    kept = ranks.lowest_name_batch(np.array(best, dtype=np.bool_), batch)
    assert kept.tolist() == lowest_name(best, names)


@settings(max_examples=200, deadline=None)
@given(gpu_pods(), st.lists(gpu_nodes(), min_size=1, max_size=10))
def test_batch_equals_scalar(pod: PodInfo, node_list: list[NodeInfo]) -> None:
    named, batch = named_batch(node_list)
    keys = most_allocated_batch(pod, batch, RESOURCES)
    scalar = [most_allocated(pod, node, RESOURCES) for node in named]
    if keys is None:
        assert scalar == [None] * len(named)
    else:
        assert keys.tolist() == scalar
        assert all(0 <= k <= 100 for k in scalar if k is not None)
        at = np.arange(len(named) - 1, -1, -2)  # some positions, in another order
        at_keys = most_allocated_batch(pod, batch, RESOURCES, at=at)
        assert at_keys is not None and at_keys.tolist() == [scalar[i] for i in at.tolist()]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(gpu_pods(), min_size=1, max_size=4),
    st.lists(gpu_nodes(), min_size=2, max_size=8),
    st.lists(st.tuples(st.integers(0, 7), gpu_nodes()), max_size=12),
)
def test_kept_keys_equal_the_scalar_ones_as_rows_change(
    pods: list[PodInfo], node_list: list[NodeInfo], writes: list[tuple[int, NodeInfo]]
) -> None:
    """The keys kept per row are read back only while the row is unchanged: after every write of a
    node (a bind, a release), for pods of a few demands asked in turn, the keys at the tied positions
    are the scalar definition's."""
    nodes = {f"n{index}": replace(node, name=f"n{index}") for index, node in enumerate(node_list)}
    table, kept = NodeTable(capacity=2), MostAllocatedKeys()
    for node in nodes.values():
        table.upsert(node)
    for step in range(len(writes) + 1):
        if step:
            index, node = writes[step - 1]
            name = f"n{index % len(nodes)}"
            nodes[name] = replace(node, name=name)
            table.upsert(nodes[name])
        pod = pods[step % len(pods)]
        batch = table.batch(list(nodes))
        assert batch is not None
        at = np.arange(len(nodes) - 1, -1, -2)
        keys = kept.at(pod, batch, RESOURCES, at)
        named = list(nodes.values())
        scalar = [most_allocated(pod, named[i], RESOURCES) for i in at.tolist()]
        if keys is None:  # a pod asking for none of the resources (or an amount too large for int64)
            assert most_allocated_batch(pod, batch, RESOURCES) is None
        else:
            assert keys.tolist() == scalar


@given(st.lists(st.tuples(st.integers(0, 10), st.integers(-1, 100)), max_size=30))
def test_break_ties_keeps_a_winner_and_demotes_only_best_nodes(pairs: list[tuple[int, int]]) -> None:
    priorities = [p for p, _ in pairs]
    keys = [k for _, k in pairs]
    broken = break_ties(priorities, keys)
    assert (10 in broken) == (10 in priorities)  # some best node keeps 10
    assert all(b == p or (p == 10 and b == 9) for p, b in zip(priorities, broken, strict=True))
    top = max((k for p, k in pairs if p == 10), default=None)
    assert all((b == 10) == (p == 10 and k == top) for (p, k), b in zip(pairs, broken, strict=True))


def test_random_alone_or_after_most_allocated() -> None:
    assert TieBreak.parse({"random": True}) == TieBreak((), False, True)
    assert TieBreak.parse({"mostAllocated": [GPU], "random": True}) == TieBreak((GPU,), False, True)
    for raw, message in (
        ({"lowestName": True, "random": True}, "tieBreak: set at most one of 'lowestName' and 'random'"),
        ({"random": 1}, "tieBreak.random: must be true or false, got 1"),
        ({"random": False}, "tieBreak: set 'mostAllocated', 'lowestName: true' or 'random: true'"),
    ):
        with pytest.raises(ArgsError) as error:
            TieBreak.parse(raw)
        assert message in str(error.value)


def test_chosen_batch_keeps_the_name_picked_among_the_best() -> None:
    best = np.array([False, True, True, False, True])
    names = ["a", "n2", "n1", "z", "n3"]
    offered: list[list[str]] = []

    def pick_last(among: list[str]) -> str:
        offered.append(among)
        return among[-1]

    assert chosen_batch(best, names, pick_last).tolist() == [False, False, False, False, True]
    assert offered == [["n2", "n1", "n3"]]  # the best names, in position order
    assert chosen_batch(best, names, min).tolist() == [False, False, True, False, False]
    assert not chosen_batch(np.zeros(5, dtype=np.bool_), names, min).any()


def test_drawn_batch_keeps_the_drawn_position_among_the_best() -> None:
    best = np.array([False, True, True, False, True])
    asked: list[int] = []

    def second(count: int) -> int:
        asked.append(count)
        return 1

    assert drawn_batch(best, second).tolist() == [False, False, True, False, False]
    assert asked == [3]
    assert not drawn_batch(np.zeros(5, dtype=np.bool_), second).any()


@given(st.lists(st.booleans(), min_size=1, max_size=60), st.integers(0, 2**32))
def test_a_drawn_position_is_the_name_choice_would_pick(best: list[bool], seed: int) -> None:
    """The simulator draws positions with ``randrange`` where kube-scheduler's model draws names with
    ``choice`` from the same generator: the same node for the same state."""
    mask, names = np.array(best), [f"n{i}" for i in range(len(best))]
    by_name = chosen_batch(mask, names, random.Random(seed).choice)
    assert drawn_batch(mask, random.Random(seed).randrange).tolist() == by_name.tolist()


def test_random_applies_only_without_soft_preferences_or_prefer_no_schedule_nodes() -> None:
    plain = PodInfo("u", "ns", "p", PodResources({"cpu": 1000}, 1000, 0))
    prefers = PodInfo("u", "ns", "p", PodResources({"cpu": 1000}, 1000, 0), soft_preferences=True)
    assert random_applies(plain, prefer_no_schedule=False)
    assert not random_applies(plain, prefer_no_schedule=True)
    assert not random_applies(prefers, prefer_no_schedule=False)


@settings(max_examples=60, deadline=None)
@given(
    gpu_pods(),
    st.lists(gpu_nodes(), min_size=1, max_size=3),  # the states the nodes are in
    st.lists(st.integers(0, 2), min_size=65, max_size=130),  # each node's state
    st.one_of(st.none(), st.integers(0, 129)),  # the node a retried pod is assumed on
    st.randoms(use_true_random=False),
)
def test_keys_of_many_best_nodes_in_few_states_equal_the_definition(
    pod: PodInfo, states: list[NodeInfo], picks: list[int], discounted: int | None, rng: random.Random
) -> None:
    """More than 64 best nodes in a few states, one of them perhaps the node a retried pod is assumed
    on: the keys at those positions equal the full computation's, and the definition node by node."""
    nodes = [replace(states[p % len(states)], name=f"n{i}") for i, p in enumerate(picks)]
    table = NodeTable(capacity=2)
    for node in nodes:
        table.upsert(node)
    names = [node.name for node in nodes]
    discount = None if discounted is None else (names[discounted % len(names)], pod.resources)
    batch = table.batch(names, discount)
    assert batch is not None
    keys = most_allocated_batch(pod, batch, RESOURCES)
    at = np.array(sorted(rng.sample(range(len(names)), 65)), dtype=np.intp)
    at_keys = most_allocated_batch(pod, batch, RESOURCES, at=at)
    assert (keys is None) == (at_keys is None)
    if keys is not None and at_keys is not None:
        assert at_keys.tolist() == keys[at].tolist()
        if discount is None:
            assert at_keys.tolist() == [most_allocated(pod, nodes[i], RESOURCES) for i in at.tolist()]
