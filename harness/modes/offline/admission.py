"""An offline row's own parts against each other (its `check` part, read by
harness.results.admission where rows join a run):

ttft_ms_p50 ≤ e2e_ms_p50; generated_tokens ≤ batch × output_tokens; total_tok_s ≤ batch ×
(context + output_tokens) ÷ e2e_ms_p50 (both are medians over the repeats: exact for an odd
count, × ``EVEN_SLACK`` for an even one, where the median of a ratio is not the ratio of the
medians); the decode ceiling is the roofline flag (``harness.results.frame.flag_rows``: counted,
never priced).
"""

from __future__ import annotations

from harness.results.admission import above
from harness.row import ResultRow

# an even count of repeats: the median of (tokens ÷ e2e) is the mean of the two middle ratios,
# above tokens ÷ (median e2e) by (a + b)² / 4ab for middle e2e a, b: 10 leaves a / b up to 38
EVEN_SLACK = 10.0


def offline_problem(row: ResultRow) -> str | None:
    ttft, e2e = row.ttft_ms_p50, row.e2e_ms_p50
    if ttft is not None and e2e is not None and above(ttft, e2e):
        return f"ttft_ms_p50 {ttft:g} is above e2e_ms_p50 {e2e:g}"
    generated, most = row.generated_tokens, row.batch * row.output_tokens
    if generated is not None and generated > most:
        return (
            f"generated_tokens {generated} is above batch {row.batch} × output_tokens "
            f"{row.output_tokens} = {most}"
        )
    total = row.total_tok_s
    if total is not None and e2e is not None and e2e > 0:
        ceiling = row.batch * (row.context + row.output_tokens) / (e2e / 1e3)
        odd = row.repeats_done is not None and row.repeats_done % 2 == 1
        if above(total, ceiling * (1.0 if odd else EVEN_SLACK)):
            return (
                f"total_tok_s {total:g} is above batch × (context + output_tokens) ÷ e2e_ms_p50 "
                f"= {ceiling:g} tok/s"
            )
    return None
