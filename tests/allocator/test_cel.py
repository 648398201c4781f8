"""CEL selectors as DRA defines them: the device variable, quantity() and semver(), errors.

Every expected value is worked out by hand from the quantities / versions in the test (for
example 40Gi = 40 * 1024Mi = 40960Mi, and 1Gi = 1024Mi but not 1000Mi).
"""

from __future__ import annotations

import pytest

from allocator import SelectorCache, SelectorError
from allocator.cel import EXPRESSION_MAX_LENGTH
from allocator.types import Device
from tests.allocator.builders import DRIVER, gpu, rslice


def device(memory: str = "40Gi", **attributes: object) -> Device:
    attrs = {"model": "H100", "index": 3, "driverVersion": {"version": "1.2.3"}, **attributes}
    return rslice("s", [gpu("g0", memory=memory, **attrs)]).devices[0]


def matches(expression: str, dev: Device | None = None) -> bool:
    return SelectorCache().matches(expression, dev or device(), DRIVER)


# ---------------------------------------------------------------------------------------- the device variable


def test_driver_is_the_slices_driver() -> None:
    assert matches(f'device.driver == "{DRIVER}"')
    assert not matches('device.driver == "other.example.com"')


def test_bare_attribute_names_belong_to_the_drivers_domain() -> None:
    assert matches(f'device.attributes["{DRIVER}"].model == "H100"')
    assert matches(f'device.attributes["{DRIVER}"].index == 3')


def test_qualified_attribute_names_go_to_their_own_domain() -> None:
    dev = device(**{"vendor.example.org/family": "hopper"})
    assert matches('device.attributes["vendor.example.org"].family == "hopper"', dev)


def test_an_unknown_attribute_domain_is_an_empty_map() -> None:
    assert matches('size(device.attributes["unknown.example.org"]) == 0')


def test_an_unknown_capacity_domain_is_an_empty_map() -> None:
    assert matches('size(device.capacity["unknown.example.org"]) == 0')


def test_a_missing_attribute_key_is_a_runtime_error_not_false() -> None:
    with pytest.raises(SelectorError, match="nokey"):
        matches(f'device.attributes["{DRIVER}"].nokey == "x"')


def test_a_key_of_an_unknown_domain_is_a_runtime_error() -> None:
    with pytest.raises(SelectorError):
        matches('device.attributes["unknown.example.org"].model == "H100"')


def test_optional_chaining_gives_a_default_for_a_missing_key() -> None:
    assert matches(f'device.attributes["{DRIVER}"].?nokey.orValue("z") == "z"')


def test_cel_bind_is_available() -> None:
    assert matches(f'cel.bind(a, device.attributes["{DRIVER}"], a.model == "H100" && a.index > 2)')


# ---------------------------------------------------------------------------------------- quantity


def test_capacity_compare_to_quantity() -> None:
    # 40Gi vs 1Gi: greater (1); vs 40960Mi (= 40Gi): equal (0); vs 80Gi: less (-1).
    assert matches(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("1Gi")) == 1')
    assert matches(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40960Mi")) == 0')
    assert matches(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) == -1')


def test_quantity_is_greater_than_and_is_less_than() -> None:
    assert matches(f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("39Gi"))')
    assert not matches(f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("40Gi"))')
    assert matches(f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("41Gi"))')
    assert not matches(f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("40Gi"))')


def test_quantity_equality_is_numeric() -> None:
    assert matches('quantity("1Gi") == quantity("1024Mi")')
    assert not matches('quantity("1Gi") == quantity("1000Mi")')
    assert matches('quantity("1k") == quantity("1000")')
    assert matches('quantity("500m") == quantity("0.5")')


def test_capacity_equals_an_equivalent_quantity() -> None:
    assert matches(f'device.capacity["{DRIVER}"].memory == quantity("40960Mi")')


def test_quantity_arithmetic_and_conversions() -> None:
    # 1Gi + 1Gi = 2Gi; 2Gi - 1 = 2147483647; 1.5 is not an integer; 0 has sign 0.
    assert matches('quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")')
    assert matches('quantity("2Gi").sub(1).asInteger() == 2147483647')
    assert matches('!quantity("1.5").isInteger()')
    assert matches('quantity("0").sign() == 0 && quantity("-1").sign() == -1')
    assert matches('isQuantity("10Gi") && !isQuantity("ten")')


def test_an_invalid_quantity_literal_is_a_runtime_error() -> None:
    with pytest.raises(SelectorError, match="abc"):
        matches('quantity("abc").sign() == 0')


def test_comparing_a_quantity_with_a_semver_is_an_error() -> None:
    with pytest.raises(SelectorError, match="cannot compare"):
        matches('quantity("1").compareTo(semver("1.0.0")) == 0')


# ---------------------------------------------------------------------------------------- semver


def test_version_attributes_compare_as_semver() -> None:
    # 1.2.3 vs 1.10.0: numeric, not string order, so 1.2.3 is older (string order would say newer).
    assert matches(f'device.attributes["{DRIVER}"].driverVersion.compareTo(semver("1.10.0")) < 0')
    assert matches(f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("1.2.0"))')
    assert matches(f'device.attributes["{DRIVER}"].driverVersion.isLessThan(semver("1.2.4"))')
    assert matches(f'device.attributes["{DRIVER}"].driverVersion == semver("1.2.3")')


def test_a_prerelease_is_older_than_its_release() -> None:
    assert matches('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))')
    assert matches('semver("1.0.0-alpha.2").isLessThan(semver("1.0.0-alpha.10"))')
    assert matches('semver("1.0.0-alpha").isLessThan(semver("1.0.0-beta"))')


def test_semver_equality_ignores_build_metadata_like_compare_to() -> None:
    # SemVer 2.0 precedence ignores build metadata; the Kubernetes Semver type's == is
    # "compare == 0", so both must agree that 1.2.3+build.7 and 1.2.3 are the same version.
    assert matches('semver("1.2.3+build.7").compareTo(semver("1.2.3")) == 0')
    assert matches('semver("1.2.3+build.7") == semver("1.2.3")')
    assert matches(f'device.attributes["{DRIVER}"].driverVersion == semver("1.2.3+other")')


def test_semver_parts_and_normalisation() -> None:
    assert matches('semver("3.4.5").major() == 3 && semver("3.4.5").minor() == 4 && semver("3.4.5").patch() == 5')
    assert matches('semver("v1.2", true) == semver("1.2.0")')
    assert matches('isSemver("1.2.3") && !isSemver("1.2")')


# ---------------------------------------------------------------------------------------- compile errors


def test_a_syntax_error_fails_to_compile() -> None:
    with pytest.raises(SelectorError, match="compilation failed"):
        SelectorCache().compile("device.driver ==")


def test_a_non_bool_expression_fails_to_compile() -> None:
    with pytest.raises(SelectorError, match="must evaluate to bool"):
        SelectorCache().compile("1 + 2")


def test_an_undeclared_variable_fails_to_compile() -> None:
    with pytest.raises(SelectorError, match="compilation failed"):
        SelectorCache().compile('gpu.driver == "x"')


def test_an_expression_over_the_length_limit_is_refused() -> None:
    long = "true" + " && true" * (EXPRESSION_MAX_LENGTH // 8)
    assert len(long) > EXPRESSION_MAX_LENGTH
    with pytest.raises(SelectorError, match="longer than"):
        SelectorCache().compile(long)


def test_a_bad_expression_fails_every_time() -> None:
    cache = SelectorCache()
    for _ in range(2):
        with pytest.raises(SelectorError):
            cache.compile("device.driver ==")


# ---------------------------------------------------------------------------------------- memo


def test_results_do_not_outlive_a_republished_device() -> None:
    cache = SelectorCache()
    expression = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("20Gi")) >= 0'
    assert cache.matches(expression, device(memory="40Gi"), DRIVER)
    # The slice is re-published with a smaller device: a new Device object, a new answer.
    assert not cache.matches(expression, device(memory="10Gi"), DRIVER)
