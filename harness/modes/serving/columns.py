"""The serving mode's published columns, each declared once as ``harness.results.columns``
declares a column (its ``ColumnSpec`` fields in order: name, label, unit, formatter, direction),
and gathered there through the registry (the mode's ``columns`` part). Its tables:
``harness.modes.serving.report`` and ``price``."""

from __future__ import annotations

from harness.units import MTOK_OUT_J, MTOK_OUT_USD, PROMPT_SHARE

COLUMNS: tuple[tuple[str, ...] | tuple[str, str, str, str, int], ...] = (
    ("level_at_slo", "level at SLO"),
    ("output_tok_s", "output tok/s", "tok/s", "fmt_float", +1),
    ("output_tok_s_at_slo", "output tok/s at SLO", "tok/s", "fmt_float", +1),
    ("usd_per_mtok_output_at_slo", "$/Mtok out at SLO", MTOK_OUT_USD, "fmt_usd", -1),
    ("j_per_mtok_output_at_slo", "J/Mtok out at SLO", MTOK_OUT_J, "fmt_float", -1),
    ("goodput_rps", "goodput req/s", "req/s", "fmt_float", +1),
    ("goodput_rps_at_slo", "goodput req/s", "req/s", "fmt_float", +1),
    ("slo_attainment", "attainment", "share of requests", "fmt_float", +1),
    ("slo_attainment_at_slo", "attainment", "share of requests", "fmt_float", +1),
    ("levels_meeting_slo", "levels meeting SLO", "levels", "fmt_int", +1),
    ("levels_measured", "levels ok", "levels", "fmt_int"),
    ("requests_ok", "ok", "requests", "fmt_int", +1),
    ("requests_failed", "failed", "requests", "fmt_int", -1),
    ("j_per_token_serving", "J/token out", "J/token", "fmt_float", -1),
    ("request_throughput", "req/s", "req/s", "fmt_float", +1),
    ("ttft_ms_p99", "TTFT p99 ms", "ms", "fmt_float", -1),
    ("tpot_ms_p99", "TPOT p99 ms", "ms", "fmt_float", -1),
    ("saturated", "saturated"),
    # the search for the highest load meeting the SLO, and cost against interactivity
    ("search_axis", "searched on"),
    ("max_rate_at_slo", "max load at SLO", "req/s or clients (searched on)", "fmt_float", +1),
    ("search_bracket_low", "bracket low (meets)", "req/s or clients", "fmt_float"),
    ("search_bracket_high", "bracket high (misses)", "req/s or clients", "fmt_float"),
    ("search_probes", "probes", "levels", "fmt_int"),
    ("search_stop", "stopped by"),
    ("goodput_rps_at_max_rate", "goodput req/s at max load", "req/s", "fmt_float", +1),
    ("output_tok_s_at_max_rate", "output tok/s at max load", "tok/s", "fmt_float", +1),
    ("usd_per_mtok_output_at_max_rate", "$/Mtok out at max load", MTOK_OUT_USD, "fmt_usd", -1),
    ("tok_s_per_user", "tok/s/user", "output tok/s per user (1000 / TPOT ms)", "fmt_float", +1),
    ("interactivity_tpot", "TPOT pct."),
    ("band_tok_s_user", "band ≥ tok/s/user", "output tok/s per user", "fmt_float"),
    ("gpu_flips", "GPU flips"),
    ("prefix_caching", "prefix caching"),
    ("prefix_cache_hit_rate", "prefix-cache hit rate", PROMPT_SHARE, "fmt_float", +1),
    ("prefix_cache_hit_rate_at_slo", "prefix-cache hit rate", PROMPT_SHARE, "fmt_float", +1),
    # speculation against plain decoding per interactivity band (harness.modes.serving.price)
    ("plain_usd_per_mtok_output", "plain $/Mtok out", MTOK_OUT_USD, "fmt_usd", -1),
    ("speculation_saving_pct", "speculation saves %", "% of plain $/Mtok out", "fmt_float", +1),
    ("cheaper", "cheaper"),  # speculation | plain | speculation only | plain only
    ("cheaper_flips", "cheaper flips"),  # the cheaper differs from the band below's
)
