"""Kubernetes quantity parsing: the API server's grammar and Value()/MilliValue() rounding (both ceil).

Grammar (k8s.io/apimachinery resource.Quantity):
    <quantity> ::= <signedNumber><suffix>
    <number>   ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>   ::= Ki|Mi|Gi|Ti|Pi|Ei | n|u|m|""|k|M|G|T|P|E | e<signedNumber>|E<signedNumber>
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from k8s_semantics.quantity import QuantityError, parse_quantity, to_milli, to_value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0001", 1),  # 0.1 millicore rounds UP to 1m
        ("100u", 1),  # 100e-6 cores = 0.1m -> 1m
        ("2n", 1),  # 2e-9 cores = 2e-6 m -> 1m
        ("1", 1000),
        ("500m", 500),
        ("1.5", 1500),
        ("0.25", 250),
        (".5", 500),
        ("+1", 1000),
        ("5.", 5000),  # "<digits>." is valid
        ("1e3", 1_000_000),  # 1000 cores
        ("1.5e-3", 2),  # 1.5m -> 2m
        ("0", 0),
        ("0m", 0),
        (2, 2000),  # an int is taken as a plain number
    ],
)
def test_to_milli_rounds_up(text: str | int, expected: int) -> None:
    assert to_milli(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1m", 1),  # one milli-byte: Value() rounds up to 1
        ("1500m", 2),  # 1.5 -> 2
        ("1", 1),
        ("1k", 1000),
        ("1Ki", 1024),
        ("1M", 1_000_000),
        ("1Mi", 1_048_576),
        ("1G", 1_000_000_000),
        ("1Gi", 1_073_741_824),  # 2**30
        ("1.5Gi", 1_610_612_736),  # 1.5 * 2**30 = 1073741824 + 536870912
        ("1T", 10**12),
        ("1Ti", 2**40),
        ("1P", 10**15),
        ("1Pi", 2**50),
        ("1E", 10**18),  # bare "E" is exa, not an exponent
        ("1Ei", 2**60),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1e+3", 1000),
        ("12e-1", 2),  # 1.2 -> 2
        (".5", 1),  # 0.5 -> 1
        ("+1", 1),
        ("128974848", 128_974_848),
        ("129e6", 129_000_000),
        ("123Mi", 128_974_848),  # 123 * 1048576
        ("0.5Ki", 512),
        (7, 7),
    ],
)
def test_to_value_rounds_up(text: str | int, expected: int) -> None:
    assert to_value(text) == expected


def test_parse_quantity_is_exact() -> None:
    assert parse_quantity("1m") == Fraction(1, 1000)
    assert parse_quantity(".5") == Fraction(1, 2)
    assert parse_quantity("-1.5") == Fraction(-3, 2)
    assert parse_quantity("1.5Gi") == Fraction(3 * 2**29)
    assert parse_quantity("1e-3") == Fraction(1, 1000)


def test_1g_and_1gi_differ() -> None:
    # 2**30 - 10**9 = 1073741824 - 1000000000 = 73741824
    assert to_value("1Gi") - to_value("1G") == 73_741_824


def test_surrounding_whitespace_is_trimmed_like_json_decoding() -> None:
    # Quantity.UnmarshalJSON calls strings.TrimSpace before ParseQuantity.
    assert to_value(" 1Gi ") == 2**30


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "NaN",
        "nan",
        "Infinity",
        "inf",
        "-Infinity",
        "1K",  # capital K is not a suffix (only lower-case k)
        "1KI",
        "1ki",
        "1gi",
        "1mi",
        "1.2.3",
        "Gi",
        "m",
        ".",
        "+",
        "-",
        "1 Gi",  # inner whitespace is not in the grammar
        "1\t0",
        "1e",
        "1e+",
        "1e3.5",
        "1Gi1",
        "0x10",
        "1_000",
        "1,5",
        "++1",
        "1b",
        "abc",
    ],
)
def test_invalid_strings_are_rejected(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)
    with pytest.raises(QuantityError):
        to_value(text)
    with pytest.raises(QuantityError):
        to_milli(text)


@pytest.mark.parametrize("value", [True, False, None, 1.5, [], {}, b"1"])
def test_non_string_non_int_inputs_are_rejected(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)  # type: ignore[arg-type]


def test_quantity_error_is_a_value_error() -> None:
    assert issubclass(QuantityError, ValueError)
