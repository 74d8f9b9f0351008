"""From result rows (and tariffs) to the tables people pay for: cost per package at equal quality.

Everything here is vectorised pandas/numpy over one frame of rows (a million rows aggregate in a
few seconds on two cores; ``make perf`` measures it). The formulas, stated once:

Equal-quality gate (MLPerf-style classes), per model against its reference row(s) of the same run
(``is_reference``; backend-independent; the reference measured on the same target is preferred,
else any reference of the model in the run; several reference rows → their median):

    class 99   ⇔  ppl ≤ ppl_ref / 0.99    and (when both are present) arc_acc ≥ 0.99 × arc_acc_ref
    class 99.9 ⇔  ppl ≤ ppl_ref / 0.999   and (when both are present) arc_acc ≥ 0.999 × arc_acc_ref

The paired bootstrap 95 % CI of the per-window NLL difference (``dnll_ci_low/high``, nats/token,
measured by the worker) is carried next to the class, also as a perplexity change in per cent:
``dppl_pct = (exp(dnll) − 1) × 100``.

Cost of one row on one tariff package (a node of ``gpus_in_package`` cards for ``days`` days at
utilisation ``u``; the row needs ``gpus_used`` cards and runs ``gpus_in_package ÷ gpus_used``
replicas)::

    usd_per_mtok = (package_price ÷ (days × 24) ÷ u) × gpus_used ÷ gpus_in_package
                   ÷ (tok_s × 3600) × 10⁶          (decode tok/s → output; total tok/s → total)
    tokens_per_package    = tok_s × 3600 × days × 24 × u × (gpus_in_package ÷ gpus_used)
    breakeven_utilisation = package_price ÷ (hourly_usd × days × 24)

Hourly billing charges only the hours used (``hourly × days × 24 × u``), so the package is the
cheaper choice exactly when ``u > breakeven_utilisation``.

A ResultRow runs on one device, so ``gpus_used`` is 1 unless the frame carries a ``gpus_used``
column (tensor parallelism, later); a row needing more cards than a node has is not priced there.

Rows priced: status ``ok``, a positive ``decode_tok_s`` not above ``roofline_decode_tok_s`` (a
row above its roofline ceiling is a measurement error: flagged, counted, never priced), measured
on the model's checkpoint (``weights: random`` rows have no quality: they are published in the
speed-only table ``speed_only`` and never priced), and only against tariffs of the row's own
``gpu``. Every other row is counted in ``Aggregate.counts``.

Tables: ``cheapest`` (lowest output $/Mtok per model, class, GPU and package, with the ratio to
the cheapest GPU), ``gpu_ratios`` (every GPU pair at equal quality), two Pareto fronts (output
$/Mtok vs ppl per model and package length; decode tok/s vs TPOT per model and device),
``main_effects`` (per model and device: the mean of decode_tok_s, peak_mib_decode and ppl at
each level of quantization, KV dtype, batch and context, minus the mean over that axis's levels)
and ``interactions`` (two-way, only for axis pairs whose grid is complete in that model and
device). ``cost`` (every priced row × package) is built when first read.
"""

from __future__ import annotations

import itertools
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from harness.errors import UserInputError
from harness.results import energy as en
from harness.results import regressions as reg
from harness.modes.serving import price as srv
from harness.modes.training import price as trn
from harness.row import ResultRow
from harness.run.store import read_manifest, read_rows
from harness.spec.scenario import CONFIGURATION_FIELDS
from harness.spec.tariffs import HOURS_PER_DAY, TariffTable

Array = NDArray[Any]  # numpy arrays of any dtype
QUALITY_CLASSES: dict[str, float] = {"99": 0.99, "99.9": 0.999}
AXES = ("quantization", "kv_cache_dtype", "batch", "context")
EFFECT_METRICS = ("decode_tok_s", "peak_mib_decode", "ppl")

COST_COLUMNS = [
    "model",
    "quality_class",
    "gpu",
    "provider",
    "package_days",
    "package_price_usd",
    "gpus_in_package",
    "gpus_used",
    "utilisation",
    *(f for f in CONFIGURATION_FIELDS if f not in ("model", "revision")),
    "decode_tok_s",
    "total_tok_s",
    "usd_per_mtok_output",
    "j_per_mtok_output",  # energy beside cost (harness.results.energy); NaN: not measured
    "usd_per_mtok_electricity",
    "avg_power_w_decode",
    "energy_source",
    "usd_per_mtok_total",
    "usd_per_mtok_output_hourly",
    "tokens_per_package",
    "total_tokens_per_package",
    "breakeven_utilisation",
    "package_beats_hourly",
    "hourly_usd",
    "ppl",
    "ppl_ref",
    "quality_pct",
    "dnll_vs_ref",
    "dnll_ci_low",
    "dnll_ci_high",
    "dppl_pct",
    "dppl_pct_ci_low",
    "dppl_pct_ci_high",
    "pass_99",
    "pass_99_9",
    "tpot_ms_p50",
    "peak_mib_decode",
    "package_rule",
    "tariff_example",
    "key",
]


INT_COLUMNS = ("batch", "context", "output_tokens", "repeats", "seed", "schema_version")


def _column_kinds() -> tuple[list[str], list[str]]:
    """(float, bool) columns of a ResultRow, read from the schema: an optional int is a float
    column here (NaN = not measured); the plain ints are INT_COLUMNS; the rest is text."""
    floats: list[str] = []
    bools: list[str] = []
    for name, info in ResultRow.model_fields.items():
        ann = info.annotation
        args = set(typing.get_args(ann)) if isinstance(ann, types.UnionType) else {ann}
        args.discard(type(None))
        if ann is bool:
            bools.append(name)
        elif args == {bool}:
            continue  # an optional flag keeps None (unknown) next to True/False
        elif args and args <= {float, int} and name not in INT_COLUMNS:
            floats.append(name)
    return floats, bools


FLOAT_COLUMNS, BOOL_COLUMNS = _column_kinds()


@dataclass
class Aggregate:
    """Every table of one aggregation. ``points`` keeps every row, priced or not; ``cost`` (one
    row per priced row × package) is built on first use, as it is the one table that grows with
    rows × packages and nothing else here needs it whole."""

    points: pd.DataFrame
    packages: pd.DataFrame
    cheapest: pd.DataFrame
    gpu_ratios: pd.DataFrame
    pareto_cost_quality: pd.DataFrame
    pareto_throughput_latency: pd.DataFrame
    main_effects: pd.DataFrame
    interactions: pd.DataFrame
    utilisation: float
    counts: dict[str, Any] = field(default_factory=dict)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    # per configuration vs its reference (harness.results.regressions); None: no run folder read
    regressions: reg.Regressions | None = None
    # mode: serving (harness.modes.serving.price): the rows, with their configuration's quality;
    # per configuration its level at the SLO; that level priced per package; the cheapest
    serving: pd.DataFrame = field(default_factory=pd.DataFrame)
    at_slo: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=srv.AT_SLO_COLUMNS))
    priced_at_slo: pd.DataFrame = field(default_factory=pd.DataFrame)
    cheapest_at_slo: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=srv.CHEAPEST_AT_SLO_COLUMNS)
    )
    # mode: training (harness.modes.training.price): the rows with their gate against the full
    # fine-tune; each priced per package ($ per 1M training tokens, $ to the target loss)
    training: pd.DataFrame = field(default_factory=pd.DataFrame)
    training_cost: pd.DataFrame = field(default_factory=pd.DataFrame)
    # n-gram overlap of what the models saw with what they are scored on (the run's manifest)
    leakage: list[dict[str, Any]] = field(default_factory=list)

    @cached_property
    def cost(self) -> pd.DataFrame:
        offline = cost_table(self.points, self.packages, self.utilisation)
        offline = srv.with_cost_at_slo(offline, self.points, self.priced_at_slo)
        return trn.with_training(offline, self.training_cost)

    @cached_property
    def speed_only(self) -> pd.DataFrame:
        """Measured rows on random weights: speed and memory, no quality, never priced."""
        rows = random_weights(self.points) & (self.points["status"] == "ok").to_numpy(dtype=bool)
        present = [c for c in SPEED_ONLY_COLUMNS if c in self.points.columns]
        return self.points.loc[rows, present].reset_index(drop=True)


SPEED_ONLY_COLUMNS = (
    "model",
    "backend",
    "quantization",
    "kv_cache_dtype",
    "batch",
    "context",
    "output_tokens",
    "device",
    "prefill_tok_s",
    "decode_tok_s",
    "ttft_ms_p50",
    "tpot_ms_p50",
    "peak_mib_decode",
    "predicted_peak_mib",
    "key",
)


# --- rows → frame -----------------------------------------------------------------------------


def frame_from_rows(rows: Iterable[ResultRow]) -> pd.DataFrame:
    """One column per ResultRow field; provenance flattened as ``provenance_<field>``."""
    records = []
    for row in rows:
        data = row.model_dump()
        provenance = data.pop("provenance") or {}
        data.update({f"provenance_{k}": v for k, v in provenance.items()})
        records.append(data)
    return normalise(pd.DataFrame.from_records(records))


def normalise(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with every schema column present, in one dtype: floats float64 (NaN = not
    measured), ``is_reference`` bool, the plain ints int64, the rest as given. Float columns that
    are missing or of another dtype are rebuilt together as one block (one insert or dtype change
    per column leaves a wide frame in hundreds of blocks, slow for every later column)."""
    out = frame.copy(deep=False)  # copy-on-write: the caller's frame is never changed
    n = len(out)
    redo = [c for c in FLOAT_COLUMNS if c not in out or out[c].dtype != np.float64]
    if redo:
        order = [*out.columns, *(c for c in redo if c not in out)]  # columns keep their places
        floats = np.full((n, len(redo)), np.nan)
        for i, name in enumerate(redo):
            if name in out:
                floats[:, i] = pd.to_numeric(out[name], errors="coerce").to_numpy(np.float64)
        out = out.drop(columns=[c for c in redo if c in out])
        out = pd.concat([out, pd.DataFrame(floats, columns=redo, index=out.index)], axis=1)
        out = out[order]
    for name in BOOL_COLUMNS:
        if name in out and out[name].dtype != bool:
            out[name] = out[name].astype("object").fillna(False).astype(bool)
    for name in INT_COLUMNS:
        if name in out and out[name].dtype != np.int64:
            out[name] = pd.to_numeric(out[name], errors="coerce").fillna(0).astype(np.int64)
    bools = [c for c in BOOL_COLUMNS if c not in out]
    objects = [
        c for c in dict.fromkeys((*CONFIGURATION_FIELDS, "status", "gpu", "run", "key"))
        if c not in out
    ]  # fmt: skip
    if bools or objects:
        added = [
            pd.DataFrame(np.zeros((n, len(bools)), dtype=bool), columns=bools, index=out.index),
            pd.DataFrame(
                np.full((n, len(objects)), None, dtype=object), columns=objects, index=out.index
            ),
        ]
        out = pd.concat([out, *added], axis=1)
    return out.reset_index(drop=True)


def load_run(run_dir: Path) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """The run's rows as a frame, and every unreadable point file with why (named, skipped)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserInputError("run folder not found", file=str(run_dir))
    rows, bad = read_rows(run_dir)
    if not rows and not bad:
        raise UserInputError(
            "no point files under points/ (is this a run folder?)", file=str(run_dir)
        )
    if not rows:
        path, why = bad[0]
        raise UserInputError(
            f"none of the {len(bad)} point files is readable (first: {path.name}: {why})",
            file=str(run_dir),
        )
    return frame_from_rows(rows), [(str(path), why) for path, why in bad]


def scenario_mix(run_dir: Path, allow_mixed: bool) -> list[str]:
    """The scenario hashes a run folder's manifest records when there is more than one (a folder
    reused for another scenario, or runs merged by hand): refused, unless ``allow_mixed`` says the
    mix is wanted, and then every table states it. [] for a folder of one scenario."""
    runs = read_manifest(run_dir).get("runs", [])
    hashes = list(dict.fromkeys(str(r["scenario_hash"]) for r in runs if r.get("scenario_hash")))
    if len(hashes) <= 1:
        return []
    if not allow_mixed:
        raise UserInputError(
            f"rows from {len(hashes)} scenarios ({', '.join(h[:16] for h in hashes[:4])}) would "
            "be aggregated as one; pass --allow-mixed to say that is meant (the report states it)",
            file=str(run_dir / "manifest.json"),
        )
    return hashes


# --- the pipeline -----------------------------------------------------------------------------


def check_quality_class(name: str, field: str = "quality_class") -> str:
    """A quality class by name (QUALITY_CLASSES), or a UserInputError saying which exist."""
    if name not in QUALITY_CLASSES:
        raise UserInputError(
            f"{name!r} is not a quality class; expected one of: {', '.join(QUALITY_CLASSES)}",
            field=field,
        )
    return name


def check_utilisation(utilisation: float) -> float:
    if not 0 < utilisation <= 1:
        raise UserInputError(
            f"utilisation must be in (0, 1], got {utilisation!r} (0.5 = the node is busy half of "
            "the package's hours)",
            field="utilisation",
        )
    return float(utilisation)


def packages_frame(tariffs: TariffTable | None) -> pd.DataFrame:
    """One row per (tariff, package); empty (with its columns) when there are no tariffs."""
    rows = tariffs.package_rows() if tariffs is not None else []
    if rows:
        return pd.DataFrame(rows).assign(package_index=np.arange(len(rows)))
    return pd.DataFrame({c: pd.Series(dtype="object") for c in PACKAGE_COLUMNS})


PACKAGE_COLUMNS = (
    "package_index",
    "tariff_index",
    "provider",
    "gpu",
    "gpus_in_package",
    "hourly_usd",
    "package_days",
    "package_price_usd",
    "package_rule",
    "tariff_source",
    "tariff_date",
    "tariff_example",
)


def aggregate(
    frame: pd.DataFrame,
    tariffs: TariffTable | None = None,
    utilisation: float = 1.0,
    unreadable: Sequence[tuple[str, str]] = (),
) -> Aggregate:
    """All tables from one frame of rows (see the module docstring for every formula)."""
    utilisation = check_utilisation(utilisation)
    points, served = srv.split_modes(flag_rows(normalise(frame)))  # serving rows: their own tables
    points, trained = trn.split_modes(points)  # training rows: their own tables
    trained = trn.gate(trained)
    codes = Codes(points)
    points = en.with_energy_columns(quality_gate(points, codes), tariffs)
    packages = packages_frame(tariffs)
    cheapest = cheapest_passing(points, packages, utilisation, codes)
    factors = _Factors(points, codes)
    served = srv.inherit_quality(served, points)
    at = srv.at_slo(served)
    priced = price_at_slo(srv.at_slo_packages(at, packages), utilisation)
    counts = _counts(points, packages, unreadable)
    counts["serving_rows"] = len(served)
    counts["training_rows"] = len(trained)
    counts["serving_by_status"] = {
        str(k): int(v) for k, v in served["status"].value_counts().items()
    }
    return Aggregate(
        training=trained,
        training_cost=trn.priced(trained, packages, utilisation),
        serving=served,
        at_slo=at,
        priced_at_slo=priced,
        cheapest_at_slo=srv.cheapest_at_slo(priced, QUALITY_CLASSES),
        points=points,
        packages=packages,
        cheapest=cheapest,
        gpu_ratios=gpu_ratios(cheapest),
        pareto_cost_quality=pareto_cost_quality(points, packages, utilisation, codes),
        pareto_throughput_latency=pareto_throughput_latency(points, codes),
        main_effects=main_effects(points, factors),
        interactions=interactions(points, factors),
        utilisation=utilisation,
        counts=counts,
        unreadable=list(unreadable),
    )


def price_at_slo(table: pd.DataFrame, utilisation: float) -> pd.DataFrame:
    """Configurations at their SLO level × packages (results.serving.at_slo_packages), priced
    with the offline formula on ``output_tok_s_at_slo`` (one replica per card: gpus_used 1)."""
    out = table.copy()
    if out.empty:
        out["usd_per_mtok_output_at_slo"] = pd.Series(dtype="float64")
        return out
    share = 1.0 / out["gpus_in_package"].to_numpy(dtype=np.float64)
    days = out["package_days"].to_numpy(dtype=np.float64)
    price = out["package_price_usd"].to_numpy(dtype=np.float64)
    usd_per_hour = package_usd_per_hour(price, days, utilisation, share)
    tok_s = out["output_tok_s_at_slo"].to_numpy(dtype=np.float64)
    out["usd_per_mtok_output_at_slo"] = usd_per_mtok(usd_per_hour, tok_s)
    return out


def aggregate_run(
    run_dir: Path,
    tariffs: TariffTable | None = None,
    utilisation: float = 1.0,
    allow_mixed: bool = False,
) -> Aggregate:
    frame, bad = load_run(run_dir)
    mixed = scenario_mix(Path(run_dir), allow_mixed)
    result = aggregate(frame, tariffs, utilisation, bad)
    result.counts["mixed_scenarios"] = mixed
    result.regressions = reg.analyse(Path(run_dir), result.points)
    result.leakage = trn.manifest_leakage(read_manifest(Path(run_dir)))
    return result


# --- integer group keys (hashing strings once, then numpy) ------------------------------------


def _codes(values: pd.Series | Array) -> Array:
    """Dense integer codes of a column; missing values get -1."""
    return np.asarray(pd.factorize(values, use_na_sentinel=True)[0], dtype=np.int64)


class Codes:
    """Integer codes of the points' columns, each column hashed once per aggregation."""

    def __init__(self, points: pd.DataFrame) -> None:
        self._points = points
        self._done: dict[str, tuple[Array, Array]] = {}

    def _get(self, column: str) -> tuple[Array, Array]:
        if column not in self._done:
            codes, uniques = pd.factorize(self._points[column], use_na_sentinel=True)
            self._done[column] = (np.asarray(codes, dtype=np.int64), np.asarray(uniques))
        return self._done[column]

    def __call__(self, column: str) -> Array:
        return self._get(column)[0]

    def labels(self, column: str, rows: Array) -> Array:
        """The column's values at ``rows`` (rows whose value is missing are not asked for)."""
        codes, uniques = self._get(column)
        return uniques[codes[rows]]


def _key(*codes: Array) -> Array:
    """One int64 per row that is equal exactly when every code is equal (mixed radix)."""
    key = np.zeros(len(codes[0]), dtype=np.int64)
    for code in codes:
        key = key * (int(code.max(initial=-1)) + 2) + (code + 1)
    return key


def _groups(key: Array) -> tuple[Array, int, Array]:
    """(group of each row, number of groups, one representative row of each group)."""
    inverse = np.asarray(pd.factorize(key)[0], dtype=np.int64)
    count = int(inverse.max(initial=-1)) + 1
    representative = np.empty(count, dtype=np.int64)
    representative[inverse] = np.arange(len(inverse))
    return inverse, count, representative


def _group_mean(inverse: Array, count: int, values: Array) -> tuple[Array, Array]:
    """Mean and count of the non-NaN values of each group (NaN where a group has none)."""
    ok = ~np.isnan(values)
    sums = np.bincount(inverse[ok], weights=values[ok], minlength=count)
    n = np.bincount(inverse[ok], minlength=count)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, sums / n, np.nan), n


def _best_per_group(key: Array, score: Array) -> Array:
    """Position of the highest score in each key group (first one on ties)."""
    return np.asarray(pd.Series(score).groupby(key, sort=False).idxmax().to_numpy(), dtype=np.int64)


# --- flags and the quality gate ---------------------------------------------------------------


def flag_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """``device`` (catalog GPU, else target), the roofline flag, and whether a row may be priced."""
    out = frame
    device = out["gpu"].astype("object").where(out["gpu"].notna(), out["target"])
    out["device"] = device.astype("str")
    decode = out["decode_tok_s"].to_numpy()
    roof = out["roofline_decode_tok_s"].to_numpy()
    with np.errstate(invalid="ignore"):
        out["exceeds_roofline"] = (decode > roof) & ~np.isnan(roof)
        measured = (out["status"] == "ok").to_numpy(dtype=bool) & (decode > 0)
    out["cost_eligible"] = measured & ~out["exceeds_roofline"].to_numpy() & ~random_weights(out)
    return out


def random_weights(frame: pd.DataFrame) -> Array:
    """Rows measured on random weights (older rows without the column: a checkpoint)."""
    random: Array = (frame["weights"] == "random").to_numpy(dtype=bool)
    return random


def _reference_values(frame: pd.DataFrame, column: str, keys: tuple[Array, Array]) -> Array:
    """Per row: the median ``column`` of its model's reference rows in the same run, measured on
    the same target when there is such a reference, else on any target. ``keys``: the
    (run, model, target) and (run, model) keys of every row."""
    values = frame[column].to_numpy(dtype=np.float64)
    is_ref = (
        frame["is_reference"].to_numpy(dtype=bool)
        & (frame["status"] == "ok").to_numpy(dtype=bool)
        & ~np.isnan(values)
        & ~random_weights(frame)
    )
    out: Array = np.full(len(frame), np.nan)
    if not is_ref.any():
        return out
    for key in keys:
        inverse, count, _ = _groups(key)
        medians = pd.Series(values[is_ref]).groupby(inverse[is_ref]).median()
        table = np.full(count, np.nan)
        table[medians.index.to_numpy(dtype=np.int64)] = medians.to_numpy(dtype=np.float64)
        out = np.where(np.isnan(out), table[inverse], out)
    return out


def quality_gate(frame: pd.DataFrame, codes: Codes | None = None) -> pd.DataFrame:
    """Adds ppl_ref, arc_acc_ref, quality_pct, pass_99, pass_99_9, quality_class, dppl_pct (+CI)."""
    out = frame
    codes = codes or Codes(frame)
    run, model, target = codes("run"), codes("model"), codes("target")
    keys = (_key(run, model, target), _key(run, model))
    # a row on random weights has no quality to class, whatever its columns say
    ppl = np.where(random_weights(out), np.nan, out["ppl"].to_numpy(dtype=np.float64))
    ppl_ref = _reference_values(out, "ppl", keys)
    arc = out["arc_acc"].to_numpy()
    arc_ref = _reference_values(out, "arc_acc", keys)
    out["ppl_ref"] = ppl_ref
    out["arc_acc_ref"] = arc_ref
    with np.errstate(invalid="ignore", divide="ignore"):
        out["quality_pct"] = ppl_ref / ppl * 100
        arc_known = ~np.isnan(arc) & ~np.isnan(arc_ref)
        for name, level in QUALITY_CLASSES.items():
            ppl_ok = ppl <= ppl_ref / level  # False when either is NaN
            arc_ok = ~arc_known | (arc >= level * arc_ref)
            out[_pass(name)] = ppl_ok & arc_ok
    known = ~np.isnan(ppl) & ~np.isnan(ppl_ref)
    code = np.select(
        [out["pass_99_9"].to_numpy(), out["pass_99"].to_numpy(), known], [0, 1, 2], default=3
    )
    out["quality_class"] = pd.Categorical.from_codes(
        code, categories=["99.9", "99", "below", "unknown"]
    )
    for suffix in ("", "_ci_low", "_ci_high"):
        source = "dnll_vs_ref" if not suffix else f"dnll{suffix}"
        out[f"dppl_pct{suffix}"] = np.expm1(out[source].to_numpy()) * 100
    return out


def _pass(quality_class: str) -> str:
    return f"pass_{quality_class.replace('.', '_')}"


# --- cost -------------------------------------------------------------------------------------


def _priceable(points: pd.DataFrame, packages: pd.DataFrame) -> Array:
    gpus = packages["gpu"].dropna().unique()
    eligible: Array = points["cost_eligible"].to_numpy(dtype=bool)
    on_gpu: Array = points["gpu"].isin(gpus).to_numpy(dtype=bool)
    return np.logical_and(eligible, on_gpu)


def _gpus_used(points: pd.DataFrame) -> Array:
    if "gpus_used" in points:
        used: Array = points["gpus_used"].fillna(1).to_numpy(dtype=np.float64)
        return used
    return np.ones(len(points))


def package_usd_per_hour(
    price: Array | float, days: Array | float, utilisation: float, share: Array
) -> Array:
    """What one hour of the row's work costs on a package: (package price ÷ (days × 24) ÷
    utilisation) × GPUs used ÷ GPUs in the package (``share``)."""
    return np.asarray(price / (days * HOURS_PER_DAY) / utilisation * share, dtype=np.float64)


def usd_per_mtok(usd_per_hour: Array, tok_s: Array) -> Array:
    """$ per million tokens at ``tok_s`` tokens per second: usd_per_hour ÷ (tok/s × 3600) × 10⁶."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(usd_per_hour / (tok_s * 3600) * 1e6, dtype=np.float64)


def cost_table(
    points: pd.DataFrame,
    packages: pd.DataFrame,
    utilisation: float,
    rows: Array | None = None,
) -> pd.DataFrame:
    """One row per (priced row, tariff package of its GPU): every COST_COLUMN, formulas in the
    module docstring. ``rows`` restricts it to those positions of ``points``."""
    mask = _priceable(points, packages)
    if rows is not None:
        keep = np.zeros(len(points), dtype=bool)
        keep[rows] = True
        mask &= keep
    if packages.empty or not mask.any():
        return pd.DataFrame(
            {c: pd.Series(dtype="float64") for c in [*COST_COLUMNS, "point_index", "package_index"]}
        )
    wanted = [c for c in COST_COLUMNS if c in points.columns and c not in packages.columns]
    chosen = points.loc[mask, wanted].assign(
        gpu=points.loc[mask, "gpu"].astype("object"),
        gpus_used=_gpus_used(points)[mask],
        point_index=np.flatnonzero(mask),
    )
    table = chosen.merge(packages, on="gpu", how="inner", sort=False)
    table = table[table["gpus_used"] <= table["gpus_in_package"]].reset_index(drop=True)
    days = table["package_days"].to_numpy(dtype=np.float64)
    hours = days * HOURS_PER_DAY
    price = table["package_price_usd"].to_numpy(dtype=np.float64)
    hourly = table["hourly_usd"].to_numpy(dtype=np.float64)
    share = table["gpus_used"].to_numpy(dtype=np.float64) / table["gpus_in_package"].to_numpy(
        dtype=np.float64
    )
    decode = table["decode_tok_s"].to_numpy(dtype=np.float64)
    total = table["total_tok_s"].to_numpy(dtype=np.float64)
    usd_per_hour = package_usd_per_hour(price, days, utilisation, share)
    table["usd_per_mtok_output"] = usd_per_mtok(usd_per_hour, decode)
    table["usd_per_mtok_total"] = np.where(total > 0, usd_per_mtok(usd_per_hour, total), np.nan)
    table["usd_per_mtok_output_hourly"] = usd_per_mtok(hourly * share, decode)
    with np.errstate(invalid="ignore", divide="ignore"):
        table["tokens_per_package"] = decode * 3600 * hours * utilisation / share
        table["total_tokens_per_package"] = total * 3600 * hours * utilisation / share
        table["breakeven_utilisation"] = price / (hourly * hours)
    table["package_beats_hourly"] = utilisation > table["breakeven_utilisation"]
    table["utilisation"] = utilisation
    return table[[*COST_COLUMNS, "point_index", "package_index"]]


def cheapest_passing(
    points: pd.DataFrame,
    packages: pd.DataFrame,
    utilisation: float,
    codes: Codes | None = None,
) -> pd.DataFrame:
    """The cheapest (decode $/Mtok) configuration per (model, class, GPU, package), with its
    ratio to the cheapest GPU of the same (model, class, package).

    For one package the cost is a constant × gpus_used ÷ decode tok/s, so the cheapest row of a
    (model, GPU, gpus_used) is the one with the highest decode tok/s; only those are priced.
    """
    columns = [
        *COST_COLUMNS,
        "point_index",
        "package_index",
        "achieved_class",
        "ratio_to_cheapest_gpu",
    ]
    priceable = _priceable(points, packages)
    if not priceable.any():
        return pd.DataFrame(columns=columns)
    efficiency = points["decode_tok_s"].to_numpy(dtype=np.float64) / _gpus_used(points)
    codes = codes or Codes(points)
    key = _key(codes("model"), codes("gpu"), _codes(_gpus_used(points)))
    parts = []
    for name in QUALITY_CLASSES:
        rows = np.flatnonzero(priceable & points[_pass(name)].to_numpy(dtype=bool))
        if rows.size == 0:
            continue
        best = rows[_best_per_group(key[rows], efficiency[rows])]
        cost = cost_table(points, packages, utilisation, best)
        if cost.empty:
            continue
        pick = cost.groupby(["model", "gpu", "package_days"], sort=False)[
            "usd_per_mtok_output"
        ].idxmin()
        chosen = cost.loc[pick.to_numpy()]
        parts.append(chosen.assign(achieved_class=chosen["quality_class"], quality_class=name))
    if not parts:
        return pd.DataFrame(columns=columns)
    out = pd.concat(parts, ignore_index=True)
    floor = out.groupby(["model", "quality_class", "package_days"])["usd_per_mtok_output"]
    out["ratio_to_cheapest_gpu"] = out["usd_per_mtok_output"] / floor.transform("min")
    out = out.sort_values(["model", "quality_class", "package_days", "usd_per_mtok_output"])
    return out.reset_index(drop=True)[columns]


def gpu_ratios(cheapest: pd.DataFrame) -> pd.DataFrame:
    """Every ordered GPU pair at equal quality: cost_a ÷ cost_b (> 1: GPU a is dearer)."""
    columns = [
        "model",
        "quality_class",
        "package_days",
        "gpu_a",
        "gpu_b",
        "usd_per_mtok_a",
        "usd_per_mtok_b",
        "cost_ratio_a_over_b",
    ]
    if cheapest.empty:
        return pd.DataFrame(columns=columns)
    small = cheapest[["model", "quality_class", "package_days", "gpu", "usd_per_mtok_output"]]
    pairs = small.merge(small, on=["model", "quality_class", "package_days"], suffixes=("_a", "_b"))
    pairs = pairs[pairs["gpu_a"] != pairs["gpu_b"]].rename(
        columns={
            "usd_per_mtok_output_a": "usd_per_mtok_a",
            "usd_per_mtok_output_b": "usd_per_mtok_b",
        }
    )
    pairs["cost_ratio_a_over_b"] = pairs["usd_per_mtok_a"] / pairs["usd_per_mtok_b"]
    return pairs.reset_index(drop=True)[columns]


# --- Pareto fronts ----------------------------------------------------------------------------


def pareto_mask(group: Array, x: Array, y: Array, *, maximise_y: bool = False) -> Array:
    """True for the rows on the front of their group: x minimal, y minimal (or maximal).

    Sort by (group, x); rows of equal (group, x) form a run whose best y alone can count. A run
    is on the front when its best y beats every earlier run of its group: y is turned into a
    dense rank offset by the group's ordinal, so one running maximum never crosses groups.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    mask = np.zeros(len(x), dtype=bool)
    idx = np.flatnonzero(~np.isnan(x) & ~np.isnan(y) & (np.asarray(group) >= 0))
    if idx.size == 0:
        return mask
    xs, gs = x[idx], np.asarray(group)[idx]
    good = y[idx] if maximise_y else -y[idx]  # larger is better
    gs = np.asarray(pd.factorize(gs)[0])
    small = gs.astype(np.int16) if gs.max() < np.iinfo(np.int16).max else gs
    order = np.argsort(xs)
    order = order[np.argsort(small[order], kind="stable")]  # by group, then x
    xs, gs, good = xs[order], gs[order], good[order]
    new_run = np.concatenate(([True], (gs[1:] != gs[:-1]) | (xs[1:] != xs[:-1])))
    starts = np.flatnonzero(new_run)
    run_of = np.cumsum(new_run) - 1
    run_best = np.maximum.reduceat(good, starts)
    rank = np.unique(run_best, return_inverse=True)[1].astype(np.int64)
    ordinal = np.cumsum(np.concatenate(([True], gs[starts][1:] != gs[starts][:-1]))) - 1
    score = rank + ordinal.astype(np.int64) * (int(rank.max()) + 2)
    before = np.concatenate(([-1], np.maximum.accumulate(score)[:-1]))
    run_on_front = score > before
    on_front = run_on_front[run_of] & (good == run_best[run_of])
    mask[idx[order]] = on_front
    return mask


def _pairs(
    points: pd.DataFrame, packages: pd.DataFrame, utilisation: float, rows: Array
) -> tuple[Array, Array, Array]:
    """(row, package, usd_per_mtok_output) for every package of each row's GPU that fits it,
    as plain arrays (the same formula as ``cost_table``, without building its frame)."""
    gpu = points["gpu"].to_numpy()[rows]
    used = _gpus_used(points)[rows]
    decode = points["decode_tok_s"].to_numpy(dtype=np.float64)[rows]
    row_parts, package_parts, cost_parts = [], [], []
    for j, package in enumerate(packages.itertuples(index=False)):
        fits = (gpu == package.gpu) & (used <= package.gpus_in_package)
        at = np.flatnonzero(fits)
        share = used[at] / float(package.gpus_in_package)
        days = float(package.package_days)
        usd_per_hour = package_usd_per_hour(
            float(package.package_price_usd), days, utilisation, share
        )
        row_parts.append(rows[at])
        package_parts.append(np.full(at.size, j, dtype=np.int64))
        cost_parts.append(usd_per_mtok(usd_per_hour, decode[at]))
    if not row_parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    return np.concatenate(row_parts), np.concatenate(package_parts), np.concatenate(cost_parts)


def pareto_cost_quality(
    points: pd.DataFrame,
    packages: pd.DataFrame,
    utilisation: float,
    codes: Codes | None = None,
) -> pd.DataFrame:
    """Per (model, package length): configurations no other beats on both $/Mtok out and ppl.

    On one package a row's cost is a constant × gpus_used ÷ decode tok/s, so a row beaten on
    both decode tok/s and ppl by another of the same (model, GPU, gpus_used) is beaten on every
    package: only that front is priced, then the front of each (model, package length) is taken.
    """
    columns = [
        "model",
        "package_days",
        "gpu",
        "provider",
        "backend",
        "quantization",
        "kv_cache_dtype",
        "batch",
        "context",
        "target",
        "usd_per_mtok_output",
        "ppl",
        "quality_class",
        "dnll_ci_low",
        "dnll_ci_high",
        "point_index",
    ]
    ppl = points["ppl"].to_numpy(dtype=np.float64)
    rows = np.flatnonzero(_priceable(points, packages) & ~np.isnan(ppl))
    if rows.size == 0:
        return pd.DataFrame(columns=columns)
    codes = codes or Codes(points)
    model = codes("model")
    used = _gpus_used(points)
    key = _key(model[rows], codes("gpu")[rows], _codes(used[rows]))
    efficiency = (points["decode_tok_s"].to_numpy(dtype=np.float64) / used)[rows]
    rows = rows[pareto_mask(key, -efficiency, ppl[rows])]
    row, package, usd = _pairs(points, packages, utilisation, rows)
    days = _codes(packages["package_days"].to_numpy())
    mask = pareto_mask(_key(model[row], days[package]), usd, ppl[row])
    if not mask.any():
        return pd.DataFrame(columns=columns)
    cost = cost_table(points, packages, utilisation, np.unique(row[mask]))
    wanted = pd.DataFrame({"point_index": row[mask], "package_index": package[mask]})
    cost = cost.merge(wanted, on=["point_index", "package_index"], how="inner")
    return (
        cost[columns]
        .sort_values(["model", "package_days", "usd_per_mtok_output"])
        .reset_index(drop=True)
    )


def pareto_throughput_latency(points: pd.DataFrame, codes: Codes | None = None) -> pd.DataFrame:
    """Per (model, device): points no other beats on both decode tok/s (max) and TPOT (min)."""
    columns = [
        "model",
        "device",
        "backend",
        "quantization",
        "kv_cache_dtype",
        "batch",
        "context",
        "decode_tok_s",
        "tpot_ms_p50",
        "key",
    ]
    codes = codes or Codes(points)
    group = _key(codes("model"), codes("device"))
    group = np.where(points["cost_eligible"].to_numpy(dtype=bool), group, -1)
    mask = pareto_mask(
        group,
        points["tpot_ms_p50"].to_numpy(dtype=np.float64),
        points["decode_tok_s"].to_numpy(dtype=np.float64),
        maximise_y=True,
    )
    front = points.loc[mask, columns]
    return front.sort_values(["model", "device", "tpot_ms_p50"]).reset_index(drop=True)


# --- factor effects ---------------------------------------------------------------------------


def _measured_rows(points: pd.DataFrame) -> Array:
    """Rows whose figures can be averaged: ok, and not above the roofline."""
    ok = (points["status"] == "ok").to_numpy(dtype=bool)
    return np.flatnonzero(ok & ~points["exceeds_roofline"].to_numpy(dtype=bool))


class _Factors:
    """The measured rows' stratum (model, device) and axis levels as integer codes, hashed once."""

    def __init__(self, points: pd.DataFrame, codes: Codes | None = None) -> None:
        self.codes = codes or Codes(points)
        self.rows = _measured_rows(points)
        self.stratum = _key(self.codes("model")[self.rows], self.codes("device")[self.rows])
        self.levels = {axis: self.codes(axis)[self.rows] for axis in AXES}
        self.metrics = {m: points[m].to_numpy(dtype=np.float64)[self.rows] for m in EFFECT_METRICS}

    def labels(self, rep: Array) -> dict[str, Array]:
        at = self.rows[rep]
        return {"model": self.codes.labels("model", at), "device": self.codes.labels("device", at)}

    def level(self, axis: str, rep: Array) -> list[str]:
        return [str(v) for v in self.codes.labels(axis, self.rows[rep])]


def main_effects(points: pd.DataFrame, factors: _Factors | None = None) -> pd.DataFrame:
    """Per (model, device) and axis: each level's mean of every metric, and its effect = that
    mean minus the mean over the axis's levels (how far the level moves the metric)."""
    columns = ["model", "device", "axis", "level", "metric", "mean", "effect", "n"]
    f = factors or _Factors(points)
    if f.rows.size == 0:
        return pd.DataFrame(columns=columns)
    parts = []
    for axis in AXES:
        inverse, count, rep = _groups(_key(f.stratum, f.levels[axis]))
        level = f.level(axis, rep)
        for metric in EFFECT_METRICS:
            mean, n = _group_mean(inverse, count, f.metrics[metric])
            parts.append(
                pd.DataFrame(
                    {
                        **f.labels(rep),
                        "axis": axis,
                        "level": level,
                        "metric": metric,
                        "mean": mean,
                        "n": n,
                        "_stratum": f.stratum[rep],
                    }
                )
            )
    out = pd.concat(parts, ignore_index=True)
    out = out[out["n"] > 0]
    base = out.groupby(["_stratum", "axis", "metric"], sort=False)["mean"].transform("mean")
    out = out.assign(effect=out["mean"] - base)
    out = out.sort_values(["model", "device", "axis", "metric", "level"])
    return out.reset_index(drop=True)[columns]


def interactions(points: pd.DataFrame, factors: _Factors | None = None) -> pd.DataFrame:
    """Two-way interactions per (model, device), only where that pair's grid is complete.

    From the cell means m[a, b] (every level pair measured): interaction = m[a, b] − m[a, ·] −
    m[·, b] + m[·, ·], the margins being means of cell means. Zero everywhere ⇔ additive effects.
    """
    columns = [
        "model",
        "device",
        "axis_a",
        "level_a",
        "axis_b",
        "level_b",
        "metric",
        "cell_mean",
        "interaction",
    ]
    f = factors or _Factors(points)
    if f.rows.size == 0:
        return pd.DataFrame(columns=columns)
    parts = []
    for a, b in itertools.combinations(AXES, 2):
        ca, cb = f.levels[a], f.levels[b]
        inverse, count, rep = _groups(_key(f.stratum, ca, cb))
        for metric in EFFECT_METRICS:
            mean, n = _group_mean(inverse, count, f.metrics[metric])
            keep = n > 0
            cells = pd.DataFrame(
                {"s": f.stratum[rep], "a": ca[rep], "b": cb[rep], "cell_mean": mean, "rep": rep}
            )[keep]
            if cells.empty:
                continue
            per = cells.groupby("s", sort=False)
            n_a, n_b = per["a"].transform("nunique"), per["b"].transform("nunique")
            complete = (per["cell_mean"].transform("size") == n_a * n_b) & (n_a > 1) & (n_b > 1)
            cells = cells[complete]
            if cells.empty:
                continue
            margin_a = cells.groupby(["s", "a"])["cell_mean"].transform("mean")
            margin_b = cells.groupby(["s", "b"])["cell_mean"].transform("mean")
            grand = cells.groupby("s")["cell_mean"].transform("mean")
            at = cells["rep"].to_numpy()
            parts.append(
                pd.DataFrame(
                    {
                        **f.labels(at),
                        "axis_a": a,
                        "level_a": f.level(a, at),
                        "axis_b": b,
                        "level_b": f.level(b, at),
                        "metric": metric,
                        "cell_mean": cells["cell_mean"].to_numpy(),
                        "interaction": (
                            cells["cell_mean"] - margin_a - margin_b + grand
                        ).to_numpy(),
                    }
                )
            )
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)[columns]


# --- counts -----------------------------------------------------------------------------------


def _counts(
    points: pd.DataFrame, packages: pd.DataFrame, unreadable: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    status = points["status"].value_counts(dropna=False)
    eligible = points["cost_eligible"].to_numpy(dtype=bool)
    priced = _priceable(points, packages)
    with_ref = points.loc[points["ppl_ref"].notna(), "model"].unique()
    models = points.loc[~random_weights(points), "model"].dropna().unique()  # random: no quality
    return {
        "rows": len(points),
        "by_status": {("unknown" if pd.isna(k) else str(k)): int(v) for k, v in status.items()},
        "excluded_not_ok": int((points["status"] != "ok").sum()),
        "flagged_above_roofline": int(points["exceeds_roofline"].sum()),
        "eligible_for_cost": int(eligible.sum()),
        "priced_rows": int(priced.sum()),
        "eligible_without_tariff": int(eligible.sum() - priced.sum()),
        "unreadable_files": len(unreadable),
        "random_weights_not_priced": int(random_weights(points).sum()),
        "models_without_reference": sorted(str(m) for m in set(models) - set(with_ref)),
    }
