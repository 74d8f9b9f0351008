"""Training rows (mode: training): the equal-quality gate against the full fine-tune, and the
price per tariff package. Pure pandas/numpy on the rows' columns (harness.row.Training).

Formulas (a package's hour and $ per 1M tokens as for inference: harness.results.pricing):
  usd_per_hour          = package_price ÷ (days × 24) ÷ utilisation × gpus_used ÷ gpus_in_package
  usd_per_mtok_train    = usd_per_hour ÷ (train_tok_s × 3600) × 10⁶
                          (train_tok_s = micro_batch × grad_accum × seq_len ÷ median step time)
  j_per_mtok_train      = j_per_token_train × 10⁶ (the device's joules per million training
                          tokens over extra steps; NaN where its counter is not readable)
  steps_to_target       = the first evaluated step count whose held-out loss ≤ target_eval_loss
                          (evaluations every `eval_every` steps; None: not reached in the run)
  usd_to_target         = steps_to_target × step_s × usd_per_hour ÷ 3600 (optimizer steps only;
                          the evaluations' time is the harness's, not the fine-tune's)
  dloss_vs_full         = mean over the same eval windows of (this − the full fine-tune's) held-out
                          loss, nats/token, with a paired 95 % bootstrap CI over windows; the full
                          fine-tune is the one with the same model, target, micro_batch, grad_accum,
                          seq_len, checkpointing, optimizer, steps and lr
  train_verdict_<class> = the paired non-inferiority verdict of dloss_vs_full against −ln(class)
                          (harness.measure.verdict: pass when its one-sided 95 % upper bound is
                          within the margin, fail when its lower bound is beyond, else undecided);
                          train_pass_<class> = train_verdict_<class> == "pass" (class 99: the
                          held-out perplexity shown at most 1 % above the full fine-tune's)

This module is the mode's `price` part (``price``; the contract: harness.modes.base.PricePart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.measure import quality, verdict
from harness.results.columns import PRICED_ON
from harness.results.pricing import (
    QUALITY_CLASSES,
    package_hour,
    pass_column,
    usd_per_mtok,
    verdict_column,
)

BOOTSTRAP_SAMPLES = 1000
# A full fine-tune and its counterparts share these.
PAIR_ON = (
    "model", "revision", "target", "backend", "micro_batch", "grad_accum", "seq_len",
    "gradient_checkpointing", "optimizer", "train_steps", "lr",
)  # fmt: skip
PASS_COLUMNS = tuple(f"train_{pass_column(c)}" for c in QUALITY_CLASSES)  # train_pass_<class>
VERDICT_COLUMNS = tuple(f"train_{verdict_column(c)}" for c in QUALITY_CLASSES)  # train_verdict_…
GATE_COLUMNS = (
    "dloss_vs_full", "dloss_vs_full_ci_low", "dloss_vs_full_ci_high", *VERDICT_COLUMNS,
    *PASS_COLUMNS,
)  # fmt: skip
# cost.csv's columns for training rows (beside the offline ones; NaN on offline rows)
COST_COLUMNS = (
    "mode", "train_method", "micro_batch", "grad_accum", "seq_len", "gradient_checkpointing",
    "optimizer", "trainable_params", "step_s", "train_tok_s", "usd_per_mtok_train",
    "j_per_mtok_train", "eval_loss", "eval_loss_ci_low", "eval_loss_ci_high", "dloss_vs_full",
    "dloss_vs_full_ci_low", "dloss_vs_full_ci_high", *VERDICT_COLUMNS, *PASS_COLUMNS,
    "target_eval_loss", "steps_to_target", "usd_to_target",
)  # fmt: skip


def _window_nll(value: Any) -> list[float] | None:
    if isinstance(value, (list, tuple, np.ndarray)) and len(value) > 0:
        return [float(v) for v in value]
    return None


def gate(trained: pd.DataFrame) -> pd.DataFrame:
    """Each ok training row's held-out loss against its full fine-tune's (paired over windows)."""
    out = trained.copy()
    for name in GATE_COLUMNS:
        out[name] = pd.Series([None] * len(out), dtype="object")
    if out.empty:
        return out
    ok = out["status"] == "ok"
    keys = [c for c in PAIR_ON if c in out.columns]
    full = out[ok & (out["train_method"] == "full")]
    for i, row in out[ok].iterrows():
        match = full
        for key in keys:
            match = match[match[key].astype("object") == row[key]]
        mine = _window_nll(row.get("eval_window_nll"))
        if match.empty or mine is None:
            continue
        ref = _window_nll(match.iloc[0].get("eval_window_nll"))
        if ref is None or len(ref) != len(mine):
            continue
        counts = np.ones(len(mine))
        diff, low, high = quality.paired_dnll(
            np.asarray(ref), np.asarray(mine), counts, samples=BOOTSTRAP_SAMPLES, seed=0
        )
        out.at[i, "dloss_vs_full"] = diff
        out.at[i, "dloss_vs_full_ci_low"] = low
        out.at[i, "dloss_vs_full_ci_high"] = high
        bounds = verdict.dnll_interval(ref, mine, counts, counts, samples=BOOTSTRAP_SAMPLES)
        for name, share in QUALITY_CLASSES.items():
            decided = verdict.decide(bounds.low, bounds.high, verdict.ppl_margin(share))
            out.at[i, f"train_verdict_{name.replace('.', '_')}"] = decided
            out.at[i, f"train_{pass_column(name)}"] = decided == "pass"
    return out


def priced(trained: pd.DataFrame, packages: pd.DataFrame, utilisation: float) -> pd.DataFrame:
    """One row per (ok training row, package of its GPU): $ per 1M training tokens and the $ to
    reach the target held-out loss (see the module docstring)."""
    columns = [*COST_COLUMNS, "model", *PRICED_ON, "gpus_used", "utilisation", "key"]
    if trained.empty or packages.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    ok = trained[(trained["status"] == "ok") & trained["train_tok_s"].notna()].copy()
    ok["gpus_used"] = 1.0
    table = ok.merge(packages, on="gpu", how="inner", sort=False)
    if table.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    usd_per_hour = package_hour(table, utilisation, table["gpus_used"].to_numpy(dtype=np.float64))
    tok_s = table["train_tok_s"].to_numpy(dtype=np.float64)
    step_s = table["step_s"].to_numpy(dtype=np.float64)
    steps = pd.to_numeric(table["steps_to_target"], errors="coerce").to_numpy(dtype=np.float64)
    table["usd_per_mtok_train"] = usd_per_mtok(usd_per_hour, tok_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        table["usd_to_target"] = steps * step_s * usd_per_hour / 3600
    per_token = table.get("j_per_token_train", pd.Series(np.nan, index=table.index))
    table["j_per_mtok_train"] = pd.to_numeric(per_token, errors="coerce") * 1e6
    table["utilisation"] = utilisation
    table["mode"] = "training"
    present = [c for c in columns if c in table.columns]
    return table[present].reset_index(drop=True)


def with_training(cost: pd.DataFrame, training_cost: pd.DataFrame) -> pd.DataFrame:
    """cost.csv: the offline rows, then the training rows (their own columns after the rest)."""
    offline = cost.copy()
    if "mode" not in offline.columns:
        offline.insert(0, "mode", "offline")
    if training_cost.empty:
        for name in COST_COLUMNS:
            if name not in offline.columns:
                offline[name] = np.nan
        return offline
    frames = [f for f in (offline, training_cost) if not f.empty]
    out = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    order = [*offline.columns, *(c for c in COST_COLUMNS if c not in offline.columns)]
    rest = [c for c in out.columns if c not in order]
    return out.reindex(columns=[*order, *rest])


# Rows that differ only in how a step's windows are split (micro_batch × grad_accum equal) read
# the same windows per step: with a token-normalised loss their training curves agree to rounding,
# which compounds over the steps (nats/token).
ACCUMULATION_TOLERANCE = 1e-3
SAME_STEP = (
    "model", "revision", "target", "backend", "train_method", "seq_len", "gradient_checkpointing",
    "optimizer", "train_steps", "lr", "tokens_per_step",
)  # fmt: skip
ACCUMULATION_COLUMNS = (
    "model", "train_method", "split_a", "split_b", "tokens_per_step", "max_abs_dloss_curve",
    "abs_deval_loss", "tolerance", "equivalent",
)  # fmt: skip


def accumulation_pairs(trained: pd.DataFrame) -> pd.DataFrame:
    """The accumulation-equivalence check on measured rows: every pair of ok rows of the same
    configuration and tokens per step but a different micro_batch × grad_accum split; the largest
    difference of their training-loss curves and of their held-out losses (nats/token)."""
    out: list[dict[str, Any]] = []
    if trained.empty or "loss_curve" not in trained.columns:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in ACCUMULATION_COLUMNS})
    ok = trained[(trained["status"] == "ok") & trained["loss_curve"].notna()]
    keys = [c for c in SAME_STEP if c in ok.columns]
    for _, group in ok.groupby(keys, dropna=False, sort=False):
        recs = group.astype("object").to_dict(orient="records")
        for i, a in enumerate(recs):
            for b in recs[i + 1 :]:
                if a["micro_batch"] == b["micro_batch"]:
                    continue
                curve = max(
                    abs(float(x) - float(y))
                    for x, y in zip(a["loss_curve"], b["loss_curve"], strict=False)
                )
                held = abs(float(a["eval_loss"]) - float(b["eval_loss"]))
                out.append({
                    "model": a["model"], "train_method": a["train_method"],
                    "split_a": f"{int(a['micro_batch'])}×{int(a['grad_accum'])}",
                    "split_b": f"{int(b['micro_batch'])}×{int(b['grad_accum'])}",
                    "tokens_per_step": a["tokens_per_step"], "max_abs_dloss_curve": curve,
                    "abs_deval_loss": held, "tolerance": ACCUMULATION_TOLERANCE,
                    "equivalent": bool(max(curve, held) <= ACCUMULATION_TOLERANCE),
                })  # fmt: skip
    if not out:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in ACCUMULATION_COLUMNS})
    return pd.DataFrame(out, columns=list(ACCUMULATION_COLUMNS))


def cheapest_to_target(training_cost: pd.DataFrame) -> pd.DataFrame:
    """Per (model, method, GPU, package): the configuration that reaches the target for the
    fewest dollars (only configurations that reached it)."""
    if training_cost.empty or "usd_to_target" not in training_cost.columns:
        return training_cost
    reached = training_cost[pd.to_numeric(training_cost["usd_to_target"], errors="coerce").notna()]
    if reached.empty:
        return reached
    keys = ["model", "train_method", "gpu", "package_days", "provider"]
    keys = [k for k in keys if k in reached.columns]
    best = reached.sort_values("usd_to_target").groupby(keys, dropna=False).head(1)
    return best.sort_values(keys).reset_index(drop=True)


# --- the mode's price part (harness.modes.base.PricePart) -------------------------------------


@dataclass(frozen=True)
class TrainingPriced:
    """The training tables, named as its registry entry declares them (``Aggregate.tables``):
    ``training`` (the rows with their gate against the full fine-tune) and ``training_cost``
    (each priced per package)."""

    tables: dict[str, pd.DataFrame]
    counts: dict[str, Any]

    def with_cost(self, cost: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
        return with_training(cost, self.tables["training_cost"])


def price(
    rows: pd.DataFrame, points: pd.DataFrame, packages: pd.DataFrame, utilisation: float
) -> TrainingPriced:
    """The training rows gated and priced (see the module docstring); ``points`` is not read:
    a training row's quality is its own gate against the full fine-tune."""
    trained = gate(rows)
    return TrainingPriced(
        tables={"training": trained, "training_cost": priced(trained, packages, utilisation)},
        counts={"training_rows": len(trained)},
    )
