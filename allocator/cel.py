"""CEL device selectors, evaluated with cel-expr-python (Google's cel-cpp) as DRA defines them.

The environment mirrors kube-scheduler's ``dynamic-resource-allocation/cel``: one variable,
``device``, with ``driver``, ``attributes`` (domain -> name -> value), ``capacity`` (domain ->
name -> Quantity) and ``allowMultipleAllocations`` (bool, false when unset), plus the Kubernetes
``quantity()`` and ``semver()`` libraries with ``compareTo``, ``isGreaterThan`` and
``isLessThan`` (and the other member functions DRA users reach for), ``cel.bind``, optional
chaining and the strings extension.

cel-expr-python has no opaque Python types, so a Quantity or Semver is a tagged map
``{"__kind": "quantity" | "semver", "v": <canonical text>}``; the canonical text makes CEL's own
``==`` agree with numeric equality (``quantity("1Gi") == quantity("1024Mi")``).

Upstream returns an *empty map* for an unknown attribute domain, so ``size(device.attributes["x"])``
is 0 instead of an error. cel-cpp has no custom map lookup, so every string literal of an
expression that is not a domain of the device gets an empty map before evaluation: the same answer
for every lookup written as a literal, which is how selectors are written.

Each expression is compiled once (``SelectorCache``) and its result memoised per device object: a
re-published slice is parsed into new ``Device`` objects, so a result never outlives its data.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from allocator.errors import AllocatorError
from allocator.types import Attribute, Device
from k8s_semantics.quantity import QuantityError, parse_quantity

__all__ = ["EXPRESSION_MAX_LENGTH", "SelectorCache", "SelectorError", "device_variable"]

EXPRESSION_MAX_LENGTH = 10 * 1024  # resourceapi.CELSelectorExpressionMaxLength

_QUANTITY, _SEMVER = "quantity", "semver"
_TAGGED = cel.Type.Map(cel.Type.STRING, cel.Type.STRING)
_LITERAL = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'((?:[^'\\]|\\.)*)'")


class SelectorError(AllocatorError):
    """A selector that does not compile, or whose evaluation failed for a device."""


# ---------------------------------------------------------------------------------------- Quantity


def _quantity_value(q: Fraction) -> dict[str, str]:
    return {"__kind": _QUANTITY, "v": str(q)}


def _quantity(text: str) -> dict[str, str]:
    try:
        return _quantity_value(parse_quantity(text))
    except QuantityError as exc:
        raise SelectorError(f"quantity({text!r}): {exc}") from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _q(value: dict[str, str]) -> Fraction:
    if value.get("__kind") != _QUANTITY:
        raise SelectorError(f"expected a Quantity, got {value.get('__kind', 'a map')}")
    return Fraction(value["v"])


# ---------------------------------------------------------------------------------------- Semver

_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def _normalize_semver(text: str) -> str:
    """k8s ``semver(s, true)``: drop a leading v, fill missing minor/patch, strip leading zeros."""
    match = re.match(r"^v?([0-9.]*)(.*)$", text, re.DOTALL)
    assert match is not None  # the pattern matches every string
    parts = match[1].split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return text
    return ".".join([str(int(p)) for p in parts] + ["0"] * (3 - len(parts))) + match[2]


def _parse_semver(text: str, normalize: bool = False) -> dict[str, str]:
    canonical = _normalize_semver(text) if normalize else text
    if _SEMVER_RE.match(canonical) is None:
        raise SelectorError(f"semver({text!r}): not a semantic version")
    return _semver_value(canonical)


def _semver_value(text: str) -> dict[str, str]:
    """Without build metadata: precedence ignores it, so CEL's ``==`` must too (k8s: EQ is compare == 0)."""
    return {"__kind": _SEMVER, "v": text.partition("+")[0]}


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _parse_semver(text, normalize)
    except SelectorError:
        return False
    return True


def _semver_key(value: dict[str, str]) -> tuple[int, int, int, tuple[tuple[int, int, str], ...] | None]:
    if value.get("__kind") != _SEMVER:
        raise SelectorError(f"expected a Semver, got {value.get('__kind', 'a map')}")
    match = _SEMVER_RE.match(value["v"])
    assert match is not None
    major, minor, patch, pre = int(match[1]), int(match[2]), int(match[3]), match[4]
    if pre is None:
        return major, minor, patch, None
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return major, minor, patch, ids


def _semver_compare(a: dict[str, str], b: dict[str, str]) -> int:
    ka, kb = _semver_key(a), _semver_key(b)
    if ka[:3] != kb[:3]:
        return -1 if ka[:3] < kb[:3] else 1
    pa, pb = ka[3], kb[3]
    if pa == pb:
        return 0
    if pa is None:  # a release outranks any pre-release of the same version
        return 1
    if pb is None:
        return -1
    return -1 if pa < pb else 1


# ---------------------------------------------------------------------------------------- dispatch


def _compare(a: dict[str, str], b: dict[str, str]) -> int:
    kind = a.get("__kind")
    if kind != b.get("__kind"):
        raise SelectorError(f"compareTo: cannot compare {kind} with {b.get('__kind')}")
    if kind == _SEMVER:
        return _semver_compare(a, b)
    x, y = _q(a), _q(b)
    return (x > y) - (x < y)


def _as_integer(value: dict[str, str]) -> int:
    q = _q(value)
    if q.denominator != 1 or not -(2**63) <= q.numerator < 2**63:
        raise SelectorError(f"asInteger: {q} is not an int64")
    return q.numerator


def _semver_part(index: int) -> Callable[[dict[str, str]], int]:
    def part(value: dict[str, str]) -> int:
        return _semver_key(value)[index]  # type: ignore[return-value]

    return part


def _overload(name: str, result: cel.Type, params: list[cel.Type], impl: Callable[..., Any], member: bool) -> Any:
    overload_id = f"{name}_{'member_' if member else ''}{'_'.join(p.name() for p in params)}"
    return cel.Overload(overload_id, result, params, is_member=member, impl=impl)


def _functions() -> list[Any]:
    s, i, b, d, t = cel.Type.STRING, cel.Type.INT, cel.Type.BOOL, cel.Type.DOUBLE, _TAGGED
    decls: dict[str, list[Any]] = {}

    def add(name: str, result: cel.Type, params: list[cel.Type], impl: Callable[..., Any], member: bool = True) -> None:
        decls.setdefault(name, []).append(_overload(name, result, params, impl, member))

    add("quantity", t, [s], _quantity, member=False)
    add("isQuantity", b, [s], _is_quantity, member=False)
    add("semver", t, [s], _parse_semver, member=False)
    add("semver", t, [s, b], _parse_semver, member=False)
    add("isSemver", b, [s], _is_semver, member=False)
    add("isSemver", b, [s, b], _is_semver, member=False)
    add("compareTo", i, [t, t], _compare)
    add("isGreaterThan", b, [t, t], lambda a, c: _compare(a, c) > 0)
    add("isLessThan", b, [t, t], lambda a, c: _compare(a, c) < 0)
    add("add", t, [t, t], lambda a, c: _quantity_value(_q(a) + _q(c)))
    add("add", t, [t, i], lambda a, c: _quantity_value(_q(a) + c))
    add("sub", t, [t, t], lambda a, c: _quantity_value(_q(a) - _q(c)))
    add("sub", t, [t, i], lambda a, c: _quantity_value(_q(a) - c))
    add("sign", i, [t], lambda a: (_q(a) > 0) - (_q(a) < 0))
    add("isInteger", b, [t], lambda a: _q(a).denominator == 1 and -(2**63) <= _q(a).numerator < 2**63)
    add("asInteger", i, [t], _as_integer)
    add("asApproximateFloat", d, [t], lambda a: float(_q(a)))
    add("major", i, [t], _semver_part(0))
    add("minor", i, [t], _semver_part(1))
    add("patch", i, [t], _semver_part(2))
    return [cel.FunctionDecl(name, overloads) for name, overloads in decls.items()]


# ---------------------------------------------------------------------------------------- the device


def _attribute_value(attr: Attribute) -> Any:
    if attr.kind == "version":
        return _semver_value(attr.value)
    return attr.value


def device_variable(device: Device, driver: str) -> dict[str, Any]:
    """The CEL ``device`` of one device: names without a domain belong to the driver's domain."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, attr in device.attributes.items():
        domain, sep, bare = name.rpartition("/")
        attributes.setdefault(domain if sep else driver, {})[bare] = _attribute_value(attr)
    capacity: dict[str, dict[str, Any]] = {}
    for name, cap in device.capacity.items():
        domain, sep, bare = name.rpartition("/")
        capacity.setdefault(domain if sep else driver, {})[bare] = _quantity_value(cap.value)
    return {
        "driver": driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": device.allow_multiple_allocations,
    }


@dataclass(frozen=True, slots=True)
class _Compiled:
    program: Any  # cel.Expression
    literals: frozenset[str]


_DEVICE_KEY = ("cel", "device")  # Device.memo key of the device's CEL variable


class SelectorCache:
    """Compiled selectors by expression text, and their results memoised per device."""

    def __init__(self) -> None:
        self._env = cel.NewEnv(
            variables={"device": cel.Type.DYN},
            extensions=[ext_bindings.ExtBindings(), ext_optional.ExtOptional(), ext_strings.ExtStrings()],
            functions=_functions(),
        )
        self._compiled: dict[str, _Compiled | SelectorError] = {}

    def __len__(self) -> int:
        return len(self._compiled)

    def compile(self, expression: str) -> _Compiled:
        """Compile once; a bad expression raises the same ``SelectorError`` every time."""
        found = self._compiled.get(expression)
        if found is None:
            found = self._compile(expression)
            self._compiled[expression] = found
        if isinstance(found, SelectorError):
            raise found
        return found

    def _compile(self, expression: str) -> _Compiled | SelectorError:
        if len(expression) > EXPRESSION_MAX_LENGTH:
            return SelectorError(f"expression is longer than {EXPRESSION_MAX_LENGTH} characters")
        try:
            program = self._env.compile(expression)
        except RuntimeError as exc:
            return SelectorError(f"compilation failed: {str(exc).removeprefix('INVALID_ARGUMENT: ')}")
        result = program.return_type()
        if result != cel.Type.BOOL and result != cel.Type.DYN:
            return SelectorError(f"must evaluate to bool, not {result.name()}")
        literals = frozenset(a or b for a, b in _LITERAL.findall(expression))
        return _Compiled(program, literals)

    def matches(self, expression: str, device: Device, driver: str) -> bool:
        """Whether the selector accepts the device; raises ``SelectorError`` on any failure."""
        memo = device.memo
        found = memo.get(expression)
        if found is not None:
            return bool(found)
        compiled = self.compile(expression)
        variable = memo.get(_DEVICE_KEY)
        if variable is None:
            variable = device_variable(device, driver)
            memo[_DEVICE_KEY] = variable
        attributes, capacity = variable["attributes"], variable["capacity"]
        missing_a = [lit for lit in compiled.literals if lit not in attributes]
        missing_c = [lit for lit in compiled.literals if lit not in capacity]
        if missing_a or missing_c:
            variable = {
                **variable,
                "attributes": {**attributes, **{key: {} for key in missing_a}} if missing_a else attributes,
                "capacity": {**capacity, **{key: {} for key in missing_c}} if missing_c else capacity,
            }
        try:
            value = compiled.program.eval(data={"device": variable})
        except SelectorError:
            raise
        except Exception as exc:  # an error raised inside one of our functions
            raise SelectorError(str(exc)) from None
        kind = value.type()
        if kind == cel.Type.ERROR:
            raise SelectorError(str(value.value()))
        if kind != cel.Type.BOOL:
            raise SelectorError(f"must evaluate to bool, not {kind.name()}")
        result = bool(value.value())
        memo[expression] = result
        return result
