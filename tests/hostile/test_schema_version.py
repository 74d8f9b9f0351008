"""The manifest records the result schema its run writes; a folder whose manifest claims a newer
schema is neither resumed (sweep.begin) nor read (load_run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.results.frame import load_run
from harness.row import SCHEMA_VERSION
from harness.run import store, sweep

SCENARIO = Path(__file__).parents[1] / "fixtures" / "tiny-sweep.yaml"


def begin(run: Path) -> None:
    sweep.begin(SCENARIO, run, gpu=None, resume=True, mode="ray")


def test_the_manifest_records_the_schema_version(tmp_path: Path) -> None:
    run = tmp_path / "run"
    begin(run)
    runs = json.loads((run / store.MANIFEST).read_text())["runs"]
    assert runs[-1]["schema_version"] == SCHEMA_VERSION


@pytest.mark.parametrize("claim", [SCHEMA_VERSION + 1, "2", True])
def test_a_run_of_a_newer_schema_is_neither_resumed_nor_read(tmp_path: Path, claim: object) -> None:
    run = tmp_path / "run"
    begin(run)
    manifest = json.loads((run / store.MANIFEST).read_text())
    manifest["runs"][-1]["schema_version"] = claim
    (run / store.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(UserInputError, match=f"writes version {SCHEMA_VERSION}") as err:
        begin(run)
    assert str(claim)[:40] in err.value.render()
    with pytest.raises(UserInputError, match="schema"):
        load_run(run)
