"""`harness site` end to end on real runs: the shipped tiny model measured once on this CPU (the
default bench's transformers grid in small: tests/fixtures/tiny-sweep.yaml), the run copied and
its provenance rewritten through the store's own writer to play a node at another provider, and a
third copy with another corpus hash that must be refused unless --allow-mixed."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.cli.main import app

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "fixtures" / "tiny-sweep.yaml"
TARIFFS = ROOT / "tariffs" / "example.yaml"


def rewrite(run: Path, **provenance: str) -> None:
    """Every row's provenance (and the manifest's corpus hash) changed through harness.run.store,
    by the script the README shows for this (scripts/as_other_provider.py)."""
    spec = importlib.util.spec_from_file_location(
        "as_other_provider", ROOT / "scripts" / "as_other_provider.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.rewrite(run, **provenance) > 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("site-cli")
    first = root / "h100-provider-one"
    done = CliRunner().invoke(app, ["measure", str(SCENARIO), "--out", str(first)])
    assert done.exit_code == 0, done.output
    second = root / "mi300x-provider-two"
    shutil.copytree(first, second)
    rewrite(second, hostname="node-7.provider-two", device_name="Provider Two CPU")
    third = root / "other-corpus"
    shutil.copytree(first, third)
    rewrite(third, corpus_hash="0123456789abcdef")
    return {"one": first, "two": second, "other": third}


def site(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["site", *map(str, args), "--tariffs", str(TARIFFS)], catch_exceptions=False
    )
    return result.exit_code, result.output


def test_two_runs_from_two_providers_make_one_site(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "site"
    code, output = site(runs["one"], runs["two"], "--out", out)
    assert code == 0, output
    assert f"site: {out}/index.html (2 runs: h100-provider-one, mi300x-provider-two)" in output
    for name in ("h100-provider-one", "mi300x-provider-two"):
        assert (out / "runs" / name / "report.html").is_file()
    points = pd.read_csv(out / "points.csv")
    assert points.groupby("run")["key"].count().to_dict() == {
        "h100-provider-one": 8,
        "mi300x-provider-two": 8,
    }
    cost = pd.read_csv(out / "cost.csv")
    hosts = dict(zip(cost["run"], cost["provenance_hostname"], strict=True))
    assert hosts["mi300x-provider-two"] == "node-7.provider-two"
    assert hosts["h100-provider-one"] != "node-7.provider-two"
    assert cost["provenance_git_sha"].notna().all() and cost["provenance_harness"].notna().all()
    assert set(points["provenance_corpus_hash"]) == {points["provenance_corpus_hash"][0]}
    page = (out / "index.html").read_text()
    assert 'href="runs/mi300x-provider-two/report.html"' in page and "MIXED" not in page


def test_a_run_with_another_corpus_hash_is_refused_with_exit_2_and_nothing_written(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "site"
    code, output = site(runs["one"], runs["two"], runs["other"], "--out", out)
    assert code == 2
    line = next(x for x in output.splitlines() if x.startswith("corpus hash differs"))
    assert "run h100-provider-one" in line and "run other-corpus" in line
    assert line.endswith("has 0123456789abcdef")
    assert "--allow-mixed" in output
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_allow_mixed_builds_it_and_states_the_mix(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "site"
    code, output = site(runs["one"], runs["other"], "--out", out, "--allow-mixed")
    assert code == 0, output
    assert "mixed: corpus hash differs: run h100-provider-one" in output
    page = (out / "index.html").read_text()
    assert "Mixed runs: not measured under the same conditions" in page
    assert "0123456789abcdef" in page


def test_the_same_run_twice_is_exit_2(runs: dict[str, Path], tmp_path: Path) -> None:
    code, output = site(runs["one"], runs["one"], "--out", tmp_path / "site")
    assert code == 2 and "the same run folder is given twice" in output
    assert not (tmp_path / "site").exists()
