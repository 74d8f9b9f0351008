"""Publishing: every file, round-trips, a self-contained and escaped HTML, atomic replacement."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from harness.errors import UserInputError
from harness.results import publish
from harness.results.aggregate import aggregate_run
from harness.results.publish import FILES, headline_table, report
from harness.results.publish import files as publish_files
from harness.spec.tariffs import load_tariffs
from tests import factories as F

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tariffs" / "example.yaml"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "run"
    rows = F.small_grid() + F.small_grid(model=F.XSS_MODEL)
    rows += [F.row(status="oom", decode_tok_s=None, error="CUDA out of memory <b>")]
    F.write_run(run_dir, rows)
    F.write_bad_file(run_dir)
    report(run_dir, load_tariffs(EXAMPLE), utilisation=0.8)
    return run_dir


def test_every_file_is_published_and_nothing_temporary_is_left(run: Path) -> None:
    published = run / "published"
    assert sorted(p.name for p in published.iterdir()) == sorted(FILES)
    assert sorted(p.name for p in run.iterdir()) == ["points", "published"]


def test_points_parquet_round_trips_to_the_aggregated_frame(run: Path) -> None:
    expected = aggregate_run(run, load_tariffs(EXAMPLE), 0.8).points
    back = pd.read_parquet(run / "published" / "points.parquet")
    pd.testing.assert_frame_equal(back, expected)
    csv = pd.read_csv(run / "published" / "points.csv")
    assert len(csv) == len(expected) and list(csv.columns) == list(expected.columns)


def test_cost_csv_has_the_published_columns(run: Path) -> None:
    cost = pd.read_csv(run / "published" / "cost.csv")
    assert set(F.COST_CSV_CONTRACT) <= set(cost.columns)
    assert len(cost) == 96 * 3  # 96 ok rows on two GPUs with tariffs × 3 packages
    assert (cost["utilisation"] == 0.8).all()


def test_summary_is_strict_json_with_counts_and_the_unreadable_file(run: Path) -> None:
    def no_nan(value: str) -> None:
        raise AssertionError(f"{value} in summary.json")

    data = json.loads((run / "published" / "summary.json").read_text(), parse_constant=no_nan)
    assert data["counts"]["rows"] == 97
    assert data["counts"]["by_status"] == {"ok": 96, "oom": 1}
    assert [Path(u["file"]).name for u in data["unreadable"]] == ["broken.json"]
    assert data["headline"] and data["cheapest"] and data["tariffs"]
    assert any("CC BY-SA 3.0" in lic["attribution"] for lic in data["licences"])


def test_readme_has_the_headline_method_formulas_and_licences(run: Path) -> None:
    text = (run / "published" / "README.md").read_text()
    assert "## Headline" in text and "| model |" in text
    assert "package price ÷ (days × 24)" in text
    assert "CC BY-SA 3.0" in text and "CC BY-SA 4.0" in text and "WikiText-2" in text
    assert "ARC" in text
    # escaped as Markdown (a renderer shows it as text), not as HTML entities
    assert "<script>" not in text and "\\<script\\>alert(1)\\</script\\>" in text
    assert "broken.json" in text


def test_the_html_report_reaches_nothing_outside_itself(run: Path) -> None:
    html = (run / "published" / "report.html").read_text()
    for attr in re.findall(r"""(?:src|href|xlink:href|action)\s*=\s*["']?([^"'\s>]+)""", html):
        assert attr.startswith("#"), attr
    assert not re.search(r"<link\b|<iframe\b|<img\b|@import|url\(", html)
    assert 'http-equiv="Content-Security-Policy"' in html
    assert html.count("<script") == 1  # the one inline sorting script


def test_the_html_report_escapes_every_string(run: Path) -> None:
    html = (run / "published" / "report.html").read_text()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "CUDA out of memory &lt;b&gt;" in html
    assert "<svg" in html and "<circle" in html and "<rect" in html
    assert html.count('class="sortable"') >= 3
    assert "CC BY-SA 3.0" in html and "CC BY-SA 4.0" in html


def test_headline_rows_are_strings_and_compact_rows_fit_a_terminal(run: Path) -> None:
    result = aggregate_run(run, load_tariffs(EXAMPLE), 0.8)
    rows = headline_table(result, "99")
    assert len(rows) == 2 * 2 * 3  # 2 models × 2 GPUs × 3 packages
    assert all(isinstance(v, str) for row in rows for v in row.values())
    assert {r["class"] for r in rows} == {"99"}
    compact = headline_table(result, "99.9", package_days=30, compact=True)
    assert list(compact[0]) == list(publish.COMPACT)
    assert {r["days"] for r in compact} == {"30"}
    with pytest.raises(UserInputError, match="quality class"):
        headline_table(result, "95")


def test_a_failure_while_publishing_leaves_the_previous_publication_untouched(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = (run / "published" / "README.md").read_text()

    def boom(*args: object, **kwargs: object) -> str:
        raise RuntimeError("disk full")

    monkeypatch.setattr(publish_files, "report_html", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        report(run, load_tariffs(EXAMPLE), utilisation=0.8)
    assert (run / "published" / "README.md").read_text() == before
    assert sorted(p.name for p in (run / "published").iterdir()) == sorted(FILES)
    assert sorted(p.name for p in run.iterdir()) == ["points", "published"]


def test_a_failure_on_the_first_publication_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = F.write_run(tmp_path / "run", F.small_grid())

    def boom(*args: object, **kwargs: object) -> str:
        raise RuntimeError("killed")

    monkeypatch.setattr(publish_files, "readme", boom)
    with pytest.raises(RuntimeError):
        report(run_dir, load_tariffs(EXAMPLE))
    assert sorted(p.name for p in run_dir.iterdir()) == ["points"]


def test_publishing_again_replaces_the_old_files(tmp_path: Path) -> None:
    run_dir = F.write_run(tmp_path / "run", F.small_grid())
    report(run_dir, None)
    assert "nothing is priced" in (run_dir / "published" / "README.md").read_text()
    report(run_dir, load_tariffs(EXAMPLE), utilisation=0.5)
    text = (run_dir / "published" / "README.md").read_text()
    assert "Utilisation assumed: 0.5" in text and "nothing is priced" not in text
    assert sorted(p.name for p in run_dir.iterdir()) == ["points", "published"]


def test_report_cmd_publishes_and_prints_the_headline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli.results import report_cmd

    run_dir = F.write_run(tmp_path / "run", F.small_grid())
    report_cmd(run_dir, tariffs=EXAMPLE)
    out = capsys.readouterr().out
    assert "published:" in out and "Cheapest configuration" in out
    assert (run_dir / "published" / "report.html").is_file()
    with pytest.raises(UserInputError, match="utilisation"):
        report_cmd(run_dir, tariffs=EXAMPLE, utilisation=2.0)
    with pytest.raises(UserInputError, match="run folder not found"):
        report_cmd(tmp_path / "missing", tariffs=EXAMPLE)
