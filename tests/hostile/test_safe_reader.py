"""Files that lie about their size: a FIFO (size 0, and a read that waits for a writer forever)
or a symlink to /dev/zero (size 0, and a read that never ends) wherever the harness reads an input
file gets one line naming the file, within 2 s, never a hang or a memory blow-up."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import tests.factories as F
from harness.cli.main import app
from harness.errors import UserInputError
from harness.files import FileTooLarge, read_capped
from harness.measure import energy
from harness.run import store

# A test that would hang on a reader that follows a FIFO is stopped, not left to the suite's 900 s
# (the hang guard: how fast a refusal is, is not a unit test's to say).
pytestmark = pytest.mark.timeout(20)

SCENARIO = """name: t
models: [tiny-llama]
backend: [transformers]
quantization: [none]
batch: [1]
context: [128]
output_tokens: 16
targets: [cpu]
"""


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def zeros(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


LIARS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "fifo": (fifo, "not a regular file (a FIFO)"),
    "dev-zero": (zeros, "not a regular file (a character device"),
}


def one_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, output[-2000:]
    assert "Traceback" not in output
    return lines[0]


# ------------------------------------------------------------------------- the reader itself


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_the_reader_refuses_what_is_not_a_regular_file_naming_it(liar: str, tmp_path: Path) -> None:
    make, cause = LIARS[liar]
    path = make(tmp_path / "input.json")
    with pytest.raises(UserInputError) as caught:
        read_capped(path, 1 << 20, "row file")
    assert str(caught.value).startswith(f"{path}: row file is {cause}")
    assert "\n" not in str(caught.value)


def test_the_reader_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match=r"not a regular file \(a directory\)"):
        read_capped(tmp_path, 100, "manifest")


def test_the_reader_lets_a_missing_file_raise_as_before(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_capped(tmp_path / "absent", 100, "manifest")


@settings(max_examples=40, deadline=None)
@given(size=st.integers(0, 300), cap=st.integers(0, 300))
def test_the_reader_returns_the_bytes_up_to_the_cap_and_refuses_one_more(
    size: int, cap: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("cap") / "f"
    data = os.urandom(size)
    path.write_bytes(data)
    if size <= cap:
        assert read_capped(path, cap, "file") == data
        return
    with pytest.raises(FileTooLarge) as caught:
        read_capped(path, cap, "file")
    assert caught.value.size == size and caught.value.cap == cap
    assert f"file is {size:,} bytes; the limit is {cap:,}" in str(caught.value)


def test_a_file_whose_size_lies_low_is_still_read_only_to_the_cap() -> None:
    # /proc files say 0 bytes and hold more: what is read, not what is claimed, is checked.
    with pytest.raises(FileTooLarge, match="larger than 16 bytes"):
        read_capped(Path("/proc/self/status"), 16, "counter")


# ------------------------------------------------------------------------- each input file


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_a_scenario_that_is_not_a_regular_file_is_one_line_exit_2_within_2_s(
    liar: str, tmp_path: Path
) -> None:
    make, cause = LIARS[liar]
    path = make(tmp_path / "s.yaml")
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "plan", str(path)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    line = one_line(result.stdout + result.stderr)
    assert str(path) in line and f"scenario file is {cause}" in line


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_a_tariff_file_that_is_not_a_regular_file_is_one_line_exit_2(
    liar: str, tmp_path: Path
) -> None:
    make, cause = LIARS[liar]
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("[cpu]", "[cuda]"))
    tariffs = make(tmp_path / "t.yaml")
    result = CliRunner().invoke(app, ["plan", str(scenario), "--tariffs", str(tariffs)])
    assert result.exit_code == 2, result.output[-2000:]
    line = one_line(result.output)
    assert str(tariffs) in line and cause in line


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_a_point_file_that_is_not_a_regular_file_is_named_unreadable_by_aggregate(
    liar: str, tmp_path: Path
) -> None:
    make, cause = LIARS[liar]
    run = F.write_run(tmp_path / "run", [F.reference(), F.row(quantization="bnb-nf4")])
    bad = make(run / "points" / "liar.json")
    result = CliRunner().invoke(app, ["aggregate", str(run)])
    assert result.exit_code == 0, result.output[-2000:]
    flat = result.output
    assert f"unreadable, skipped: {bad}" in flat and cause in flat, flat[-1500:]


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_a_manifest_that_is_not_a_regular_file_is_refused_with_what_to_do(
    liar: str, tmp_path: Path
) -> None:
    make, cause = LIARS[liar]
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    out.mkdir()
    manifest = make(out / "manifest.json")
    result = CliRunner().invoke(app, ["measure", str(scenario), "--out", str(out)])
    assert result.exit_code == 2, result.output[-2000:]
    line = one_line(result.output)
    assert str(manifest) in line and cause in line and "move it away" in line
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_aggregate_refuses_a_manifest_that_is_not_a_regular_file(liar: str, tmp_path: Path) -> None:
    make, cause = LIARS[liar]
    run = F.write_run(tmp_path / "run", [F.reference(), F.row(quantization="bnb-nf4")])
    make(run / store.MANIFEST)
    result = CliRunner().invoke(app, ["aggregate", str(run)])
    assert result.exit_code == 2, result.output[-2000:]
    assert cause in one_line(result.output)


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_window_scores_that_are_not_a_regular_file_are_absent_not_a_hang(
    liar: str, tmp_path: Path
) -> None:
    make, _ = LIARS[liar]
    path = store.window_scores_path(tmp_path, "g")
    path.parent.mkdir(parents=True)
    make(path)
    assert store.load_window_nll(tmp_path, "g") is None
    assert store.load_window_tasks(tmp_path, "g") is None
    assert store.load_scores(path) is None


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_a_local_config_json_that_is_not_a_regular_file_is_one_line_naming_it(
    liar: str, tmp_path: Path
) -> None:
    make, cause = LIARS[liar]
    model = tmp_path / "model"
    model.mkdir()
    config = make(model / "config.json")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("[tiny-llama]", f"['{model}']"))
    result = CliRunner().invoke(app, ["plan", str(scenario)])
    assert result.exit_code == 2, result.output[-2000:]
    line = one_line(result.output)
    assert str(config) in line and cause in line


def rapl_tree(root: Path) -> Path:
    domain = root / "intel-rapl:0"
    domain.mkdir(parents=True)
    (domain / "name").write_text("package-0\n")
    (domain / "energy_uj").write_text("1000\n")
    (domain / "max_energy_range_uj").write_text("262143328850\n")
    return root


@pytest.mark.parametrize("counter", ["energy_uj", "max_energy_range_uj", "name"])
@pytest.mark.parametrize("liar", sorted(LIARS))
def test_a_rapl_file_that_is_not_a_regular_file_leaves_energy_unavailable_naming_it(
    liar: str, counter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make, cause = LIARS[liar]
    root = rapl_tree(tmp_path / "powercap")
    path = root / "intel-rapl:0" / counter
    path.unlink()
    make(path)
    monkeypatch.setenv(energy.POWERCAP_ENV, str(root))
    meter = energy.open_meter("cpu")
    assert not meter.available
    assert meter.unavailable_reason is not None
    assert str(path) in meter.unavailable_reason and cause in meter.unavailable_reason
    assert "\n" not in meter.unavailable_reason


def test_a_rapl_counter_longer_than_a_number_is_refused(tmp_path: Path) -> None:
    root = rapl_tree(tmp_path / "powercap")
    (root / "intel-rapl:0" / "energy_uj").write_text("1" * 10_000)
    meter = energy.open_rapl(root)
    assert meter.unavailable_reason is not None and "the limit is" in meter.unavailable_reason
