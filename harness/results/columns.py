"""Every column a published table or `harness compare` shows, declared once.

A column is the frame's field ``name``, the ``label`` a person reads (unit included: "decode
tok/s", "$/Mtok out"), its ``unit`` spelled out ("" where it has none: a model, a class), the
formatter of its cells, and its ``direction``: +1 higher is better, −1 lower is better, 0 neither
(an identity, a setting, a prediction, a bound). The report tables (``results.publish``, each
mode's ``report``) take their columns from here by name (``table_columns``, ``headers``), and
``results.compare`` takes each compared metric's direction from here.

Cheap to import (the CLI reads labels as it starts): a formatter is named here, one of
``harness.results.publish.format``'s functions, and looked up there when a table is built.
A new metric: one line in ``COLUMNS``, then its name in the tables that show it.

The runs of columns that several tables show together are named once below the registry (the
configuration, the package a row is priced on, its price, the perplexity change with its CI);
each table's list is built from those groups and its own columns.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from harness import modes
from harness.modes.base import Column
from harness.spec import labels
from harness.units import MTOK_OUT_J, MTOK_OUT_USD, NATS

Direction = Literal[-1, 0, 1]
# the formatters of harness.results.publish.format a column may name (None: text, as is)
Format = Literal["fmt_float", "fmt_int", "fmt_usd", "fmt_count", "fmt_value", "fmt_interval"]
FORMAT_MODULE = "harness.results.publish.format"

# units said once (the labels abbreviate them; those the modes' columns share: harness.units)
PAIRED_UNITS = "share of paired units (items; extract: gold fields)"
ACCEPTED_SHARE = "% of draft tokens accepted"
ACCEPTED_LENGTH = "tokens per target step (1 + accepted / drafts)"
ACCEPTED_PER_POS = "% of drafts accepted at each draft position, comma-separated"


@dataclass(frozen=True)
class ColumnSpec:
    """One published column: its field, label, unit, formatter (by name) and good direction."""

    name: str
    label: str
    unit: str = ""
    fmt: Format | None = None
    direction: Direction = 0

    def formatter(self) -> Callable[[Any], str] | None:
        """The cell formatter (``harness.results.publish.format``), None for text."""
        if self.fmt is None:
            return None
        found: Callable[[Any], str] = getattr(importlib.import_module(FORMAT_MODULE), self.fmt)
        return found

    def column(self) -> Column:
        """The (field, header, formatter) triple the table builders take."""
        return (self.name, self.label, self.formatter())


def _c(
    name: str, label: str, unit: str = "", fmt: Format | None = None, direction: Direction = 0
) -> ColumnSpec:
    return ColumnSpec(name, label, unit, fmt, direction)


_SPECS: tuple[ColumnSpec, ...] = (
    # --- what a configuration is (text or settings: no better direction) ----------------------
    _c("model", "model"),
    _c("backend", "backend"),
    _c("quantization", "quant"),
    _c("kv_cache_dtype", "KV"),
    _c("layout", "layout"),  # tp=2, tp=4,pp=2, tp=8,ep; empty on one card
    _c("speculative", "speculation"),  # ngram:k=4,lookup=2-4 (harness.spec.speculative)
    _c("weights", "weights"),
    _c("batch", "batch", "sequences", "fmt_int"),
    _c("context", "context", "tokens", "fmt_int"),
    _c("target", "target"),
    _c("device", "device"),
    _c("configuration", "config"),  # the one configuration label (harness.spec.labels)
    _c("status", "status"),
    _c("error", "error"),
    _c("note", "note"),
    _c("quality_class", "class"),
    # --- the equal-quality verdict's undecided table (harness.results.publish.verdicts) -------
    _c("undecided_on", "undecided on"),  # the gated metrics whose interval straddles the margin
    _c("deciding_bounds", "bound vs margin"),
    _c("to_decide", "to decide"),  # the windows / items that would decide it
    # --- where it was priced ------------------------------------------------------------------
    _c("gpu", "GPU"),
    _c("gpu_a", "GPU a"),
    _c("gpu_b", "GPU b"),
    _c("provider", "provider"),
    # the day a price was read, its age, STALE past the tariff file's threshold, EXAMPLE when
    # not a quote (harness.spec.tariffs.Tariff.price_read)
    _c("price_read", "price read", "date, age in days; STALE / EXAMPLE flagged"),
    _c("tariff_basis", "basis"),  # on-demand, spot (restart charge included) or reserved
    # a tariff file's price history per card (harness.prices.verdicts.price_history)
    _c("date", "date", "the day the prices were read (UTC)"),
    _c("feed", "feed"),
    _c("feed_version", "feed version"),
    # the card's offers in the tariff table (harness.spec.tariffs.CardSpread)
    _c("cheapest_offer", "cheapest offer"),
    _c("card_offers", "offers", "offers of the card", "fmt_int"),
    _c("card_hour_usd_min", "min $/card-h", "USD per card-hour", "fmt_usd", -1),
    _c("card_hour_usd_median", "median $/card-h", "USD per card-hour", "fmt_usd"),
    _c("card_hour_usd_max", "max $/card-h", "USD per card-hour", "fmt_usd"),
    _c("package_days", "days", "days", "fmt_int"),
    _c("gpus_per_node", "cards", "GPUs per node", "fmt_int"),
    # --- speed and memory ---------------------------------------------------------------------
    _c("decode_tok_s", "decode tok/s", "tok/s", "fmt_float", +1),
    _c("total_tok_s", "total tok/s", "tok/s", "fmt_float", +1),
    _c("tpot_ms_p50", "TPOT ms", "ms", "fmt_float", -1),
    _c("ttft_ms_p50", "TTFT ms", "ms", "fmt_float", -1),
    _c("peak_mib_decode", "peak MiB", "MiB", "fmt_float", -1),
    _c("predicted_peak_mib", "predicted MiB", "MiB", "fmt_float"),
    _c("roofline_fraction", "roofline frac.", "share of the roofline ceiling", "fmt_float"),
    _c("exceeds_roofline", "above roofline"),
    # --- quality ------------------------------------------------------------------------------
    _c("ppl", "ppl", "perplexity", "fmt_float", -1),
    _c("dppl_pct", "Δppl %", "%", "fmt_float", -1),
    _c("dppl_pct_ci_low", "CI low", "%", "fmt_float"),
    _c("dppl_pct_ci_high", "CI high", "%", "fmt_float"),
    # dppl_pct with its 95 % CI in one cell: the value is (dppl_pct, ci_low, ci_high)
    _c("dppl_pct_with_ci", "Δppl % [95 % CI]", "%", "fmt_interval", -1),
    # --- cost ---------------------------------------------------------------------------------
    _c("usd_per_mtok_output", "$/Mtok out", MTOK_OUT_USD, "fmt_usd", -1),
    _c("usd_per_mtok_total", "$/Mtok total", "USD per 1e6 tokens (prompt + output)", "fmt_usd", -1),
    _c("usd_per_mtok_output_hourly", "$/Mtok out, hourly", MTOK_OUT_USD, "fmt_usd", -1),
    _c("tokens_per_package", "tokens/package", "output tokens", "fmt_count", +1),
    # ⌊n ÷ k⌋ copies of a k-card layout on an n-card node (harness.results.pricing)
    _c("replicas_per_node", "replicas/node", "copies of the layout on one node", "fmt_count"),
    _c("breakeven_utilisation", "breakeven util.", "share of the package's hours", "fmt_float"),
    _c("ratio_to_cheapest_gpu", "× cheapest GPU", "ratio", "fmt_float", -1),
    _c("cost_ratio_a_over_b", "cost a ÷ b", "ratio", "fmt_float"),
    # --- factor effects -----------------------------------------------------------------------
    _c("axis", "axis"),
    _c("level", "level"),  # a factor's level (effects), a load level (serving)
    _c("metric", "metric"),
    _c("mean", "mean", "the metric's", "fmt_float"),
    _c("effect", "effect", "the metric's", "fmt_float"),
    _c("n", "n", "count", "fmt_int"),
    # --- energy -------------------------------------------------------------------------------
    _c("energy_source", "counter"),
    _c("energy_j_prefill", "J / prefill pass", "J", "fmt_float", -1),
    _c("energy_j_decode", "J / decode (one generation)", "J", "fmt_float", -1),
    _c("energy_j_quality", "J quality scoring", "J", "fmt_float", -1),
    _c("j_per_mtok_output", "J/Mtok out", MTOK_OUT_J, "fmt_float", -1),
    _c("j_per_token_decode", "decode J/token", "J/token", "fmt_float", -1),
    _c("avg_power_w_decode", "decode W per card", "W", "fmt_float", -1),
    _c("usd_per_mtok_electricity", "electricity $/Mtok", MTOK_OUT_USD, "fmt_usd", -1),
    _c("hourly_usd", "rent $/node-hour", "USD per node-hour", "fmt_usd", -1),
    _c("own_usd_per_hour", "electricity $/node-hour", "USD per node-hour", "fmt_usd", -1),
    _c("purchase_usd", "purchase $", "USD", "fmt_usd", -1),
    _c("breakeven_hours", "break-even busy hours", "h", "fmt_float"),
    _c("breakeven_days", "break-even days at utilisation", "days", "fmt_float"),
    # --- error analysis against the reference -------------------------------------------------
    _c("units_paired", "units paired", "items or gold fields", "fmt_int"),
    _c("right_to_wrong", "right→wrong", "units", "fmt_int", -1),
    _c("wrong_to_right", "wrong→right", "units", "fmt_int", +1),
    _c("mcnemar_p_exact", "McNemar exact p", "probability", "fmt_float"),
    _c("windows_paired", "windows paired", "windows", "fmt_int"),
    _c("dnll_nats_per_token", "ΔNLL nats/token", NATS, "fmt_float", -1),
    _c("worst_window", "worst window"),
    _c("worst_dnll_nats_per_token", "worst ΔNLL nats/token", NATS, "fmt_float", -1),
    _c("item", "item"),
    _c("change", "change"),
    _c("excerpt", "excerpt"),
    # --- tasks (harness.results.tasks; shares in [0, 1], changes reference − configuration) ---
    _c("task", "task"),
    _c("task_kind", "kind"),
    _c("category", "category"),
    _c("task_items", "items", "items", "fmt_int"),
    _c("task_score", "score", "accuracy (extract: field F1)", "fmt_float", +1),
    _c("macro_f1", "macro-F1", "mean per-label F1", "fmt_float", +1),
    _c("json_valid", "JSON valid", "share of outputs", "fmt_float", +1),
    _c("required_present", "required present", "share of required fields", "fmt_float", +1),
    _c("field_precision", "field P", "share of output fields", "fmt_float", +1),
    _c("field_recall", "field R", "share of gold fields", "fmt_float", +1),
    _c("field_f1", "field F1", "harmonic mean of field P and R", "fmt_float", +1),
    # (estimate, low, high): the drop of the paired rate, reference − configuration, 90 % CI
    _c("task_change_with_ci", "drop [90 % CI]", PAIRED_UNITS, "fmt_interval", -1),
    _c("worst_category", "worst category"),
    _c("worst_change_with_ci", "worst drop [90 % CI]", PAIRED_UNITS, "fmt_interval", -1),
    _c("tasks_verdict", "tasks verdict"),
    _c("tasks_failed_by", "failed by"),
    # leakage (the run's manifest)
    _c("seen", "text seen (training, calibration)"),
    _c("eval", "text scored"),
    _c("shared", "shared n-grams", "n-grams", "fmt_value", -1),
    _c("eval_ngrams", "eval n-grams", "n-grams", "fmt_value"),
    _c("overlap", "overlap", "share of the scored text's n-grams", "fmt_value", -1),
    # --- speculative decoding (harness.results.speculation; from the engine's counters) --------
    _c("spec_workload", "acceptance read on"),  # the text: corpus windows, extract prompts, trace
    _c("spec_acceptance_rate_pct", "acceptance %", ACCEPTED_SHARE, "fmt_float", +1),
    _c("spec_acceptance_length_tokens", "acceptance length", ACCEPTED_LENGTH, "fmt_float", +1),
    _c("spec_acceptance_per_pos_pct", "acceptance % per position", ACCEPTED_PER_POS),
    _c("spec_drafts", "drafts", "target steps that drafted", "fmt_int"),
    _c("spec_tasks_workload", "tasks: acceptance read on"),
    _c("spec_tasks_acceptance_rate_pct", "tasks: acceptance %", ACCEPTED_SHARE, "fmt_float", +1),
    _c("spec_tasks_acceptance_length_tokens", "tasks: length", ACCEPTED_LENGTH, "fmt_float", +1),
    _c("spec_synthetic_length_tokens", "synthetic acceptance L", ACCEPTED_LENGTH, "fmt_float"),
    _c("plain_decode_tok_s", "plain decode tok/s", "tok/s", "fmt_float", +1),
    _c("plain_tpot_ms_p50", "plain TPOT ms", "ms", "fmt_float", -1),
    _c("plain_ttft_ms_p50", "plain TTFT ms", "ms", "fmt_float", -1),
    _c("decode_speedup", "decode speed-up", "ratio to plain decoding", "fmt_float", +1),
    _c("greedy_items", "greedy items compared", "sequences and extract items", "fmt_int"),
    _c("greedy_differing", "items differing", "sequences and extract items", "fmt_int", -1),
    _c("greedy_identical", "greedy identical"),
    # --- a site across runs (results/site.py, publish/site_html.py) ---------------------------
    _c("run", "run"),
    _c("folder", "folder"),
    _c("rows", "rows"),
    _c("ok", "ok"),
    _c("unreadable", "unreadable"),
    _c("hostnames", "host"),
    _c("devices", "device"),
    _c("harness", "harness"),
    _c("git_sha", "git sha"),
    _c("corpus_hash", "corpus hash"),
    _c("reference", "reference"),
    _c("schema_version", "schema"),
    _c("gated_on", "gated on"),  # the metrics a run's equal-quality verdict reads (its own gate)
    _c("provenance_hostname", "host"),
    _c("provenance_device_name", "device"),
    _c("provenance_harness", "harness"),
    _c("provenance_git_sha", "git sha"),
)


def mode_columns() -> tuple[ColumnSpec, ...]:
    """Every mode's own columns (its ``columns`` part: ``ColumnSpec`` fields as tuples), in the
    registry's order."""
    rows = [row for m in modes.REGISTRY.values() if m.ref("columns") for row in m.load("columns")]
    return tuple(ColumnSpec(*row) for row in rows)


def declared_once(specs: Iterable[ColumnSpec]) -> dict[str, ColumnSpec]:
    """name → column; a ValueError naming a column declared twice (here and in a mode, or in
    two modes), which would give one name two labels."""
    out: dict[str, ColumnSpec] = {}
    for column in specs:
        if column.name in out:
            raise ValueError(f"column {column.name!r} is declared twice")
        out[column.name] = column
    return out


COLUMNS: dict[str, ColumnSpec] = declared_once((*_SPECS, *mode_columns()))

# --- column groups: runs of columns several tables show together, named once -----------------
# a configuration within a model: engine, weights, KV cache, batch, context (the fields of its
# one label, harness.spec.labels), and the same over every batch and context
CONFIGURATION: tuple[str, ...] = labels.CONFIGURATION
ENGINE_WEIGHTS_KV: tuple[str, ...] = labels.ENGINE_WEIGHTS_KV
# the package a published table's row is priced on, as the tables show it: its length first
PACKAGE: tuple[str, ...] = ("package_days", "gpu", "provider")
# what a cheapest table's row is the cheapest of: a model in a quality class on one package
CHEAPEST_OF: tuple[str, ...] = ("model", "quality_class", *PACKAGE)
# the package a cost frame's row is priced on (cost.csv, the modes' priced tables)
PRICED_ON: tuple[str, ...] = (
    "gpu",
    "provider",
    "package_days",
    "package_price_usd",
    "gpus_in_package",
)
# when each price was read, with its age and flags (stale, example)
PRICE_READ: tuple[str, ...] = ("price_read",)
# the row's price basis, the card's cheapest offer and the spread of its offers' prices
OFFER_SPREAD: tuple[str, ...] = (
    "tariff_basis",
    "cheapest_offer",
    "card_offers",
    "card_hour_usd_min",
    "card_hour_usd_median",
    "card_hour_usd_max",
)
# a configuration's price on a package: $ per million output tokens and per million tokens
USD_PER_MTOK: tuple[str, ...] = ("usd_per_mtok_output", "usd_per_mtok_total")
# what the package buys, the utilisation above which it beats hourly billing, and its cost
# against the cheapest GPU's
PACKAGE_TERMS: tuple[str, ...] = (
    "replicas_per_node",
    "tokens_per_package",
    "breakeven_utilisation",
    "ratio_to_cheapest_gpu",
)
# the perplexity change against the reference, with its paired 95 % CI
DPPL_WITH_CI: tuple[str, ...] = ("dppl_pct", "dppl_pct_ci_low", "dppl_pct_ci_high")
# the decode peak memory, measured and planned
PEAK_MEMORY: tuple[str, ...] = ("peak_mib_decode", "predicted_peak_mib")

# The metrics `harness compare` compares, in its order (methods: harness.results.compare).
COMPARED: tuple[str, ...] = ("decode_tok_s", "ppl", "peak_mib_decode", "j_per_token_decode")


def spec(name: str) -> ColumnSpec:
    """The declared column ``name``; KeyError saying where to declare it and what is close."""
    try:
        return COLUMNS[name]
    except KeyError:
        close = difflib.get_close_matches(name, COLUMNS, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise KeyError(
            f"column {name!r} is not declared in harness.results.columns.COLUMNS{hint}"
        ) from None


def label(name: str) -> str:
    return spec(name).label


def table_columns(names: Iterable[str]) -> list[Column]:
    """The (field, header, formatter) list of a table showing ``names``, in that order."""
    return [spec(n).column() for n in names]


def headers(names: Iterable[str]) -> dict[str, str]:
    """field → header of a table showing ``names``, in that order."""
    return {n: spec(n).label for n in names}
