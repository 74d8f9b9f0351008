"""Layouts side by side on an 8-card node, per latency band (issue 37): one vLLM configuration
served at TP 1 (one card, so 8 replicas per node) and at TP 8 (the whole node, 1 replica), on an
8 × H100 tariff. TP 1 is cheaper per Mtok at the loose band, TP 8 (lower TPOT) at the tight one.
Every expected figure is computed by hand.

The node: 8 × H100 at $24.00 per node-hour, one 30-day package at no discount, utilisation 1:

    package price = 24 × 24 h × 30 d = $17,280;  node $/hour = 17,280 ÷ (30 × 24) = $24.00
    priced on k of n = 8 cards:  TP 1: 24 × 1/8 = $3.00/h;  TP 8: 24 × 8/8 = $24.00/h
    $/Mtok out = package $/h × k/n ÷ (output tok/s × 3600) × 10⁶;  tok/s/user = 1000 ÷ TPOT ms

    layout  level  out tok/s  TPOT p50  tok/s/user  $/Mtok out
    TP 1    c32    2400       40 ms     25          3 ÷ (2400 × 3600) × 10⁶ = 3 ÷ 8.64 = 0.347222
    TP 1    c1     60         16 ms     62.5        3 ÷ (60 × 3600) × 10⁶ = 3 ÷ 0.216 = 13.888889
    TP 8    c64    9600       50 ms     20          24 ÷ (9600 × 3600) × 10⁶ = 24 ÷ 34.56 = 0.694444
    TP 8    c32    8000       12.5 ms   80          24 ÷ (8000 × 3600) × 10⁶ = 24 ÷ 28.8 = 0.833333

Bands (tok/s/user): 25 (TPOT ≤ 1000/25 = 40 ms, the loose band) and 50 (TPOT ≤ 20 ms, tight):

    ≥ 25: TP 1 c32 0.347222 (c1 13.89 dearer); TP 8 c32 0.833333 (c64 at 20/user is below)
          → TP 1 cheaper
    ≥ 50: TP 1 c1 13.888889 (c32 at 25/user is below); TP 8 c32 0.833333 → TP 8 cheaper:
          the cheaper layout flips at 50 tok/s/user (TPOT ≤ 20 ms)

At the SLO (TPOT target 60 ms; every level attains 1.0, so the highest output tok/s): TP 1 c32
(2400 tok/s, 0.347222 $/Mtok) and TP 8 c64 (9600 tok/s, 0.694444 $/Mtok).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.modes.serving.report import layout_lines
from harness.results.aggregate import Aggregate, aggregate
from harness.results.frame import frame_from_rows
from harness.results.publish.files import report
from harness.row import ResultRow
from harness.spec.tariffs import Package
from tests.factories import quality, reference, row, tariff, tariffs

GPU = "H100-SXM-80GB"
ONE = "tiny-llama|vllm|none|kv=auto|cuda"
TP8 = "tiny-llama|vllm|none|kv=auto|tp=8|cuda"
BANDS = "25 50"
# layout → its levels: (concurrency, output tok/s, TPOT p50 ms)
LEVELS: dict[str | None, list[tuple[int, float, float]]] = {
    None: [(32, 2400.0, 40.0), (1, 60.0, 16.0)],
    "tp=8": [(64, 9600.0, 50.0), (32, 8000.0, 12.5)],
}
GROUP = {None: ONE, "tp=8": TP8}
NODE = tariffs(tariff(hourly_usd=24.0, packages=[Package(days=30, discount_pct=0)]))
USD = {  # (layout, concurrency) → $/Mtok out, by hand (the module docstring)
    (None, 32): 3 / 8.64,
    (None, 1): 3 / 0.216,
    ("tp=8", 64): 24 / 34.56,
    ("tp=8", 32): 24 / 28.8,
}


def serving(layout: str | None, concurrency: int, tok_s: float, tpot: float) -> ResultRow:
    fields: dict[str, Any] = {
        "mode": "serving", "group": GROUP[layout], "backend": "vllm", "layout": layout,
        "status": "ok", "concurrency": concurrency, "requests_sent": 64, "requests_ok": 64,
        "requests_failed": 0, "output_tok_s": tok_s, "tpot_ms_p50": tpot, "tpot_ms_p99": tpot,
        "ttft_ms_p99": 300.0, "slo_tpot_ms": 60.0, "slo_ttft_ms": 2000.0,
        "slo_attainment_target": 0.99, "slo_attainment": 1.0, "goodput_rps": tok_s / 128,
        "interactivity_tpot": "p50", "interactivity_bands": BANDS, "decode_tok_s": None,
        "total_tok_s": None, "ppl": None, "ppl_ci_low": None, "ppl_ci_high": None,
        "dnll_vs_ref": None, "dnll_ci_low": None, "dnll_ci_high": None,
    }  # fmt: skip
    return row(**fields)


def rows() -> list[ResultRow]:
    """The reference, each layout's offline row (TP 8 decodes 6000 tok/s offline against TP 1's
    1000: TP 1 $3/h ÷ 3.6 = 0.8333, TP 8 $24/h ÷ 21.6 = 1.1111 $/Mtok), and its levels."""
    out = [
        reference(group="tiny-llama|transformers|none|kv=auto|cuda"),
        row(group=ONE, backend="vllm", **quality(100.0)),
        row(group=TP8, backend="vllm", layout="tp=8", decode_tok_s=6000.0, **quality(100.0)),
    ]
    for layout, levels in LEVELS.items():
        out += [serving(layout, c, tok_s, tpot) for c, tok_s, tpot in levels]
    return out


@pytest.fixture(scope="module")
def result() -> Aggregate:
    return aggregate(frame_from_rows(rows()), NODE, 1.0)


def shown(layout: object) -> str:
    return layout if isinstance(layout, str) else "tp=1"  # one card: None / NaN


def class_99(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["quality_class"] == "99"]


def test_each_level_is_priced_on_its_layouts_cards(result: Aggregate) -> None:
    curve = result.table("interactivity")
    got = {
        (None if pd.isna(r["layout"]) else r["layout"], int(r["level"].split()[-1])): r
        for _, r in curve.iterrows()
    }
    assert set(got) == set(USD)
    for key, usd in USD.items():
        assert got[key]["usd_per_mtok_output"] == pytest.approx(usd, rel=1e-9)
    assert got[("tp=8", 32)]["tok_s_per_user"] == pytest.approx(80.0)  # 1000 / 12.5
    assert got[(None, 32)]["replicas_per_node"] == 8  # ⌊8 / 1⌋
    assert got[("tp=8", 32)]["replicas_per_node"] == 1  # ⌊8 / 8⌋


def test_the_band_table_lists_both_layouts_side_by_side_and_names_the_flip(
    result: Aggregate,
) -> None:
    bands = class_99(result.table("interactivity_bands"))
    got = [(r["band_tok_s_user"], shown(r["layout"]), r["level"]) for _, r in bands.iterrows()]
    assert got == [  # per band, cheapest first
        (25.0, "tp=1", "concurrency 32"),
        (25.0, "tp=8", "concurrency 32"),
        (50.0, "tp=8", "concurrency 32"),
        (50.0, "tp=1", "concurrency 1"),
    ]
    assert list(bands["usd_per_mtok_output"]) == pytest.approx(
        [3 / 8.64, 24 / 28.8, 24 / 28.8, 3 / 0.216]
    )
    assert list(bands["band_cheapest"]) == [True, False, True, False]
    # the cheaper layout flips at the 50 tok/s/user band: TP 1 at 25, TP 8 at 50
    assert list(bands["layout_flips"]) == [False, False, True, False]
    assert not bands["gpu_flips"].any()  # one card type
    assert list(bands["replicas_per_node"]) == [8, 1, 1, 8]


def test_at_the_slo_the_layouts_stand_side_by_side(result: Aggregate) -> None:
    cheapest = class_99(result.table("cheapest_at_slo"))
    got = {shown(r["layout"]): r for _, r in cheapest.iterrows()}
    assert set(got) == {"tp=1", "tp=8"}
    assert got["tp=1"]["usd_per_mtok_output_at_slo"] == pytest.approx(3 / 8.64)
    assert got["tp=8"]["usd_per_mtok_output_at_slo"] == pytest.approx(24 / 34.56)
    assert got["tp=1"]["replicas_per_node"] == 8 and got["tp=8"]["replicas_per_node"] == 1


def test_the_flip_in_words(result: Aggregate) -> None:
    assert layout_lines(result.table("interactivity_bands"), "99") == [
        "tiny-llama, 30-day packages: tp=1 × 8 replicas per node is cheaper at ≥ 25 tok/s/user "
        "(TPOT ≤ 40 ms), tp=8 × 1 replica per node at ≥ 50 tok/s/user (TPOT ≤ 20 ms): the "
        "cheaper layout flips at 50 tok/s/user (TPOT 20 ms)"
    ]


def test_no_words_without_two_layouts() -> None:
    one = [r for r in rows() if r.layout is None]
    bands = aggregate(frame_from_rows(one), NODE, 1.0).table("interactivity_bands")
    assert not bands.empty and layout_lines(bands, "99") == []


def test_the_published_readme_names_the_layouts_and_the_flip(
    result: Aggregate, tmp_path: Path
) -> None:
    out = report(tmp_path / "run", NODE, result=result)
    markdown = (out / "README.md").read_text()
    serving = markdown[markdown.index("## Serving: cheapest at the latency SLO") :]
    assert "Cheaper layout per interactivity band" in serving
    assert "the cheaper layout flips at 50 tok/s/user (TPOT 20 ms)" in serving
    html = (out / "report.html").read_text()
    assert "the cheaper layout flips at 50 tok/s/user (TPOT 20 ms)</li>" in html
    assert "tp=1 × 8 replicas per node at $0.3472/Mtok out" in html
    # the serving headline (cheapest at the SLO) names the layout and its replicas
    lead = serving.split("\n|", 1)[0]
    assert (
        "tiny-llama on H100-SXM-80GB (TestCloud, 30-day): tp=1 × 8 replicas per node at "
        "$0.3472/Mtok out, then tp=8 × 1 replica per node at $0.6944"
    ) in lead
    # the headline table at the top names each row's layout: TP 8 offline at $1.111/Mtok (24 ÷
    # 21.6), one card empty (not "None"), TP 1's $0.8333 (3 ÷ 3.6) first
    headline = markdown[markdown.index("## Headline") : markdown.index("## Equal quality")]
    lines = [line for line in headline.splitlines() if line.startswith("| tiny-llama")]
    assert len(lines) == 2 and "| None |" not in headline
    assert "| auto |  |" in lines[0] and "$0.8333" in lines[0]
    assert "| auto | tp=8 |" in lines[1] and "$1.111" in lines[1]


def test_a_layout_needing_more_cards_than_the_node_has_is_not_priced_there() -> None:
    # a 4-card node at $12/node-hour: TP 8 (k = 8 > n = 4) is priced nowhere; TP 1 on
    # 12 × 1/4 = $3/h, so its figures stay 3 ÷ 8.64 (c32), with ⌊4 / 1⌋ = 4 replicas
    half = tariffs(
        tariff(gpus_per_node=4, hourly_usd=12.0, packages=[Package(days=30, discount_pct=0)])
    )
    small = aggregate(frame_from_rows(rows()), half, 1.0)
    for table in (
        small.table("interactivity"),
        small.table("priced_at_slo"),
        small.table("cheapest_at_slo"),
    ):
        assert set(table["layout"].map(shown)) == {"tp=1"}
    usd = small.table("cheapest_at_slo")["usd_per_mtok_output_at_slo"]
    assert list(usd) == pytest.approx([3 / 8.64] * len(usd))
    assert set(small.table("cheapest_at_slo")["replicas_per_node"]) == {4}
    assert layout_lines(small.table("interactivity_bands"), "99") == []
