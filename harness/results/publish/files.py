"""Write a publication: every file into a temp folder beside ``published/``, then swapped in."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from harness.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text, public_mode
from harness.csvtext import csv_text
from harness.results.aggregate import Aggregate, aggregate_run
from harness.results.pricing import check_quality_class
from harness.results.publish.analysis import regressions_frame
from harness.results.publish.html import report_html
from harness.results.publish.markdown import readme
from harness.results.publish.summary import json_safe, summary
from harness.run.store import run_lock
from harness.spec.tariffs import TariffTable

PUBLISHED = "published"
FILES = (
    "points.csv",
    "points.parquet",
    "cost.csv",
    "regressions.csv",
    "serving.csv",
    "summary.json",
    "README.md",
    "report.html",
)


class Extra(NamedTuple):
    """Sections a later room adds to a publication (before you rent: harness.projection):
    Markdown for README.md, HTML (escaped already) for report.html and a site's index."""

    markdown: Sequence[str] = ()
    html: Sequence[str] = ()


Extras = Callable[[Aggregate], Extra]  # a publication's added sections, from its aggregate


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def cost_for_csv(result: Aggregate) -> pd.DataFrame:
    return result.cost.drop(columns=["point_index", "package_index"], errors="ignore")


def write_published(
    result: Aggregate,
    out_dir: Path,
    tariffs: TariffTable | None,
    quality_class: str = "99",
    extra_markdown: Sequence[str] = (),
    extra_html: Sequence[str] = (),
) -> Path:
    """Write every file into a fresh temp folder, then swap it in as ``out_dir``;
    ``extra_markdown`` / ``extra_html``: sections a later room adds to README.md / report.html
    (before you rent)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        public_mode(tmp, folder=True)
        atomic_write_text(tmp / "points.csv", csv_text(result.points))
        atomic_write_bytes(tmp / "points.parquet", parquet_bytes(result.points))
        atomic_write_text(tmp / "cost.csv", csv_text(cost_for_csv(result)))
        atomic_write_text(tmp / "regressions.csv", csv_text(regressions_frame(result)))
        atomic_write_text(
            tmp / "serving.csv", csv_text(result.table("serving"))
        )  # mode: serving rows
        atomic_write_json(tmp / "summary.json", json_safe(summary(result, tariffs, quality_class)))
        atomic_write_text(tmp / "README.md", readme(result, tariffs, quality_class, extra_markdown))
        page = report_html(result, tariffs, quality_class, extra_html)
        atomic_write_text(tmp / "report.html", page)
        swap_in(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def remove_leftovers(final: Path) -> list[Path]:
    """Remove what a killed publication left beside ``final`` (its ``.<name>.tmp-*`` and
    ``.<name>.old-*`` folders; the caller holds the folder's lock, so none is in use)."""
    gone: list[Path] = []
    for pattern in (f".{final.name}.tmp-*", f".{final.name}.old-*"):
        for path in final.parent.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                gone.append(path)
    return gone


def swap_in(new: Path, final: Path) -> None:
    """Rename ``new`` to ``final``; an older ``final`` is moved aside first, then removed."""
    if not final.exists():
        os.rename(new, final)
        return
    old = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(final, old)
    try:
        os.rename(new, final)
    except BaseException:
        os.rename(old, final)
        raise
    shutil.rmtree(old, ignore_errors=True)


def report(
    run_dir: Path,
    tariffs: TariffTable | None,
    *,
    utilisation: float = 1.0,
    quality_class: str = "99",
    result: Aggregate | None = None,
    extra_markdown: Sequence[str] = (),
    extra_html: Sequence[str] = (),
) -> Path:
    """Aggregate ``run_dir`` (unless ``result`` is given) and publish it to run_dir/published/."""
    check_quality_class(quality_class)
    run_dir = Path(run_dir)
    with run_lock(run_dir, "report"):  # one writer per run folder (nested: the CLI's lock)
        if result is None:
            result = aggregate_run(run_dir, tariffs, utilisation)
        return write_published(
            result, run_dir / PUBLISHED, tariffs, quality_class, extra_markdown, extra_html
        )
