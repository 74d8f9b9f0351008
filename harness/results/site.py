"""`harness site RUN... --out DIR`: any number of run folders (nodes, providers) → one static site.

Each `make bench` on a rented node leaves its own run folder; the site puts them side by side:

    DIR/index.html           the cheapest configuration at equal quality per (model, class, GPU,
                             package) across every run, each row naming its run and where it was
                             measured; the runs with their provenance and links to their pages
    DIR/runs/<run>/          each run's own publication (what `harness report` writes:
                             report.html, points.csv, cost.csv, …), unchanged
    DIR/points.csv|.parquet  every row of every run, with ``run`` (its name here), ``run_name``
                             (the name the row was written with), ``run_folder`` and provenance
    DIR/cost.csv             every priced row × package, with its run and provenance
    DIR/cheapest.csv         the index's table: cheapest per (model, class, GPU, package)
    DIR/serving.csv          serving rows of every run (mode: serving), with their run
    DIR/runs.csv, site.json  one entry per run: folder, rows, hosts, devices, versions, checks;
                             site.json also says whether the runs are mixed and why
    DIR/price-history.csv    with ``history`` (the imported tariff files' dated price history
                             per card, ``harness.prices.verdicts.price_history``): one row per
                             file and card, shown on the index as a table per card

Runs are read only through ``harness.run.store`` and strictly, as ``aggregate`` reads one run
(``aggregate.load_run``). A run is named by its folder name (made file-name safe); two folders of
the same name get a short hash of their path as a suffix, and the same folder given twice is
refused. ``run`` is the namespace of every table: the quality gate compares a row with its own
run's reference, so two runs whose rows carry the same run name or point keys never mix.

Each run is gated as its own report gates it: on the metrics its scenario's ``quality.gate`` names
(its manifest; where that does not say, every metric its rows scored), so a row's verdict, and
whether the cost and cheapest tables price it, is the verdict of its run's own page. The runs
table and site.json name each run's gated metrics (``gated_on``); a row whose verdict here differs
from its run's page all the same is stated at the top of the index and in site.json
(``verdicts_differ``), never silently.

Side by side only what can be compared: runs whose corpus hash, reference configuration or result
schema version (``harness.row.SCHEMA_VERSION`` when written) differ are refused, one line per
difference naming both runs and both values, and nothing is written; ``allow_mixed`` publishes them
anyway, the differences stated at the top of the index and in site.json.

Everything is written into a temp folder beside DIR and swapped in (``publish.files.swap_in``): a
failure leaves the previous site or nothing. An existing DIR that is not a site, or that is or holds
one of the runs, is never replaced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import __version__, modes
from harness.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text, public_mode
from harness.csvtext import csv_text
from harness.errors import UserInputError
from harness.results.aggregate import Aggregate, aggregate, aggregate_run, gated_metrics
from harness.results.frame import load_run
from harness.results.pricing import check_quality_class, check_utilisation, verdict_column
from harness.results.publish.files import (
    Extra,
    Extras,
    parquet_bytes,
    remove_leftovers,
    swap_in,
    write_published,
)
from harness.results.publish.site_html import index_html
from harness.results.publish.summary import json_safe
from harness.row import SCHEMA_VERSION
from harness.run.store import read_manifest, run_lock
from harness.spec.labels import ENGINE_WEIGHTS_KV, configuration_label
from harness.spec.tariffs import TariffTable

SITE_KIND = "harness-site"  # site.json's "kind": what marks a folder as a site we may replace
RUNS = "runs"  # DIR/runs/<run>/: each run's own publication
FILES = (
    "index.html",
    "points.csv",
    "points.parquet",
    "cost.csv",
    "cheapest.csv",
    "serving.csv",
    "runs.csv",
    "site.json",
)
# Where a row came from, on every row of points.csv and cost.csv.
PROVENANCE_COLUMNS = (
    "run",
    "run_name",
    "run_folder",
    "provenance_hostname",
    "provenance_device_name",
    "provenance_harness",
    "provenance_git_sha",
    "provenance_corpus_hash",
)
HISTORY_FILE = "price-history.csv"  # with a price history only
MAX_SITE_JSON_BYTES = 64 << 20
UNKNOWN = "unknown"


@dataclass
class SiteRun:
    """One run folder as the site shows it: its name here, its rows, and what must match."""

    label: str  # the run's name in the site (file-name safe, unique)
    path: Path  # as given
    frame: pd.DataFrame  # its rows (store-read), ``run`` set to ``label``
    unreadable: list[tuple[str, str]]
    corpus_hashes: tuple[str, ...]  # from its rows' provenance and its manifest
    references: tuple[str, ...]  # "backend quantization kv=…" of its reference rows
    schema_versions: tuple[str, ...]  # its rows' schema_version

    def facts(self) -> dict[str, Any]:
        """One entry of runs.csv / site.json."""
        f = self.frame
        status = f["status"].value_counts()
        return {
            "run": self.label,
            "folder": str(self.path),
            "page": f"{RUNS}/{self.label}/report.html",
            "rows": len(f),
            "ok": int(status.get("ok", 0)),
            "unreadable": len(self.unreadable),
            "hostnames": _values(f["provenance_hostname"]),
            "devices": _values(f["provenance_device_name"]),
            "harness": _values(f["provenance_harness"]),
            "git_sha": _values(f["provenance_git_sha"]),
            "corpus_hash": _show(self.corpus_hashes),
            "reference": _show(self.references),
            "schema_version": _show(self.schema_versions),
            "run_names": _values(f["run_name"]),
        }


@dataclass
class Site:
    out: Path
    runs: list[SiteRun]
    mixed: list[str]  # one line per difference (empty: the runs are comparable)
    result: Aggregate  # every run's rows together, each gated on its own run's metrics
    own: list[Aggregate]  # each run alone, as `harness report` aggregates it (its page)
    extras: Extras | None = None  # sections a later room adds (before you rent)
    history: pd.DataFrame | None = None  # the dated price history per card (price-history.csv)

    def files(self) -> list[str]:
        """The files the site writes (the history's only with one)."""
        return [*FILES, *([HISTORY_FILE] if self.history is not None else [])]

    def extra(self, result: Aggregate) -> Extra:
        return Extra() if self.extras is None else self.extras(result)

    def gated_on(self, run: SiteRun) -> str:
        """The metrics the run's verdicts read, as its own report states them."""
        return ", ".join(self.result.gated_by_run.get(run.label, ()))


CHECKS = (
    ("corpus hash", "corpus_hashes"),
    ("reference configuration", "references"),
    ("result schema version", "schema_versions"),
)


def _values(column: pd.Series) -> str:
    """The distinct non-empty values of a column, in order of appearance, joined."""
    seen = dict.fromkeys(str(v) for v in column if v is not None and not pd.isna(v))
    return ", ".join(seen) or UNKNOWN


def _show(values: tuple[str, ...]) -> str:
    return " + ".join(values) or UNKNOWN


SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(name: str) -> str:
    """A folder name safe in a path and a URL: letters, digits, . _ - (never empty, never dots)."""
    out = SAFE.sub("_", name).strip("._-")[:80]
    return out or "run"


def run_labels(paths: Sequence[Path]) -> list[str]:
    """Each run's name in the site: its folder name; folders sharing a name get a short hash of
    their path. The same folder twice (also through a link) is refused."""
    real = [Path(p).resolve() for p in paths]
    first: dict[Path, Path] = {}
    for given, resolved in zip(paths, real, strict=True):
        if resolved in first:
            raise UserInputError(
                f"the same run folder is given twice ({first[resolved]} and {given}): give each "
                "run once",
                field="RUN",
            )
        first[resolved] = Path(given)
    names = [slug(p.name) for p in real]
    count = Counter(names)
    labels: list[str] = []
    for name, resolved in zip(names, real, strict=True):
        label = name
        if count[name] > 1:
            label = f"{name}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:8]}"
        while label in labels:  # a suffixed name that another folder already has
            label += "_"
        labels.append(label)
    return labels


def load_site_run(path: Path, label: str) -> SiteRun:
    """A run read strictly (``aggregate.load_run`` → ``store.read_rows``; its manifest through
    ``store.read_manifest``), renamed ``label`` in every row."""
    frame, bad = load_run(path)
    manifest = read_manifest(path)
    frame = frame.assign(
        run_name=frame["run"].astype("object"), run=label, run_folder=str(path)
    ).reset_index(drop=True)
    corpus = {str(v) for v in frame["provenance_corpus_hash"].dropna()}
    corpus |= {str(r["corpus_hash"]) for r in manifest.get("runs", []) if r.get("corpus_hash")}
    is_ref = frame["is_reference"].to_numpy(dtype=bool)
    refs = frame.loc[is_ref, list(ENGINE_WEIGHTS_KV)].astype(str)
    references = {configuration_label(r, ENGINE_WEIGHTS_KV) for r in refs.to_dict("records")}
    schema = {str(v) for v in frame["schema_version"].dropna()}
    return SiteRun(
        label=label,
        path=Path(path),
        frame=frame,
        unreadable=bad,
        corpus_hashes=tuple(sorted(corpus)),
        references=tuple(sorted(references)),
        schema_versions=tuple(sorted(schema, key=lambda v: (len(v), v))),
    )


def differences(runs: Sequence[SiteRun]) -> list[str]:
    """One line per run and check where the run differs from the first run."""
    lines: list[str] = []
    if not runs:
        return lines
    first = runs[0]
    for name, attr in CHECKS:
        mine = getattr(first, attr)
        for other in runs[1:]:
            theirs = getattr(other, attr)
            if theirs != mine:
                lines.append(
                    f"{name} differs: run {first.label} ({first.path}) has {_show(mine)}, "
                    f"run {other.label} ({other.path}) has {_show(theirs)}"
                )
    return lines


def is_site(folder: Path) -> bool:
    """A folder this command wrote (its site.json says so)."""
    marker = folder / "site.json"
    try:
        if not marker.is_file() or marker.stat().st_size > MAX_SITE_JSON_BYTES:
            return False
        data = json.loads(marker.read_bytes())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("kind") == SITE_KIND


def check_out(out: Path, runs: Sequence[Path]) -> None:
    """Refuse an --out whose replacement would destroy something that is not an older site."""
    target = out.resolve()
    for run in runs:
        real = Path(run).resolve()
        if target == real or target in real.parents:
            raise UserInputError(
                f"{out} is (or holds) the run folder {run}: the site would replace it; "
                "choose another folder",
                field="--out",
            )
    if out.exists() and not out.is_dir():
        raise UserInputError("exists and is not a folder; choose another --out", file=str(out))
    if out.is_dir() and any(out.iterdir()) and not is_site(out):
        raise UserInputError(
            "exists, is not empty and is not a site written by `harness site` (no site.json of "
            "kind harness-site): it is never replaced; choose a new or empty folder",
            file=str(out),
            field="--out",
        )


def with_provenance(table: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """``table`` (rows carrying ``point_index`` into ``points``) with each row's run and
    provenance as columns (PROVENANCE_COLUMNS), the run first."""
    out = table.reset_index(drop=True)
    if "point_index" in out.columns and len(out):
        where = out["point_index"].to_numpy(dtype=np.int64)
        source = points[list(PROVENANCE_COLUMNS)].iloc[where].reset_index(drop=True)
    else:
        source = pd.DataFrame(
            {c: pd.Series([None] * len(out), dtype="object") for c in PROVENANCE_COLUMNS}
        )
    out = out.drop(columns=[c for c in PROVENANCE_COLUMNS if c in out.columns])
    out = pd.concat([out, source], axis=1)
    return out[["run", *(c for c in out.columns if c != "run")]]


def run_first(frame: pd.DataFrame) -> pd.DataFrame:
    """The same frame with ``run`` as its first column."""
    if "run" not in frame.columns:
        return frame
    return frame[["run", *(c for c in frame.columns if c != "run")]]


def build_site(
    paths: Sequence[Path],
    out: Path,
    tariffs: TariffTable | None,
    *,
    quality_class: str = "99",
    utilisation: float = 1.0,
    allow_mixed: bool = False,
    extras: Extras | None = None,
    history: pd.DataFrame | None = None,
) -> Site:
    """Read every run, check that they can stand side by side, and write the site at ``out``.
    Bad input (a missing run, the same run twice, runs that differ without ``allow_mixed``, an
    --out that must not be replaced) is a UserInputError before anything is written.
    ``extras``: the sections a later room adds to each run's page and to the index, from their
    aggregates (before you rent). ``history``: the imported tariff files' dated price history
    per card (``harness.prices.verdicts.price_history``), kept as price-history.csv and shown."""
    check_quality_class(quality_class)
    utilisation = check_utilisation(utilisation)
    if not paths:
        raise UserInputError("give at least one run folder", field="RUN")
    paths = [Path(p) for p in paths]
    out = Path(out)
    labels = run_labels(paths)
    check_out(out, paths)
    with contextlib.ExitStack() as locks:  # the site's folder and every run: one writer each
        locks.enter_context(run_lock(out, "site", lock=site_lock(out)))
        for path in paths:
            locks.enter_context(run_lock(path, "site", create=False))
        return publish_site(
            paths, labels, out, tariffs, quality_class, utilisation, allow_mixed, extras, history
        )


def site_lock(out: Path) -> Path:
    """The site's lock: beside its folder (the folder itself is swapped whole)."""
    return out.parent / f".{out.name}.lock"


def publish_site(
    paths: Sequence[Path],
    labels: list[str],
    out: Path,
    tariffs: TariffTable | None,
    quality_class: str,
    utilisation: float,
    allow_mixed: bool,
    extras: Extras | None = None,
    history: pd.DataFrame | None = None,
) -> Site:
    runs = [load_site_run(p, label) for p, label in zip(paths, labels, strict=True)]
    mixed = differences(runs)
    if mixed and not allow_mixed:
        raise UserInputError(
            "these runs cannot be put side by side (--allow-mixed publishes them anyway, "
            "marked as mixed):\n" + "\n".join(mixed),
            field="RUN",
        )
    frame = pd.concat([r.frame for r in runs], ignore_index=True).copy()  # one block per dtype
    unreadable = [item for r in runs for item in r.unreadable]
    # each run gated on what its own scenario gates on (its manifest), as its own page is
    gates = {r.label: gated_metrics(r.path) for r in runs}
    result = aggregate(frame, tariffs, utilisation, unreadable, gates)
    # before anything is written; a run folder of several scenarios needs allow_mixed too
    own = [aggregate_run(r.path, tariffs, utilisation, allow_mixed) for r in runs]
    site = Site(
        out=out, runs=runs, mixed=mixed, result=result, own=own, extras=extras, history=history
    )
    write_site(site, tariffs, quality_class)
    return site


def write_site(site: Site, tariffs: TariffTable | None, quality_class: str) -> Path:
    """Every file into a fresh temp folder beside ``site.out``, then swapped in."""
    out = site.out
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        public_mode(tmp, folder=True)
        (tmp / RUNS).mkdir()
        for run, own in zip(site.runs, site.own, strict=True):  # as `harness report` writes it
            added = site.extra(own)
            write_published(
                own, tmp / RUNS / run.label, tariffs, quality_class, added.markdown, added.html
            )
        result = site.result
        points = run_first(result.points)
        cost = with_provenance(result.cost, result.points)
        cheapest = with_provenance(result.cheapest, result.points)
        runs = pd.DataFrame([{**r.facts(), "gated_on": site.gated_on(r)} for r in site.runs])
        differ = verdicts_differ(site, quality_class)
        atomic_write_text(tmp / "points.csv", csv_text(points))
        atomic_write_bytes(tmp / "points.parquet", parquet_bytes(points))
        cost = cost.drop(columns=["point_index", "package_index"], errors="ignore")
        atomic_write_text(tmp / "cost.csv", csv_text(cost))
        cheapest_csv = cheapest.drop(columns=["point_index", "package_index"], errors="ignore")
        atomic_write_text(tmp / "cheapest.csv", csv_text(cheapest_csv))
        atomic_write_text(tmp / "serving.csv", csv_text(run_first(result.table("serving"))))
        atomic_write_text(tmp / "runs.csv", csv_text(runs))
        if site.history is not None:
            atomic_write_text(tmp / HISTORY_FILE, csv_text(site.history))
        atomic_write_json(
            tmp / "site.json", json_safe(site_json(site, runs, quality_class, differ))
        )
        page = index_html(
            runs,
            cheapest,
            site.mixed,
            result.counts,
            result.unreadable,
            tariffs=tariffs,
            quality_class=quality_class,
            utilisation=result.utilisation,
            files=[name for name in site.files() if name != "index.html"],
            charts=mode_charts(result, quality_class),
            verdicts_differ=differ,
            extra=site.extra(result).html,
            history=site.history,
        )
        atomic_write_text(tmp / "index.html", page)
        swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def mode_charts(result: Aggregate, quality_class: str) -> list[str]:
    """The charts each mode's report part draws across runs (its `site_charts`, where it has
    one: serving's cost against interactivity), in the registry's order."""
    out: list[str] = []
    for mode in modes.REGISTRY.values():
        if mode.ref("report") is None:
            continue
        draw = getattr(mode.load("report"), "site_charts", None)
        if draw is not None:
            out += draw(result, quality_class)
    return out


def verdicts_differ(site: Site, quality_class: str) -> list[str]:
    """One line per row whose class verdict in the site differs from its run's own page
    (``Site`` gates each run as its page does: a line here is a fault, said, never hidden)."""
    column = verdict_column(quality_class)
    lines: list[str] = []
    points = site.result.points
    for run, own in zip(site.runs, site.own, strict=True):
        if column not in own.points.columns or own.points.empty:
            continue
        mine = points.loc[points["run"] == run.label, ["key", column]].set_index("key")[column]
        theirs = own.points[["key", column]].set_index("key")[column]
        both = mine.index.intersection(theirs.index)
        for key in both[(mine[both].astype(str) != theirs[both].astype(str)).to_numpy()]:
            lines.append(
                f"run {run.label}, point {str(key)[:40]}: class {quality_class} is "
                f"{mine[key]} here but {theirs[key]} on the run's own page"
            )
    return lines


def site_json(
    site: Site, runs: pd.DataFrame, quality_class: str, differ: Sequence[str] = ()
) -> dict[str, Any]:
    return {
        "kind": SITE_KIND,
        "harness": __version__,
        "schema_version": SCHEMA_VERSION,
        "generated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quality_class": quality_class,
        "utilisation": site.result.utilisation,
        "mixed": site.mixed,
        "verdicts_differ": list(differ),
        "checked": [name for name, _ in CHECKS],
        "runs": runs.to_dict(orient="records"),
        "counts": site.result.counts,
        "unreadable": [{"file": f, "why": why} for f, why in site.result.unreadable],
        "files": [*site.files(), f"{RUNS}/<run>/"],
    }
