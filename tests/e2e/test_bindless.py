"""A kube-scheduler profile without bindVerb: its own binder binds the pods the extender filtered, the
extender's fit re-check and assumption never run, and the extender tells the operator (issue 13, 5)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, Group
from tests.e2e.process import wait_for

NOBIND = "gpu-scheduler-nobind"
METRIC = "kube_gpu_extender_pods_bound_without_extender_total"


def _without_bind_verb(config: dict[str, Any]) -> None:
    """The shipped profile under another name, its extender entry without bindVerb (one instance: no
    leader election, deploy/rbac.yaml grants only the shipped lease)."""
    config["leaderElection"] = {"leaderElect": False}
    config["profiles"][0]["schedulerName"] = NOBIND
    for extender in config["extenders"]:
        extender.pop("bindVerb", None)


@pytest.fixture
def nobind_scheduler(cluster: Cluster) -> Iterator[str]:
    cluster.plane.start_scheduler(cluster.extender.port, name="kube-scheduler-nobind", edit=_without_bind_verb)
    try:
        yield NOBIND
    finally:
        cluster.plane.stop_component("kube-scheduler-nobind")
        cluster.restart_extender()  # the warning would otherwise stay in /readyz for the other tests


def test_pods_bound_without_bind_are_reported(group: Group, nobind_scheduler: str) -> None:
    extender = group.cluster.extender
    group.node("a")
    before = extender.metric(METRIC)

    group.pod("through-bind", gpus=1)  # the shipped profile: bound by /bind, not reported
    group.wait_bound("through-bind")
    group.pod("own-binder", gpus=1, scheduler=nobind_scheduler)
    group.wait_bound("own-binder")

    # Watch events arrive in order, so once the second pod is reported the first one was judged too.
    wait_for("the bind-less pod reported", lambda: extender.metric(METRIC) > before)
    assert extender.metric(METRIC) == before + 1
    debug = extender.get("/debug?nodes=false").json()["boundWithoutExtender"]
    assert debug["recent"][0]["pod"] == f"{group.name}/own-binder"
    assert debug["recent"][0]["node"] == group.nodes[0]
    ready = extender.get("/readyz")
    assert ready.status_code == 200
    assert "bound without the extender's /bind" in ready.json()["detail"]
    assert f"{group.name}/own-binder" in ready.json()["detail"]
