"""The equal-quality gate (MLPerf-style classes) and the reference rule it measures against.

**The reference rule**, stated once and used by the gate and by the error analysis
(``harness.results.regressions``): a row's reference rows are the ``is_reference`` rows of the
same run, model and revision that are ``ok``, on checkpoint weights and have measured the value
compared; those on the row's own target when there are any, else those on any target
(backend-independent). Several reference rows → the gate takes their median; the error analysis
pairs a configuration with the first of them (in row order) that kept its scores' group.

**The gate**, per row against its reference value(s) (quality classes and ``pass_<class>``
columns: ``harness.results.pricing``)::

    class 99   ⇔  ppl ≤ ppl_ref / 0.99    and (when both are present) arc_acc ≥ 0.99 × arc_acc_ref
    class 99.9 ⇔  ppl ≤ ppl_ref / 0.999   and (when both are present) arc_acc ≥ 0.999 × arc_acc_ref

The paired bootstrap 95 % CI of the per-window NLL difference (``dnll_ci_low/high``, nats/token,
measured by the worker) is carried next to the class, also as a perplexity change in per cent:
``dppl_pct = (exp(dnll) − 1) × 100``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.results.frame import Array, Codes, groups_of, joint_key, random_weights
from harness.results.pricing import QUALITY_CLASSES, pass_column

# A reference is of the same run, model and revision; the same target is preferred.
SAME_REFERENCE = ("run", "model", "revision")
# quality_class's values, best first: the classes from the strictest, then below any, unknown
PASSING = tuple(sorted(QUALITY_CLASSES, key=QUALITY_CLASSES.__getitem__, reverse=True))
CLASS_ORDER = (*PASSING, "below", "unknown")


@dataclass(frozen=True)
class Strata:
    """Every row's reference strata as dense group ids: (run, model, revision, target) and
    (run, model, revision). One frame's, shared by every compared column."""

    fine: Array
    fine_count: int
    coarse: Array
    coarse_count: int


def strata(frame: pd.DataFrame, codes: Codes | None = None) -> Strata:
    codes = codes or Codes(frame)
    same = [codes(c) for c in SAME_REFERENCE]
    fine, fine_count, _ = groups_of(joint_key(*same, codes("target")))
    coarse, coarse_count, _ = groups_of(joint_key(*same))
    return Strata(fine, fine_count, coarse, coarse_count)


@dataclass(frozen=True)
class References:
    """The reference rule's answer for every row of one frame and one compared column."""

    eligible: Array  # per row: a reference row that counts (is_reference, ok, measured, ...)
    strata: Strata
    on_target: Array  # per row: its own target has an eligible reference row (else: any target)

    def rows_for(self, row: int) -> Array:
        """Positions of the reference rows row ``row`` is compared with (empty: none)."""
        ids = self.strata.fine if self.on_target[row] else self.strata.coarse
        return np.flatnonzero(self.eligible & (ids == ids[row]))

    def median(self, values: Array) -> Array:
        """Per row: the median of ``values`` over its reference rows (NaN where it has none)."""
        out: Array = np.full(len(values), np.nan)
        if not self.eligible.any():
            return out
        s = self.strata
        for ids, count, use in (
            (s.fine, s.fine_count, self.on_target),
            (s.coarse, s.coarse_count, ~self.on_target),
        ):
            medians = pd.Series(values[self.eligible]).groupby(ids[self.eligible]).median()
            table = np.full(count, np.nan)
            table[medians.index.to_numpy(dtype=np.int64)] = medians.to_numpy(dtype=np.float64)
            out = np.where(use, table[ids], out)
        return out


def references(
    frame: pd.DataFrame, column: str, codes: Codes | None = None, among: Strata | None = None
) -> References:
    """The reference rows of every row of ``frame`` for ``column`` (the module docstring's rule);
    ``among``: the frame's ``strata``, when already known."""
    among = among or strata(frame, codes)
    values = frame[column].to_numpy(dtype=np.float64)
    eligible = (
        frame["is_reference"].to_numpy(dtype=bool)
        & (frame["status"] == "ok").to_numpy(dtype=bool)
        & ~np.isnan(values)
        & ~random_weights(frame)
    )
    has_reference = np.zeros(among.fine_count, dtype=bool)
    has_reference[among.fine[eligible]] = True
    return References(eligible, among, has_reference[among.fine])


def quality_gate(frame: pd.DataFrame, codes: Codes | None = None) -> pd.DataFrame:
    """Adds ppl_ref, arc_acc_ref, quality_pct, pass_<class>, quality_class, dppl_pct (+CI)."""
    out = frame
    codes = codes or Codes(frame)
    # a row on random weights has no quality to class, whatever its columns say
    ppl = np.where(random_weights(out), np.nan, out["ppl"].to_numpy(dtype=np.float64))
    among = strata(out, codes)
    ppl_ref = references(out, "ppl", among=among).median(out["ppl"].to_numpy(dtype=np.float64))
    arc = out["arc_acc"].to_numpy(dtype=np.float64)
    arc_ref = references(out, "arc_acc", among=among).median(arc)
    out["ppl_ref"] = ppl_ref
    out["arc_acc_ref"] = arc_ref
    with np.errstate(invalid="ignore", divide="ignore"):
        out["quality_pct"] = ppl_ref / ppl * 100
        arc_known = ~np.isnan(arc) & ~np.isnan(arc_ref)
        for name, level in QUALITY_CLASSES.items():
            ppl_ok = ppl <= ppl_ref / level  # False when either is NaN
            arc_ok = ~arc_known | (arc >= level * arc_ref)
            out[pass_column(name)] = ppl_ok & arc_ok
    known = ~np.isnan(ppl) & ~np.isnan(ppl_ref)
    passes = [out[pass_column(name)].to_numpy(dtype=bool) for name in PASSING]
    code = np.select([*passes, known], list(range(len(PASSING) + 1)), default=len(PASSING) + 1)
    out["quality_class"] = pd.Categorical.from_codes(
        code.astype(np.int64), categories=pd.Index(CLASS_ORDER)
    )
    for suffix in ("", "_ci_low", "_ci_high"):
        source = "dnll_vs_ref" if not suffix else f"dnll{suffix}"
        out[f"dppl_pct{suffix}"] = np.expm1(out[source].to_numpy(dtype=np.float64)) * 100
    return out
