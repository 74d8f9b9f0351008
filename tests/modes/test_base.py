"""harness.modes.base: a mode's parts as lazy "module:attr" references in their role's file."""

from __future__ import annotations

import dataclasses

import pytest

from harness.modes.base import mode


def test_a_part_lives_in_the_module_of_its_role() -> None:
    offline = mode("offline", "a batch", points="offline_points", run="iter_offline")
    assert offline.ref("points") == "harness.modes.offline.points:offline_points"
    assert offline.ref("run") == "harness.modes.offline.device.run:iter_offline"
    assert offline.ref("price") is None  # left out: absent


def test_an_unknown_part_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"unknown mode parts \['colour'\]"):
        mode("offline", "a batch", colour="blue")


def test_a_part_is_imported_only_when_loaded() -> None:
    lazy = dataclasses.replace(mode("x", ""), parts={"points": "harness.units:to_mib"})
    to_mib = lazy.load("points")
    assert to_mib(2_097_152) == 2.0  # 2 * 1_048_576 bytes


def test_loading_a_part_the_mode_has_not_is_a_key_error_naming_both() -> None:
    with pytest.raises(KeyError, match="mode 'offline' has no 'price' part"):
        mode("offline", "a batch").load("price")
