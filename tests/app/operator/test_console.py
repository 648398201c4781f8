"""The operator console (/ui): each view's numbers against the JSON endpoints, filters and pages,
bad input as a message on the page, escaping of hostile names, and the guard."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from app.cluster.objects import pod_from_obj
from app.operator import console_cluster
from app.operator.console import render
from app.operator.console_cluster import Cell, CellGroup, ClusterPage, ClusterQuery, NodeRow, Totals, cluster_page
from tests.app.operator.conftest import EXAMPLES, block, by_id, cells, example_service
from tests.conftest import bind_body, filter_body, labelled, make_service, node_obj, pod_obj

GPU = "nvidia.com/gpu"
HOSTILE = "<script>alert(1)</script>"


def test_root_and_ui_lead_to_the_cluster_page(console: Any) -> None:
    client = console(example_service())
    for path in ("/", "/ui", "/ui/"):
        answer = client.get(path)
        assert answer.status_code == 200 and str(answer.url).endswith("/ui/cluster")
    for view in ("cluster", "queues", "groups", "decisions", "explain", "health"):
        page = client.get(f"/ui/{view}")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert 'aria-current="page"' in page.text
    assert "--used" in client.get("/ui/static/console.css").text
    assert client.get("/ui/static/console.js").status_code == 200


# ---------------------------------------------------------------------------------------------- cluster
@pytest.mark.parametrize("node", ["dgx-a100-1", "dgx-a100-2", "l4-1", "l4-3", "cpu-1"])
def test_a_nodes_cells_are_what_debug_counts(console: Any, node: str) -> None:
    client = console(example_service())
    shown = client.get(f"/debug?node={node}").json()
    row = block(client.get("/ui/cluster").text, "tr", "data-node", node)
    allocated = cells(row, "allocated")
    assert len(allocated) == shown["requested"].get(GPU, 0)
    assert len(cells(row, "free")) == shown["free"][GPU]
    assert f">{shown['free'][GPU]}/{shown['allocatable'].get(GPU, 0)}<" in row
    # Every allocated cell names a pod of the example file bound to this node that asks for GPUs.
    items = [json.loads(json.dumps(i)) for i in _example_items() if i["kind"] == "Pod"]
    holders = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in items
        if p["spec"].get("nodeName") == node and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
    }
    assert {re.search(r"pod (\S+)", title).group(1) for title in allocated} <= holders  # type: ignore[union-attr]


def _example_items() -> list[dict[str, Any]]:
    import yaml

    items: list[dict[str, Any]] = yaml.safe_load((EXAMPLES / "cluster.yaml").read_text())["items"]
    return items


def test_dra_devices_show_their_holder_claim(console: Any) -> None:
    client = console(example_service())
    shown = client.get("/debug?node=dra-1").json()["dra"]
    row = block(client.get("/ui/cluster").text, "tr", "data-node", "dra-1")
    held = [d for pool in shown["pools"] for s in pool["slices"] for d in s["devices"] if d["holder"]]
    assert held, "the example holds a DRA device on dra-1"
    titles = cells(row, "allocated")
    assert len(titles) == len(held)
    for device in held:
        assert any(device["name"] in t and device["holder"] in t for t in titles)


def test_assumed_pods_are_cells_of_their_own(console: Any) -> None:
    service = example_service()
    pending = next(p for p in service.cache.pods.values() if p.key == "ml-train/llama-finetune-1")
    assert service.cache.assume(pending, "l4-3") is None
    client = console(service)
    page = client.get("/ui/cluster").text
    assumed = cells(block(page, "tr", "data-node", "l4-3"), "assumed")
    assert len(assumed) == pending.resources.requests[GPU]
    assert all("ml-train/llama-finetune-1" in t for t in assumed)
    assert by_id(page, "total-assumed") == str(pending.resources.requests[GPU])
    health = client.get("/ui/health").text
    assert by_id(health, "ledger-size") == "1" == str(len(client.get("/debug").json()["assumeLedger"]))


def test_totals_and_fragmentation() -> None:
    """a: 8 GPUs, 2 used (6 free on a partly used node); b: 8 free; c: 4 of 4 used; d: no GPUs."""
    nodes = [node_obj("a", gpus=8), node_obj("b", gpus=8), node_obj("c", gpus=4), node_obj("d", gpus=None)]
    pods = [pod_obj("p1", gpus=2, node="a"), pod_obj("p2", gpus=4, node="c")]
    totals = cluster_page(make_service(nodes, pods), ClusterQuery()).totals
    assert (totals.nodes, totals.gpu_nodes, totals.gpus, totals.free, totals.allocated) == (4, 3, 20, 14, 6)
    assert (totals.free_on_partly_used, totals.entirely_free_nodes) == (6, 1)
    assert totals.fragmentation == pytest.approx(6 / 14)
    assert Totals().fragmentation == 0.0  # no free GPU: nothing is fragmented


def test_totals_count_in_words_that_agree_with_the_number(console: Any) -> None:
    client = console(example_service())
    label = re.compile(r'id="total-entirely-free">(\d+)</span><span class="label">([^<]*)</span>')
    counts = set()
    for query in ("", "?name=dgx", "?name=l4", "?name=dra", "?name=l4-2"):
        count, words = label.findall(client.get(f"/ui/cluster{query}").text)[0]
        assert words == ("GPU node entirely free" if count == "1" else "GPU nodes entirely free")
        counts.add(count)
    assert "1" in counts and len(counts) > 1  # both wordings were seen
    page = client.get("/ui/cluster?name=l4-2").text
    assert re.search(r'id="total-nodes">1</span><span class="label">node matching', page)


def test_totals_follow_the_filter_and_agree_with_the_rows() -> None:
    """The totals come from the node table's columns; the rows count cells one by one: they agree."""
    service = example_service()
    shared_pool_seen = False
    for query in (ClusterQuery(), ClusterQuery(model="NVIDIA-L4"), ClusterQuery(name="dra"), ClusterQuery(name="1")):
        page = cluster_page(service, ClusterQuery(query.name, query.label, query.model, size=500))
        assert page.totals.nodes == len(page.rows)
        # A DRA pool published for several nodes shows on each of their rows and counts once in totals.
        repeated: dict[str, list[CellGroup]] = {}
        for row in page.rows:
            for group in row.groups:
                if "several nodes" in group.label:
                    repeated.setdefault(group.label, []).append(group)
        extra = [c for groups in repeated.values() for g in groups[1:] for c in g.cells]
        assert page.totals.gpus == sum(r.gpus for r in page.rows) - len(extra)
        assert page.totals.free == sum(r.free for r in page.rows) - sum(c.state == "free" for c in extra)
        allocated = sum(c.state == "allocated" for r in page.rows for g in r.groups for c in g.cells)
        assert page.totals.allocated == allocated - sum(c.state == "allocated" for c in extra)
        shared_pool_seen |= bool(extra)
    assert shared_pool_seen  # the example has such a pool


def test_filters_by_name_label_and_model(console: Any) -> None:
    client = console(example_service())

    def names(query: str) -> list[str]:
        return re.findall(r'<tr data-node="([^"]+)"', client.get(f"/ui/cluster?{query}").text)

    assert names("name=l4") == ["l4-1", "l4-2", "l4-3"]
    assert names("model=NVIDIA-A100-SXM4-80GB") == ["dgx-a100-1", "dgx-a100-2"]
    assert names("model=L4") == ["dra-1", "dra-2"]  # a DRA device's productName
    assert names("label=gpu.example.com/dra") == ["dra-1", "dra-2"]
    assert names("label=nvidia.com/gpu.product%3DNVIDIA-L4") == ["l4-1", "l4-2", "l4-3"]
    assert names("name=nothing-like-this") == []
    models = re.findall(r'<option value="([^"]+)"', client.get("/ui/cluster").text)
    assert {"NVIDIA-A100-SXM4-80GB", "NVIDIA-L4", "L4", "H100"} <= set(models)


def test_pages_split_the_sorted_nodes_and_build_only_their_rows(console: Any, monkeypatch: Any) -> None:
    service = make_service([node_obj(f"n-{i:02d}", gpus=4) for i in range(23)])
    built: list[str] = []
    real = console_cluster.node_row
    monkeypatch.setattr(console_cluster, "node_row", lambda s, name: built.append(name) or real(s, name))
    client = console(service)
    page = client.get("/ui/cluster?size=10&page=3").text
    assert re.findall(r'<tr data-node="([^"]+)"', page) == ["n-20", "n-21", "n-22"]
    assert built == ["n-20", "n-21", "n-22"]  # 23 nodes matched, 3 rows built
    assert by_id(page, "page-of").startswith("page 3 of 3")
    assert by_id(page, "total-gpus") == str(23 * 4)  # totals cover every matching node, not the page
    assert 'rel="prev"' in page and 'rel="next"' not in page
    past = client.get("/ui/cluster?size=10&page=7")
    assert past.status_code == 200 and "page 7 is past the last page (3)" in past.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("page=abc", "page must be a whole number, got &#39;abc&#39;"),
        ("page=-1", "page must be between 1 and"),
        ("page=0", "page must be between 1 and"),
        ("size=0", "size must be between 1 and 500"),
        ("size=100000", "size must be between 1 and 500"),
        ("size=1.5", "size must be a whole number"),
    ],
)
def test_bad_query_parameters_are_a_message_not_a_crash(console: Any, query: str, message: str) -> None:
    answer = console(example_service()).get(f"/ui/cluster?{query}")
    assert answer.status_code == 400
    assert message in by_id_html(answer.text, "error")


def by_id_html(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</div>', page, re.S)
    assert match, f"no element {element_id!r}"
    return match.group(1)


def test_a_shared_cell_shows_the_fraction_in_use() -> None:
    """Nothing shares GPUs yet; the cell is ready for it: its fill is the fraction used."""
    row = NodeRow("n", "", {}, [CellGroup(GPU, [Cell("shared", "gpu 0: 25% used by pod a/b", 0.25)])], 1, 0, 1, 0)
    page = ClusterPage(ClusterQuery(), [row], Totals(), 1, 1, 1, [], (GPU,))
    html = render("cluster.html", current="cluster", params={}, page=page, prev_link="", next_link="", built_ms=0.0)
    assert '<i class="cell shared" title="gpu 0: 25% used by pod a/b" style="--used: 25%"></i>' in html.body.decode()


def test_many_devices_are_counted_beyond_the_cells_drawn(console: Any) -> None:
    client = console(make_service([node_obj("big", gpus=console_cluster.MAX_CELLS + 6)]))
    row = block(client.get("/ui/cluster").text, "tr", "data-node", "big")
    assert len(cells(row, "free")) == console_cluster.MAX_CELLS and "+6" in row


# ---------------------------------------------------------------------------------------------- escaping
def test_hostile_names_labels_and_pasted_pods_are_text(console: Any) -> None:
    node = labelled("evil", {"team": HOSTILE, "nvidia.com/gpu.product": HOSTILE}, gpus=2)
    service = make_service([node])
    client = console(service)
    pod = pod_obj(f"x{HOSTILE}", gpus=1, namespace="ns-\"'><img src=x onerror=alert(2)>")
    client.post("/filter", content=filter_body(pod, ["evil"]))
    client.post("/bind", content=bind_body(pod, "evil"))
    assert "already bound" in client.post("/bind", content=bind_body(pod, "other")).json()["Error"]  # a last error
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    pages = {
        "cluster": client.get("/ui/cluster").text,
        "decisions": client.get("/ui/decisions").text,
        "model filter": client.get("/ui/cluster", params={"model": HOSTILE, "label": f"team={HOSTILE}"}).text,
        "explain": client.post("/ui/explain", data={"pod": json.dumps(pod_obj(HOSTILE + "</textarea>"))}).text,
        "health": client.get("/ui/health").text,
    }
    for name, page in pages.items():
        assert "<script>alert" not in page, name
        assert "<img src=x" not in page, name
        assert page.count("</textarea>") == (1 if name == "explain" else 0), name  # the form's own only
        assert escaped in page, name
    assert pages["model filter"].count('<tr data-node="evil"') == 1  # the label filter matched the raw value


# ---------------------------------------------------------------------------------------------- queues
def _queued_pod(name: str, uid: str) -> dict[str, Any]:
    pod: dict[str, Any] = json.loads((EXAMPLES / "requests" / "queued-pod.json").read_text())["Pod"]
    pod["metadata"].update(name=name, uid=uid)
    return pod


def test_queues_show_the_tree_with_debug_queues_numbers(console: Any) -> None:
    service = example_service()
    client = console(service)
    admitted = _queued_pod("finetune-0", "u-admitted")
    client.post("/filter", content=filter_body(admitted, ["dgx-a100-1"]))
    assert client.post("/bind", content=bind_body(admitted, "dgx-a100-1")).json()["Error"] == ""
    view = client.get("/debug/queues").json()
    page = client.get("/ui/queues").text
    assert [m for m in re.findall(r'data-queue="([^"]+)"', page)] == ["cohort/gpu-org", "cq/inference", "cq/research"]
    for key, entry in view["nodes"].items():
        node = block(page, "tbody", "data-queue", key)
        assert f"DRS {entry['weightedShareRounded']}‰" in node
        for r in entry["resources"]:
            row = block(node, "tr", "data-flavor", r["flavor"])
            assert re.search(rf'class="num quota">{r["subtreeQuota"]:g}<', row)
            assert re.search(rf'class="num usage">{r["usage"]:g}<', row)
            assert re.search(rf'class="num borrowed">{r["borrowed"]:g}<', row)
    research = {r["flavor"]: r for r in view["nodes"]["cq/research"]["resources"]}
    assert research["a100-reserved"]["usage"] == 2  # the admitted pod: the numbers above are not all zero
    assert "admitted" in block(page, "table", "id", "queue-decisions")


def test_pending_queued_pods_and_why(console: Any) -> None:
    service = example_service()
    waiting = _queued_pod("finetune-9", "u-waiting")
    service.cache.upsert_pod(pod_from_obj(waiting))
    client = console(service)
    page = client.get("/ui/queues").text
    row = block(page, "tr", "data-pod", "ml-train/finetune-9")
    assert "research" in row and "no decision yet" in row  # the LocalQueue training's ClusterQueue
    client.post("/filter", content=filter_body(waiting, ["cpu-1"]))  # no GPU there: filter leaves no node
    row = block(client.get("/ui/queues").text, "tr", "data-pod", "ml-train/finetune-9")
    assert "last filter: 0 node(s) passed" in row and "Insufficient nvidia.com/gpu" in row
    assert "/ui/explain?pod=u-waiting" in row
    assert "ml-train/llama-finetune-1" not in page  # pending, but in no queue


def test_kai_queues(console: Any) -> None:
    config = {
        "queues": {
            "kaiQueues": [
                {"metadata": {"name": "org"}, "spec": {"resources": {"gpu": {"quota": 8}}}},
                {"metadata": {"name": "qa"}, "spec": {"parentQueue": "org", "resources": {"gpu": {"quota": 3}}}},
            ]
        }
    }
    service = make_service([node_obj("n", gpus=8)], config=config)
    view = console(service).get("/debug/queues").json()["kai"]["queues"]
    page = console(service).get("/ui/queues").text
    qa = block(page, "tbody", "data-queue", "qa")
    assert f">{view['qa']['resources']['gpu']['deserved']:g}<" in qa
    assert "padding-left: 2.0em" in qa  # a child of org
    assert "No <code>queues:</code>" in console(make_service([node_obj("n")])).get("/ui/queues").text


# ---------------------------------------------------------------------------------------------- decisions
def test_decisions_newest_first_and_filtered(console: Any) -> None:
    service = make_service([node_obj("a", gpus=4), node_obj("b", gpus=4)])
    client = console(service)
    first, second = pod_obj("first", gpus=1), pod_obj("second", gpus=1)
    for pod, node in ((first, "a"), (second, "b")):
        client.post("/filter", content=filter_body(pod, ["a", "b"]))
        client.post("/bind", content=bind_body(pod, node))
    page = client.get("/ui/decisions").text
    order = re.findall(r'<tr data-verb="(\w+)" data-pod="([^"]+)"', page)
    expected = [(d["verb"], d["pod"]) for d in reversed(client.get("/debug").json()["decisions"])]
    assert order == expected and order[0] == ("bind", "default/second")
    by_node = re.findall(r'data-pod="([^"]+)"', client.get("/ui/decisions?node=a").text)
    assert by_node == ["default/first"]  # the bind to a; filters name no single node
    by_pod = re.findall(r'<tr data-verb="(\w+)" data-pod="([^"]+)"', client.get("/ui/decisions?pod=SECOND").text)
    assert by_pod == [("bind", "default/second"), ("filter", "default/second")]
    assert "no decision matches" in client.get("/ui/decisions?pod=nobody").text


# ---------------------------------------------------------------------------------------------- explain
def test_explain_form_gives_what_debug_explain_gives(console: Any) -> None:
    service = example_service()
    weights = {spec.plugin.name: spec.weight for spec in service.profile.scorers}
    client = console(service)
    body = (EXAMPLES / "requests" / "gpu-pod.json").read_bytes()
    expected = client.post("/debug/explain", content=body).json()
    for text in (body.decode(), json.dumps(json.loads(body)["Pod"])):  # ExtenderArgs, or the Pod alone
        page = client.post("/ui/explain", data={"pod": text}).text
        for node in expected["nodes"]:
            row = block(page, "tr", "data-node", node["name"])
            assert ('class="pass"' in row) == node["filter"]["passed"]
            if node["filter"]["passed"]:
                assert f'class="num score">{node["score"]}<' in row
            else:
                assert node["filter"]["reason"] in row
            for plugin, raw in node["scores"].items():
                weight = weights[plugin]
                if plugin in node["satOut"]:
                    assert f"<b>{plugin}</b> {raw} (sat out)" in row
                else:
                    assert f"<b>{plugin}</b> {raw} \u00d7 {weight} = {raw * weight}" in row


def test_explain_accepts_yaml_and_a_node_list(console: Any) -> None:
    client = console(example_service())
    text = (
        "kind: Pod\nmetadata: {name: y, namespace: default}\n"
        "spec:\n  containers:\n  - name: c\n    resources:\n      requests: {nvidia.com/gpu: 8}\n"
    )
    page = client.post("/ui/explain", data={"pod": text, "nodes": "dgx-a100-2, l4-1"}).text
    assert re.findall(r'<tr data-node="([^"]+)"', page) == ["dgx-a100-2", "l4-1"]
    assert "0 of 2 nodes pass" in page  # 8 GPUs: dgx-a100-2 has 6 free, l4-1 has 4 GPUs


def test_explain_a_pending_pod_of_the_cache(console: Any) -> None:
    service = example_service()
    client = console(service)
    pending = next(p for p in service.cache.pods.values() if p.key == "ml-train/llama-finetune-1")
    form = client.get("/ui/explain").text
    assert f'<option value="{pending.uid}"' in form
    page = client.get(f"/ui/explain?pod={pending.uid}").text
    assert "ml-train/llama-finetune-1:" in page
    passing = int(re.search(r"(\d+) of \d+ nodes pass", page).group(1))  # type: ignore[union-attr]
    free = client.get("/debug").json()["nodes"]
    assert passing == sum(1 for n in free.values() if n["free"][GPU] >= pending.resources.requests[GPU])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "paste a Pod"),
        ("foo: [", "neither JSON nor YAML"),
        ("[1, 2]", "expected a Pod object, got list"),
        ("kind: Deployment\nmetadata: {name: d}", "expected kind Pod, got &#39;Deployment&#39;"),
        ("kind: Pod\nspec: {}", "the pod needs metadata.name"),
        ("kind: Pod\nmetadata: {name: q}", "Pod.spec is missing"),
        (
            "kind: Pod\nmetadata: {name: q}\nspec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}",
            "lots",
        ),
        # Aliases would let a few KB expand to gigabytes of JSON on the event loop.
        ("a: &x [1, 2]\nb: [*x, *x]\nkind: Pod", "YAML aliases (*name) are not accepted here"),
        ("kind: Pod\nmetadata: {name: q, creationTimestamp: 2026-11-24}", "the YAML holds a value JSON cannot"),
    ],
)
def test_explain_refuses_bad_pods_with_a_message(console: Any, text: str, message: str) -> None:
    answer = console(example_service()).post("/ui/explain", data={"pod": text})
    assert answer.status_code == 400
    assert message in by_id_html(answer.text, "error")
    assert "<textarea" in answer.text  # the form is there to fix it


def test_explain_of_an_unknown_pending_pod_and_an_oversized_form(console: Any) -> None:
    client = console(make_service([node_obj("n")], config={"server": {"maxRequestBytes": 2048}}))
    answer = client.get("/ui/explain?pod=no-such-uid")
    assert answer.status_code == 400 and "no pod with uid" in answer.text
    answer = client.post("/ui/explain", data={"pod": "x" * 5000})
    assert answer.status_code == 400 and "exceeds the limit of 2048 bytes" in answer.text


# ---------------------------------------------------------------------------------------------- health
def test_health_shows_sources_errors_and_version(console: Any) -> None:
    service = example_service()
    service.cache.source("pods").last_error = "watch pods: 500 Internal Server Error"
    client = console(service)
    client.post("/bind", content=json.dumps({"PodName": "a", "PodNamespace": "b", "PodUID": "u", "Node": "l4-1"}))
    page = client.get("/ui/health").text
    debug = client.get("/debug").json()
    assert by_id(page, "ready") == ("ready" if debug["ready"] else "not ready")
    for name in debug["cache"]["sources"]:
        assert f'data-source="{name}"' in page
    errors = block(page, "table", "id", "errors")
    assert "watch pods: 500 Internal Server Error" in errors
    assert "pod b/a (uid u) is unknown to the extender" in errors
    assert by_id(page, "version") == __import__("importlib.metadata").metadata.version("kube-gpu-extender")


# ---------------------------------------------------------------------------------------------- guard
def test_the_console_has_the_debug_guard(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from app.http.auth import BearerTokenGuard, is_protected
    from app.http.server import create_app

    token = tmp_path / "token"
    token.write_text("t0k")
    with TestClient(BearerTokenGuard(create_app(example_service()), str(token))) as client:
        for path in ("/ui", "/ui/cluster", "/ui/explain", "/ui/static/console.css", "/debug/queues"):
            assert client.get(path).status_code == 401, path
            assert client.get(path, headers={"Authorization": "Bearer t0k"}).status_code == 200, path
        assert client.post("/ui/explain", data={"pod": "x"}).status_code == 401
        assert client.get("/healthz").status_code == 200
    assert not is_protected("/uix") and not is_protected("/filter") and is_protected("/debug/anything")


def test_amounts_read_as_an_operator_writes_them() -> None:
    from app.operator.console_views import detail_text, quantity

    assert quantity("cpu", 48000) == "48" and quantity("cpu", 2.5, milli_cpu=False) == "2.5"
    assert quantity("memory", 64 * 2**30) == "64Gi" and quantity("memory", 1000.0) == "1000"
    assert quantity("nvidia.com/gpu", 8.0) == "8"
    assert detail_text({"borrowing": False, "failed": {"Insufficient nvidia.com/gpu": 3}}) == (
        "borrowing: false, failed: Insufficient nvidia.com/gpu: 3"
    )


@pytest.mark.parametrize(
    "headers",
    [{"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}, {"Origin": "http://evil.example"}],
)
def test_explain_requested_by_another_site_is_refused(console: Any, headers: dict[str, str]) -> None:
    """A page of another site may not make the operator's browser run explains (they cost the event
    loop the verbs share); the console's own form and links are same-origin."""
    service = example_service()
    client = console(service)
    pending = next(p for p in service.cache.pods.values() if not p.node_name)
    for answer in (
        client.post("/ui/explain", data={"pod": json.dumps(pod_obj("q", gpus=1))}, headers=headers),
        client.get(f"/ui/explain?pod={pending.uid}", headers=headers),
    ):
        assert answer.status_code == 403 and "refused" in answer.text
    same = {"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"}
    answer = client.post("/ui/explain", data={"pod": json.dumps(pod_obj("q", gpus=1))}, headers=same)
    assert answer.status_code == 200
