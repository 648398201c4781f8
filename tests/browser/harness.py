"""The browser tests' harness: the extender on the example snapshot, and Debian's headless Chromium.

The service is the real one (uvicorn on 127.0.0.1, an ephemeral port, in a thread) on
examples/cluster.yaml with examples/config-queues.yaml, plus a little activity so every view has
something to show: a queued pod admitted through /filter and /bind, a queued pod left pending
after a /filter that found no node, a pod assumed on a node (bound by us, not yet confirmed), and
three gangs: one planned on one node (a member bound, one binding, one held), one that fits nowhere
and one waiting for a member.

Chromium is /usr/bin/chromium driven through /usr/bin/chromedriver (Debian's ``chromium`` and
``chromium-driver``; CHROMIUM and CHROMEDRIVER override the paths). Selenium is given both paths,
so its driver manager never looks for a browser on the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.cluster.objects import pod_from_obj
from app.cluster.podgroups import policy_from_obj
from app.config import load_config
from app.http.server import create_app
from app.http.serving import build_server
from app.runtime import build_snapshot_runtime
from app.service import ExtenderService
from tests.app.serverutil import running

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
# Quiet, offline, throwaway: this machine reaches no browser services, and nothing may try.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)
ADMITTED = "finetune-0"  # a queued pod the extender binds during set-up
WAITING = "finetune-big"  # a queued pod that stays pending (8 GPUs fit nowhere after the admission)
ASSUMED = ("ml-train/llama-finetune-1", "l4-3")  # a pending pod of the example, assumed on a node
# Gangs (group key -> its PodGroup): planned on one node (3 x 2 GPUs: only dgx-a100-2 has 6 free),
# fitting nowhere (2 x 8 GPUs), waiting for its third member.
PLANNED, TOO_BIG, SHORT = "podgroup:ml-train/allreduce", "podgroup:ml-train/pretrain", "coscheduling:ml-train/sweep"
PODGROUPS: dict[str, dict[str, Any]] = {
    PLANNED: {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "allreduce", "namespace": "ml-train"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 3}},
            "schedulingConstraints": {"topology": [{"key": "kubernetes.io/hostname"}]},
        },
    },
    TOO_BIG: {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pretrain", "namespace": "ml-train"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    },
    SHORT: {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "sweep", "namespace": "ml-train"},
        "spec": {"minMember": 3},
    },
}


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"{path} not found: install Debian's {package} (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[dev]'"
    return None


def _queued_pod(name: str, uid: str, gpus: int) -> dict[str, Any]:
    pod: dict[str, Any] = json.loads((EXAMPLES / "requests" / "queued-pod.json").read_text())["Pod"]
    pod["metadata"].update(name=name, uid=uid)
    for container in pod["spec"]["containers"]:
        container["resources"] = {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)}}
    return pod


def _member(key: str, index: int, gpus: int) -> dict[str, Any]:
    """A pod of the group ``key``: a 1.36 PodGroup's member by spec.schedulingGroup, a coscheduling
    one by its label."""
    source, _, name = key.partition(":")
    namespace, _, group = name.partition("/")
    requests = {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer", "resources": {"requests": requests}}]}
    metadata: dict[str, Any] = {"name": f"{group}-{index}", "namespace": namespace, "uid": f"gang-{group}-{index}"}
    if source == "podgroup":
        spec["schedulingGroup"] = {"podGroupName": group}
    else:
        metadata["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}


GANG_MEMBERS = {
    PLANNED: [_member(PLANNED, i, 2) for i in range(3)],
    TOO_BIG: [_member(TOO_BIG, i, 8) for i in range(2)],
    SHORT: [_member(SHORT, i, 1) for i in range(2)],
}


@dataclass
class Extender:
    url: str
    service: ExtenderService

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as answer:
            return json.loads(answer.read())

    def post_json(self, path: str, body: Any) -> Any:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())


@contextlib.contextmanager
def example_extender() -> Iterator[Extender]:
    """The extender serving the example snapshot with the activity described above."""
    config = load_config(str(EXAMPLES / "config-queues.yaml"))
    service = build_snapshot_runtime(config, str(EXAMPLES / "cluster.yaml")).service
    waiting = _queued_pod(WAITING, "6f1d2c3b-0000-4000-8000-00000000b16", gpus=8)
    service.cache.upsert_pod(pod_from_obj(waiting))  # as the watch would deliver it
    pending = next(p for p in service.cache.pods.values() if p.key == ASSUMED[0])
    assert service.cache.assume(pending, ASSUMED[1]) is None
    for key, members in GANG_MEMBERS.items():
        service.cache.groups.upsert(policy_from_obj(PODGROUPS[key]))  # as the watches would deliver them
        for member in members:
            service.cache.upsert_pod(pod_from_obj(member))
    with running(build_server(create_app(service), config.server, "127.0.0.1", 0)) as server:
        extender = Extender(f"http://127.0.0.1:{server.port}", service)
        nodes = sorted(service.cache.nodes)
        admitted = _queued_pod(ADMITTED, "9d2f4c71-5e3a-4b8f-a1c2-7e6d5b4a3f21", gpus=2)
        extender.post_json("/filter", {"Pod": admitted, "NodeNames": nodes})
        meta = admitted["metadata"]
        bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": "dgx-a100-1"}
        error = extender.post_json("/bind", bind)["Error"]
        assert error == "", error
        extender.post_json("/filter", {"Pod": waiting, "NodeNames": nodes})
        _gang_activity(extender, server.servers[0].get_loop(), nodes)
        yield extender


def _gang_activity(extender: Extender, loop: asyncio.AbstractEventLoop, nodes: list[str]) -> None:
    """Each gang's first member through /filter; of the planned one, a member bound through /bind
    and one whose /bind is under way (its hold turned into an assumption, as /bind does before the
    binder writes)."""
    passed = {key: extender.post_json("/filter", {"Pod": m[0], "NodeNames": nodes}) for key, m in GANG_MEMBERS.items()}
    first, second, _ = GANG_MEMBERS[PLANNED]
    (node,) = passed[PLANNED]["NodeNames"]
    meta = first["metadata"]
    bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
    error = extender.post_json("/bind", bind)["Error"]
    assert error == "", error
    cache = extender.service.cache

    async def binding() -> str | None:  # on the server's loop, like the verbs: never beside them
        return cache.assume(cache.pods[second["metadata"]["uid"]], node)

    assert asyncio.run_coroutine_threadsafe(binding(), loop).result(10) is None


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A headless Chromium session (Selenium WebDriver) with its browser console log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="kge-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
