"""harness.atomic: a file is either the old one or the new one, never half; its mode is what
`open` would give, or the mode asked for (a secret's 0600)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import atomic


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_write_makes_the_folder_and_leaves_only_the_file(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "row.json"
    atomic.atomic_write_bytes(target, b"abc")
    assert target.read_bytes() == b"abc"
    assert [p.name for p in target.parent.iterdir()] == ["row.json"]  # no temp file left


def test_a_file_gets_the_umask_mode_not_mkstemps_private_one(
    tmp_path: Path, umask_022: None
) -> None:
    target = tmp_path / "x.txt"
    atomic.atomic_write_text(target, "x")
    assert mode_of(target) == 0o644  # 0o666 & ~0o022


def test_a_secret_is_written_with_the_mode_asked_for(tmp_path: Path, umask_022: None) -> None:
    target = tmp_path / "token"
    atomic.atomic_write_bytes(target, b"s3cret", mode=0o600)
    assert mode_of(target) == 0o600


def test_the_umask_is_read_without_being_changed(umask_022: None) -> None:
    assert atomic.umask() == 0o022
    assert atomic.umask() == 0o022  # reading twice: still what it was


def test_public_mode_gives_a_folder_the_umask_folder_mode(tmp_path: Path, umask_022: None) -> None:
    folder = tmp_path / "d"
    folder.mkdir(mode=0o700)
    atomic.public_mode(folder, folder=True)
    assert mode_of(folder) == 0o755  # 0o777 & ~0o022


def test_a_failed_rename_keeps_the_old_file_and_names_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "rows.json"
    target.write_text("old")

    def full_disk(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError) as caught:
        atomic.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["rows.json"]  # the temp file is removed
    assert caught.value.filename == str(target)


def test_json_is_sorted_indented_and_ends_with_a_newline(tmp_path: Path) -> None:
    target = tmp_path / "s.json"
    atomic.atomic_write_json(target, {"b": 1, "a": [2]})
    assert target.read_text() == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}\n'
    assert json.loads(target.read_text()) == {"a": [2], "b": 1}
