"""The site gates each run as its own report does (issue 35, cause 5): a run that gates on
``[ppl]`` passes a configuration on its own page, so the site's cost and cheapest tables price it
too; another run gating on ``[ppl, arc]`` (as a manifest of a run before ARC was a task says:
read as ``[ppl, tasks]``) fails the same configuration on both; the runs table and site.json say
which metrics each run is gated on."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.results.site import build_site
from harness.row import Provenance, ResultRow
from tests import factories as F

PROV = Provenance(device_name="NVIDIA H100 80GB HBM3", harness="0.1.0", corpus_hash="c0ffee")


def rows(run: str) -> list[ResultRow]:
    """A reference and bnb-int8, whose ppl passes class 99 (ΔNLL ln(1.0005) = 0.0005, 90 % high
    0.0005 + 0.0005 × 1.645 / 1.96 = 0.00092 ≤ 0.01005) and whose ARC fails it (60 of 2,376
    items lost, none gained: a drop of 0.0253 whose 90 % low end is above 0.01 × 0.60 = 0.006)."""
    return [
        F.reference(key=f"{run}-ref", run=run, provenance=PROV, decode_tok_s=1000.0,
                    **F.quality(100.0), **F.arc(0.60, 0, 0)),
        F.row(key=f"{run}-int8", run=run, quantization="bnb-int8", provenance=PROV,
              decode_tok_s=4000.0, **F.quality(100.05), **F.arc(0.60, 60, 0)),
    ]  # fmt: skip


def run_folder(root: Path, name: str, gate: list[str] | None) -> Path:
    own = rows(name)
    run = F.write_run(root / name, own)
    if gate is not None:
        F.write_manifest(run, own, quality_gate=gate)
    return run


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gates")
    ppl_only = run_folder(root, "ppl-only", ["ppl"])
    both = run_folder(root, "ppl-arc", ["ppl", "arc"])
    out = root / "site"
    build_site([ppl_only, both], out, F.tariffs())
    return out


def verdicts(csv: Path) -> dict[str, str]:
    points = pd.read_csv(csv)
    return dict(zip(points["key"], points["verdict_99"], strict=True))


def test_each_run_s_own_page_gives_its_own_gate_s_verdict(site: Path) -> None:
    assert verdicts(site / "runs" / "ppl-only" / "points.csv")["ppl-only-int8"] == "pass"
    assert verdicts(site / "runs" / "ppl-arc" / "points.csv")["ppl-arc-int8"] == "fail"


def test_the_site_gives_every_row_its_own_run_s_verdict(site: Path) -> None:
    mine = verdicts(site / "points.csv")
    assert mine["ppl-only-int8"] == "pass"  # once "fail": re-gated on arc, which its run is not
    assert mine["ppl-arc-int8"] == "fail"


def test_the_site_prices_what_its_run_s_page_prices(site: Path) -> None:
    cost = pd.read_csv(site / "cost.csv", dtype={"quality_class": str})
    int8 = cost[cost["quantization"] == "bnb-int8"].groupby("run")["quality_class"]
    # ppl-only: ΔNLL's 90 % high 0.00092 ≤ 0.0010005 passes class 99.9 too; ppl-arc: ARC fails
    assert {run: set(c) for run, c in int8} == {"ppl-only": {"99.9"}, "ppl-arc": {"below"}}
    for run in ("ppl-only", "ppl-arc"):
        own = pd.read_csv(site / "runs" / run / "cost.csv", dtype={"quality_class": str})
        mine = cost[cost["run"] == run]
        assert sorted(own["quality_class"]) == sorted(mine["quality_class"])
    cheapest = pd.read_csv(site / "cheapest.csv", dtype={"quality_class": str})
    class_99 = cheapest[cheapest["quality_class"] == "99"]
    # bnb-int8 of ppl-only (4,000 tok/s) beats both references (1,000 tok/s) in every package
    assert set(zip(class_99["run"], class_99["quantization"], strict=True)) == {
        ("ppl-only", "bnb-int8")
    }


def test_the_runs_table_and_site_json_say_what_each_run_gates_on(site: Path) -> None:
    runs = pd.read_csv(site / "runs.csv").set_index("run")
    assert runs.loc["ppl-only", "gated_on"] == "ppl"
    assert runs.loc["ppl-arc", "gated_on"] == "ppl, tasks"
    data = json.loads((site / "site.json").read_text())
    assert {r["run"]: r["gated_on"] for r in data["runs"]} == {
        "ppl-only": "ppl", "ppl-arc": "ppl, tasks",
    }  # fmt: skip
    assert data["verdicts_differ"] == []
    page = (site / "index.html").read_text()
    assert "gated on" in page and "as its own report gates it" in page
    assert 'id="verdicts-differ"' not in page


def test_a_run_without_a_gate_in_its_manifest_is_gated_on_what_its_rows_scored(
    tmp_path: Path,
) -> None:
    """No manifest: every metric its rows scored (ppl and tasks here), on its page and the site."""
    run = run_folder(tmp_path, "old", None)
    out = tmp_path / "site"
    build_site([run], out, F.tariffs())
    assert verdicts(out / "points.csv")["old-int8"] == "fail"
    assert verdicts(out / "runs" / "old" / "points.csv")["old-int8"] == "fail"
    assert pd.read_csv(out / "runs.csv")["gated_on"].tolist() == ["ppl, tasks"]
