"""RowMemo: per-row results are read back only while the row is unchanged (never stale)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.best_fit import BestFit, BestFitArgs
from scoring.cpu_balance import GpuCpuBalance, GpuCpuBalanceArgs
from scoring.fragmentation import GpuFragmentation
from scoring.framework import NodeInfo, PodInfo
from scoring.profile import SCALAR_ROWS, Profile, ScorePluginSpec
from scoring.resources import PodResources
from scoring.row_memo import RowMemo
from scoring.row_shapes import signature
from scoring.scarce import ScarceResourceAvoidance, ScarceResourceAvoidanceArgs
from scoring.table import Batch, Int64Array, NodeTable
from tests.scoring.builders import cpu_node, table_of
from tests.scoring.test_gpu_sharing_plugins import GPU, fgd, gpu_nodes, gpu_pods


class Counting:
    """cpu left per node, counting the rows it was asked about."""

    def __init__(self) -> None:
        self.rows = 0

    def __call__(self, batch: Batch) -> Int64Array:
        self.rows += len(batch)
        return batch.allocatable("cpu") - batch.requested("cpu")


def test_unchanged_rows_are_read_back_and_written_rows_computed_again() -> None:
    table = table_of(cpu_node("a", 8000), cpu_node("b", 4000), cpu_node("c", 2000))
    memo, compute = RowMemo(), Counting()
    batch = table.batch(["a", "b", "c"])
    assert batch is not None
    assert memo.get("k", batch, compute).tolist() == [8000, 4000, 2000]
    assert compute.rows == 3
    assert memo.get("k", batch, compute).tolist() == [8000, 4000, 2000]
    assert compute.rows == 3  # all read back
    table.upsert(cpu_node("b", 4000, used=1000))
    batch = table.batch(["c", "b", "a"])
    assert batch is not None
    assert memo.get("k", batch, compute).tolist() == [2000, 3000, 8000]
    assert compute.rows == 4  # only b again
    assert memo.get("other", batch, compute).tolist() == [2000, 3000, 8000]
    assert compute.rows == 7  # another key: its own values


def test_a_row_written_into_a_state_another_node_was_in_is_not_computed_again() -> None:
    table = table_of(cpu_node("a", 8000), cpu_node("b", 8000, used=1000), cpu_node("c", 8000, used=3000))
    memo, compute = RowMemo(), Counting()
    assert memo.get("k", table.batch(["a", "b", "c"]), compute).tolist() == [8000, 7000, 5000]  # type: ignore[arg-type]
    assert compute.rows == 3
    table.upsert(cpu_node("a", 8000, used=1000))  # b's state (another name, other labels)
    table.upsert(cpu_node("c", 8000, used=2000))  # a state no node was in
    assert memo.get("k", table.batch(["a", "b", "c"]), compute).tolist() == [7000, 7000, 6000]  # type: ignore[arg-type]
    assert compute.rows == 4  # c only: a's result is b's
    assert memo.get("other", table.batch(["a"]), compute).tolist() == [7000]  # type: ignore[arg-type]
    assert compute.rows == 5  # each key its own results


def test_states_numbered_again_past_the_limit_keep_equal_rows_equal_and_unequal_apart() -> None:
    table = NodeTable(capacity=2, shape_limit=3)
    for used in range(6):  # six states through one node: past the limit, numbered again
        table.upsert(cpu_node("a", 8000, used=used))
    table.upsert(cpu_node("b", 8000, used=5))
    table.upsert(cpu_node("c", 8000, used=1))
    ids = table.shapes.ids
    a, b, c = (int(ids[table.index[name]]) for name in "abc")
    assert a == b != c and table.shapes.epoch >= 1 and 0 not in (a, c)
    memo, compute = RowMemo(), Counting()
    assert memo.get("k", table.batch(["a", "b", "c"]), compute).tolist() == [7995, 7995, 7999]  # type: ignore[arg-type]
    row = table.index["c"]
    table.remove("c")
    assert int(table.shapes.ids[row]) == 0  # a free row is in no state


def test_unknown_names_discounted_positions_and_other_tables_are_never_kept() -> None:
    table = table_of(cpu_node("a", 8000), cpu_node("b", 4000))
    memo, compute = RowMemo(), Counting()
    batch = table.batch(["a", "zzz", "b"])
    assert batch is not None
    assert memo.get("k", batch, compute).tolist() == [8000, 0, 4000]
    assert memo.get("k", batch, compute).tolist() == [8000, 0, 4000]
    assert compute.rows == 4  # the unknown node each time
    discounted = table.batch(["a", "b"], discount=("b", PodResources({"cpu": 1000}, 1000, 0)))
    assert discounted is not None
    assert memo.get("k", discounted, compute).tolist() == [8000, 5000]
    assert memo.get("fresh", discounted, compute).tolist() == [8000, 5000]
    assert memo.get("k", table.batch(["a", "b"]), compute).tolist() == [8000, 4000]  # type: ignore[arg-type]
    other = table_of(cpu_node("a", 100), cpu_node("b", 200))
    assert memo.get("k", other.batch(["a", "b"]), compute).tolist() == [100, 200]  # type: ignore[arg-type]


def test_a_row_reused_by_another_node_and_a_grown_table() -> None:
    table = table_of(cpu_node("a", 8000), cpu_node("b", 4000))
    memo, compute = RowMemo(), Counting()
    assert memo.get("k", table.batch(["a", "b"]), compute).tolist() == [8000, 4000]  # type: ignore[arg-type]
    table.remove("a")
    table.upsert(cpu_node("x", 1000))  # takes a's row
    for index in range(5):  # past the capacity: the columns grow
        table.upsert(cpu_node(f"n{index}", index))
    names = ["x", "b", *(f"n{index}" for index in range(5))]
    assert memo.get("k", table.batch(names), compute).tolist() == [1000, 4000, 0, 1, 2, 3, 4]  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(gpu_pods(), st.lists(st.tuples(st.integers(0, 5), gpu_nodes()), min_size=1, max_size=25))
def test_memoised_plugins_follow_every_update(pod: PodInfo, updates: list[tuple[int, NodeInfo]]) -> None:
    """One plugin (one memo) scores after each node update; every answer equals the definition."""
    balance = GpuCpuBalance(GpuCpuBalanceArgs.parse({"cpuPerGpu": 10000}))
    for plugin in (fgd(), BestFit(BestFitArgs.parse(None)), balance):
        _follows_every_update(plugin, pod, updates)


def _follows_every_update(
    plugin: GpuFragmentation | BestFit | GpuCpuBalance, pod: PodInfo, updates: list[tuple[int, NodeInfo]]
) -> None:
    table: NodeTable = NodeTable(capacity=2, shape_limit=4)  # states numbered again now and then
    nodes: dict[str, NodeInfo] = {}
    for index, node in updates:
        nodes[f"n{index}"] = replace(node, name=f"n{index}")
        table.upsert(nodes[f"n{index}"])
        batch = table.batch(list(nodes))
        assert batch is not None
        scores = plugin.score_batch(pod, batch)
        assert scores is not None
        assert scores.tolist() == [plugin.score(pod, node) for node in nodes.values()]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(gpu_pods(), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 5), gpu_nodes()), min_size=1, max_size=25),
    st.integers(1, 30),
)
def test_memoised_profile_follows_every_update(
    pods: list[PodInfo], updates: list[tuple[int, NodeInfo]], fgd_weight: int
) -> None:
    """The profile's own memo of the combined score (its plugins are all ``RowScorer``s): after each
    node update, for pods of several shapes in turn, every answer equals the scalar definition.
    ScarceResourceAvoidance takes part for the pods that ask for no GPU (as deploy/'s profile), as
    does GpuCpuBalance for every pod."""
    profile = Profile(
        [],
        [
            ScorePluginSpec(fgd("Linear"), fgd_weight),
            ScorePluginSpec(BestFit(BestFitArgs.parse(None)), 1),
            ScorePluginSpec(GpuCpuBalance(GpuCpuBalanceArgs.parse({"cpuPerGpu": 10000, "milliPerPoint": 10})), 19),
            ScorePluginSpec(ScarceResourceAvoidance(ScarceResourceAvoidanceArgs.parse({"resources": [GPU]})), 20),
        ],
    )
    table: NodeTable = NodeTable(capacity=2, shape_limit=4)  # states numbered again now and then
    nodes: dict[str, NodeInfo] = {}
    for step, (index, node) in enumerate(updates):
        nodes[f"n{index}"] = replace(node, name=f"n{index}")
        table.upsert(nodes[f"n{index}"])
        batch = table.batch(list(nodes))
        assert batch is not None
        pod = pods[step % len(pods)]
        scores = profile.node_scores_batch(pod, batch)
        assert scores is not None
        assert scores.tolist() == [profile.score(pod, node).node_score for node in nodes.values()]


def test_a_profile_whose_plugin_cannot_batch_the_rows_leaves_them_to_the_scalar_path() -> None:
    """More resource types than ScarceResourceAvoidance has bits: its ``score_rows`` gives None, and so
    does the profile (the caller then scores node by node) instead of a memo of wrong scores. A few
    rows are scored by the scalar definitions anyway, right whatever the bits."""
    profile = Profile(
        [],
        [
            ScorePluginSpec(BestFit(BestFitArgs.parse(None)), 1),
            ScorePluginSpec(ScarceResourceAvoidance(ScarceResourceAvoidanceArgs.parse({"resources": [GPU]})), 1),
        ],
    )
    pod = PodInfo("u", "ns", "p", PodResources({"cpu": 1000}, 1000, 0))
    few = table_of(cpu_node("a", 8000))
    batch = few.batch(["a"])
    assert batch is not None
    assert profile.node_scores_batch(pod, batch) is not None
    crowded = NodeTable(capacity=2)
    allocatable = {"cpu": 8000, **{f"example.com/r{i}": 1 for i in range(70)}}
    names = [f"n{index}" for index in range(SCALAR_ROWS + 1)]  # more rows than the scalar path takes
    nodes = [NodeInfo(name=n, allocatable=allocatable, allocatable_types=frozenset(allocatable)) for n in names]
    for node in nodes:
        crowded.upsert(node)
    batch = crowded.batch(names)
    assert batch is not None and crowded.type_overflow
    assert profile.node_scores_batch(pod, batch) is None
    one = crowded.batch([names[1]])
    assert one is not None
    assert profile.node_scores_batch(pod, one).tolist() == [profile.score(pod, nodes[1]).node_score]  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=65, max_size=140),  # each node's state, of four
    st.lists(st.integers(0, 139), max_size=3),  # names the table does not hold, at these places
    st.one_of(st.none(), st.integers(0, 139)),  # the node a retried pod is assumed on
)
def test_many_rows_are_computed_once_per_state(
    states: list[int], unknown_at: list[int], discount_at: int | None
) -> None:
    """A key met for the first time on many rows computes each state once (the rest take its result);
    an unknown name and the discounted node are computed each. Every answer equals computing every row."""
    table = NodeTable(capacity=2)
    names = []
    for index, state in enumerate(states):
        names.append(f"n{index}")
        table.upsert(cpu_node(f"n{index}", 8000, used=1000 * state))
    for at in sorted(unknown_at):
        names.insert(min(at, len(names)), f"unknown-{at}")
    discount = None
    if discount_at is not None:
        discount = (f"n{discount_at % len(states)}", PodResources({"cpu": 500}, 500, 0))
    batch = table.batch(names, discount)
    assert batch is not None
    memo, compute = RowMemo(), Counting()
    assert memo.get("k", batch, compute).tolist() == Counting()(batch).tolist()
    distinct = len(set(states))
    assert compute.rows <= distinct + len(unknown_at) + (discount is not None)
    assert memo.get("k", batch, compute).tolist() == Counting()(batch).tolist()  # read back


def test_many_distinct_rows_are_each_computed() -> None:
    table = NodeTable(capacity=2)
    for index in range(100):
        table.upsert(cpu_node(f"n{index}", 8000, used=index))
    batch = table.batch([f"n{index}" for index in range(100)])
    assert batch is not None
    memo, compute = RowMemo(), Counting()
    assert memo.get("k", batch, compute).tolist() == [8000 - index for index in range(100)]
    assert compute.rows == 100


def test_signatures_are_canonical_and_take_any_amount() -> None:
    """Equal content in another order, under equal names held by other string objects (a decoded
    object's keys are not interned, a literal's are), is one state; an amount past 64 bits still has a
    signature (the table keeps such a node rather than failing), equal only to equal content."""
    one = NodeInfo(name="a", allocatable={"cpu": 8000, "memory": 10}, requested={"memory": 1, "cpu": 2})
    cpu, memory = "".join(["c", "pu"]), "".join(["mem", "ory"])
    two = NodeInfo(name="b", allocatable={memory: 10, cpu: 8000}, requested={cpu: 2, memory: 1}, labels={"x": "y"})
    assert signature(one) == signature(two) != signature(replace(two, requested={"cpu": 3, "memory": 1}))
    huge = NodeInfo(name="h", allocatable={"example.com/x": 2**70})
    assert signature(huge) == signature(replace(huge, name="i"))
    assert signature(huge) != signature(replace(huge, allocatable={"example.com/x": 2**70 + 1}))
    table = table_of(huge, replace(huge, name="i"), one)
    ids = table.shapes.ids
    assert ids[table.index["h"]] == ids[table.index["i"]] != ids[table.index["a"]]


def test_a_few_rows_written_since_are_scored_by_the_scalar_definitions() -> None:
    """After a few binds the memo scores the written rows again: up to ``SCALAR_ROWS`` of them the
    profile asks the plugins' scalar ``score`` (from the snapshots the rows were written from), more
    go to the batch twins; the scores are the scalar ones either way."""
    calls = {"rows": 0, "scalar": 0}

    class Spy(BestFit):
        def score_rows(self, key, rows):  # type: ignore[no-untyped-def]
            calls["rows"] += 1
            return super().score_rows(key, rows)

        def score(self, pod, node):  # type: ignore[no-untyped-def]
            calls["scalar"] += 1
            return super().score(pod, node)

    profile = Profile([], [ScorePluginSpec(Spy(BestFitArgs.parse(None)), 1)])
    pod = PodInfo("u", "ns", "p", PodResources({"cpu": 1000}, 1000, 0))
    nodes = {f"n{index}": cpu_node(f"n{index}", 8000, used=100 * index) for index in range(SCALAR_ROWS + 2)}
    table = table_of(*nodes.values())

    def scored() -> list[int]:
        batch = table.batch(list(nodes))
        assert batch is not None
        scores = profile.node_scores_batch(pod, batch)
        assert scores is not None
        assert scores.tolist() == [profile.score(pod, node).node_score for node in nodes.values()]
        return scores.tolist()

    scored()
    assert calls == {"rows": 1, "scalar": len(nodes)}  # the scalar calls are the check's, none the profile's
    for count in (1, SCALAR_ROWS, SCALAR_ROWS + 1):
        for index, name in enumerate(list(nodes)[:count]):
            nodes[name] = cpu_node(name, 8000, used=1000 * count + 10 * index)  # states not met before
            table.upsert(nodes[name])
        before = dict(calls)
        scored()
        batch_calls = calls["rows"] - before["rows"]
        scalar_calls = calls["scalar"] - before["scalar"] - len(nodes)  # less the check's
        assert (batch_calls, scalar_calls) == ((0, count) if count <= SCALAR_ROWS else (1, 0))
