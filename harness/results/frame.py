"""Result rows as one frame: read, normalised to one dtype per column, flagged, split by mode,
and its columns as integer codes (each string column hashed once, then plain numpy).

A run folder is read through ``read_run``/``load_run``: the store's rows, each admitted by
``harness.results.admission`` (schema, foreign, consistent); a refused row is unreadable, named
with its cause.

Column kinds come from the ``ResultRow`` schema: an optional int is a float column here (NaN =
not measured); the plain ints are ``INT_COLUMNS``; a bool is a bool; the rest is text.

Flags (``flag_rows``): ``device`` is the catalog GPU, else the target; ``exceeds_roofline`` marks a
row whose decode tok/s is above its roofline ceiling (a measurement error: counted, never priced);
``cost_eligible`` = status ok, a positive decode tok/s, not above the roofline, and measured on the
model's checkpoint (``weights: random`` rows have no quality and are never priced), and for a
speculative row greedy-identical to its plain row (``harness.results.speculation``).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from harness.errors import UserInputError
from harness.results import admission, speculation
from harness.row import ResultRow
from harness.run.store import read_manifest, read_rows
from harness.spec.scenario import CONFIGURATION_FIELDS

Array = NDArray[Any]  # numpy arrays of any dtype
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
        floats = np.full((len(redo), n), np.nan)  # a column per line: the block pandas keeps
        for i, name in enumerate(redo):
            if name in out:
                floats[i] = pd.to_numeric(out[name], errors="coerce").to_numpy(np.float64)
        out = out.drop(columns=[c for c in redo if c in out])
        out = pd.concat(
            [out, pd.DataFrame(floats.T, columns=redo, index=out.index, copy=False)], axis=1
        )
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
            pd.DataFrame(
                np.zeros((len(bools), n), dtype=bool).T, columns=bools, index=out.index, copy=False
            ),
            pd.DataFrame(
                np.full((len(objects), n), None, dtype=object).T,
                columns=objects,
                index=out.index,
                copy=False,
            ),
        ]
        out = pd.concat([out, *added], axis=1)
    return out.reset_index(drop=True)


def with_columns(frame: pd.DataFrame, added: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``added``'s columns joined at once, replacing those of the same name.
    Dropping columns from a frame whose blocks are interleaved (``normalise`` keeps columns in
    their places) returns one view block per column under copy-on-write: so nothing is dropped
    unless replaced, and a frame that lost columns is consolidated (copied) before it grows, or
    the next insert (``assign``) meets a "highly fragmented" frame."""
    replaced = [c for c in added.columns if c in frame.columns]
    if not replaced:
        return pd.concat([frame, added], axis=1)
    return pd.concat([frame.drop(columns=replaced), added], axis=1).copy()


@dataclass
class LoadedRun:
    """A run folder read through ``admission.admit``: its rows as a frame, every unreadable or
    refused point file with why, and the foreign rows ``allow_mixed`` admitted (file, why)."""

    frame: pd.DataFrame
    unreadable: list[tuple[str, str]]
    mixed: list[tuple[str, str]] = field(default_factory=list)


def read_run(run_dir: Path, allow_mixed: bool = False) -> LoadedRun:
    """The run's admitted rows (harness.results.admission: schema, foreign, consistent); a folder
    whose manifest claims a newer result schema, or whose files are all unreadable, is refused."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserInputError("run folder not found", file=str(run_dir))
    rows, bad = read_rows(run_dir)
    if not rows and not bad:
        raise UserInputError(
            "no point files under points/ (is this a run folder?)", file=str(run_dir)
        )
    admitted = admission.admit(
        run_dir, rows, [(str(p), why) for p, why in bad], read_manifest(run_dir), allow_mixed
    )
    if not admitted.rows:
        path, why = admitted.unreadable[0]
        raise UserInputError(
            f"none of the {len(admitted.unreadable)} point files is readable "
            f"(first: {Path(path).name}: {why})",
            file=str(run_dir),
        )
    return LoadedRun(frame_from_rows(admitted.rows), admitted.unreadable, admitted.mixed)


def load_run(
    run_dir: Path, allow_mixed: bool = False
) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """The run's rows as a frame, and every unreadable or refused point file with why (named,
    skipped): ``read_run`` without its list of admitted foreign rows."""
    loaded = read_run(run_dir, allow_mixed)
    return loaded.frame, loaded.unreadable


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


def manifest_leakage(run_dir: Path) -> list[dict[str, Any]]:
    """The leakage table of the run's latest manifest entry (the n-gram overlap of what the
    models saw with what they are scored on, harness.modes.training.leakage); [] when the run
    predates it."""
    runs = read_manifest(run_dir).get("runs") or []
    table = runs[-1].get("leakage") if runs and isinstance(runs[-1], dict) else None
    return [dict(row) for row in table if isinstance(row, dict)] if isinstance(table, list) else []


# --- flags and modes --------------------------------------------------------------------------


def flag_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """``device`` (catalog GPU, else target), the roofline flag, and whether a row may be priced."""
    out = frame
    device = out["gpu"].where(out["gpu"].notna(), out["target"])  # as stored: no Python objects
    out["device"] = device.astype("str")
    decode = out["decode_tok_s"].to_numpy()
    # a speculative step yields its accepted tokens for one read of the weights
    roof = out["roofline_decode_tok_s"].to_numpy() * speculation.tokens_per_step(out)
    with np.errstate(invalid="ignore"):
        out["exceeds_roofline"] = (decode > roof) & ~np.isnan(roof)
        measured = (out["status"] == "ok").to_numpy(dtype=bool) & (decode > 0)
    out = speculation.with_plain_pairs(out)  # a speculative row's plain twin, greedy identity
    out["cost_eligible"] = (
        measured
        & ~out["exceeds_roofline"].to_numpy()
        & ~random_weights(out)
        & speculation.priceable(out)
    )
    return out


def random_weights(frame: pd.DataFrame) -> Array:
    """Rows measured on random weights (older rows without the column: a checkpoint)."""
    random: Array = (frame["weights"] == "random").to_numpy(dtype=bool)
    return random


def split_modes(
    frame: pd.DataFrame, names: Sequence[str]
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """(every other row, {mode: its rows}) for the modes named: the offline tables never see
    their rows. A frame without a ``mode`` column (older rows) is all offline. The usual run has
    no such row and keeps its frame as it is (no copy of a large frame)."""
    modes = frame["mode"] if "mode" in frame.columns else None
    masks = {name: np.zeros(len(frame), dtype=bool) for name in names}
    if modes is not None:
        masks = {name: (modes == name).to_numpy(dtype=bool) for name in names}
    empty = frame.iloc[0:0]
    if not any(mask.any() for mask in masks.values()):
        return frame, {name: empty.copy() for name in names}
    rest = ~np.logical_or.reduce(list(masks.values()))
    parts = {
        name: frame.loc[mask].reset_index(drop=True).copy() if mask.any() else empty.copy()
        for name, mask in masks.items()
    }
    return frame.loc[rest].reset_index(drop=True).copy(), parts


# --- integer group keys (hashing strings once, then numpy) ------------------------------------


def column_codes(values: pd.Series[Any] | Array) -> Array:
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


def joint_key(*codes: Array) -> Array:
    """One int64 per row that is equal exactly when every code is equal (mixed radix)."""
    key = np.zeros(len(codes[0]), dtype=np.int64)
    for code in codes:
        key = key * (int(code.max(initial=-1)) + 2) + (code + 1)
    return key


def groups_of(key: Array) -> tuple[Array, int, Array]:
    """(group of each row, number of groups, one representative row of each group)."""
    inverse = np.asarray(pd.factorize(key)[0], dtype=np.int64)
    count = int(inverse.max(initial=-1)) + 1
    representative = np.empty(count, dtype=np.int64)
    representative[inverse] = np.arange(len(inverse))
    return inverse, count, representative


def group_mean(inverse: Array, count: int, values: Array) -> tuple[Array, Array]:
    """Mean and count of the non-NaN values of each group (NaN where a group has none)."""
    ok = ~np.isnan(values)
    sums = np.bincount(inverse[ok], weights=values[ok], minlength=count)
    n = np.bincount(inverse[ok], minlength=count)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, sums / n, np.nan), n


def best_per_group(key: Array, score: Array) -> Array:
    """Position of the highest score in each key group (first one on ties)."""
    return np.asarray(pd.Series(score).groupby(key, sort=False).idxmax().to_numpy(), dtype=np.int64)


# --- text columns of few phrases --------------------------------------------------------------


@dataclass(frozen=True)
class Phrases:
    """A text column of few distinct values (verdicts, reasons, metric names) held as codes into
    a table of phrases: chosen, joined and made a column without a Python string per row (a
    million rows of text inferred as pandas' string dtype take ~0.3 s a column; taken from a
    table of phrases, ~0.03 s)."""

    codes: Array  # int64 per row: a position in ``table``
    table: tuple[str, ...]

    @classmethod
    def constant(cls, text: str, n: int) -> Phrases:
        return cls(np.zeros(n, dtype=np.int64), (text,))

    @classmethod
    def of(cls, values: Array | Sequence[str]) -> Phrases:
        """Per-row texts (all strings) as phrases."""
        codes, uniques = pd.factorize(np.asarray(values, dtype=object))
        return cls(codes.astype(np.int64), tuple(str(u) for u in uniques))

    @classmethod
    def flag(cls, mask: Array, text: str) -> Phrases:
        """``text`` where ``mask`` holds, "" elsewhere."""
        return cls(np.asarray(mask, dtype=np.int64), ("", text))

    def __len__(self) -> int:
        return len(self.codes)

    def is_(self, text: str) -> Array:
        """Per row: whether its phrase is ``text``."""
        hits = np.array([t == text for t in self.table], dtype=bool)
        found: Array = hits[self.codes] if len(hits) else np.zeros(len(self), dtype=bool)
        return found

    def where(self, mask: Array, other: Phrases) -> Phrases:
        """This phrase where ``mask`` holds, ``other``'s elsewhere."""
        shifted = other.codes + len(self.table)
        return Phrases(np.where(mask, self.codes, shifted), (*self.table, *other.table))

    def map(self, change: Callable[[str], str]) -> Phrases:
        return Phrases(self.codes, tuple(change(t) for t in self.table))

    def texts(self) -> Array:
        """Per row, its phrase (an object array)."""
        table: Array = np.array(self.table, dtype=object)
        return table[self.codes] if len(table) else np.full(len(self), "", dtype=object)

    def column(self) -> pd.api.extensions.ExtensionArray:
        """The column in pandas' string dtype (what a column of Python strings is inferred as)."""
        table = pd.array(np.array(self.table or ("",), dtype=object), dtype="str")
        return table.take(self.codes)


def joined_phrases(parts: Sequence[Phrases], sep: str) -> Phrases:
    """Per row: the non-empty phrases of ``parts``, in order, joined with ``sep`` (each distinct
    combination joined once)."""
    if not parts:
        return Phrases.constant("", 0)
    codes, combos = parts[0].codes, [(t,) for t in parts[0].table]
    for part in parts[1:]:
        width = len(part.table)
        pairs, codes = _dense(codes * width + part.codes, (len(combos) or 1) * width)
        combos = [(*combos[k // width], part.table[k % width]) for k in pairs.tolist()]
    table = tuple(sep.join(w for w in words if w) for words in combos)
    return Phrases(codes.reshape(-1).astype(np.int64), table)


def _dense(key: Array, size: int) -> tuple[Array, Array]:
    """The distinct values of ``key`` (all in [0, size)), ascending, and each row's position
    among them: by counting where the range is small, else by sorting."""
    if size > max(1 << 16, 4 * len(key)):
        present, inverse = np.unique(key, return_inverse=True)
        return present, inverse.reshape(-1)
    present = np.flatnonzero(np.bincount(key, minlength=size))
    lookup = np.zeros(size, dtype=np.int64)
    lookup[present] = np.arange(len(present))
    return present, lookup[key]
