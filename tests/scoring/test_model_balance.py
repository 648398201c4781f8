"""GpuModelBalance: a node scores by how much freer its GPU model is than the cluster, from every
labelled node of the table; the batch twin equals the definition (hypothesis); the node table's
label codes follow label changes and removed nodes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.framework import ArgsError, NodeInfo, PodInfo
from scoring.model_balance import DEFAULT_LABEL, GpuModelBalance, GpuModelBalanceArgs, model_balance
from scoring.profile import build_score_plugin
from scoring.resources import PodResources
from scoring.table import NodeTable
from tests.scoring.builders import table_of
from tests.scoring.test_gpu_sharing_plugins import GPU, claim_pod, dra_node, plugin_node

BALANCE = GpuModelBalance(GpuModelBalanceArgs.parse({}))


def labelled(node: NodeInfo, name: str, model: str | None) -> NodeInfo:
    return replace(node, name=name, labels={} if model is None else {DEFAULT_LABEL: model, "zone": "a"})


def batch_scores(plugin: GpuModelBalance, pod: PodInfo, table: NodeTable, names: list[str]) -> list[int]:
    batch = table.batch(names)
    assert batch is not None
    scores = plugin.score_batch(pod, batch)
    result: list[int] = scores.tolist()
    return result


def test_one_point_per_percentage_point_of_free_share_above_the_clusters() -> None:
    assert model_balance(50, 100, 40, 100) == 60
    assert model_balance(1, 3, 1, 2) == 33  # 33.3 % against 50 %: floor(-16.7)
    assert model_balance(0, 100, 100, 100) == 0
    assert model_balance(100, 100, 0, 100) == 100
    assert model_balance(5, 0, 5, 10) == 50  # no devices of the model, or none labelled
    assert model_balance(5, 10, 0, 0) == 50


def test_pods_take_the_gpus_of_the_model_with_most_room() -> None:
    # model a: 8 GPUs, 6 used (25 % free); model b: 2 GPUs, none used (100 %: 50 + 60, clamped);
    # the labelled nodes: 10 GPUs, 40 % free
    a1 = labelled(dra_node([1000] * 6 + [0, 0]), "a1", "a")
    b1 = labelled(dra_node([0, 0]), "b1", "b")
    bare = labelled(dra_node([0, 0]), "bare", None)  # no label: neither counted nor steered
    table = table_of(a1, b1, bare)
    pod = claim_pod(1, 500)
    assert batch_scores(BALANCE, pod, table, ["a1", "b1", "bare"]) == [35, 100, 50]
    # the scalar path reads the cluster from the last table scored
    assert [BALANCE.score(pod, n) for n in (a1, b1, bare)] == [35, 100, 50]


def test_device_plugin_gpus_count_whole_and_removed_nodes_leave_the_shares() -> None:
    a1 = labelled(plugin_node(4, 4), "a1", "a")  # a: 0 % free
    b1 = labelled(plugin_node(4, 0), "b1", "b")  # b: 100 % free
    b2 = labelled(plugin_node(4, 2), "b2", "b")
    table = table_of(a1, b1, b2)
    plugin = GpuModelBalance(GpuModelBalanceArgs.parse({}))
    pod = claim_pod(1, 1000)
    assert batch_scores(plugin, pod, table, ["a1", "b1"]) == [50 - 50, 50 + 25]  # cluster 50 %, b 75 %
    table.remove("b2")  # cluster 4 of 8 free, b 100 %
    assert batch_scores(plugin, pod, table, ["a1", "b1"]) == [0, 100]
    table.upsert(replace(a1, labels={DEFAULT_LABEL: "b"}))  # relabelled: one model, all alike
    assert batch_scores(plugin, pod, table, ["a1", "b1"]) == [50, 50]


def test_it_sits_out_for_pods_without_gpus_and_reads_the_configured_label() -> None:
    cpu_only = PodInfo("u", "ns", "p", PodResources({"cpu": 1000}, 1000, 0))
    assert not BALANCE.applies(cpu_only)
    assert BALANCE.applies(claim_pod(1, 300))
    assert BALANCE.applies(PodInfo("u", "ns", "p", PodResources({"cpu": 1000, GPU: 2}, 1000, 0)))
    custom = GpuModelBalance(GpuModelBalanceArgs.parse({"label": "zone"}))
    table = table_of(labelled(dra_node([1000, 0]), "a1", "a"), labelled(dra_node([0, 0]), "b1", "b"))
    assert batch_scores(custom, claim_pod(1, 1000), table, ["a1", "b1"]) == [50, 50]  # both in zone a


def test_names_the_table_does_not_hold_score_50() -> None:
    table = table_of(labelled(dra_node([1000, 0]), "a1", "a"), labelled(dra_node([0, 0]), "b1", "b"))
    assert batch_scores(BALANCE, claim_pod(1, 1000), table, ["a1", "new", "b1"]) == [25, 50, 75]


def test_args_errors_name_the_field() -> None:
    with pytest.raises(ArgsError, match=r"args.label: must be a non-empty"):
        build_score_plugin("GpuModelBalance", {"label": ""}, "plugins[0]")
    with pytest.raises(ArgsError, match="unknown field"):
        build_score_plugin("GpuModelBalance", {"labels": "x"}, "plugins[0]")
    with pytest.raises(ArgsError, match="must be a mapping"):
        build_score_plugin("GpuModelBalance", [1], "plugins[0]")
    assert build_score_plugin("GpuModelBalance", None, "plugins[0]").name == "GpuModelBalance"


@st.composite
def cluster(draw: st.DrawFn) -> list[NodeInfo]:
    nodes = []
    for index in range(draw(st.integers(1, 8))):
        model = draw(st.sampled_from([None, "a", "b", "c"]))
        if draw(st.booleans()):
            node = dra_node(draw(st.lists(st.sampled_from([0, 300, 1000]), min_size=0, max_size=8)))
        else:
            gpus = draw(st.integers(0, 8))
            node = plugin_node(gpus, draw(st.integers(0, gpus)))
        nodes.append(labelled(node, f"n{index}", model))
    return nodes


@settings(max_examples=200, deadline=None)
@given(cluster(), st.data())
def test_batch_equals_the_definition(nodes: list[NodeInfo], data: st.DataObject) -> None:
    """Each node's batch score is ``model_balance`` of its model's and the cluster's free and total
    milli-devices, summed by hand over the labelled nodes (also after one node is removed)."""
    table = table_of(*nodes)
    if data.draw(st.booleans()) and len(nodes) > 1:
        gone = nodes.pop(data.draw(st.integers(0, len(nodes) - 1)))
        table.remove(gone.name)
    plugin = GpuModelBalance(GpuModelBalanceArgs.parse({}))
    scores = batch_scores(plugin, claim_pod(1, 1000), table, [n.name for n in nodes])

    def amounts(node: NodeInfo) -> tuple[int, int]:
        free = node.devices_free(GPU)
        return sum(max(f, 0) for f in free), 1000 * len(free)

    totals: dict[str, list[int]] = {}
    for node in nodes:
        model = node.labels.get(DEFAULT_LABEL)
        if model is not None:
            free, total = amounts(node)
            entry = totals.setdefault(model, [0, 0])
            entry[0] += free
            entry[1] += total
    cluster_free = sum(free for free, _ in totals.values())
    cluster_total = sum(total for _, total in totals.values())
    expected = []
    for node in nodes:
        model = node.labels.get(DEFAULT_LABEL)
        if model is None:
            expected.append(50)
        else:
            expected.append(model_balance(*totals[model], cluster_free, cluster_total))
    assert scores == expected
    assert [plugin.score(claim_pod(1, 1000), n) for n in nodes] == expected


@settings(max_examples=100, deadline=None)
@given(cluster())
def test_a_profile_adds_it_to_the_memoised_sum_of_the_row_plugins(nodes: list[NodeInfo]) -> None:
    """With a plugin that reads the whole cluster, the profile memoises the weighted sum of the others
    and adds it: the same integer mean as the one-node path, twice (the second from the memo)."""
    from scoring.best_fit import BestFit, BestFitArgs
    from scoring.profile import Profile, ScorePluginSpec

    plugin = GpuModelBalance(GpuModelBalanceArgs.parse({}))
    profile = Profile([], [ScorePluginSpec(BestFit(BestFitArgs.parse({})), 3), ScorePluginSpec(plugin, 10)])
    table = table_of(*nodes)
    pod = claim_pod(1, 1000)
    for _ in range(2):
        batch = table.batch([n.name for n in nodes])
        assert batch is not None
        scores = profile.node_scores_batch(pod, batch)
        assert scores is not None
        assert scores.tolist() == [profile.score(pod, node).node_score for node in nodes]


@st.composite
def writes(draw: st.DrawFn) -> list[tuple[str, NodeInfo | None]]:
    """Table writes: a node (new or again, maybe relabelled or with other devices in use), or a
    removal (None)."""
    steps: list[tuple[str, NodeInfo | None]] = []
    for node in draw(st.lists(cluster(), min_size=1, max_size=5)):
        for one in node[: draw(st.integers(1, 3))]:
            steps.append((one.name, None if draw(st.integers(0, 5)) == 0 else one))
    return steps


@settings(max_examples=150, deadline=None)
@given(cluster(), writes())
def test_one_instance_follows_the_writes_of_its_table(
    nodes: list[NodeInfo], steps: list[tuple[str, NodeInfo | None]]
) -> None:
    """The sums kept between requests (only written rows counted again) give what a plugin that
    counts the whole table afresh gives, after every write, removal and relabelling."""
    table = table_of(*nodes)
    kept = GpuModelBalance(GpuModelBalanceArgs.parse({}))
    pod = claim_pod(1, 1000)
    present = {n.name: n for n in nodes}
    for name, node in [("", None), *steps]:
        if name and node is None:
            table.remove(name)
            present.pop(name, None)
        elif node is not None:
            table.upsert(node)
            present[name] = node
        names = list(present)
        fresh = GpuModelBalance(GpuModelBalanceArgs.parse({}))
        assert batch_scores(kept, pod, table, names) == batch_scores(fresh, pod, table, names)
