"""A full disk, a read-only or unwritable folder, a file where a folder goes: one line each, exit 2,
nothing lost (every write is atomic); the point in flight is measured again on resume. A killed
report's temp folder is removed by the next report."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.results.publish import report
from harness.run import store
from tests import factories as F

SCENARIO = (
    "name: faults\nmodels: [tiny-llama]\nbackend: [transformers]\nquantization: [none]\n"
    "batch: [1, 2]\ncontext: [16]\noutput_tokens: 4\ntargets: [cpu]\nrepeats: 1\nwarmups: 0\n"
    "quality: {window_tokens: 32, max_windows: 2, arc_items: 0, bootstrap_samples: 50}\n"
)


def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return path


def one_line_error(output: str, word: str) -> None:
    errors = [line for line in output.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and word in errors[0], output[-3000:]
    assert "Traceback" not in output


def ok_keys(run: Path) -> set[str]:
    rows, bad = store.read_rows(run)
    assert not bad
    return {r.key for r in rows if r.status == "ok"}


@pytest.mark.engine  # the point in flight is measured on the real tiny model
def test_a_full_disk_is_one_line_and_the_point_in_flight_is_measured_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    real_replace = os.replace
    failed: list[str] = []

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        is_row = Path(dst).parent == out / store.POINTS
        if is_row and not failed and '"status": "ok"' in Path(src).read_text():
            failed.append(Path(dst).stem)  # the first measured row: the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src))
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    first = CliRunner().invoke(app, ["measure", str(scenario(tmp_path)), "--out", str(out)])
    assert first.exit_code == 2, first.output[-3000:]
    one_line_error(first.output, "ENOSPC")
    assert failed and failed[0] not in ok_keys(out)  # nothing half-written under its name
    assert not list((out / store.POINTS).glob(".*.tmp"))  # nor a temp file left

    monkeypatch.setattr(os, "replace", real_replace)
    again = CliRunner().invoke(app, ["measure", str(scenario(tmp_path)), "--out", str(out)])
    assert again.exit_code == 0, again.output[-3000:]
    assert failed[0] in ok_keys(out) and len(ok_keys(out)) == 2
    runs = json.loads((out / store.MANIFEST).read_text())["runs"]
    assert len(runs) == 2 and "ended" in runs[-1]


@pytest.mark.parametrize(("code", "name"), [(errno.EROFS, "EROFS"), (errno.EACCES, "EACCES")])
def test_a_read_only_or_unwritable_folder_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, name: str
) -> None:
    """Simulated (tests run as root, where chmod does not stop a write): the first file made in
    the run folder fails as the kernel would fail it."""
    out = tmp_path / "run"
    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).startswith(str(out)) and flags & os.O_CREAT:
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    result = CliRunner().invoke(app, ["measure", str(scenario(tmp_path)), "--out", str(out)])
    assert result.exit_code == 2, result.output[-3000:]
    one_line_error(result.output, name)


def test_out_naming_an_existing_file_is_one_line_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "a-file"
    out.write_text("mine")
    result = CliRunner().invoke(app, ["measure", str(scenario(tmp_path)), "--out", str(out)])
    assert result.exit_code == 2, result.output[-3000:]
    one_line_error(result.output, str(out))
    assert out.read_text() == "mine"


def test_a_killed_reports_temp_folders_are_removed_by_the_next_report(tmp_path: Path) -> None:
    run = F.write_run(tmp_path / "run", F.small_grid())
    left = [run / ".published.tmp-deadbeef", run / ".published.old-cafe0123"]
    for folder in left:
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "points.csv").write_text("half")
    report(run, None)
    assert (run / "published" / "report.html").is_file()
    assert not [p.name for p in run.iterdir() if p.name.startswith(".published.")]


def test_aggregate_reads_a_run_folder_it_cannot_write_and_report_says_why_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only archive of runs (simulated: the lock file cannot be made there)."""
    run = F.write_run(tmp_path / "run", F.small_grid())
    real_open = os.open

    def read_only(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).startswith(str(run)) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    aggregated = CliRunner().invoke(app, ["aggregate", str(run)])
    assert aggregated.exit_code == 0, aggregated.output[-3000:]
    reported = CliRunner().invoke(app, ["report", str(run)])
    assert reported.exit_code == 2, reported.output[-3000:]
    one_line_error(reported.output, "EROFS")
