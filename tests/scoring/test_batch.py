"""The vectorised batch path must give exactly the scalar plugins' answers, node by node."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.fitplus import NodeResourcesFitPlus, NodeResourcesFitPlusArgs
from scoring.framework import NodeInfo, PodInfo
from scoring.managed_fit import ManagedResourcesFit
from scoring.profile import Profile, ScorePluginSpec
from scoring.resources import PodResources
from scoring.scarce import ScarceResourceAvoidance, ScarceResourceAvoidanceArgs
from scoring.table import Batch, NodeTable
from tests.scoring.strategies import nodes, pods

RESOURCES = ["cpu", "memory", "nvidia.com/gpu", "example.com/fpga", "ephemeral-storage", "hugepages-1Gi"]

LARGEST = 10**12  # the largest random amount


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    strategies = {
        name: {"type": draw(st.sampled_from(["MostAllocated", "LeastAllocated"])), "weight": draw(st.integers(1, 5))}
        for name in draw(st.lists(st.sampled_from(RESOURCES), min_size=1, unique=True))
    }
    scarce = draw(st.lists(st.sampled_from(RESOURCES), min_size=1, unique=True))
    managed = draw(st.lists(st.sampled_from(RESOURCES), unique=True))
    return Profile(
        [ManagedResourcesFit(managed)],
        [
            ScorePluginSpec(
                NodeResourcesFitPlus(NodeResourcesFitPlusArgs.parse({"resources": strategies})), draw(st.integers(1, 4))
            ),
            ScorePluginSpec(
                ScarceResourceAvoidance(ScarceResourceAvoidanceArgs.parse({"resources": scarce})),
                draw(st.integers(1, 4)),
            ),
        ],
    )


DRA_BACKED = ["nvidia.com/gpu", "example.com/fpga"]  # extended resources some nodes get from DRA devices


@settings(max_examples=300, deadline=None)
@given(
    profiles(),
    pods(RESOURCES, LARGEST),
    st.lists(nodes(RESOURCES, LARGEST, DRA_BACKED), min_size=1, max_size=12),
    st.booleans(),
)
def test_batch_equals_scalar(profile: Profile, pod: PodInfo, node_list: list[NodeInfo], with_unknown: bool) -> None:
    table = NodeTable(capacity=2)  # small, so rows grow while upserting
    named = [replace(n, name=f"n{i}", pod_count=0) for i, n in enumerate(node_list)]
    for node in named:
        table.upsert(node)
    names = [n.name for n in named] + (["ghost"] if with_unknown else [])
    batch = table.batch(names)
    assert batch is not None
    verdicts = profile.filter_batch(pod, batch)
    scores = profile.node_scores_batch(pod, batch)
    assert scores is not None
    for plugin in profile.scorer_names:
        single = profile.node_scores_batch(pod, batch, plugin)
        assert single is not None
        for position, node in enumerate(named):
            assert single[position] == profile.node_score(pod, node, plugin)
    for position, node in enumerate(named):
        assert verdicts.status(position) == profile.filter(pod, node), node
        assert scores[position] == profile.score(pod, node).node_score
    if with_unknown:
        assert not batch.known[-1]


def test_discount_takes_out_the_pods_own_assumption() -> None:
    table = NodeTable()
    table.upsert(
        NodeInfo("g1", {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 4}, allocatable_types=frozenset({"nvidia.com/gpu"}))
    )
    table.upsert(
        NodeInfo("g2", {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 4}, allocatable_types=frozenset({"nvidia.com/gpu"}))
    )
    pod = PodInfo("u", "ns", "p", PodResources({"nvidia.com/gpu": 2}, 0, 0))
    batch = table.batch(["g1", "g2"], ("g2", pod.resources))
    assert batch is not None
    assert batch.requested("nvidia.com/gpu").tolist() == [4, 2]
    verdicts = ManagedResourcesFit(["nvidia.com/gpu"]).filter_batch(pod, batch)
    assert verdicts.passed(["g1", "g2"]) == ["g2"]


def test_repeated_names_and_removed_rows() -> None:
    table = NodeTable()
    for name in ("a", "b", "c"):
        table.upsert(NodeInfo(name, {"cpu": 1000}, allocatable_types=frozenset({"cpu"})))
    assert table.batch(["a", "b", "a"]) is None  # the caller dedupes
    table.remove("b")
    batch = table.batch(["a", "b", "c"])
    assert batch is not None and batch.known.tolist() == [True, False, True]
    table.upsert(NodeInfo("d", {"cpu": 2000}, allocatable_types=frozenset({"cpu"})))  # reuses b's row
    batch = table.batch(["d", "c"])
    assert batch is not None and batch.allocatable("cpu").tolist() == [2000, 1000]
    assert table.host_prefix[table.index["d"]] == b'{"Host":"d","Score":'
    assert table.name_key[table.index["d"]] == b'"d":'


def _rows(batch: object) -> list[int]:
    assert batch is not None
    return batch.rows.tolist()  # type: ignore[attr-defined]


def test_recent_lists_are_recalled_only_while_valid() -> None:
    table = NodeTable()
    names = [f"node-{i}" for i in range(100)]
    for name in names:
        table.upsert(NodeInfo(name, {"cpu": 1000}, allocatable_types=frozenset({"cpu"})))
    expected = {name: table.index[name] for name in names}
    table.batch(list(names))
    rotated = names[37:] + names[:37]
    # Fresh string objects, as a new request decodes them: recalled by comparison, not identity.
    fresh = [str(n.encode().decode()) for n in rotated]
    assert _rows(table.batch(fresh)) == [expected[n] for n in rotated]
    table.remove("node-5")
    table.upsert(NodeInfo("node-new", {"cpu": 1000}, allocatable_types=frozenset({"cpu"})))  # reuses node-5's row
    after = [n if n != "node-5" else "node-new" for n in names]
    batch = table.batch(after)
    assert _rows(batch) == [table.index[n] for n in after]
    gone = table.batch(list(names))
    assert gone is not None and not gone.known[5]  # node-5 is no longer known, not recalled as before
    subset = names[::3]
    table.remember(subset, np.array([table.index.get(n, 0) for n in subset]))
    assert _rows(table.batch(list(subset))) == [table.index.get(n, 0) for n in subset]


@given(st.lists(st.tuples(st.sampled_from(["rotate", "shuffle", "swap-middle", "again"]), st.integers(0, 99))))
def test_lists_in_any_order_gather_the_rows_of_their_names(steps: list[tuple[str, int]]) -> None:
    """Whatever was seen before (rotations, new orders, lists that differ only inside), a batch's rows
    are those of its names: recalling a recent list never answers for another one."""
    table = NodeTable()
    names = [f"node-{i}" for i in range(100)]
    for name in names:
        table.upsert(NodeInfo(name, {"cpu": 1000}, allocatable_types=frozenset({"cpu"})))
    current = list(names)
    for kind, value in steps:
        current = list(current)  # a list handed to the table is never modified afterwards
        if kind == "rotate":
            current = current[value:] + current[:value]
        elif kind == "shuffle":
            random.Random(value).shuffle(current)
        elif kind == "swap-middle":
            i, j = 1 + value % 98, 1 + (value * 7) % 98
            current[i], current[j] = current[j], current[i]
        current = [str(n.encode().decode()) for n in current]  # fresh objects, as a request decodes them
        assert _rows(table.batch(current)) == [table.index[n] for n in current]


def _three_gpu_nodes(assumed_on: str) -> tuple[NodeTable, PodInfo, list[str], Batch]:
    """Three GPU nodes, a 1-GPU pod assumed on ``assumed_on``, and the batch of g0, g1, "gone" (a name
    the table does not hold) and g2 with that assumption discounted."""
    table = NodeTable()
    for i in range(3):
        table.upsert(
            NodeInfo(
                f"g{i}",
                {"nvidia.com/gpu": 8},
                {"nvidia.com/gpu": i + 1},
                allocatable_types=frozenset({"nvidia.com/gpu"}),
            )
        )
    pod = PodInfo("u", "ns", "p", PodResources({"nvidia.com/gpu": 1}, 0, 0))
    names = ["g0", "g1", "gone", "g2"]
    whole = table.batch(names, (assumed_on, pod.resources))
    assert whole is not None
    return table, pod, names, whole


@given(st.lists(st.booleans(), min_size=4, max_size=4), st.sampled_from(["g0", "g1", "g2", "g3"]))
def test_subset_reads_as_a_batch_gathered_for_those_names(keep: list[bool], assumed_on: str) -> None:
    """``Batch.subset`` (filter narrowing to the best scored nodes) equals gathering the kept names
    again, the pod's own assumption discounted where its node is kept. "gone" is unknown to the table."""
    table, pod, names, whole = _three_gpu_nodes(assumed_on)
    subset = whole.subset(np.array(keep, dtype=np.bool_))
    kept = [name for name, k in zip(names, keep, strict=True) if k]
    fresh = table.batch(kept, (assumed_on, pod.resources))
    assert fresh is not None
    assert list(subset.names) == kept
    assert subset.known.tolist() == fresh.known.tolist()
    assert subset.requested("nvidia.com/gpu").tolist() == fresh.requested("nvidia.com/gpu").tolist()
    assert subset.allocatable("nvidia.com/gpu").tolist() == fresh.allocatable("nvidia.com/gpu").tolist()
    named = whole.subset(np.array(keep, dtype=np.bool_), kept)  # the names given, as filter has them
    assert (list(named.names), named.rows.tolist(), named.discount_position) == (
        kept,
        subset.rows.tolist(),
        subset.discount_position,
    )


@given(st.lists(st.integers(0, 3), max_size=4, unique=True), st.sampled_from(["g0", "g1", "g2", "g3"]))
def test_take_reads_as_the_whole_batch_at_those_positions(positions: list[int], assumed_on: str) -> None:
    """``Batch.take`` (the tie-break reading the best of many candidates) gives, position by position
    and in the order asked, what the whole batch gives there, the pod's own assumption discounted
    where its node is taken."""
    _, _, names, whole = _three_gpu_nodes(assumed_on)
    at = np.array(positions, dtype=np.intp)
    taken = whole.take(at)
    assert list(taken.names) == [names[p] for p in positions]
    assert taken.known.tolist() == whole.known[at].tolist()
    for read in ("requested", "allocatable"):
        assert getattr(taken, read)("nvidia.com/gpu").tolist() == getattr(whole, read)("nvidia.com/gpu")[at].tolist()


def test_the_table_keeps_each_name_as_a_json_key() -> None:
    table = NodeTable(capacity=2)
    for name in ("a", 'q"uote', "c"):
        table.upsert(NodeInfo(name, {"cpu": 1000}, allocatable_types=frozenset({"cpu"})))
    assert [table.name_key[table.index[n]] for n in ("a", 'q"uote', "c")] == [b'"a":', b'"q\\"uote":', b'"c":']


def test_host_prefixes_are_kept_for_the_same_name_list_until_the_table_changes() -> None:
    table = NodeTable()
    for name in ("a", "b"):
        table.upsert(NodeInfo(name, {"cpu": 1000}, allocatable_types=frozenset({"cpu"})))
    names = ["b", "a"]
    batch = table.batch(names)
    assert batch is not None
    first = table.host_prefixes(names, batch.rows)
    assert first == [b'{"Host":"b","Score":', b'{"Host":"a","Score":']
    assert table.host_prefixes(names, batch.rows) is first
    assert table.host_prefixes(list(names), batch.rows) is not first  # an equal list is not the same list
    table.remove("a")
    table.upsert(NodeInfo("c", {"cpu": 1000}, allocatable_types=frozenset({"cpu"})))  # takes a's row
    renamed = table.batch(["b", "c"])
    assert renamed is not None and renamed.rows.tolist() == batch.rows.tolist()
    assert table.host_prefixes(names, renamed.rows) == [b'{"Host":"b","Score":', b'{"Host":"c","Score":']


@given(st.booleans(), st.lists(st.booleans(), min_size=4, max_size=4), st.lists(st.integers(0, 3), unique=True))
def test_parts_of_a_batch_say_whether_every_name_is_known(with_gone: bool, keep: list[bool], at: list[int]) -> None:
    """A batch's parts (``subset``, ``take``, the row memo's ``part``) answer ``all_known`` as their own
    names are: inherited from a batch of known names, worked out where the batch has an unknown one."""
    table, _, names, _ = _three_gpu_nodes("g0")
    names = names if with_gone else ["g0", "g1", "g2", "g1-copy"]
    table.upsert(NodeInfo("g1-copy", {"nvidia.com/gpu": 8}, allocatable_types=frozenset({"nvidia.com/gpu"})))
    whole = table.batch(names)
    assert whole is not None and whole.all_known is not with_gone
    positions = np.array(at, dtype=np.intp)
    for part in (
        whole.subset(np.array(keep, dtype=np.bool_)),
        whole.take(positions),
        whole.part([names[p] for p in at], whole.rows[positions], whole.known[positions], -1, None),
    ):
        assert part.all_known == bool(part.known.all())


def test_the_list_asked_about_for_every_pod_outlives_the_lists_each_pod_adds() -> None:
    # filter's input comes with every pod; each pod's survivors are remembered for its prioritize. The
    # input must stay recalled (found without looking a name up) however many survivor lists came.
    table = NodeTable()
    names = [f"node-{i}" for i in range(100)]
    for name in names:
        table.upsert(NodeInfo(name, {"cpu": 1000}, allocatable_types=frozenset({"cpu"})))
    table.batch(names)
    for pod in range(10):
        survivors = names[: 99 - pod]
        assert table._recalled(names) is not None, pod
        table.remember(survivors, np.array([table.index[n] for n in survivors]))
        assert _rows(table.batch(survivors)) == [table.index[n] for n in survivors]
