"""Exact parsing of Kubernetes resource quantities.

The `kubernetes` client's ``parse_quantity`` accepts things the API server rejects (``NaN``,
``Infinity``, ``1K``) and works in floats; scheduling decisions need the API server's grammar and
its integer rounding (``Value()`` and ``MilliValue()`` both round up), so we parse ourselves.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

from k8s_semantics.errors import SemanticsError

__all__ = ["QuantityError", "ceil_milli", "ceil_value", "parse_quantity", "to_milli", "to_value"]

# <sign>?<digits>[.<digits>] followed by a binary-SI, decimal-SI or decimal-exponent suffix.
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[munkMGTPE]?))$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}


class QuantityError(SemanticsError):
    """A string that is not a valid Kubernetes quantity."""


def parse_quantity(text: str | int) -> Fraction:
    """Return the exact value of a quantity such as ``"500m"``, ``"16Gi"`` or ``"1e3"``."""
    if isinstance(text, bool):
        raise QuantityError(f"invalid quantity {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if not isinstance(text, str):
        raise QuantityError(f"invalid quantity {text!r}: expected a string")
    return _parse_short(text) if len(text) <= _MEMO_LENGTH else _parse_text(text)


# The same few quantities come in every pod and claim, and a Fraction is immutable: short texts
# are parsed once (bounded: at most 4,096 texts of at most 64 characters are kept).
_MEMO_LENGTH = 64


def _parse_text(text: str) -> Fraction:
    match = _QUANTITY.match(text.strip())
    if match is None or (not match["int"] and not match["frac"]):
        raise QuantityError(f"invalid quantity {text!r}")
    digits = (match["int"] or "") + (match["frac"] or "")
    value = Fraction(int(digits), 10 ** len(match["frac"] or ""))
    if match["bin"]:
        value *= _BINARY[match["bin"]]
    elif match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > 100:
            raise QuantityError(f"invalid quantity {text!r}: exponent out of range")
        value *= Fraction(10) ** exponent
    else:
        value *= _DECIMAL[match["dec"] or ""]
    return -value if match["sign"] == "-" else value


_parse_short = functools.lru_cache(maxsize=4096)(_parse_text)


def ceil_value(value: Fraction) -> int:
    """``Quantity.Value()`` of an exact amount: rounded up."""
    return -((-value.numerator) // value.denominator)


def ceil_milli(value: Fraction) -> int:
    """``Quantity.MilliValue()`` of an exact amount: thousandths, rounded up."""
    return ceil_value(value * 1000)


def to_value(text: str | int) -> int:
    """``Quantity.Value()``: the integer value, rounded up (``"1m"`` of memory is 1 byte)."""
    return ceil_value(parse_quantity(text))


def to_milli(text: str | int) -> int:
    """``Quantity.MilliValue()``: thousandths, rounded up (``"0.0001"`` cpu is 1 millicore)."""
    return ceil_milli(parse_quantity(text))
