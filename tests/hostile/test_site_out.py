"""Round two's last cases: `harness site --out` never writes into a run folder (its root or its
`points/`, given or not), and a model path that is a symlink loop is refused saying so."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from tests import factories as F


def one_line_error(output: str) -> str:
    lines = [x for x in output.splitlines() if x.strip()]
    assert len(lines) == 1, output[-2000:]
    assert "Traceback" not in output and lines[0].startswith("error: ")
    assert len(lines[0]) < 600, lines[0][:600]
    return lines[0]


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    """Two run folders: `a` is published, `b` is another run beside it, not named."""
    a = F.write_run(tmp_path / "a", F.small_grid(run="a"))
    b = F.write_run(tmp_path / "b", F.small_grid(run="b"))
    return a, b


@pytest.mark.parametrize(
    "where",
    [
        "a/points",  # the run's points/ folder itself
        "a/points/site",  # a new folder inside points/: its files would be read back as rows
        "a/site",  # inside the run's root
        "a/published/site",
        "b/site",  # inside another run, not given
        "b/points/site",
    ],
)
def test_a_site_inside_a_run_folder_is_refused_and_nothing_is_written(
    runs: tuple[Path, Path], where: str
) -> None:
    a, _ = runs
    root = a.parent
    before = listing(root)
    result = CliRunner().invoke(app, ["site", str(a), "--out", str(root / where)])
    assert result.exit_code == 2, result.output[-2000:]
    line = one_line_error(result.output)
    assert "--out" in line and "inside the run folder" in line
    assert listing(root) == before


def test_a_site_beside_the_runs_is_written(runs: tuple[Path, Path]) -> None:
    a, _ = runs
    result = CliRunner().invoke(app, ["site", str(a), "--out", str(a.parent / "site")])
    assert result.exit_code == 0, result.output[-2000:]
    assert (a.parent / "site" / "index.html").is_file()


def test_a_site_out_through_a_symlink_into_a_run_is_refused(runs: tuple[Path, Path]) -> None:
    a, _ = runs
    link = a.parent / "looks-elsewhere"
    link.symlink_to(a / "points")
    result = CliRunner().invoke(app, ["site", str(a), "--out", str(link / "site")])
    assert result.exit_code == 2, result.output[-2000:]
    assert "inside the run folder" in one_line_error(result.output)
    assert not (a / "points" / "site").exists()


def test_a_site_out_that_is_a_symlink_loop_is_one_line(runs: tuple[Path, Path]) -> None:
    a, _ = runs
    loop = a.parent / "loop"
    loop.symlink_to(loop.name)
    result = CliRunner().invoke(app, ["site", str(a), "--out", str(loop / "site")])
    assert result.exit_code == 2, result.output[-2000:]
    assert "symlink loop" in one_line_error(result.output)


# --- a model path that is a symlink loop -------------------------------------------------------

SCENARIO = """name: loop
models: [{model}]
backend: [transformers]
quantization: [none]
kv_cache_dtype: [auto]
batch: [1]
context: [64]
output_tokens: 8
targets: [cpu]
"""


@pytest.mark.parametrize(
    "model",
    [
        "./loop",  # the folder is a link to itself
        "./loop/inner",  # a path through the loop (also a hub id's shape)
        "./model",  # a real folder whose config.json links to itself
    ],
)
def test_a_model_path_that_is_a_symlink_loop_is_refused_saying_so(
    tmp_path: Path, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").symlink_to("config.json")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.format(model=model))
    result = CliRunner().invoke(app, ["plan", str(scenario)])
    assert result.exit_code == 2, result.output[-2000:]
    line = one_line_error(result.output)
    assert "symlink loop" in line and "models" in line and str(scenario) in line
    assert os.path.islink(tmp_path / "loop")  # left as it was
