"""Locust: kube-scheduler's per-pod sequence against a running extender (nodeCacheCapable: true).

Why a sequence and not single verbs: bind re-checks the fit against the assume ledger, so only
filter -> prioritize -> bind with concurrent "schedulers" exercises the interleavings that matter
(two pods racing for the last GPUs of a node). Each simulated pod gets a fresh UID; filter memoises
it, so bind can assume it before a watch would deliver it.

Per pod: filter over every node; no feasible node -> "filter (unschedulable)" and stop (the
scheduler would requeue it); one feasible node -> bind straight away (kube-scheduler skips
prioritize then); else prioritize on the feasible names and bind to the best score (ties at random).
A bind answering "no longer fits" is the expected loser of a race or a full cluster: it is
reported as "bind (full)", not as a failure. Only a non-empty top-level ``Error`` fails a filter
(per-node "Insufficient ..." reasons are normal answers).

Node names come from ``GET /debug?nodes=true`` once at start, or from ``KGE_NODE_NAMES``
(comma separated). ``KGE_WAIT`` sets seconds between pods per user (default 0: back to back).
``KGE_PODS_FILE`` (a JSON list of pods) makes users schedule those pods, in order, instead of fresh
ones: in cluster mode a Binding needs a pod that exists in the API server (``bench.load`` creates
them); a user stops when the list is used up.
Run from the repository root, bounded and headless:

    .venv/bin/kube-gpu-extender serve --snapshot examples/cluster.yaml --port 8888 &
    .venv/bin/locust -f bench/locustfile.py --headless -u 4 -r 4 --run-time 60s --only-summary
"""

from __future__ import annotations

import json
import os
import random
import urllib.request
import uuid
from typing import Any

from locust import FastHttpUser, constant, events, task
from locust.env import Environment
from locust.exception import StopUser

from bench.cluster import encode
from bench.request_bodies import PENDING_KINDS, bind_body, chosen_host, filter_body_names, pending_pod

DEFAULT_HOST = "http://127.0.0.1:8888"
HEADERS = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"}
KIND_WEIGHTS = {"gpu-1": 50, "gpu-2": 25, "gpu-8": 5, "cpu": 20}  # mostly inference, some training
TEMPLATES = {kind: pending_pod(kind) for kind in PENDING_KINDS}
_RNG = random.Random()  # ties among the best-scored nodes, as kube-scheduler breaks them
NODE_NAMES: list[str] = []
PODS: list[dict[str, Any]] = []  # from KGE_PODS_FILE: users take them in order (greenlets: no lock needed)


def fetch_node_names(host: str) -> list[str]:
    """``KGE_NODE_NAMES`` if set, else every node the extender's cache knows, from /debug."""
    configured = os.environ.get("KGE_NODE_NAMES", "")
    if configured:
        return [name for name in configured.split(",") if name]
    with urllib.request.urlopen(f"{host.rstrip('/')}/debug?nodes=true&decisions=0", timeout=60) as response:
        return sorted(json.load(response)["nodes"])


@events.test_start.add_listener
def _load_node_names(environment: Environment, **_: Any) -> None:
    NODE_NAMES[:] = fetch_node_names(environment.host or DEFAULT_HOST)
    if os.environ.get("KGE_PODS_FILE"):
        with open(os.environ["KGE_PODS_FILE"]) as pods:
            PODS[:] = reversed(json.load(pods))


def new_pod(kind: str) -> dict[str, Any]:
    """A fresh pending pod of ``kind``: the template with a new UID and name."""
    uid = str(uuid.uuid4())
    template = TEMPLATES[kind]
    app = template["metadata"]["labels"]["app.kubernetes.io/name"]
    return {**template, "metadata": {**template["metadata"], "uid": uid, "name": f"{app}-{uid[:13]}"}}


class Scheduler(FastHttpUser):
    """One scheduling loop; several users are several schedulers (or a burst) sharing the extender."""

    host = DEFAULT_HOST
    wait_time = constant(float(os.environ.get("KGE_WAIT", "0")))

    def on_start(self) -> None:
        if not NODE_NAMES:  # test_start did not run here (e.g. a late worker)
            NODE_NAMES[:] = fetch_node_names(self.host or DEFAULT_HOST)

    @task
    def schedule_one_pod(self) -> None:
        if os.environ.get("KGE_PODS_FILE"):
            if not PODS:
                raise StopUser()
            pod = PODS.pop()
        else:
            pod = new_pod(random.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0])
        feasible = self._filter(pod)
        if not feasible:
            return
        node = feasible[0] if len(feasible) == 1 else self._prioritize(pod, feasible)
        if node:
            self._bind(pod, node)

    def _post(self, verb: str, body: bytes) -> Any:
        """POST a verb; the caller decides success, failure or a more precise request name."""
        session: Any = self.client  # locust types ``data`` as str or dict; bytes go out as they are
        return session.post(f"/{verb}", data=body, headers=HEADERS, name=verb, catch_response=True)

    def _filter(self, pod: dict[str, Any]) -> list[str]:
        body = encode(filter_body_names(pod, NODE_NAMES))
        with self._post("filter", body) as resp:
            result = _json(resp.content)
            if not isinstance(result, dict) or not isinstance(result.get("NodeNames", []), list | None):
                resp.failure(f"not an ExtenderFilterResult: {resp.content[:200]!r}")
                return []
            if result.get("Error"):
                resp.failure(f"Error: {result['Error']}")
                return []
            feasible: list[str] = result.get("NodeNames") or []
            if not feasible:
                resp.request_meta["name"] = "filter (unschedulable)"
            return feasible

    def _prioritize(self, pod: dict[str, Any], feasible: list[str]) -> str:
        body = encode(filter_body_names(pod, feasible))
        with self._post("prioritize", body) as resp:
            node = chosen_host(_json(resp.content), feasible, _RNG)
            if node is None:
                resp.failure(f"not a HostPriorityList for {len(feasible)} nodes: {resp.content[:200]!r}")
                return ""
            return node

    def _bind(self, pod: dict[str, Any], node: str) -> None:
        body = encode(bind_body(pod, node))
        with self._post("bind", body) as resp:
            result = _json(resp.content)
            error = result.get("Error") if isinstance(result, dict) else f"not JSON: {resp.content[:200]!r}"
            if error and "no longer fits" in error:
                resp.request_meta["name"] = "bind (full)"  # lost a race or the cluster is full: expected
            elif error:
                resp.failure(f"Error: {error}")


def _json(content: bytes | None) -> Any:
    try:
        return json.loads(content or b"")
    except ValueError:
        return None
