"""Speculative decoding in the published tables: each speculative row paired with its plain row,
greedy identity checked before any price, and acceptance per workload.

The plain row of a speculative row is the row of the same run, mode and configuration
(``CONFIGURATION_FIELDS``) without speculation: it gives the decode tok/s, TPOT and TTFT "without
speculation on the same prompts" (``plain_*`` columns, ``decode_speedup`` = decode tok/s ÷ the
plain row's).

Greedy identity (published like "engines agree"). Every vLLM offline row keeps one digest per
generated sequence of its timed pass and per extract-task item (harness.measure.speculation).
Decoding is greedy and vLLM's standard rejection sampler keeps a draft token only where it is
the target's own argmax, so a speculative row must have produced token-identical outputs: its
digests equal its plain row's, item by item. ``greedy_identical`` is

  "yes"          every item identical (n items compared, sequences and extract items);
  "no"           some differ (``greedy_differing`` of ``greedy_items``);
  "unchecked"    no plain row, or no digests to compare (a row of an older harness);
  "synthetic"    a replay through the synthetic rejection sampler: accepts by a schedule, not
                 by the target, so its outputs are not the target's; never quality.

Only "yes" may be priced: ``priceable`` is False for every other speculative row (plain rows are
untouched), so a speculative configuration that fails, or was not checked, is never priced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from harness import modes
from harness.measure.speculation import differing_items
from harness.spec.labels import CONFIGURATION, configuration_label
from harness.spec.scenario import CONFIGURATION_FIELDS, Point
from harness.spec.speculative import LABEL_PATTERN

# (plain row's column, the speculative row's column it fills)
PLAIN_FIGURES = (
    ("decode_tok_s", "plain_decode_tok_s"),
    ("tpot_ms_p50", "plain_tpot_ms_p50"),
    ("ttft_ms_p50", "plain_ttft_ms_p50"),
)
IDENTICAL, DIFFERENT, UNCHECKED, SYNTHETIC = "yes", "no", "unchecked", "synthetic"
DIGESTS = ("greedy_sequences_sha", "greedy_tasks_sha")
MATCH_ON = tuple(f for f in CONFIGURATION_FIELDS if f != "speculative")
ACCEPTANCE_COLUMNS = (
    "model", "configuration", "level", "spec_workload", "spec_acceptance_rate_pct",
    "spec_acceptance_length_tokens", "spec_acceptance_per_pos_pct", "spec_drafts",
    "decode_speedup",
)  # fmt: skip
# a tasks pass's configuration: the group's (the pass runs once per group, at no point's shape)
TASKS_LABEL = tuple(f for f in CONFIGURATION if f not in ("batch", "context"))
# a group's greedy identity, worst first: one row that differs (or is unchecked) decides
VERDICT_ORDER = (DIFFERENT, SYNTHETIC, UNCHECKED, IDENTICAL)
# the modes whose rows are load levels (a row's `level` names one: harness.modes Facts.levels)
LEVELLED = frozenset(name for name, m in modes.REGISTRY.items() if m.facts.levels)


Array = NDArray[np.bool_]
Record = dict[Any, Any]


def speculative_rows(frame: pd.DataFrame) -> Array:
    """Rows measured with speculative decoding (a label in ``speculative``)."""
    if "speculative" not in frame:
        return np.zeros(len(frame), dtype=bool)
    spec = frame["speculative"]
    mask: Array = (spec.notna() & (spec.astype("object") != "")).to_numpy(dtype=bool)
    return mask


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _key(row: Record) -> tuple[str, ...]:
    """What a row is paired on: run, mode and its configuration less speculation."""
    fields = [row.get(f) for f in ("run", "mode", *MATCH_ON)]
    return tuple("" if _missing(v) else str(v) for v in fields)


def _digests(row: Record) -> list[str] | None:
    """The row's per-item digests, sequences then extract items; None where it has none."""
    texts = [p for p in (row.get(c) for c in DIGESTS) if isinstance(p, str) and p]
    if not texts:
        return None
    return [d for text in texts for d in text.split(",")]


def identity(row: Record, plain: Record | None) -> tuple[str, int, int]:
    """(verdict, items compared, items differing) of a speculative row against its plain row."""
    if not _missing(row.get("spec_synthetic_length_tokens")):
        return SYNTHETIC, 0, 0
    if plain is None:
        return UNCHECKED, 0, 0
    ours, theirs = _digests(row), _digests(plain)
    if ours is None or theirs is None:
        return UNCHECKED, 0, 0
    differing = differing_items(ours, theirs)
    if differing is None:
        return UNCHECKED, 0, 0
    return (IDENTICAL if differing == 0 else DIFFERENT), len(ours), differing


def _float(value: object) -> float:
    return float("nan") if _missing(value) else float(str(value))


def with_plain_pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """Each speculative row with its plain row's figures, its decode speed-up and its greedy
    identity (module docstring); the columns are empty on every other row."""
    out = frame
    n = len(out)
    spec = speculative_rows(out)
    figures = {column: np.full(n, np.nan) for _, column in PLAIN_FIGURES}
    speedup, items, differing = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    verdicts = np.full(n, None, dtype=object)
    if spec.any():
        records = out.to_dict("records")
        ok = [r.get("status") == "ok" for r in records]
        plain = {_key(records[i]): i for i in range(n) if not spec[i] and ok[i]}
        for i in np.flatnonzero(spec):
            row = records[i]
            j = plain.get(_key(row))
            other = records[j] if j is not None else None
            verdicts[i], compared, differ = identity(row, other)
            if compared:
                items[i], differing[i] = compared, differ
            if other is None:
                continue
            for source, column in PLAIN_FIGURES:
                figures[column][i] = _float(other.get(source))
            speedup[i] = _float(row.get("decode_tok_s")) / _float(other.get("decode_tok_s"))
    for column, values in figures.items():
        out[column] = values
    out["decode_speedup"] = speedup
    out["greedy_items"] = items
    out["greedy_differing"] = differing
    out["greedy_identical"] = verdicts
    return out


def tokens_per_step(frame: pd.DataFrame) -> NDArray[np.float64]:
    """Tokens a decode step yields, per row, for the roofline check: 1 without speculation; a
    speculative row's measured mean acceptance length (accepted drafts + the bonus token, each
    step reading the target's weights once), its synthetic replay's length, else at most k + 1
    (nothing measured: the most one step can yield)."""
    out = np.ones(len(frame))
    spec = speculative_rows(frame)
    if not spec.any():
        return out
    for i in np.flatnonzero(spec):
        out[i] = _step_tokens(frame.iloc[i])
    return out


def _step_tokens(row: pd.Series) -> float:
    for column in ("spec_acceptance_length_tokens", "spec_synthetic_length_tokens"):
        value = _float(row.get(column))
        if value >= 1.0:  # NaN (none measured) is not
            return value
    match = LABEL_PATTERN.fullmatch(str(row.get("speculative")))
    return 1.0 + int(match["k"]) if match else 1.0


def priceable(frame: pd.DataFrame) -> Array:
    """False for a speculative row whose greedy identity is not "yes"; True for every other."""
    spec = speculative_rows(frame)
    if "greedy_identical" not in frame:
        return ~spec
    verdict = frame["greedy_identical"].astype("object").to_numpy()
    same: Array = verdict == IDENTICAL
    return ~spec | same


def group_identity(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (run, group) of speculative rows measured ok: the group's greedy identity, its
    worst row's (``VERDICT_ORDER``): "yes" only when every row of the group is identical. A
    serving row inherits it from its group's offline rows (the server runs that configuration,
    its outputs are not compared)."""
    columns = ["run", "group", "greedy_identical"]
    if rows.empty or "greedy_identical" not in rows:
        return pd.DataFrame(columns=columns)
    ok = speculative_rows(rows) & (rows["status"] == "ok").to_numpy(dtype=bool)
    found = rows.loc[ok, columns].copy()
    found["greedy_identical"] = found["greedy_identical"].astype("object").fillna(UNCHECKED)
    rank = {verdict: i for i, verdict in enumerate(VERDICT_ORDER)}
    found["rank"] = found["greedy_identical"].map(rank)
    worst = found.sort_values("rank", kind="stable").drop_duplicates(["run", "group"])
    return worst[columns].reset_index(drop=True)


def acceptance_table(points: pd.DataFrame, serving: pd.DataFrame | None = None) -> pd.DataFrame:
    """Acceptance per workload: one line per (speculative row, workload it was read on) that
    measured any, the point's text and the extract tasks' apart, never mixed; a serving row's
    line names its load level (its workload: the serving prompts or the replayed trace).
    Synthetic replays are left out: their acceptance is the schedule they were told."""
    frames = [f for f in (points, serving) if f is not None and "spec_workload" in f]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=list(ACCEPTANCE_COLUMNS))
    lines = []
    tasks_seen: set[tuple[str, str]] = set()
    records = [r for f in frames for r in f[speculative_rows(f)].to_dict("records")]
    for row in records:
        if row.get("greedy_identical") == SYNTHETIC or not _missing(
            row.get("spec_synthetic_length_tokens")
        ):
            continue
        level = row.get("level") if row.get("mode") in LEVELLED else None
        for prefix in ("spec_", "spec_tasks_"):
            workload = row.get(f"{prefix}workload")
            rate = row.get(f"{prefix}acceptance_rate_pct")
            if not isinstance(workload, str) or rate is None or pd.isna(rate):
                continue
            # the tasks pass is the group's, once, whatever the point's batch and context
            label = configuration_label(
                row, TASKS_LABEL if prefix == "spec_tasks_" else CONFIGURATION
            )
            if prefix == "spec_tasks_" and (label, workload) in tasks_seen:
                continue
            tasks_seen.add((label, workload))
            lines.append({
                "model": row["model"], "configuration": label, "level": level,
                "spec_workload": workload,
                "spec_acceptance_rate_pct": rate,
                "spec_acceptance_length_tokens": row.get(f"{prefix}acceptance_length_tokens"),
                "spec_acceptance_per_pos_pct": row.get(f"{prefix}acceptance_per_pos_pct"),
                "spec_drafts": row.get(f"{prefix}drafts"),
                "decode_speedup": row.get("decode_speedup") if prefix == "spec_" else np.nan,
            })  # fmt: skip
    return pd.DataFrame(lines, columns=list(ACCEPTANCE_COLUMNS))


def unpaired_line(points: Sequence[Point]) -> str | None:
    """Said at plan: the planned speculative points without a plain twin among ``points`` (the
    same configuration, ``MATCH_ON``, without speculation), which are measured but never
    priced, since greedy identity needs the twin's outputs; None when every one has its twin."""
    plain = {_point_key(p) for p in points if p.speculative is None}
    alone = [p for p in points if p.speculative is not None and _point_key(p) not in plain]
    if not alone:
        return None
    example = configuration_label(alone[0].model_dump())
    return (
        f"{len(alone)} speculative point(s) have no plain twin in this sweep (the same "
        f"configuration without speculation), e.g. {alone[0].model} {example}: they are "
        "measured but nothing of them is priced (greedy identity is checked against the plain "
        "row); add `none` to `speculative:`"
    )


def _point_key(point: Point) -> tuple[str, ...]:
    fields = point.model_dump()
    return (point.mode, *(str(fields.get(f)) for f in MATCH_ON))


def identity_lines(points: pd.DataFrame) -> list[str]:
    """The greedy-identity check in words, one line per speculative row (or why there is none),
    for the published reports."""
    rows = points[speculative_rows(points)] if not points.empty else points
    if rows.empty:
        return ["no configuration was measured with speculative decoding"]
    out = []
    for row in rows.to_dict("records"):
        label = f"{row['model']} {configuration_label(row)}"
        verdict = row.get("greedy_identical")
        if verdict == IDENTICAL:
            out.append(f"{label}: greedy output identical to plain decoding on all "
                       f"{int(row['greedy_items'])} items")  # fmt: skip
        elif verdict == DIFFERENT:
            out.append(f"{label}: DIFFERS from plain decoding on {int(row['greedy_differing'])} "
                       f"of {int(row['greedy_items'])} items: not priced")  # fmt: skip
        elif verdict == SYNTHETIC:
            length = row["spec_synthetic_length_tokens"]
            out.append(f"{label}: synthetic acceptance {length:g} (a replay, not the "
                       "target's outputs): never gated, never priced")  # fmt: skip
        else:
            out.append(f"{label}: unchecked (no plain row of the same configuration with greedy "
                       "digests in this run): not priced")  # fmt: skip
    return out


def _bands_text(bands: list[float]) -> str:
    return ", ".join(f"{b:g}" for b in bands)


def band_lines(bands: pd.DataFrame, quality_class: str) -> list[tuple[bool, str]]:
    """Speculation against plain decoding per interactivity band in words (harness.modes.serving
    .price.speculation_bands, class ``quality_class``): per series, the bands where it is cheaper
    per Mtok out (with the saving), where plain is, and where the cheaper flips; each line with
    whether speculation wins at any band (the headline names those)."""
    if bands.empty:
        return []
    rows = bands[bands["quality_class"] == quality_class]
    series = [
        "model", "gpu", "provider", "package_days", "backend", "quantization", "kv_cache_dtype",
        "layout", "speculative",
    ]  # fmt: skip
    out = []
    for _, one in rows.groupby(series, sort=False, dropna=False):
        first = one.iloc[0]
        wins = one[one["cheaper"].isin(["speculation", "speculation only"])]
        plain = one[one["cheaper"].isin(["plain", "plain only"])]
        flips = one[one["cheaper_flips"].astype(bool)]
        workload = first.get("spec_workload") or "its serving prompts"
        head = (
            f"{first['model']} on {first['gpu']} ({first['provider']}, "
            f"{first['package_days']:g}-day), {first['speculative']} on {workload}"
        )
        parts = []
        if not wins.empty:
            saving = wins["speculation_saving_pct"].dropna()
            low, high = (f"{saving.min():.1f}", f"{saving.max():.1f}") if len(saving) else ("", "")
            spread = low if low == high else f"{low}–{high}"
            saves = f" (saves {spread} % of plain $/Mtok out)" if len(saving) else ""
            at = _bands_text(list(wins["band_tok_s_user"]))
            parts.append(f"cheaper than plain decoding at ≥ {at} tok/s/user{saves}")
        if not plain.empty:
            at = _bands_text(list(plain["band_tok_s_user"]))
            parts.append(f"plain decoding cheaper at ≥ {at} tok/s/user")
        if not flips.empty:
            parts.append(f"the cheaper flips at ≥ {_bands_text(list(flips['band_tok_s_user']))}")
        out.append((not wins.empty, f"{head}: {'; '.join(parts)}"))
    return out


def offline_wins(cheapest: pd.DataFrame, quality_class: str) -> list[str]:
    """The offline headline's cheapest configurations (class ``quality_class``) that speculate,
    in words."""
    if cheapest.empty or "speculative" not in cheapest:
        return []
    rows = cheapest[(cheapest["quality_class"] == quality_class) & speculative_rows(cheapest)]
    return [
        f"{r['model']} on {r['gpu']} ({r['provider']}, {r['package_days']:g}-day): the cheapest "
        f"configuration uses speculative decoding {r['speculative']} "
        f"(${float(r['usd_per_mtok_output']):.4g}/Mtok out)"
        for r in rows.to_dict("records")
    ]
