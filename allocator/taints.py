"""Device taints (DRADeviceTaints, beta in Kubernetes 1.36): which taints a device carries, and
whether a request tolerates them.

A device's taints are those published in its ResourceSlice (``spec.devices[].taints``) plus one per
DeviceTaintRule (resource.k8s.io/v1beta2 in 1.36, behind the DRADeviceTaintRules gate) whose
``spec.deviceSelector`` matches it: every field that is set (``driver``, ``pool``, ``device``) must
equal the device's; an empty or absent selector matches every device (upstream's tracker,
``applyPatches``). The rule's taint is appended after the slice's own.

Only ``NoSchedule`` and ``NoExecute`` keep a device from being allocated, and only when no toleration
of the request matches (upstream ``taintPreventsAllocation``); ``None`` and unknown effects never do.
Claims that are already allocated are not touched: evicting their pods on ``NoExecute`` is the
device-taint eviction controller's job, not the scheduler's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from allocator.parse import _metadata
from allocator.types import Device, DeviceID, DeviceTaint, DeviceToleration

__all__ = [
    "NO_TAINT_RULES",
    "DeviceTaintRule",
    "TaintRules",
    "parse_device_taint_rule",
    "taint_blocks",
]

_EFFECTS = ("None", "NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """One DeviceTaintRule: ``driver`` / ``pool`` / ``device`` None means "any"."""

    name: str
    taint: DeviceTaint
    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def matches(self, device: DeviceID) -> bool:
        return (
            (self.driver is None or self.driver == device.driver)
            and (self.pool is None or self.pool == device.pool)
            and (self.device is None or self.device == device.device)
        )


def parse_device_taint_rule(obj: Mapping[str, Any]) -> DeviceTaintRule:
    """A resource.k8s.io DeviceTaintRule; errors name the object and the field."""
    o, meta = _metadata(obj, "DeviceTaintRule", namespaced=False)
    spec = o.obj(obj.get("spec"), "spec")
    raw = spec.get("taint")
    if raw is None:
        raise o.fail("spec.taint", "required")
    taint = o.obj(raw, "spec.taint")
    effect = o.text(taint, "effect", "spec.taint", required=True)
    if effect not in _EFFECTS:
        raise o.fail("spec.taint.effect", f"must be one of {', '.join(_EFFECTS)}, not {effect!r}")
    selector = o.obj(spec.get("deviceSelector"), "spec.deviceSelector")
    return DeviceTaintRule(
        name=meta["name"],
        taint=DeviceTaint(
            key=o.text(taint, "key", "spec.taint", required=True),
            effect=effect,
            value=o.text(taint, "value", "spec.taint"),
            time_added=o.opt_text(taint, "timeAdded", "spec.taint"),
        ),
        driver=o.opt_text(selector, "driver", "spec.deviceSelector"),
        pool=o.opt_text(selector, "pool", "spec.deviceSelector"),
        device=o.opt_text(selector, "device", "spec.deviceSelector"),
    )


@dataclass
class TaintRules:
    """The DeviceTaintRules in force, by name; ``taints_for`` is what they add to one device."""

    _rules: dict[str, DeviceTaintRule] = field(default_factory=dict)
    _blocking: tuple[DeviceTaintRule, ...] = ()

    def __bool__(self) -> bool:
        return bool(self._blocking)

    def __len__(self) -> int:
        return len(self._rules)

    def rules(self) -> list[DeviceTaintRule]:
        return [self._rules[name] for name in sorted(self._rules)]

    def upsert(self, rule: DeviceTaintRule) -> None:
        self._rules[rule.name] = rule
        self._refresh()

    def delete(self, name: str) -> None:
        if self._rules.pop(name, None) is not None:
            self._refresh()

    def replace(self, rules: Iterable[DeviceTaintRule]) -> None:
        self._rules = {rule.name: rule for rule in rules}
        self._refresh()

    def _refresh(self) -> None:
        # Only rules whose taint can block an allocation matter to the search (by name: upstream
        # lists the rules in informer order, and which taint blocks first changes no answer).
        self._blocking = tuple(r for _, r in sorted(self._rules.items()) if r.taint.blocks)

    def taints_for(self, device: DeviceID) -> tuple[DeviceTaint, ...]:
        """Every rule's taint that applies to ``device`` (blocking or not), by rule name."""
        return tuple(self._rules[n].taint for n in sorted(self._rules) if self._rules[n].matches(device))

    def blocking_for(self, device: DeviceID) -> Iterable[DeviceTaint]:
        for rule in self._blocking:
            if rule.matches(device):
                yield rule.taint


NO_TAINT_RULES = TaintRules()


def _untolerated(taint: DeviceTaint, tolerations: tuple[DeviceToleration, ...]) -> bool:
    return taint.blocks and not any(t.tolerates(taint) for t in tolerations)


def taint_blocks(
    device: Device, device_id: DeviceID, tolerations: tuple[DeviceToleration, ...], rules: TaintRules
) -> DeviceTaint | None:
    """The first NoSchedule / NoExecute taint of the device (its slice's, then the rules') that no
    toleration of the request matches, or None when the request may use the device."""
    for taint in device.taints:
        if _untolerated(taint, tolerations):
            return taint
    if rules:
        for taint in rules.blocking_for(device_id):
            if _untolerated(taint, tolerations):
                return taint
    return None
