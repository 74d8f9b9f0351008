"""The speculation section both pages carry, and the headline's line when speculation wins (an
offline run: a plain and a speculative vLLM row of one configuration beside its reference)."""

from __future__ import annotations

from harness.results.aggregate import aggregate
from harness.results.frame import frame_from_rows
from harness.results.publish.html import HTML_PAGE
from harness.results.publish.markdown import MARKDOWN_PAGE
from harness.results.publish.speculation import headline_note, speculation_section
from harness.row import ResultRow
from tests.factories import quality, reference, row, tariffs

SPEC = "ngram:k=4,lookup=2-4"


def rows(spec_decode: float, spec_digests: str = "a1,b2,c3") -> list[ResultRow]:
    return [
        reference(group="tiny-llama|transformers|none|kv=auto|cuda"),
        row(backend="vllm", decode_tok_s=1000.0, greedy_sequences_sha="a1,b2,c3",
            **quality(100.05)),
        row(backend="vllm", speculative=SPEC, decode_tok_s=spec_decode,
            greedy_sequences_sha=spec_digests, spec_workload="corpus windows",
            spec_acceptance_rate_pct=36.8, spec_acceptance_length_tokens=2.39,
            spec_acceptance_per_pos_pct="50.0,33.3,27.8,27.8", spec_drafts=90,
            **quality(100.05)),
    ]  # fmt: skip


def test_a_run_without_speculation_has_no_section_and_no_headline_line() -> None:
    result = aggregate(frame_from_rows(rows(1200.0)[:2]), tariffs())
    assert speculation_section(result, "99", MARKDOWN_PAGE) == []
    assert headline_note(result, "99", MARKDOWN_PAGE) == []


def test_the_section_states_identity_and_acceptance_and_the_headline_names_the_winner() -> None:
    result = aggregate(frame_from_rows(rows(1200.0)), tariffs())
    text = "\n".join(speculation_section(result, "99", MARKDOWN_PAGE))
    assert "greedy output identical to plain decoding on all 3 items" in text
    # decode speed-up 1200 / 1000 = 1.2
    assert "| corpus windows | 36.8 | 2.39 | 50.0,33.3,27.8,27.8 | 90 | 1.2 |" in text
    note = "\n".join(headline_note(result, "99", MARKDOWN_PAGE))
    assert note.startswith("Speculative decoding wins:")
    assert f"the cheapest configuration uses speculative decoding {SPEC}" in note
    html = "".join(speculation_section(result, "99", HTML_PAGE))
    assert 'id="speculation-acceptance"' in html and "identical to plain decoding" in html


def test_a_faster_speculative_row_that_differs_is_neither_cheapest_nor_named() -> None:
    result = aggregate(frame_from_rows(rows(1200.0, "a1,XX,c3")), tariffs())
    text = "\n".join(speculation_section(result, "99", MARKDOWN_PAGE))
    assert "DIFFERS from plain decoding on 1 of 3 items: not priced" in text
    assert headline_note(result, "99", MARKDOWN_PAGE) == []
    assert result.cheapest["speculative"].isna().all()
