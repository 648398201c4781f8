"""/bind: the one verb that writes. Admit, reserve (before the first await, so atomic with other
binds and filters on the event loop), pre-bind, the Binding, post-bind; a bind that fails for certain
gives back what the participants reserved."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from app.cluster.bindless import BindlessPods
from app.cluster.cache import ClusterCache
from app.cluster.writes import BindError
from app.http import wire
from app.operator.metrics import Metrics
from app.pipeline.framework import BindCycle, Pipeline, Refusal
from scoring.framework import PodInfo

__all__ = ["BindVerb", "Binder"]


class Binder(Protocol):
    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...


class BindVerb:
    """/bind over the cache and the pipeline's bind extension points; ``record`` keeps and logs a
    decision (``ExtenderService._record``), ``pending`` has the pods /filter saw before the watch."""

    def __init__(
        self,
        cache: ClusterCache,
        pipeline: Pipeline,
        binder: Binder,
        bindless: BindlessPods,
        metrics: Metrics,
        record: Callable[..., None],
        pending: Mapping[str, PodInfo],
    ) -> None:
        self.cache = cache
        self.pipeline = pipeline
        self.binder = binder
        self.bindless = bindless
        self.metrics = metrics
        self.record = record
        self.pending = pending
        self.binding: set[str] = set()  # UIDs of the pods a /bind is running for

    async def bind(self, body: bytes) -> dict[str, Any]:
        try:
            args = wire.decode_bind_args(body)
        except wire.WireError as exc:
            message = f"invalid bind request: {exc}"
            self.record("bind", "?", "error", level=logging.WARNING, msg=f"bind failed: {message}", error=str(exc))
            return wire.bind_result(message)
        key = f"{args.pod_namespace}/{args.pod_name}"
        pod = self.cache.pods.get(args.pod_uid) or self.pending.get(args.pod_uid)
        if pod is None:
            return self._bind_failed(key, "unknown-pod", f"pod {key} (uid {args.pod_uid}) is unknown to the extender")
        if (pod.namespace, pod.name) != (args.pod_namespace, args.pod_name):
            return self._bind_failed(key, "mismatch", f"pod uid {args.pod_uid} belongs to {pod.key}, not {key}")
        if pod.node_name == args.node:
            return self._already_bound(key, args.node)
        if pod.node_name:
            return self._bind_failed(key, "bound-elsewhere", f"pod {key} is already bound to node {pod.node_name}")
        if args.node not in self.cache.nodes:
            return self._bind_failed(key, "unknown-node", f"node {args.node} is unknown to the extender")
        if pod.uid in self.binding:
            # kube-scheduler retried after a timeout while the first /bind still runs: two binds of one
            # pod would undo each other's in-flight devices and claims.
            return self._bind_failed(key, "in-progress", f"a bind of pod {key} is still in progress")
        self.binding.add(pod.uid)
        try:
            return await self._bind(pod, key, args)
        finally:
            self.binding.discard(pod.uid)

    async def _bind(self, pod: PodInfo, key: str, args: wire.BindArgs) -> dict[str, Any]:
        cycle = BindCycle(pod, args.node)
        refusal = self._admit_and_reserve(cycle)
        if refusal is None:
            self.bindless.assumed(pod.uid, args.node)  # from here on a Binding to this node is ours
            for participant in self.pipeline.at("pre_bind", pod):
                refusal = await participant.pre_bind(cycle)
                if refusal is not None:
                    break
        if refusal is None:
            try:
                await self.binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
            except BindError as exc:
                if exc.bound_to == args.node:
                    return self._already_bound(key, args.node)
                message = f"binding pod {key} to node {args.node} failed: {exc}"
                refusal = Refusal(exc.kind, message, definite=exc.definite)
        if refusal is not None:
            if refusal.definite and cycle.reserved:
                await self._unreserve(cycle)
            return self._bind_failed(key, refusal.kind, refusal.message)
        self.record("bind", key, "bound", level=logging.INFO, msg=f"bound {key} to node {args.node}", node=args.node)
        for participant in self.pipeline.at("post_bind", pod):
            participant.post_bind(cycle)
        return wire.bind_result()

    def _admit_and_reserve(self, cycle: BindCycle) -> Refusal | None:
        """Admit, then reserve, all before the first await (atomic with other binds and filters); a
        failed reserve gives back what the participants before it reserved."""
        pod = cycle.pod
        for participant in self.pipeline.at("admit", pod):
            refusal = participant.admit(pod, cycle.node)
            if refusal is not None:
                return refusal
        for participant in self.pipeline.at("reserve", pod):
            refusal = participant.reserve(cycle)
            if refusal is not None:
                return refusal
            cycle.reserved.append(participant)
        return None

    async def _unreserve(self, cycle: BindCycle) -> None:
        """A bind that failed for certain: the participants give back what they reserved, last first,
        and a Binding to this node is no longer ours."""
        reserved, cycle.reserved = cycle.reserved, []
        for participant in reversed(reserved):
            await participant.unreserve(cycle)
        self.bindless.released(cycle.pod.uid, cycle.node)

    def _already_bound(self, key: str, node: str) -> dict[str, Any]:
        message = f"{key} was already bound to node {node} (a retried bind): success"
        self.record("bind", key, "already-bound", level=logging.INFO, msg=message, node=node)
        return wire.bind_result()

    def _bind_failed(self, key: str, kind: str, message: str) -> dict[str, Any]:
        self.metrics.bind_errors.labels(kind).inc()
        self.record("bind", key, "error", level=logging.WARNING, msg=f"bind failed: {message}", error=message)
        return wire.bind_result(message)
