"""harness.modes: the registry of modes, asked by name."""

from __future__ import annotations

import pytest

from harness import modes
from harness.errors import UserInputError


def test_the_registry_lists_the_modes_in_the_order_a_group_runs_them() -> None:
    assert list(modes.REGISTRY)[:3] == ["offline", "serving", "training"]


def test_a_mode_is_found_by_its_name() -> None:
    assert modes.get("serving") is modes.REGISTRY["serving"]
    assert modes.get("serving").name == "serving"


def test_an_unknown_mode_is_refused_with_a_near_miss_and_the_known_ones() -> None:
    with pytest.raises(UserInputError) as caught:
        modes.get("servng")
    assert "unknown mode 'servng' (did you mean 'serving'?)" in str(caught.value)
    assert "offline, serving, training" in str(caught.value)
