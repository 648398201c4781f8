"""The kube-scheduler extender v1 wire format (k8s.io/kube-scheduler/extender/v1).

The Go types have no JSON tags, so kube-scheduler sends Go field names and matches keys
case-insensitively when decoding. We accept any key case and always answer with the Go names.
Bodies are decoded with msgspec (a 5,000-node NodeList in ~13 ms) and node objects are echoed back
as ``msgspec.Raw`` without re-encoding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from app.http import go_layout
from app.http.answers import host_priority_raw, node_reasons_raw

__all__ = [
    "BindArgs",
    "Candidates",
    "ExtenderArgs",
    "NodeReasons",
    "PreemptArgs",
    "WireError",
    "bind_result",
    "decode_bind_args",
    "decode_extender_args",
    "decode_pod",
    "decode_preempt_args",
    "encode",
    "encode_debug",
    "filter_result",
    "host_priority_list",
    "host_priority_raw",
    "meta_victims",
    "node_list",
    "node_reasons_raw",
    "pod_identity",
    "preempt_result",
]


class WireError(ValueError):
    """A request body kube-scheduler would never send; answered as ``Error``."""


class _NodeMeta(msgspec.Struct):
    name: str = ""


class _NodeStatus(msgspec.Struct):
    allocatable: dict[str, Any] | None = None


class _Node(msgspec.Struct):
    """Just what the extender reads from a node in the request."""

    metadata: _NodeMeta | None = None
    status: _NodeStatus | None = None


class _NodeList(msgspec.Struct):
    items: list[msgspec.Raw] | None = None


@dataclass(slots=True)
class RequestNode:
    """A node of a NodeList request: its name, and its bytes to echo back unchanged.

    The allocatable is decoded only when asked (a node the cache does not know), so a 10 MB
    NodeList is not parsed node by node for nothing.
    """

    name: str
    raw: msgspec.Raw
    _allocatable: Mapping[str, Any] | None = None
    _decoded: bool = False

    @property
    def allocatable(self) -> Mapping[str, Any] | None:
        if not self._decoded:
            node = _decode(_decoder_node, self.raw, f"node {self.name}")
            self._allocatable = node.status.allocatable if node.status else None
            self._decoded = True
        return self._allocatable


@dataclass(slots=True)
class ExtenderArgs:
    """``ExtenderArgs``: exactly one of ``node_names`` (nodeCacheCapable) or ``nodes`` is set.

    ``pod_raw`` is the Pod's JSON as sent: kube-scheduler sends the same bytes to filter and
    prioritize, so the service memoises the parsed pod by them.
    """

    pod_raw: bytes
    node_names: list[str] | None = None
    nodes: list[RequestNode] | None = None


@dataclass(slots=True)
class Victims:
    uids: list[str]
    pods: list[dict[str, Any]] = field(default_factory=list)  # full pods, non-cache mode only
    num_pdb_violations: int = 0


@dataclass(slots=True)
class PreemptArgs:
    pod: dict[str, Any]
    victims: dict[str, Victims]


@dataclass(slots=True)
class BindArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


_decoder_top = msgspec.json.Decoder(dict[str, msgspec.Raw])
_decoder_names = msgspec.json.Decoder(list[str] | None)
_decoder_node_list = msgspec.json.Decoder(_NodeList | None)
_decoder_node = msgspec.json.Decoder(_Node)
_decoder_any = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def _top(body: bytes) -> dict[str, msgspec.Raw]:
    if not body:
        raise WireError("empty request body")
    try:
        top = _decoder_top.decode(body)
    except msgspec.ValidationError:
        raise WireError("request body must be a JSON object") from None
    except msgspec.DecodeError as exc:
        raise WireError(f"malformed JSON: {exc}") from None
    return {key.lower(): value for key, value in top.items()}


def _decode(decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw, field_name: str) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as exc:  # wrong types, or (a node split off unparsed) malformed JSON
        raise WireError(f"{field_name}: {exc}") from None


def decode_pod(raw: bytes | None) -> dict[str, Any]:
    """The Pod object of a request (a missing or non-object Pod is a WireError)."""
    try:
        pod = _decoder_any.decode(raw) if raw else None
    except msgspec.DecodeError as exc:
        raise WireError(f"Pod: {exc}") from None
    if not isinstance(pod, dict):
        raise WireError("Pod: missing or not an object")
    return pod


class _Metadata(msgspec.Struct):
    uid: str = ""
    resourceVersion: str = ""


class _PodIdentity(msgspec.Struct):
    metadata: _Metadata | None = None


_decoder_identity = msgspec.json.Decoder(_PodIdentity)


def pod_identity(raw: bytes) -> tuple[str, str]:
    """A request Pod's (metadata.uid, metadata.resourceVersion), ("", "") when it has none; read
    without building the object (the rest is skipped), so a pod the cache holds at that version need
    not be parsed. A body this cannot read is left to ``decode_pod``, which says what is wrong."""
    try:
        metadata = _decoder_identity.decode(raw).metadata
    except (msgspec.ValidationError, msgspec.DecodeError):
        return "", ""
    return (metadata.uid, metadata.resourceVersion) if metadata is not None else ("", "")


def _pod(top: Mapping[str, msgspec.Raw]) -> dict[str, Any]:
    return decode_pod(top.get("pod"))


class _GoExtenderArgs(msgspec.Struct):
    """The exact shape kube-scheduler sends, decoded in one pass."""

    Pod: msgspec.Raw = msgspec.Raw(b"")
    Nodes: _NodeList | None = None
    NodeNames: msgspec.Raw = msgspec.Raw(b"")  # decoded through go_layout.node_names (memoised by its bytes)


_decoder_go_args = msgspec.json.Decoder(_GoExtenderArgs)


_node_list_items = go_layout.NodeListItems(RequestNode)


def _request_node(raw: msgspec.Raw, index: int) -> RequestNode:
    name = go_layout.node_name(raw)
    if name is not None:
        return RequestNode(name, raw)
    node = _decode(_decoder_node, raw, f"Nodes.items[{index}]")
    name = node.metadata.name if node.metadata else ""
    if not name:
        raise WireError(f"Nodes.items[{index}].metadata.name is missing")
    return RequestNode(name, raw, node.status.allocatable if node.status else None, True)


def _go_node_list(body: bytes) -> ExtenderArgs | None:
    """A NodeList-mode body in exactly Go's layout, its nodes echoed as received (app/http/go_layout.py)."""
    split = _node_list_items.split(body)
    return None if split is None else ExtenderArgs(split[0], nodes=split[1])


def _go_node_names(body: bytes) -> ExtenderArgs | None:
    """A NodeNames-mode body in exactly Go's layout (app/http/go_layout.py)."""
    split = go_layout.split_node_names(body)
    return None if split is None else ExtenderArgs(split[0], node_names=split[1])


def decode_extender_args(body: bytes) -> ExtenderArgs:
    split = None
    if body.endswith(b"]}"):
        split = _go_node_names(body)
    elif body.endswith(go_layout.NODES_CLOSE):
        split = _go_node_list(body)
    if split is not None:
        return split
    try:
        fast = _decoder_go_args.decode(body) if body else None
    except (msgspec.ValidationError, msgspec.DecodeError):
        fast = None  # the general path below says precisely what is wrong
    if fast is not None and memoryview(fast.Pod)[:1].tobytes() == b"{":
        if len(fast.NodeNames) and (names := go_layout.node_names(fast.NodeNames)) is not None:
            return ExtenderArgs(bytes(fast.Pod), node_names=names)
        if fast.Nodes is not None:
            nodes = [_request_node(raw, i) for i, raw in enumerate(fast.Nodes.items or ())]
            return ExtenderArgs(bytes(fast.Pod), nodes=nodes)
    # Any key case (Go decodes case-insensitively), and precise errors.
    top = _top(body)
    pod_raw = top.get("pod")
    decode_pod(pod_raw)
    names_raw = top.get("nodenames")
    node_names = _decode(_decoder_names, names_raw, "NodeNames") if names_raw is not None else None
    nodes_raw = top.get("nodes")
    node_list = _decode(_decoder_node_list, nodes_raw, "Nodes") if nodes_raw is not None else None
    if node_names is not None:
        return ExtenderArgs(bytes(pod_raw or b""), node_names=node_names)
    if node_list is None:
        raise WireError("neither NodeNames nor Nodes is set")
    nodes = [_request_node(raw, i) for i, raw in enumerate(node_list.items or ())]
    return ExtenderArgs(bytes(pod_raw or b""), nodes=nodes)


def _lower(obj: Any) -> dict[str, Any]:
    return {k.lower(): v for k, v in obj.items()} if isinstance(obj, dict) else {}


def decode_preempt_args(body: bytes) -> PreemptArgs:
    top = _top(body)
    pod = _pod(top)
    victims: dict[str, Victims] = {}
    meta = _decoder_any.decode(top["nodenametometavictims"]) if "nodenametometavictims" in top else None
    full = _decoder_any.decode(top["nodenametovictims"]) if "nodenametovictims" in top else None
    if meta is None and full is None:
        raise WireError("neither NodeNameToMetaVictims nor NodeNameToVictims is set")
    for source, is_meta in ((full, False), (meta, True)):
        if source is None:
            continue
        if not isinstance(source, dict):
            raise WireError("victims map must be an object of node name to victims")
        for node, entry in source.items():
            entry = _lower(entry)
            pods = entry.get("pods") or []
            if not isinstance(pods, list):
                raise WireError(f"victims of node {node}: Pods must be a list")
            if is_meta:
                uids = [str(_lower(p).get("uid", "")) for p in pods]
                full_pods: list[dict[str, Any]] = []
            else:
                if not all(isinstance(p, dict) and isinstance(p.get("metadata") or {}, dict) for p in pods):
                    raise WireError(f"victims of node {node}: a victim is not a Pod object")
                full_pods = pods
                uids = [str((p.get("metadata") or {}).get("uid", "")) for p in full_pods]
            if any(not uid for uid in uids):
                raise WireError(f"victims of node {node}: a victim has no UID")
            pdb = entry.get("numpdbviolations") or 0
            victims[node] = Victims(uids, full_pods, pdb if isinstance(pdb, int) else 0)
    return PreemptArgs(pod, victims)


class _GoBindArgs(msgspec.Struct, forbid_unknown_fields=True):
    """``ExtenderBindingArgs`` exactly as kube-scheduler's encoder writes it; any other key (another
    case of a name, which Go would also read) sends the body down the general path."""

    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


_decoder_go_bind = msgspec.json.Decoder(_GoBindArgs)


def decode_bind_args(body: bytes) -> BindArgs:
    try:
        go = _decoder_go_bind.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError):
        go = None  # the general path says precisely what is wrong
    if go is not None and go.PodName and go.PodUID and go.Node:
        return BindArgs(go.PodName, go.PodNamespace or "default", go.PodUID, go.Node)
    top = _top(body)
    values = {}
    for key in ("podname", "podnamespace", "poduid", "node"):
        raw = top.get(key)
        value = _decoder_any.decode(raw) if raw is not None else None
        if not isinstance(value, str) or (not value and key != "podnamespace"):
            raise WireError(f"{_GO_NAMES[key]}: missing or not a string")
        values[key] = value
    return BindArgs(values["podname"], values["podnamespace"] or "default", values["poduid"], values["node"])


_GO_NAMES = {"podname": "PodName", "podnamespace": "PodNamespace", "poduid": "PodUID", "node": "Node"}


def node_list(raws: list[msgspec.Raw]) -> dict[str, Any]:
    """A v1 NodeList echoing the request's node objects byte for byte."""
    return {"metadata": {}, "items": raws}


def filter_result(
    *,
    node_names: list[str] | None = None,
    nodes: list[msgspec.Raw] | None = None,
    failed: NodeReasons | None = None,
    unresolvable: NodeReasons | None = None,
    error: str = "",
) -> dict[str, Any]:
    """``ExtenderFilterResult`` with every key present, as the Go encoder writes it."""
    return {
        "Nodes": node_list(nodes) if nodes is not None else None,
        "NodeNames": node_names,
        "FailedNodes": _reasons(failed),
        "FailedAndUnresolvableNodes": _reasons(unresolvable),
        "Error": error,
    }


# A map of node name to reason: as a mapping, or already encoded (node_reasons_raw).
NodeReasons = Mapping[str, str] | msgspec.Raw


def _reasons(reasons: NodeReasons | None) -> dict[str, str] | msgspec.Raw:
    return reasons if isinstance(reasons, msgspec.Raw) else dict(reasons or {})


def host_priority_list(names: Sequence[str], scores: Sequence[int]) -> list[dict[str, Any]]:
    """``HostPriorityList``: one ``{"Host", "Score"}`` per node scored above 0 (kube-scheduler counts
    a host not listed as 0, so the answer leaves those out)."""
    return [{"Host": name, "Score": score} for name, score in zip(names, scores, strict=True) if score]


def meta_victims(uids: Sequence[str], pdb_violations: int) -> dict[str, Any]:
    """One node's ``MetaVictims``: the victims by UID."""
    return {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb_violations}


def preempt_result(victims: Mapping[str, Mapping[str, Any]], error: str = "") -> dict[str, Any]:
    """``ExtenderPreemptionResult``. The Go type has no Error field: an ``error`` goes along for people
    reading the reply, and an empty map ends preemption for this pod."""
    result: dict[str, Any] = {"NodeNameToMetaVictims": dict(victims)}
    if error:
        result["Error"] = error
    return result


def bind_result(error: str = "") -> dict[str, Any]:
    """``ExtenderBindingResult``: an empty ``Error`` is success."""
    return {"Error": error}


_UNPARSABLE: Mapping[str, Any] = {"status.allocatable": "unparsable"}


@dataclass(frozen=True, slots=True)
class Candidates:
    """A request's candidate nodes in order, each once; in NodeList mode also their Node objects,
    which the filter answer echoes unchanged."""

    names: list[str]
    by_name: dict[str, RequestNode] | None = None

    @staticmethod
    def of(args: ExtenderArgs, *, dedupe: bool = True) -> Candidates:
        if args.node_names is not None:
            return Candidates(list(dict.fromkeys(args.node_names)) if dedupe else args.node_names)
        by_name: dict[str, RequestNode] = {}
        for node in args.nodes or ():
            by_name.setdefault(node.name, node)  # the first occurrence wins; dicts keep that order
        return Candidates(list(by_name), by_name)

    def result(
        self,
        passed: list[str],
        failed: NodeReasons | None = None,
        unresolvable: NodeReasons | None = None,
    ) -> dict[str, Any]:
        """The filter answer in the request's mode: names, or the request's Node objects unchanged."""
        if self.by_name is None:
            return filter_result(node_names=passed, failed=failed, unresolvable=unresolvable)
        nodes = [self.by_name[name].raw for name in passed]
        return filter_result(nodes=nodes, failed=failed, unresolvable=unresolvable)

    def subset(self, names: list[str]) -> Candidates:
        """These candidates only (``names`` come from this request, each once)."""
        if self.by_name is None:
            return Candidates(names)
        return Candidates(names, {name: self.by_name[name] for name in names})

    def allocatable(self, name: str) -> Mapping[str, Any] | None:
        """A NodeList node's allocatable (None in NodeNames mode: the cache's is used)."""
        if self.by_name is None:
            return None
        try:
            return self.by_name[name].allocatable or {}
        except WireError:
            return _UNPARSABLE  # judged like an invalid quantity: "node(s) with invalid allocatable"


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


# Non-finite numbers in /debug documents: JSON has no literal for them (msgspec writes null, which
# reads as "unknown"); these strings are what Prometheus and Go's strconv write, and parse anywhere.
POSITIVE_INFINITY = "+Inf"
NEGATIVE_INFINITY = "-Inf"
NOT_A_NUMBER = "NaN"


def finite_or_string(value: Any) -> Any:
    """``value`` with every non-finite float (at any depth) replaced by "+Inf", "-Inf" or "NaN"."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if math.isnan(value):
            return NOT_A_NUMBER
        return POSITIVE_INFINITY if value > 0 else NEGATIVE_INFINITY
    if isinstance(value, Mapping):
        return {k: finite_or_string(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_string(v) for v in value]
    return value


def encode_debug(obj: Any) -> bytes:
    """An operator document (/debug, /debug/queues, /debug/explain): non-finite numbers as strings."""
    return _encoder.encode(finite_or_string(obj))
