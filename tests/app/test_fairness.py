"""Queues in the verbs (app/pipeline/fairness.py over fairshare/): flavor rules in filter, FlavorFairness in
prioritize, fair-sharing victims in preempt, and what /debug shows (KAI queues: test_fairness_kai.py;
DRA devices: test_fairness_dra.py). Every expected number is worked by hand in a comment from the
reference (fair-sharing.md) or the example config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cluster.objects import node_from_obj, pod_from_obj
from app.config import ConfigError, ExtenderConfiguration, parse_config
from tests.conftest import (
    bind_body,
    cluster_queue,
    filter_body,
    in_queue,
    labelled,
    make_service,
    node_obj,
    pod_obj,
)

GPU = "nvidia.com/gpu"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fairshare.yaml"


def story1(**extra: Any) -> dict[str, Any]:
    section = yaml.safe_load(EXAMPLE.read_text())
    section["localQueues"].append(
        {"metadata": {"name": "lq-b", "namespace": "team-b"}, "spec": {"clusterQueue": "team-b"}}
    )
    return {"queues": section, **extra}


def fit_plus() -> dict[str, Any]:
    """The default profile's NodeResourcesFitPlus entry (weight 1)."""
    (plugin,) = [p for p in ExtenderConfiguration().plugins if p.name == "NodeResourcesFitPlus"]
    return plugin.model_dump()


STORY1_NODES = [
    labelled("spot-1", {"gpu-type": "a10", "lifecycle": "spot"}),
    labelled("h100-1", {"gpu-type": "h100"}, gpus=32),
]


# ---------------------------------------------------------------------------- filter: flavor rules
def test_flavor_taints_and_node_selector_decide_which_flavors_a_pod_may_use(client_for: Any) -> None:
    """A flavor whose taint neither it nor the pod tolerates is closed to the pod (unresolvable), and a
    nodeSelector on a flavor's label key must match that flavor's value; keys of no flavor are ignored."""
    section = yaml.safe_load(EXAMPLE.read_text())
    section["resourceFlavors"][1]["spec"].pop("tolerations")  # a10-spot: taint spot=true:NoSchedule, untolerated
    service = make_service(STORY1_NODES, [], config={"queues": section})
    client = client_for(service)
    names = ["spot-1", "h100-1"]

    plain = in_queue(pod_obj("p", gpus=1, namespace="team-a", uid="p"), "training")
    result = client.post("/filter", content=filter_body(plain, names)).json()
    assert result["NodeNames"] == ["h100-1"]
    assert "untolerated taint spot=true:NoSchedule of flavor a10-spot" in result["FailedAndUnresolvableNodes"]["spot-1"]

    tolerant = in_queue(pod_obj("t", gpus=1, namespace="team-a", uid="t"), "training")
    tolerant["spec"]["tolerations"] = [{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    assert client.post("/filter", content=filter_body(tolerant, names)).json()["NodeNames"] == names

    pinned = in_queue(pod_obj("s", gpus=1, namespace="team-a", uid="s"), "training")
    pinned["spec"]["tolerations"] = tolerant["spec"]["tolerations"]
    pinned["spec"]["nodeSelector"] = {"gpu-type": "a10", "zone": "z1"}  # zone: no flavor's key -> ignored
    result = client.post("/filter", content=filter_body(pinned, names)).json()
    assert result["NodeNames"] == ["spot-1"]
    assert (
        "nodeSelector gpu-type=a10 does not match flavor h100-reserved"
        in (result["FailedAndUnresolvableNodes"]["h100-1"])
    )


def test_required_affinity_is_matched_against_the_flavor_labels(client_for: Any) -> None:
    service = make_service(STORY1_NODES, [], config=story1())
    client = client_for(service)
    pod = in_queue(pod_obj("a", gpus=1, namespace="team-a", uid="a"), "training")
    term = {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["h100"]}]}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    result = client.post("/filter", content=filter_body(pod, ["spot-1", "h100-1"])).json()
    assert result["NodeNames"] == ["h100-1"]
    assert "required node affinity does not match flavor a10-spot" in result["FailedAndUnresolvableNodes"]["spot-1"]


def test_a_pod_naming_a_missing_local_queue_is_rejected_everywhere(client_for: Any) -> None:
    service = make_service(STORY1_NODES, [], config=story1())
    pod = in_queue(pod_obj("lost", gpus=1, namespace="team-a", uid="lost"), "no-such-queue")
    result = client_for(service).post("/filter", content=filter_body(pod, ["spot-1", "h100-1"])).json()
    assert result["NodeNames"] == []
    assert set(result["FailedAndUnresolvableNodes"].values()) == {"LocalQueue team-a/no-such-queue does not exist"}


def test_malformed_tolerations_of_a_queued_pod_get_a_clear_error(client_for: Any) -> None:
    service = make_service(STORY1_NODES, [], config=story1())
    pod = in_queue(pod_obj("bad", gpus=1, namespace="team-a", uid="bad"), "training")
    pod["spec"]["tolerations"] = [{"operator": "Equal", "value": "x"}]
    result = client_for(service).post("/filter", content=filter_body(pod, ["spot-1"])).json()
    assert "Pod.spec.tolerations[0].operator: must be Exists when key is empty" in result["Error"]


def test_admitted_usage_keeps_its_flavor_when_the_node_is_relabelled(client_for: Any) -> None:
    """Kueue records a workload's flavors at admission: a node moved from a10 to h100 labels leaves its
    running pods counted against a10-spot (also after a configuration reload), while new pods see the
    node as h100-reserved."""
    running = in_queue(pod_obj("b", gpus=2, node="n", namespace="team-b", uid="b", phase="Running"), "lq-b")
    service = make_service([labelled("n", {"gpu-type": "a10", "lifecycle": "spot"})], [running], config=story1())
    usage = service.queue_usage
    assert usage is not None and usage.usage["team-b"] == {("a10-spot", GPU): 2.0}
    service.cache.upsert_node(node_from_obj(labelled("n", {"gpu-type": "h100"})))
    service.cache.upsert_pod(pod_from_obj(running))  # a later event of the same pod
    assert usage.usage["team-b"] == {("a10-spot", GPU): 2.0}
    service.fairness.reconfigure(service.fairness.config)
    assert service.queue_usage.usage["team-b"] == {("a10-spot", GPU): 2.0}
    # Filter and explain see the new flavor (signatures are kept at cache-update time).
    pod = in_queue(pod_obj("a", gpus=1, namespace="team-a", uid="a"), "training")
    (node,) = client_for(service).post("/debug/explain", content=filter_body(pod, ["n"])).json()["nodes"]
    assert node["fairness"]["flavors"] == {GPU: "h100-reserved"}
    service.cache.delete_node("n")
    assert service.fairness.filter(pod_from_obj(pod), ["n"]) == {}  # unknown to the cache: no queue verdict


def test_usage_counts_the_flavor_admission_chose(client_for: Any) -> None:
    """Two flavors cover the same nodes; the first is tainted and the pod does not tolerate it. Bind
    admits the pod under the second, and usage counts it there (not under the first flavor whose
    labels the node also carries)."""
    flavors = [
        {"metadata": {"name": name}, "spec": {"nodeLabels": {"pool": "p"}, **spec}}
        for name, spec in (
            ("reserved", {"nodeTaints": [{"key": "reserved", "value": "yes", "effect": "NoSchedule"}]}),
            ("open", {}),
        )
    ]
    queue = {
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": f, "resources": [{"name": GPU, "nominalQuota": 8}]} for f in ("reserved", "open")
                    ],
                }
            ]
        },
    }
    local = {"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}}
    config = {"queues": {"resourceFlavors": flavors, "clusterQueues": [queue], "localQueues": [local]}}
    service = make_service([labelled("n", {"pool": "p"})], [], config=config)
    client = client_for(service)
    pod = in_queue(pod_obj("x", gpus=2, namespace="ns", uid="x"), "lq")
    assert client.post("/filter", content=filter_body(pod, ["n"])).json()["NodeNames"] == ["n"]
    assert client.post("/bind", content=bind_body(pod, "n")).json()["Error"] == ""
    assert service.queue_usage is not None and service.queue_usage.usage["cq"] == {("open", GPU): 2.0}
    assert service.fairness.decisions[-1]["flavors"] == {GPU: "open"}


# ---------------------------------------------------------------------------- prioritize: FlavorFairness
def test_flavor_fairness_prefers_non_borrowing_earlier_flavors(client_for: Any) -> None:
    """team-a, 2 GPUs, nothing in use. h100-reserved is its first flavor and within nominal: 100 -> 10.
    a10-spot borrows: weighted share after admission = 2*1 / (8 h100 * 8 + 12 a10 * 1) * 1000 = 26.3
    per-mille (team-b lends 12 of its 16 a10) -> 49 - floor(26.3 * 49 / 1000) = 48: below the best of the two
    candidates, so priority 0 (the Candidates scale: best 10, worst 0)."""
    plugins = [fit_plus(), {"name": "FlavorFairness", "weight": 3}]
    service = make_service(STORY1_NODES, [], config=story1(plugins=plugins))
    client = client_for(service)
    pod = in_queue(pod_obj("a", gpus=2, namespace="team-a", uid="a"), "training")
    body = filter_body(pod, ["spot-1", "h100-1"])
    alone = client.post("/prioritize/FlavorFairness", content=body).json()
    assert alone == [{"Host": "h100-1", "Score": 10}]  # spot-1's 0 is left out
    explained = {n["name"]: n for n in client.post("/debug/explain", content=body).json()["nodes"]}
    assert explained["h100-1"]["scores"]["FlavorFairness"] == 100
    assert explained["spot-1"]["scores"]["FlavorFairness"] == 48
    assert explained["spot-1"]["fairness"]["borrowing"] is True
    assert explained["spot-1"]["fairness"]["flavors"] == {GPU: "a10-spot"}
    # Combined by weight: (fit + 3 * fairness) // 4, as /debug/explain computes it node by node.
    combined = {e["Host"]: e["Score"] for e in client.post("/prioritize", content=body).json()}
    for name, node in explained.items():
        fit = node["scores"]["NodeResourcesFitPlus"]
        assert node["nodeScore"] == (fit + 3 * node["scores"]["FlavorFairness"]) // 4
        assert combined.get(name, 0) == node["score"]
    assert combined["h100-1"] > combined.get("spot-1", 0)


def test_flavor_fairness_sits_out_for_pods_without_a_queue(client_for: Any) -> None:
    """Unqueued pods are scored as if FlavorFairness were not in the profile (kube-scheduler's PreScore Skip)."""
    with_plugin = make_service(
        STORY1_NODES,
        [],
        config=story1(plugins=[fit_plus(), {"name": "FlavorFairness", "weight": 5}]),
    )
    without = make_service(STORY1_NODES, [], config=story1(plugins=[fit_plus()]))
    pod = pod_obj("free", gpus=3, namespace="team-a", uid="free")
    body = filter_body(pod, ["spot-1", "h100-1"])
    scores = client_for(with_plugin).post("/prioritize", content=body).json()
    assert scores == client_for(without).post("/prioritize", content=body).json()
    assert len(scores) == 1 and scores[0]["Score"] == 10  # the nodes differ (the other's 0 is left out)


def test_flavor_fairness_config_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"plugins\[0\].name: FlavorFairness needs the queues section"):
        parse_config({"plugins": [{"name": "FlavorFairness"}]})
    with pytest.raises(ConfigError, match=r"plugins\[0\].args: FlavorFairness takes no args"):
        parse_config({**story1(), "plugins": [{"name": "FlavorFairness", "args": {"x": 1}}]})


# ---------------------------------------------------------------------------- preempt: fair-sharing victims
COHORT_9 = {
    "resourceFlavors": [{"metadata": {"name": "default"}}],
    "cohorts": [
        {
            "metadata": {"name": "c"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [{"name": "default", "resources": [{"name": GPU, "nominalQuota": 9}]}],
                    }
                ]
            },
        }
    ],
    "clusterQueues": [
        cluster_queue(name, "default", 0, cohortName="c", preemption={"reclaimWithinCohort": "Any"})
        for name in ("cq-p1", "cq-p2")
    ],
    "localQueues": [
        {"metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": f"cq-{ns}"}} for ns in ("p1", "p2")
    ],
}


def running(
    prefix: str, count: int, *, gpus: int, node: str, namespace: str, queue: str, first_priority: int
) -> list[dict[str, Any]]:
    """``count`` running GPU-only pods of one queue on one node, priorities rising from ``first_priority``."""
    return [
        in_queue(
            pod_obj(
                f"{prefix}{i}",
                gpus=gpus,
                cpu=None,
                memory=None,
                node=node,
                namespace=namespace,
                uid=f"{prefix}{i}",
                phase="Running",
                priority=first_priority + i,
            ),
            queue,
        )
        for i in range(count)
    ]


def cq_p1_workers() -> list[dict[str, Any]]:
    """cq-p1's 4 x 2 GPUs on n1, priorities 1..4, so the candidate order (lower priority first) is w0..w3."""
    return running("w", 4, gpus=2, node="n1", namespace="p1", queue="lq", first_priority=1)


def preempt_service() -> Any:
    """The reference's worked example (section 5.2) on one node: cohort 9 GPUs, cq-p1 runs 4 x 2 on n1 (9 GPUs)."""
    workers = cq_p1_workers()
    other = pod_obj("x", gpus=4, node="n2", uid="x", phase="Running")  # no queue
    return make_service(
        [node_obj("n1", gpus=9), node_obj("n2", gpus=4)], [*workers, other], config={"queues": COHORT_9}
    )


def preempt(service: Any, gpus: int, victims: dict[str, list[str]]) -> dict[str, Any]:
    pod = in_queue(pod_obj(f"in-{gpus}", gpus=gpus, cpu=None, memory=None, namespace="p2", priority=10), "lq")
    body = {
        "Pod": pod,
        "NodeNameToMetaVictims": {
            n: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0} for n, uids in victims.items()
        },
    }
    answer: dict[str, Any] = service.preempt(json.dumps(body).encode())
    return answer["NodeNameToMetaVictims"]


def test_preempt_replaces_victims_by_the_fair_sharing_choice() -> None:
    """Incoming 5 in cq-p2: w0 passes LessThanOrEqualToFinalShare (5/9 = 555.6 <= 6/9 = 666.7), w1 only
    LessThanInitialShare (555.6 < 666.7) -> victims w0, w1 (sent highest priority first: w1, w0),
    which also free 4 of n1's GPUs (1 free + 4 >= 5). The scheduler had proposed all four."""
    service = preempt_service()
    answer = preempt(service, 5, {"n1": ["w0", "w1", "w2", "w3"]})
    assert answer == {"n1": {"Pods": [{"UID": "w1"}, {"UID": "w0"}], "NumPDBViolations": 0}}
    decision = service.fairness.decisions[-1]
    assert decision["verb"] == "preempt" and decision["node"] == "n1"
    assert [(v["uid"], v["reason"]) for v in decision["victims"]] == [
        ("w1", "InCohortFairSharing"),
        ("w0", "InCohortFairSharing"),
    ]


def test_preempt_drops_a_node_without_a_valid_fair_sharing_set() -> None:
    """Incoming 6: w0 passes S2-a (666.7 <= 666.7) but nothing passes for a second victim (4/9 = 444 <
    666.7 fails S2-a; 666.7 < 666.7 fails S2-b) -> no preemption at all, so n1 is dropped."""
    service = preempt_service()
    assert preempt(service, 6, {"n1": ["w0", "w1", "w2", "w3"]}) == {}
    assert "no fair-sharing victims" in service.fairness.decisions[-1]["reason"]


def test_preempt_keeps_the_schedulers_victims_when_quota_is_not_the_problem() -> None:
    """Incoming 1: the cohort has 9 - 8 = 1 GPU available, so the quota fits; only node room is
    missing and the scheduler's victims are judged by node fit as without queues."""
    service = preempt_service()
    answer = preempt(service, 1, {"n1": ["w3"], "n2": ["x"]})
    assert answer == {
        "n1": {"Pods": [{"UID": "w3"}], "NumPDBViolations": 0},
        "n2": {"Pods": [{"UID": "x"}], "NumPDBViolations": 0},
    }


def test_preempt_drops_a_node_when_the_queue_victims_do_not_free_the_node() -> None:
    """Same quota as the 5-GPU case, but n1 has only 8 GPUs: w0 + w1 free 4 < 5 -> dropped."""
    service = make_service([node_obj("n1", gpus=8)], cq_p1_workers(), config={"queues": COHORT_9})
    assert preempt(service, 5, {"n1": ["w0", "w1", "w2", "w3"]}) == {}


# ---------------------------------------------------------------------------- /debug
def test_debug_queues_lists_filter_decisions_with_reasons(client_for: Any) -> None:
    bound = [in_queue(pod_obj("b1", gpus=8, node="h100-1", namespace="team-b", uid="b1", phase="Running"), "lq-b")]
    service = make_service(STORY1_NODES, bound, config=story1())  # h100-1 has room: quota decides
    client = client_for(service)
    pod = in_queue(pod_obj("a1", gpus=4, namespace="team-a", uid="a1"), "training")
    client.post("/filter", content=filter_body(pod, ["spot-1", "h100-1"]))
    decisions = client.get("/debug/queues").json()["decisions"]
    assert decisions[-1]["verb"] == "filter" and decisions[-1]["queue"] == "team-a"
    assert decisions[-1]["rejected"] == 1 and decisions[-1]["of"] == 2
    (reason,) = decisions[-1]["reasons"]
    assert reason.startswith("insufficient quota for nvidia.com/gpu in flavor h100-reserved")


def test_bind_rechecks_the_quota_that_filter_saw(client_for: Any) -> None:
    """kube-scheduler filters the next pod before the previous pod's bind arrives: two 5-GPU team-a pods
    both pass filter on h100-1 (team-a may use its 4 + team-b's idle 4 = 8), but only the first bind
    may take the quota; the second is refused with the reason, and usage stays at 5."""
    service = make_service(STORY1_NODES, [], config=story1())
    client = client_for(service)
    first, second = (in_queue(pod_obj(n, gpus=5, namespace="team-a", uid=n), "training") for n in ("x", "y"))
    for pod in (first, second):
        assert client.post("/filter", content=filter_body(pod, ["h100-1"])).json()["NodeNames"] == ["h100-1"]
    assert client.post("/bind", content=bind_body(first, "h100-1")).json()["Error"] == ""
    error = client.post("/bind", content=bind_body(second, "h100-1")).json()["Error"]
    assert "can no longer use node h100-1: insufficient quota for nvidia.com/gpu in flavor h100-reserved" in error
    assert service.queue_usage is not None and service.queue_usage.usage["team-a"] == {("h100-reserved", GPU): 5.0}
    admitted, refused = list(service.fairness.decisions)[-2:]
    assert (admitted["action"], admitted["pod"], admitted["flavors"], admitted["borrowing"]) == (
        "admitted",
        "team-a/x",
        {GPU: "h100-reserved"},
        True,  # 5 > team-a's nominal 4: one h100 borrowed from team-b
    )
    assert (refused["action"], refused["pod"]) == ("refused", "team-a/y")
    # A retried bind of the first pod still succeeds (it is already bound there).
    assert client.post("/bind", content=bind_body(first, "h100-1")).json()["Error"] == ""


def test_story1_team_a_reclaims_its_h100s_from_borrowing_team_b() -> None:
    """Story 1 through preempt. team-b runs 8 one-GPU pods (priorities 0..7) on an 8-GPU h100 node: 4 of
    its own quota plus team-a's 4, borrowed. team-a asks for 4: within its nominal 4, so Kueue's
    within-nominal reclamation takes team-b's candidates in order (lower priority first) without the
    share rules until the 4 fit: b0..b3, reason InCohortReclamation, sent highest priority first."""
    pods = running("b", 8, gpus=1, node="h100-8", namespace="team-b", queue="lq-b", first_priority=0)
    service = make_service([labelled("h100-8", {"gpu-type": "h100"}, gpus=8)], pods, config=story1())
    pod = in_queue(pod_obj("a", gpus=4, cpu=None, memory=None, namespace="team-a", priority=100), "training")
    body = {
        "Pod": pod,
        "NodeNameToMetaVictims": {"h100-8": {"Pods": [{"UID": f"b{i}"} for i in range(8)], "NumPDBViolations": 0}},
    }
    answer = service.preempt(json.dumps(body).encode())["NodeNameToMetaVictims"]
    assert answer == {"h100-8": {"Pods": [{"UID": f"b{i}"} for i in (3, 2, 1, 0)], "NumPDBViolations": 0}}
    reasons = {v["reason"] for v in service.fairness.decisions[-1]["victims"]}
    assert reasons == {"InCohortReclamation"}


def test_flavor_fairness_sits_out_for_a_queued_pod_requesting_nothing_covered(client_for: Any) -> None:
    """team-a covers only GPUs: a CPU-only pod of team-a has no flavor to prefer, so the profile scores
    it exactly as without FlavorFairness."""
    plugins = [fit_plus(), {"name": "FlavorFairness", "weight": 5}]
    with_plugin = make_service(STORY1_NODES, [], config=story1(plugins=plugins))
    without = make_service(STORY1_NODES, [], config=story1(plugins=[fit_plus()]))
    pod = in_queue(pod_obj("cpu-only", cpu="4", namespace="team-a", uid="cpu-only"), "training")
    body = filter_body(pod, ["spot-1", "h100-1"])
    assert client_for(with_plugin).post("/prioritize", content=body).json() == (
        client_for(without).post("/prioritize", content=body).json()
    )


def test_bundled_queue_example_answers_as_the_readme_says(client_for: Any) -> None:
    """examples/config-queues.yaml on examples/cluster.yaml, the README's queue walk-through. research
    has 4 reserved A100s (first flavor, no borrowing: 100 -> 10) and borrows L4s: 2 * 1 / (16 A100 * 8
    + 12 L4 * 1) * 1000 = 14.3 per-mille -> 49 - floor(14.3 * 49 / 1000) = 49. CPU and DRA nodes
    have no flavor of research -> 0 (they fail the GPU check anyway). Over these candidates (best 100,
    worst 0): 10 for the A100s, 10 - ceil(10 * 51 / 100) = 4 for the L4s."""
    from app.config import load_config
    from app.runtime import build_snapshot_runtime

    root = EXAMPLE.parent
    runtime = build_snapshot_runtime(load_config(root / "config-queues.yaml"), str(root / "cluster.yaml"))
    client = client_for(runtime.service)
    request = (root / "requests" / "queued-pod.json").read_bytes()
    assert client.post("/filter", content=request).json()["NodeNames"] == [
        "dgx-a100-1",
        "dgx-a100-2",
        "l4-1",
        "l4-2",
        "l4-3",
    ]
    scores = {e["Host"]: e["Score"] for e in client.post("/prioritize/FlavorFairness", content=request).json()}
    # the CPU and DRA nodes score 0: left out
    assert scores == {"dgx-a100-1": 10, "dgx-a100-2": 10, "l4-1": 4, "l4-2": 4, "l4-3": 4}
    bind = (root / "requests" / "bind-queued-pod.json").read_bytes()
    assert client.post("/bind", content=bind).json()["Error"] == ""
    research = client.get("/debug/queues").json()["nodes"]["cq/research"]
    a100 = next(r for r in research["resources"] if r["flavor"] == "a100-reserved")
    assert (a100["usage"], a100["available"], research["borrowing"]) == (2.0, 14.0, False)


def test_metrics_export_each_queues_weighted_share(client_for: Any) -> None:
    """team-a borrows 4 a10 (nominal 0): 4 * 1 / 76 * 1000 = 52.6 per-mille, as in test_queues."""
    bound = [in_queue(pod_obj("a", gpus=4, node="spot-1", namespace="team-a", uid="a", phase="Running"), "training")]
    service = make_service(STORY1_NODES, bound, config=story1())
    text = client_for(service).get("/metrics").text
    line = next(
        x for x in text.splitlines() if x.startswith('kube_gpu_extender_queue_weighted_share{queue="cq/team-a"}')
    )
    assert float(line.split()[-1]) == pytest.approx(4000 / 76)
    assert 'kube_gpu_extender_queue_weighted_share{queue="cq/team-b"} 0.0' in text
    team_a = client_for(service).get("/debug/queues").json()["nodes"]["cq/team-a"]
    assert team_a["weightedShareRounded"] == 53  # ceil(52.6), Kueue's status value
    assert team_a["borrowedResources"] == [{"flavor": "a10-spot", "resource": GPU}]


def test_pods_listed_before_their_node_count_once_the_node_arrives() -> None:
    """After a restart the pod watch may sync before the node watch: a pod on a node not known yet gets
    no flavor, and must be counted when the node arrives (it was lost before, so a restarted extender
    under-counted quota)."""
    service = make_service([], cq_p1_workers(), config={"queues": COHORT_9})
    assert service.fairness is not None
    assert service.fairness.usage.usage.get("cq-p1", {}) == {}
    service.cache.upsert_node(node_from_obj(node_obj("n1", gpus=9)))
    assert service.fairness.usage.usage["cq-p1"] == {("default", GPU): 8.0}
