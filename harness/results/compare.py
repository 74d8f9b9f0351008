"""Compare two runs configuration by configuration, against a declared useful-effect threshold.

Rows are matched by the point's fields (model, revision, backend, quantization, KV dtype, batch,
context, output tokens, target) and the GPU, never by the key: the key also hashes the harness
version and the corpus, which is what a comparison across versions or machines wants to see
through. When no configuration matches with the GPU (two runs on two different cards), they are
matched without it: the comparison is then card against card.

For every matched configuration and metric: A, B, B − A, the change in % of A with a 95 % CI,
the method, and a verdict against the threshold T (in %):

- ``better`` / ``worse``: the whole CI is beyond +T or −T (in the metric's good / bad direction);
- ``equivalent``: the whole CI lies within ±T;
- ``inconclusive``: the CI straddles ±T (more repeats or windows would tell);
- ``n/a``: a value is missing on one side.

Methods:

- ppl, ``paired-windows``: both runs kept per-window NLL sums for the configuration (same windows
  and token counts): the paired bootstrap of the per-window difference
  (``harness.measure.quality.paired_dnll``), as a perplexity change exp(ΔNLL) − 1. The
  difference of two perplexities on the same text is far tighter paired than unpaired.
- ppl, ``welch-ci``: otherwise, each side's standard error is read back from its 95 % CI
  (half-width ÷ 1.96) and the difference gets ±1.96 × √(se_a² + se_b²). Conservative: it ignores
  that both runs scored the same windows.
- decode_tok_s, ``welch``: standard error = mean × CV ÷ √repeats on each side, Welch–
  Satterthwaite degrees of freedom, Student-t quantile.
- peak_mib_decode, ``point``: one peak per point, no spread: the verdict compares the change
  itself with ±T (``equivalent`` / ``better`` / ``worse``), with no CI.
- j_per_token_decode, ``point``: likewise (one metered pass per point); ``n/a`` where either
  run could not read its device's energy counter.
- ``task:<name>`` (each task both runs scored, harness.tasks: accuracy, extract field F1),
  ``point``: the change of the score itself against ±T.

Per-window NLL sums (arrays ``nll_sum`` and ``tokens``) are read from where the worker keeps
every group's (``harness.run.store.load_window_nll``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from harness.errors import UserInputError
from harness.results.columns import COMPARED, spec
from harness.results.frame import load_run
from harness.run.store import load_window_nll
from harness.spec.scenario import CONFIGURATION_FIELDS

Array = NDArray[Any]  # numpy arrays of any dtype
MATCH_FIELDS = CONFIGURATION_FIELDS
# metric → +1 when higher is better, −1 when lower is better (declared in harness.results.columns)
METRICS: dict[str, int] = {m: spec(m).direction for m in COMPARED}
Z95 = 1.959963984540054

WindowSource = Callable[[pd.Series], tuple[Array, Array] | None]

COLUMNS = [
    *MATCH_FIELDS,
    "gpu_a",
    "gpu_b",
    "metric",
    "a",
    "b",
    "diff",
    "diff_pct",
    "ci_low_pct",
    "ci_high_pct",
    "method",
    "verdict",
    "key_a",
    "key_b",
]


@dataclass
class Comparison:
    table: pd.DataFrame  # one row per (configuration, metric), COLUMNS
    only_a: pd.DataFrame  # configurations measured (ok) in A only: MATCH_FIELDS
    only_b: pd.DataFrame
    threshold_pct: float
    matched_on: list[str] = field(default_factory=list)
    duplicates: dict[str, int] = field(default_factory=dict)  # rows dropped as repeats, per run
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was not compared, and why

    def verdicts(self) -> dict[str, dict[str, int]]:
        """metric → verdict → count."""
        out: dict[str, dict[str, int]] = {}
        counts = self.table.groupby(["metric", "verdict"]).size()
        for (metric, verdict), n in zip(counts.index.to_list(), counts.to_list(), strict=True):
            out.setdefault(str(metric), {})[str(verdict)] = int(n)
        return out


def t_quantile_975(df: Array) -> Array:
    """Student-t 97.5 % quantile (Cornish–Fisher expansion in 1/df; within 1 % for df ≥ 2,
    within 0.1 % for df ≥ 4; infinite df → the normal 1.96)."""
    nu = np.maximum(np.asarray(df, dtype=np.float64), 1.0)
    z = Z95
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return np.asarray(z + g1 / nu + g2 / nu**2 + g3 / nu**3 + g4 / nu**4, dtype=np.float64)


def window_source(run_dir: Path) -> WindowSource:
    """Per-window (nll_sum, tokens) of a row's configuration, when the run kept them."""

    def load(row: pd.Series) -> tuple[Array, Array] | None:
        group = row.get("group")
        return load_window_nll(run_dir, group) if isinstance(group, str) and group else None

    return load


ADAPTER_CONTENT = "adapter_content"  # an adapter matched by its weights, not by its path
MATCHED_ON = {"card": "gpu", ADAPTER_CONTENT: "adapter (by content)"}  # the keys, as said


def adapter_content(frame: pd.DataFrame) -> pd.Series:
    """Each row's adapter by content: its weights' sha256 where the row records it, else the
    adapter as written ("" without an adapter)."""
    written = frame["adapter"].astype("object").fillna("") if "adapter" in frame else ""
    column = "provenance_adapter_sha256"
    sha = frame[column].astype("object") if column in frame else pd.Series(None, frame.index)
    has = sha.notna() & (sha.astype(str) != "")
    return pd.Series(np.where(has, "sha256:" + sha.astype(str), written), index=frame.index)


def match_keys(with_card: bool) -> list[str]:
    """What two rows are matched on: the configuration, its adapter by content, the card."""
    keys = [ADAPTER_CONTENT if f == "adapter" else f for f in MATCH_FIELDS]
    return [*keys, "card"] if with_card else keys


def _dedupe(frame: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, int]:
    ok = frame[frame["status"] == "ok"].sort_values("key", kind="stable")
    card = ok["gpu"].astype("object").fillna("")
    extra = pd.DataFrame({"card": card, ADAPTER_CONTENT: adapter_content(ok)}, index=ok.index)
    ok = pd.concat([ok.drop(columns=["card"], errors="ignore"), extra], axis=1)
    unique = ok.drop_duplicates(keys, keep="first")
    return unique, len(ok) - len(unique)


def _verdict(low: float, high: float, threshold: float, direction: int) -> str:
    if math.isnan(low) or math.isnan(high):
        return "n/a"
    if -threshold < low and high < threshold:
        return "equivalent"
    if low > threshold:
        return "better" if direction > 0 else "worse"
    if high < -threshold:
        return "worse" if direction > 0 else "better"
    return "inconclusive"


def _decode_ci(m: pd.DataFrame) -> tuple[Array, Array, Array]:
    """(diff, low, high) of decode tok/s, Welch."""
    a, b = m["decode_tok_s_a"].to_numpy(float), m["decode_tok_s_b"].to_numpy(float)
    n_a = m["repeats_done_a"].fillna(m["repeats_a"]).to_numpy(float)
    n_b = m["repeats_done_b"].fillna(m["repeats_b"]).to_numpy(float)
    var_a = (a * m["decode_cv_a"].to_numpy(float)) ** 2 / n_a
    var_b = (b * m["decode_cv_b"].to_numpy(float)) ** 2 / n_b
    with np.errstate(invalid="ignore", divide="ignore"):
        df = (var_a + var_b) ** 2 / (var_a**2 / (n_a - 1) + var_b**2 / (n_b - 1))
        df = np.where(np.isfinite(df), df, np.inf)
    half = t_quantile_975(df) * np.sqrt(var_a + var_b)
    diff = b - a
    return diff, diff - half, diff + half


def _side(m: pd.DataFrame, suffix: str) -> pd.DataFrame:
    """One run's columns of the merged frame, under their own names (keys included)."""
    own = m[[c for c in m.columns if c.endswith(suffix)]]
    own = own.rename(columns=lambda c: c[: -len(suffix)])
    return pd.concat([m[[c for c in MATCH_FIELDS if c in m.columns]], own], axis=1)


def _ppl_ci(
    m: pd.DataFrame,
    windows_a: WindowSource | None,
    windows_b: WindowSource | None,
    samples: int,
) -> tuple[Array, Array, Array, list[str]]:
    """(diff %, low %, high %, method) of ppl per matched configuration."""
    from harness.measure.quality import paired_dnll

    a, b = m["ppl_a"].to_numpy(float), m["ppl_b"].to_numpy(float)
    se_a = (m["ppl_ci_high_a"] - m["ppl_ci_low_a"]).to_numpy(float) / (2 * Z95)
    se_b = (m["ppl_ci_high_b"] - m["ppl_ci_low_b"]).to_numpy(float) / (2 * Z95)
    half = Z95 * np.sqrt(se_a**2 + se_b**2)
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = (b - a) / a * 100
        low = (b - a - half) / a * 100
        high = (b - a + half) / a * 100
    method = ["welch-ci"] * len(m)
    if windows_a is None or windows_b is None:
        return pct, low, high, method
    cols_a, cols_b = _side(m, "_a"), _side(m, "_b")
    for i in range(len(m)):
        wa, wb = windows_a(cols_a.iloc[i]), windows_b(cols_b.iloc[i])
        if wa is None or wb is None or wa[0].shape != wb[0].shape:
            continue
        if not np.array_equal(wa[1], wb[1]):
            continue  # different windows: not a pair
        d, d_low, d_high = paired_dnll(wa[0], wb[0], wa[1], samples=samples, seed=0)
        pct[i], low[i], high[i] = (math.expm1(v) * 100 for v in (d, d_low, d_high))
        method[i] = "paired-windows"
    return pct, low, high, method


def _matched(
    frame_a: pd.DataFrame, frame_b: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str], dict[str, int]]:
    """The configurations both runs measured (on the same card, else card against card), those
    only one of them has, the keys they were matched on and the duplicates each side dropped."""
    keys = match_keys(with_card=True)
    a, dup_a = _dedupe(frame_a, keys)
    b, dup_b = _dedupe(frame_b, keys)
    m = a.merge(b, on=keys, how="inner", suffixes=("_a", "_b"))
    if m.empty:  # two runs on two different cards: compare card against card
        keys = match_keys(with_card=False)
        a, dup_a = _dedupe(frame_a, keys)
        b, dup_b = _dedupe(frame_b, keys)
        m = a.merge(b, on=keys, how="inner", suffixes=("_a", "_b"))
    if "adapter_a" in m:  # matched by content: the adapter as A wrote it
        m = pd.concat([m, m["adapter_a"].rename("adapter")], axis=1)
    only_a, only_b = _only(a, b, keys), _only(b, a, keys)
    return m, only_a, only_b, keys, {"a": dup_a, "b": dup_b}


def _only(x: pd.DataFrame, y: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The configurations of ``x`` that ``y`` lacks (matched on ``keys``), as MATCH_FIELDS
    (and the card, as ``gpu``, when matched on it)."""
    marks = x.merge(y[keys].drop_duplicates(), on=keys, how="left", indicator=True)
    shown = [*MATCH_FIELDS, "card"] if "card" in keys else list(MATCH_FIELDS)
    alone = marks.loc[marks["_merge"] == "left_only", shown]
    return alone.rename(columns={"card": "gpu"})


def adapter_notes(frame_a: pd.DataFrame, frame_b: pd.DataFrame) -> list[str]:
    """An adapter written the same in both runs whose weights differ: said, not compared."""
    notes = []
    pairs: dict[str, dict[str, set[str]]] = {}
    for side, frame in (("a", frame_a), ("b", frame_b)):
        if "adapter" not in frame or frame.empty:
            return []
        ok = frame[frame["status"] == "ok"]
        for written, content in zip(ok["adapter"], adapter_content(ok), strict=True):
            if isinstance(written, str) and written:
                pairs.setdefault(written, {}).setdefault(side, set()).add(content)
    for written, sides in pairs.items():
        a, b = sides.get("a", set()), sides.get("b", set())
        if a and b and not a & b:
            notes.append(
                f"adapter {written}: other weights in B ({sorted(b)[0][:23]}) than in A "
                f"({sorted(a)[0][:23]}): its rows are not compared"
            )
    return notes


def _metric_rows(
    m: pd.DataFrame,
    metric: str,
    direction: int,
    threshold_pct: float,
    windows: tuple[WindowSource | None, WindowSource | None],
    samples: int,
) -> pd.DataFrame:
    """One metric over the matched configurations: A, B, the change in %, its CI by the
    metric's method (module docstring) and the verdict against the threshold."""
    base = m[list(MATCH_FIELDS)].assign(
        gpu_a=m["gpu_a"], gpu_b=m["gpu_b"], key_a=m["key_a"], key_b=m["key_b"]
    )
    va, vb = m[f"{metric}_a"].to_numpy(float), m[f"{metric}_b"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = (vb - va) / va * 100
    if metric == "decode_tok_s":
        _, low, high = _decode_ci(m)
        with np.errstate(invalid="ignore", divide="ignore"):
            low, high = low / va * 100, high / va * 100
        method = ["welch"] * len(m)
    elif metric == "ppl":
        pct, low, high, method = _ppl_ci(m, windows[0], windows[1], samples)
    else:
        low, high = pct.copy(), pct.copy()
        method = ["point"] * len(m)
    verdicts = [
        _verdict(lo, hi, threshold_pct, direction)
        for lo, hi in zip(low.tolist(), high.tolist(), strict=True)
    ]
    point = np.array(method) == "point"
    return base.assign(
        metric=metric, a=va, b=vb, diff=vb - va, diff_pct=pct,
        ci_low_pct=np.where(point, np.nan, low), ci_high_pct=np.where(point, np.nan, high),
        method=method, verdict=verdicts,
    )  # fmt: skip


def task_contents(cell: Any) -> dict[str, str]:
    """A row's task files by content (``provenance_inputs_sha256``: "task:<name>=<sha>" pairs)."""
    if not isinstance(cell, str):
        return {}
    pairs = (item.rpartition("=") for item in cell.split(","))
    return {what[5:]: sha for what, _, sha in pairs if what.startswith("task:")}


def with_task_scores(m: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int], list[str]]:
    """The matched frame with each task's score (``task:<name>``: accuracy, extract field F1;
    higher is better) as a column per side, for the tasks both sides scored on the same items:
    compared ``point``-wise (one score per configuration). A task scored on another count of
    items, or from a task file of other content, is not compared: said in a note."""
    if m.empty or "tasks_a" not in m.columns or "tasks_b" not in m.columns:
        return m, {}, []
    notes: dict[str, str] = {}

    def scored(cell: Any) -> dict[str, tuple[float, int]]:
        tasks = cell if isinstance(cell, list) else []
        return {
            t["name"]: (t["score"], t.get("items")) for t in tasks if t.get("score") is not None
        }

    inputs = {
        side: m.get(f"provenance_inputs_sha256_{side}", pd.Series(None, index=m.index))
        for side in ("a", "b")
    }
    per_side: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    for i in range(len(m)):
        a, b = scored(m["tasks_a"].iloc[i]), scored(m["tasks_b"].iloc[i])
        sha_a, sha_b = (task_contents(inputs[s].iloc[i]) for s in ("a", "b"))
        for name in a.keys() & b.keys():
            if a[name][1] != b[name][1]:
                notes[name] = f"task {name}: scored on {a[name][1]} items in A, {b[name][1]} in B"
            elif name in sha_a and name in sha_b and sha_a[name] != sha_b[name]:
                notes[name] = (
                    f"task {name}: other task file content in B (sha256 {sha_b[name]}) than "
                    f"in A ({sha_a[name]})"
                )
            else:
                continue
            del a[name], b[name]
        per_side["a"].append({f"task:{k}": v[0] for k, v in a.items()})
        per_side["b"].append({f"task:{k}": v[0] for k, v in b.items()})
    names = sorted({k for d in per_side["a"] for k in d} & {k for d in per_side["b"] for k in d})
    added = {
        f"{name}_{side}": [d.get(name, np.nan) for d in per_side[side]]
        for name in names
        for side in ("a", "b")
    }
    # joined at once: one insert per column fragments a wide frame (pandas warns past 100 blocks)
    frame = pd.DataFrame(added, index=m.index, dtype=float)
    joined = pd.concat([m, frame], axis=1) if added else m
    lines = [f"{line}: not compared" for line in notes.values()]
    return joined, dict.fromkeys(names, spec("task_score").direction), lines


def compare_frames(
    frame_a: pd.DataFrame,
    frame_b: pd.DataFrame,
    threshold_pct: float,
    *,
    windows_a: WindowSource | None = None,
    windows_b: WindowSource | None = None,
    samples: int = 1000,
) -> Comparison:
    """Every configuration both frames measured, every metric of METRICS, against the
    useful-effect threshold (in %)."""
    if not threshold_pct > 0:
        raise UserInputError(
            f"threshold must be a positive percentage, got {threshold_pct!r} (e.g. 2 = a 2 % "
            "change is the smallest one worth acting on)",
            field="threshold_pct",
        )
    m, only_a, only_b, keys, duplicates = _matched(frame_a, frame_b)
    m, task_metrics, task_notes = with_task_scores(m)
    parts = [
        _metric_rows(m, metric, direction, threshold_pct, (windows_a, windows_b), samples)
        for metric, direction in {**METRICS, **task_metrics}.items()
        if not m.empty
    ]
    table = pd.concat(parts, ignore_index=True)[COLUMNS] if parts else pd.DataFrame(columns=COLUMNS)
    return Comparison(
        table=table,
        only_a=only_a.reset_index(drop=True),
        only_b=only_b.reset_index(drop=True),
        threshold_pct=float(threshold_pct),
        matched_on=[
            {"card": "gpu", ADAPTER_CONTENT: "adapter (by content)"}.get(k, k) for k in keys
        ],
        duplicates=duplicates,
        notes=[*adapter_notes(frame_a, frame_b), *task_notes],
    )


def compare(
    run_a: Path, run_b: Path, threshold_pct: float = 2.0, *, samples: int = 1000
) -> Comparison:
    """Every configuration measured ok in both runs, metric by metric (see the module doc)."""
    frame_a, bad_a = load_run(Path(run_a))
    frame_b, bad_b = load_run(Path(run_b))
    result = compare_frames(
        frame_a,
        frame_b,
        threshold_pct,
        windows_a=window_source(Path(run_a)),
        windows_b=window_source(Path(run_b)),
        samples=samples,
    )
    result.unreadable = [*bad_a, *bad_b]
    return result
