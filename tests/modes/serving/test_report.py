"""The search's outcome and cost against interactivity, from a frame of serving rows: two runs of
one model at equal quality, one on an RTX 4090 and one on an H100 (each a reference, an offline
row and serving levels; the H100 run also a search). Checked: `max_rate_at_slo`, its bracket,
goodput and $/Mtok there; tok/s/user = 1000 / TPOT; the band table, where the cheaper card flips;
and the report's chart and tables (the browser check: tests/results/test_report_browser.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from harness.results.aggregate import Aggregate, aggregate
from harness.results.frame import frame_from_rows
from harness.results.pricing import package_usd_per_hour
from harness.results.publish.files import report
from harness.row import ResultRow
from tests.factories import quality, reference, row, tariff, tariffs

GROUP = "tiny-llama|vllm|none|kv=auto|cuda"
BANDS = "10 30 100 200"
# per GPU: (concurrency, output tok/s, TPOT p50 ms): tok/s/user = 1000 / TPOT
LEVELS = {
    "RTX-4090": [(1, 100.0, 10.0), (8, 320.0, 25.0), (32, 480.0, 1000 / 15)],
    "H100-SXM-80GB": [(1, 250.0, 4.0), (16, 1920.0, 1000 / 120), (64, 2400.0, 20.0)],
}
# the H100 run's search on the request rate: (rate, output tok/s, attainment), target 0.99
PROBES = [(1.0, 130.0, 1.0), (16.0, 2050.0, 0.5), (4.0, 515.0, 1.0), (8.0, 1000.0, 0.995),
          (11.3137, 1400.0, 0.9)]  # fmt: skip


def serving(run: str, gpu: str, **kw: Any) -> ResultRow:
    fields: dict[str, Any] = {
        "run": run, "mode": "serving", "group": GROUP, "backend": "vllm", "gpu": gpu,
        "status": "ok", "requests_sent": 64, "requests_ok": 64, "requests_failed": 0,
        "tpot_ms_p99": 30.0, "ttft_ms_p99": 300.0, "slo_tpot_ms": 50.0, "slo_ttft_ms": 2000.0,
        "slo_attainment_target": 0.99, "slo_attainment": 1.0, "interactivity_tpot": "p50",
        "interactivity_bands": BANDS, "decode_tok_s": None, "total_tok_s": None, "ppl": None,
        "ppl_ci_low": None, "ppl_ci_high": None, "dnll_vs_ref": None, "dnll_ci_low": None,
        "dnll_ci_high": None,
    }  # fmt: skip
    fields.update(kw)
    return row(**fields)


def rows(rtx_ppl: float = 100.05) -> list[ResultRow]:
    """Both runs; ``rtx_ppl``: the RTX configuration's perplexity (the reference's is 100)."""
    out: list[ResultRow] = []
    for run, gpu in (("run-a", "H100-SXM-80GB"), ("run-b", "RTX-4090")):
        ppl = rtx_ppl if gpu == "RTX-4090" else 100.05
        out += [
            reference(run=run, gpu=gpu, group="tiny-llama|transformers|none|kv=auto|cuda"),
            row(run=run, gpu=gpu, group=GROUP, backend="vllm", **quality(ppl)),
        ]
        for c, tok_s, tpot in LEVELS[gpu]:
            out.append(serving(run, gpu, concurrency=c, output_tok_s=tok_s, tpot_ms_p50=tpot,
                               goodput_rps=tok_s / 128))  # fmt: skip
    for i, (rate, tok_s, share) in enumerate(PROBES):
        out.append(
            serving("run-a", "H100-SXM-80GB", request_rate=rate, output_tok_s=tok_s,
                    tpot_ms_p50=30.0, slo_attainment=share, goodput_rps=rate * share,
                    search_axis="request_rate", search_probe=i)
        )  # fmt: skip
    out.append(
        serving("run-a", "H100-SXM-80GB", search_axis="request_rate", max_rate_at_slo=8.0,
                search_bracket_low=8.0, search_bracket_high=11.3137, search_probes=5,
                search_stop="tolerance", requests_sent=None, requests_ok=None,
                requests_failed=None, slo_attainment=None)
    )  # fmt: skip
    return out


TARIFFS = tariffs(tariff(), tariff("RTX-4090", provider="CheapCloud", hourly_usd=4.0))


@pytest.fixture(scope="module")
def result() -> Aggregate:
    return aggregate(frame_from_rows(rows()), TARIFFS)


def per_mtok(gpu: str, days: int, tok_s: float) -> float:
    """The at-SLO formula by hand: one card of the package, its hour ÷ tokens per hour × 10⁶."""
    (t,) = [t for t in TARIFFS.tariffs if t.gpu == gpu]
    (package,) = [p for p in t.packages if p.days == days]
    price = t.hourly_usd * 24 * days * (1 - package.discount_pct / 100)
    hour = package_usd_per_hour(price, days, 1.0, 1 / t.gpus_per_node)
    return float(hour) / (tok_s * 3600) * 1e6


def test_the_search_row_gives_max_rate_its_bracket_goodput_and_cost_there(
    result: Aggregate,
) -> None:
    table = result.table("slo_search")
    assert len(table) == 3  # one search × the H100's three packages
    first = table.iloc[0]
    assert first["max_rate_at_slo"] == 8.0
    assert (first["search_bracket_low"], first["search_bracket_high"]) == (8.0, 11.3137)
    assert first["search_probes"] == 5 and first["search_stop"] == "tolerance"
    assert first["goodput_rps_at_max_rate"] == pytest.approx(8.0 * 0.995)
    assert first["output_tok_s_at_max_rate"] == 1000.0
    for rec in table.to_dict(orient="records"):
        expected = per_mtok("H100-SXM-80GB", rec["package_days"], 1000.0)
        assert rec["usd_per_mtok_output_at_max_rate"] == pytest.approx(expected)


def test_the_search_row_is_in_no_level_table_and_its_probes_are_levels(result: Aggregate) -> None:
    assert result.table("serving")["max_rate_at_slo"].isna().all()
    probes = result.table("serving")[result.table("serving")["search_probe"].notna()]
    assert len(probes) == len(PROBES)
    assert result.counts["serving_rows"] == 12 and result.counts["serving_search_rows"] == 1
    # the level at the SLO may be a probe: the fastest one meeting 0.99 (8 req/s, 1000 tok/s)
    # loses to c64 at 2400 tok/s, which meets it too
    h100 = result.table("at_slo")[result.table("at_slo")["run"] == "run-a"].iloc[0]
    assert h100["output_tok_s_at_slo"] == 2400.0


def test_interactivity_is_1000_over_the_tpot_and_each_level_is_priced_per_package(
    result: Aggregate,
) -> None:
    curve = result.table("interactivity")
    assert len(curve) == (6 + len(PROBES)) * 3  # every ok level × the 3 packages of its card
    for rec in curve.to_dict(orient="records"):
        levels = LEVELS[rec["gpu"]]
        tpot = next((t for c, _, t in levels if rec["level"] == f"concurrency {c}"), 30.0)
        assert rec["tok_s_per_user"] == pytest.approx(1000.0 / tpot)
        expected = per_mtok(rec["gpu"], rec["package_days"], rec["output_tok_s"])
        assert rec["usd_per_mtok_output"] == pytest.approx(expected)


def test_the_cheapest_card_per_band_flips_where_the_hand_calculation_says(
    result: Aggregate,
) -> None:
    # 3-day packages by hand ($/Mtok = card-hour / tokens per hour): RTX c32 (15 tok/s/user) is
    # the cheapest level of all; from 30 tok/s/user only H100 levels beat RTX c8 (40/user):
    # H100 c64 (50/user, 2400 tok/s); from 100, H100 c16 (120/user); from 200, H100 c1 alone.
    bands = result.table("interactivity_bands")
    three = bands[(bands["quality_class"] == "99") & (bands["package_days"] == 3)]
    got = [(b, gpu, level) for b, gpu, level in
           zip(three["band_tok_s_user"], three["gpu"], three["level"], strict=True)]  # fmt: skip
    assert got == [
        (10.0, "RTX-4090", "concurrency 32"),
        (30.0, "H100-SXM-80GB", "concurrency 64"),
        (100.0, "H100-SXM-80GB", "concurrency 16"),
        (200.0, "H100-SXM-80GB", "concurrency 1"),
    ]
    assert list(three["gpu_flips"]) == [False, True, False, False]
    cheapest = per_mtok("RTX-4090", 3, 480.0)
    assert three["usd_per_mtok_output"].iloc[0] == pytest.approx(cheapest)
    assert cheapest < per_mtok("H100-SXM-80GB", 3, 2400.0) < per_mtok("RTX-4090", 3, 320.0)


def test_no_band_is_met_by_a_level_failing_the_quality_class() -> None:
    bands = aggregate(frame_from_rows(rows(rtx_ppl=110.0)), TARIFFS).table("interactivity_bands")
    assert (bands[bands["quality_class"] == "99"]["gpu"] == "H100-SXM-80GB").all()
    assert not bands[bands["quality_class"] == "99"].empty


def test_the_report_shows_the_chart_with_its_front_and_the_band_table(
    result: Aggregate, tmp_path: Path
) -> None:
    out = report(tmp_path / "run", TARIFFS, result=result)
    html = (out / "report.html").read_text()
    assert 'id="slo-search"' in html and 'id="interactivity-bands"' in html
    charts = re.findall(r"<svg[^>]*>.*?</svg>", html, flags=re.S)
    cost = [c for c in charts if "cost against interactivity" in c]
    assert len(cost) == 3  # one per package length of the one model
    three = next(c for c in cost if "3-day packages" in c)
    assert "output tok/s per user (1000 / TPOT p50 ms)" in three
    assert ">RTX-4090 · CheapCloud<" in three and ">H100-SXM-80GB · TestClo…<" in three  # legend
    assert "RTX-4090 CheapCloud 3 d · vllm none kv=auto · concurrency 32: 15 tok/s/user" in three
    assert three.count('class="front"') == 1 and three.count("on the front: ") >= 3
    markdown = (out / "README.md").read_text()
    assert "Highest load meeting the SLO (searched)" in markdown
    assert "Cheapest per interactivity band" in markdown


def test_the_front_holds_only_levels_no_other_beats_on_cost_and_interactivity(
    result: Aggregate,
) -> None:
    from harness.modes.serving.report import _front

    three = result.table("interactivity")[result.table("interactivity")["package_days"] == 3]
    front = three[_front(three)]
    for rec in front.to_dict(orient="records"):
        better = three[
            (three["usd_per_mtok_output"] <= rec["usd_per_mtok_output"])
            & (three["tok_s_per_user"] >= rec["tok_s_per_user"])
            & ((three["usd_per_mtok_output"] < rec["usd_per_mtok_output"])
               | (three["tok_s_per_user"] > rec["tok_s_per_user"]))
        ]  # fmt: skip
        assert better.empty
    assert not math.isnan(front["usd_per_mtok_output"].min())


def test_the_site_draws_cost_against_interactivity_across_runs_and_providers(
    tmp_path: Path,
) -> None:
    from harness.results.site import build_site
    from tests.factories import write_run

    runs = [
        write_run(tmp_path / run, [r for r in rows() if r.run == run]) for run in ("run-a", "run-b")
    ]
    site = build_site(runs, tmp_path / "site", TARIFFS)
    index = (site.out / "index.html").read_text()
    assert "Cost against interactivity across every run" in index
    charts = [c for c in re.findall(r"<svg[^>]*>.*?</svg>", index, flags=re.S) if "tok/s" in c]
    assert len(charts) == 3  # one per package length, both runs' cards in each
    assert all(">RTX-4090 · CheapCloud<" in c and ">H100-SXM-80GB · TestClo…<" in c for c in charts)
    # each run's own report has its chart of its own card only
    own = (site.out / "runs" / "run-b" / "report.html").read_text()
    assert "cost against interactivity" in own and "H100-SXM-80GB · TestClo" not in own
