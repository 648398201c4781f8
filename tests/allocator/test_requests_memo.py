"""claim_requests is kept per claim spec, and set up again when a class it names changes."""

from __future__ import annotations

import pytest

from allocator import AllocationError, SelectorCache
from allocator.requests import claim_requests
from tests.allocator.builders import DRIVER, claim, device_class


def test_the_same_spec_is_set_up_once_while_its_classes_are_the_same() -> None:
    cache, wanted = SelectorCache(), claim()
    classes = {DRIVER: device_class()}
    first = claim_requests(wanted, classes, cache)
    assert claim_requests(wanted, dict(classes), cache) is first  # equal classes, same objects
    classes[DRIVER] = device_class(DRIVER, 'device.driver == "other"')  # the class changed
    again = claim_requests(wanted, classes, cache)
    assert again is not first
    assert again[0][0].device_class is classes[DRIVER]
    assert again[0][0].selectors == ('device.driver == "other"',)
    with pytest.raises(AllocationError, match="could not retrieve device class"):
        claim_requests(wanted, {}, cache)  # the class is gone: an error, never the kept set-up
