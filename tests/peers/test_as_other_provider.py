"""harness.peers.as_other_provider: a run copied with every row's provenance rewritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.peers.as_other_provider import copy_as
from harness.run import store
from tests.factories import row, write_run


def test_the_copy_carries_the_other_hostname_and_the_original_is_untouched(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [row(batch=1), row(batch=4)])
    assert copy_as(run, tmp_path / "copy", hostname="node-7", device_name="Other CPU") == 2
    rows, bad = store.read_rows(tmp_path / "copy")
    assert not bad
    assert {(r.provenance.hostname, r.provenance.device_name) for r in rows} == {
        ("node-7", "Other CPU")
    }
    before, _ = store.read_rows(run)
    assert "node-7" not in {r.provenance.hostname for r in before}


def test_an_existing_destination_is_refused(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [row()])
    (tmp_path / "copy").mkdir()
    with pytest.raises(SystemExit, match="exists"):
        copy_as(run, tmp_path / "copy", hostname="h")
