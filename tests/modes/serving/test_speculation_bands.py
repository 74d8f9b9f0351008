"""Speculation on the cost-against-interactivity chart: one run on an H100, the same vLLM
configuration served with and without n-gram speculation. Checked by hand: which arm is cheaper
per Mtok at each interactivity band, the saving, where the cheaper flips, the headline's line;
a speculative configuration whose greedy output differs is never compared (never priced); and
both pages show the acceptance table and the identity line beside "engines agree"."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.results.aggregate import Aggregate, aggregate
from harness.results.frame import frame_from_rows
from harness.results.publish.files import report
from harness.results.publish.speculation import headline_lines
from harness.row import ResultRow
from tests.factories import quality, reference, row, tariff, tariffs

SPEC = "ngram:k=4,lookup=2-4"
PLAIN_GROUP = "tiny-llama|vllm|none|kv=auto|cuda"
SPEC_GROUP = f"tiny-llama|vllm|none|kv=auto|spec={SPEC}|cuda"
WORKLOAD = "serving prompts: corpus slices"
BANDS = "40 80 150"
# (concurrency, output tok/s, TPOT p50 ms): tok/s/user = 1000 / TPOT
LEVELS = {
    None: [(1, 100.0, 10.0), (8, 640.0, 12.5), (32, 1600.0, 20.0)],  # 100, 80, 50 tok/s/user
    SPEC: [(1, 150.0, 6.25), (8, 720.0, 10.0), (32, 1280.0, 25.0)],  # 160, 100, 40 tok/s/user
}
TARIFFS = tariffs(tariff())


def serving(spec: str | None, concurrency: int, tok_s: float, tpot: float) -> ResultRow:
    fields: dict[str, Any] = {
        "mode": "serving", "group": SPEC_GROUP if spec else PLAIN_GROUP, "backend": "vllm",
        "speculative": spec, "status": "ok", "concurrency": concurrency, "requests_sent": 64,
        "requests_ok": 64, "requests_failed": 0, "output_tok_s": tok_s, "tpot_ms_p50": tpot,
        "tpot_ms_p99": 30.0, "ttft_ms_p99": 300.0, "slo_tpot_ms": 50.0, "slo_ttft_ms": 2000.0,
        "slo_attainment_target": 0.99, "slo_attainment": 1.0, "goodput_rps": tok_s / 128,
        "interactivity_tpot": "p50", "interactivity_bands": BANDS, "decode_tok_s": None,
        "total_tok_s": None, "ppl": None, "ppl_ci_low": None, "ppl_ci_high": None,
        "dnll_vs_ref": None, "dnll_ci_low": None, "dnll_ci_high": None,
    }  # fmt: skip
    if spec:
        fields.update(spec_workload=WORKLOAD, spec_drafts=200, spec_draft_tokens=800,
                      spec_accepted_tokens=240, spec_acceptance_rate_pct=30.0,
                      spec_acceptance_length_tokens=2.2)  # fmt: skip
    return row(**fields)


def rows(spec_digests: str = "a1,b2") -> list[ResultRow]:
    """The reference, the plain and the speculative offline rows (greedy digests: the plain
    row's "a1,b2"), and each arm's serving levels."""
    out = [
        reference(group="tiny-llama|transformers|none|kv=auto|cuda"),
        row(group=PLAIN_GROUP, backend="vllm", greedy_sequences_sha="a1,b2", **quality(100.05)),
        row(group=SPEC_GROUP, backend="vllm", speculative=SPEC, decode_tok_s=1500.0,
            greedy_sequences_sha=spec_digests, spec_workload="corpus windows",
            spec_acceptance_rate_pct=36.8, spec_acceptance_length_tokens=2.39, spec_drafts=90,
            **quality(100.05)),
    ]  # fmt: skip
    for spec, levels in LEVELS.items():
        out += [serving(spec, c, tok_s, tpot) for c, tok_s, tpot in levels]
    return out


@pytest.fixture(scope="module")
def result() -> Aggregate:
    return aggregate(frame_from_rows(rows()), TARIFFS)


def three_day(result: Aggregate) -> Any:
    bands = result.table("speculation_bands")
    return bands[(bands["quality_class"] == "99") & (bands["package_days"] == 3)]


def test_at_each_band_the_cheaper_arm_its_saving_and_where_it_flips(result: Aggregate) -> None:
    # $/Mtok = card-hour ÷ (tok/s × 3600) × 10⁶ on the same card and package, so the cheaper
    # level is the one with more output tok/s. By hand:
    # ≥ 40/user:  plain c32 1600 tok/s, speculative c32 1280 (40/user) → plain;
    #             saving 100 × (1 − 1600/1280) = −25 %
    # ≥ 80/user:  plain c8 640 (80/user), speculative c8 720 (100/user) → speculation;
    #             saving 100 × (1 − 640/720) = 11.11 %; the cheaper flips
    # ≥ 150/user: plain reaches 100/user at most; speculative c1 (160/user) → speculation only
    three = three_day(result)
    assert list(three["band_tok_s_user"]) == [40.0, 80.0, 150.0]
    assert list(three["cheaper"]) == ["plain", "speculation", "speculation only"]
    assert list(three["cheaper_flips"]) == [False, True, False]
    saving = three["speculation_saving_pct"].to_numpy()
    assert saving[:2] == pytest.approx([-25.0, 100 * (1 - 640 / 720)])
    assert np.isnan(saving[2]) and np.isnan(three["plain_usd_per_mtok_output"].iloc[2])
    assert list(three["level"]) == ["concurrency 32", "concurrency 8", "concurrency 1"]
    assert set(three["speculative"]) == {SPEC} and set(three["spec_workload"]) == {WORKLOAD}
    # the ratio of the two arms' $/Mtok is the inverse of their tok/s: 1280 / 1600
    first = three.iloc[0]
    ratio = first["plain_usd_per_mtok_output"] / first["usd_per_mtok_output"]
    assert ratio == pytest.approx(1280 / 1600)


def test_the_headline_names_speculation_where_it_wins(result: Aggregate) -> None:
    lines = headline_lines(result, "99")
    three = [line for line in lines if "3-day" in line]
    assert len(three) == 2
    # offline: the speculative row decodes 1500 tok/s against the plain row's 1000, so it is the
    # cheapest; 3-day card-hour = 23.92 $/node-hour × 0.92 ÷ 8 cards = 2.7508 $, ÷ (1500 × 3600)
    # × 10⁶ = 0.5094 $/Mtok out
    assert three[0] == (
        "tiny-llama on H100-SXM-80GB (TestCloud, 3-day): the cheapest configuration uses "
        f"speculative decoding {SPEC} ($0.5094/Mtok out)"
    )
    assert f"{SPEC} on {WORKLOAD}: cheaper than plain decoding at ≥ 80, 150 tok/s/user" in three[1]
    assert "(saves 11.1 % of plain $/Mtok out)" in three[1]
    assert "plain decoding cheaper at ≥ 40 tok/s/user" in three[1]
    assert "the cheaper flips at ≥ 80" in three[1]


def test_a_speculative_configuration_whose_greedy_output_differs_is_never_compared() -> None:
    result = aggregate(frame_from_rows(rows(spec_digests="a1,XX")), TARIFFS)
    served = result.table("serving")
    spec = served[served["speculative"] == SPEC]
    assert set(spec["greedy_identical"]) == {"no"}  # its group's offline verdict
    assert not spec["pass_99"].any() and served[served["speculative"].isna()]["pass_99"].all()
    three = three_day(result)
    # only plain levels pass: "plain only" at ≥ 40 and ≥ 80; nothing reaches ≥ 150
    assert list(three["cheaper"]) == ["plain only", "plain only"]
    assert headline_lines(result, "99") == []
    assert result.table("cheapest_at_slo")["speculative"].isna().all()


def test_both_pages_show_identity_beside_engines_agree_and_acceptance_per_workload(
    result: Aggregate, tmp_path: Path
) -> None:
    out = report(tmp_path / "run", TARIFFS, result=result)
    markdown = (out / "README.md").read_text()
    engines = markdown.index("## Engines agree")
    section = markdown.index("## Speculative decoding: greedy identity and acceptance")
    assert engines < section
    # 2 sequences compared, none differ
    assert (f"- tiny-llama vllm none kv=auto spec={SPEC} b=1 ctx=128: greedy output identical "
            "to plain decoding on all 2 items") in markdown  # fmt: skip
    assert "Speculative decoding wins:" in markdown.split("## Rows")[0]  # under the headline
    # the acceptance table: the offline corpus windows and each serving level's prompts
    assert markdown.count("| corpus windows | 36.8 | 2.39 |") == 1
    assert markdown.count(f"| {WORKLOAD} | 30 | 2.2 |") == 3  # 30 %, 2.2 tokens per level
    html = (out / "report.html").read_text()
    assert 'id="speculation-acceptance"' in html and 'id="speculation-bands"' in html
    charts = re.findall(r"<svg[^>]*>.*?</svg>", html, flags=re.S)
    cost = next(c for c in charts if "3-day packages: cost against interactivity" in c)
    # the speculative series beside the plain one (legend), each level's tip saying which
    assert ">ngram:k=4 · H100-SXM-80…<" in cost and ">H100-SXM-80GB · TestClo…<" in cost
    assert f"kv=auto spec={SPEC} · concurrency 8" in cost
    assert "spec=nan" not in cost and "kv=auto · concurrency 8" in cost
