"""The fake API server's vocabulary: the kinds and paths it serves, v1 Status bodies, field
selectors, and list continue tokens."""

from __future__ import annotations

import base64
import binascii
import copy
import json
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (kind, namespace, name); namespace is "" for Nodes

LIST_KINDS = {
    "Node": "NodeList",
    "Pod": "PodList",
    "DeviceClass": "DeviceClassList",
    "ResourceClaim": "ResourceClaimList",
    "ResourceSlice": "ResourceSliceList",
    "ResourceFlavor": "ResourceFlavorList",
    "Cohort": "CohortList",
    "ClusterQueue": "ClusterQueueList",
    "LocalQueue": "LocalQueueList",
    "Workload": "WorkloadList",
}
NAMESPACED = {
    "Node": False,
    "Pod": True,
    "DeviceClass": False,
    "ResourceClaim": True,
    "ResourceSlice": False,
    "ResourceFlavor": False,
    "Cohort": False,
    "ClusterQueue": False,
    "LocalQueue": True,
    "Workload": True,
}
RESOURCES = {
    "Node": "nodes",
    "Pod": "pods",
    "DeviceClass": "deviceclasses",
    "ResourceClaim": "resourceclaims",
    "ResourceSlice": "resourceslices",
    "ResourceFlavor": "resourceflavors",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "Workload": "workloads",
}
DRA = "/apis/resource.k8s.io/v1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
KUEUE_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "Workload")
API_VERSIONS = {
    kind: "v1" if kind in ("Node", "Pod") else "kueue.x-k8s.io/v1beta2" if kind in KUEUE_KINDS else "resource.k8s.io/v1"
    for kind in LIST_KINDS
}
# Field labels the real server accepts for these kinds (others answer 400).
FIELD_LABELS = {
    "Node": {"metadata.name", "spec.unschedulable"},
    "Pod": {
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    },
    "DeviceClass": {"metadata.name"},
    "ResourceClaim": {"metadata.name", "metadata.namespace"},
    "ResourceSlice": {"metadata.name", "spec.nodeName", "spec.driver"},
    # Custom resources: only the metadata fields.
    "ResourceFlavor": {"metadata.name"},
    "Cohort": {"metadata.name"},
    "ClusterQueue": {"metadata.name"},
    "LocalQueue": {"metadata.name", "metadata.namespace"},
    "Workload": {"metadata.name", "metadata.namespace"},
}
BOOL_FIELDS = {"spec.unschedulable", "spec.hostNetwork"}
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
TRUE_VALUES = {"1", "true"}


def status_body(code: int, message: str, reason: str | None = None, details: Obj | None = None) -> Obj:
    """Build a v1 Status object describing a failure."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def json_response(body: Obj, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)


class APIError(Exception):
    """Raised by handlers; rendered as a Status response with the same code."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: Obj | None = None) -> None:
        super().__init__(message)
        self.body = status_body(code, message, reason, details)
        self.code = code


@dataclass(frozen=True)
class Requirement:
    """One term of a field selector: ``field=value`` or ``field!=value``."""

    field: str
    equal: bool
    value: str


def parse_field_selector(kind: str, raw: str) -> list[Requirement]:
    """Parse a comma-separated (AND) field selector with =, == and != terms."""
    reqs: list[Requirement] = []
    for term in filter(None, (t.strip() for t in raw.split(","))):
        for op in ("!=", "==", "="):
            name, sep, value = term.partition(op)
            if sep:
                break
        else:
            raise APIError(400, f'invalid selector: "{raw}"; can\'t understand "{term}"')
        name = name.strip()
        if name not in FIELD_LABELS[kind]:
            raise APIError(400, f"field label not supported: {name}")
        reqs.append(Requirement(name, op != "!=", value.strip()))
    return reqs


def field_value(obj: Obj, path: str) -> str:
    """Value of a dotted field as the API server renders it for selectors."""
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool) or path in BOOL_FIELDS:
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def matches(obj: Obj, selector: list[Requirement]) -> bool:
    return all((field_value(obj, r.field) == r.value) == r.equal for r in selector)


def list_item(obj: Obj) -> Obj:
    """List items omit kind/apiVersion, like the real server's lists."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def with_rv(obj: Obj, rv: int) -> Obj:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = str(rv)
    return out


def encode_continue(snapshot_id: str, offset: int) -> str:
    """Opaque continue token naming a stored list snapshot and a position in it."""
    raw = json.dumps({"snapshot": snapshot_id, "offset": offset}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[str, int]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(data["snapshot"]), int(data["offset"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise APIError(400, "continue key is not valid") from None
