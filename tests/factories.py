"""Builders of result rows, runs and tariff tables for the aggregate / publish / compare tests."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from harness.measure import verdict
from harness.row import Provenance, ResultRow
from harness.run.contracts import WorkContext
from harness.run.store import write_row
from harness.spec.quality import QualitySettings
from harness.spec.scenario import Point, Reference
from harness.spec.tariffs import Package, Tariff, TariffTable

_counter = itertools.count()

XSS_MODEL = "<script>alert(1)</script>"


def row(**overrides: Any) -> ResultRow:
    """A plausible ok row on one H100 (override any field; `key` is unique unless given)."""
    fields: dict[str, Any] = {
        "key": f"k{next(_counter):06d}",
        "run": "run-a",
        "status": "ok",
        "model": "tiny-llama",
        "backend": "transformers",
        "quantization": "none",
        "kv_cache_dtype": "auto",
        "batch": 1,
        "context": 128,
        "output_tokens": 32,
        "target": "cuda",
        "repeats": 5,
        "is_reference": False,
        "gpu": "H100-SXM-80GB",
        "decode_tok_s": 1000.0,
        "total_tok_s": 1500.0,
        "tpot_ms_p50": 1.0,
        "decode_cv": 0.02,
        "repeats_done": 5,
        "peak_mib_decode": 2000.0,
        "predicted_peak_mib": 1900.0,
        "ppl": 100.0,
        "ppl_ci_low": 98.0,
        "ppl_ci_high": 102.0,
        "dnll_vs_ref": 0.0,
        "dnll_ci_low": 0.0,
        "dnll_ci_high": 0.0,
        "roofline_decode_tok_s": 50_000.0,
        "provenance": Provenance(device_name="NVIDIA H100 80GB HBM3", harness="0.1.0"),
    }
    fields.update(overrides)
    return ResultRow(**fields)


def reference(**overrides: Any) -> ResultRow:
    return row(**{"is_reference": True, "quantization": "none", **overrides})


WINDOWS = 64  # quality windows of a factory row


def quality(ppl: float, ref_ppl: float = 100.0, half_ci: float = 0.0005) -> dict[str, Any]:
    """Quality fields of a configuration whose perplexity is ``ppl`` (reference ``ref_ppl``):
    the paired ΔNLL with a 95 % CI of ± ``half_ci`` nats/token, its 90 % one (± half_ci ×
    1.645 / 1.96) and the per-window sd that gives it over WINDOWS windows."""
    import math

    dnll = math.log(ppl / ref_ppl)
    half90 = half_ci * verdict.Z / 1.959963984540054
    return {
        "ppl": ppl,
        "ppl_ci_low": ppl * 0.98,
        "ppl_ci_high": ppl * 1.02,
        "dnll_vs_ref": dnll,
        "dnll_ci_low": dnll - half_ci,
        "dnll_ci_high": dnll + half_ci,
        "dnll_ci90_low": dnll - half90,
        "dnll_ci90_high": dnll + half90,
        "dnll_sd": half90 / verdict.Z * math.sqrt(WINDOWS),
        "quality_windows": WINDOWS,
    }


def arc(ref_acc: float, lost: int, gained: int, items: int = 2376) -> dict[str, Any]:
    """A row's ``tasks`` holding only ``arc_part``'s."""
    return {"tasks": [arc_part(ref_acc, lost, gained, items)]}


def arc_part(ref_acc: float, lost: int, gained: int, items: int = 2376) -> dict[str, Any]:
    """The ``arc-easy`` task part of a configuration against a reference of accuracy
    ``ref_acc`` on ``items`` items: ``lost`` right→wrong and ``gained`` wrong→right flips,
    Newcombe's 90 % interval; one category, ``all``, with the same figures."""
    right = round(ref_acc * items)
    interval = verdict.paired_proportion_ci(right - lost, lost, gained, items - right - gained)
    acc = (right - lost + gained) / items
    figures = {
        "items": items,
        "score": acc,
        "unit_rate": acc,
        "ref_rate": right / items,
        "diff": interval.estimate,
        "diff_ci90_low": interval.low,
        "diff_ci90_high": interval.high,
        "paired_units": interval.n,
    }
    worst = {"worst_category": "all", "worst_diff": interval.estimate,
             "worst_ci90_low": interval.low, "worst_ci90_high": interval.high}  # fmt: skip
    return {"name": "arc-easy", "kind": "choice", "units": items, **figures, **worst,
            "categories": [{"category": "all", **figures}]}  # fmt: skip


def write_run(run_dir: Path, rows: list[ResultRow]) -> Path:
    for r in rows:
        write_row(run_dir, r)
    return run_dir


def write_bad_file(run_dir: Path, name: str = "broken.json") -> Path:
    path = run_dir / "points" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": "x", "status": "ok"}))  # misses required fields
    return path


def tariff(gpu: str = "H100-SXM-80GB", **overrides: Any) -> Tariff:
    fields: dict[str, Any] = {
        "provider": "TestCloud",
        "gpu": gpu,
        "gpus_per_node": 8,
        "hourly_usd": 23.92,
        "source": "test",
        "date": "2026-05",
        "example": True,
        "packages": [
            Package(days=3, discount_pct=8),
            Package(days=7, discount_pct=10),
            Package(days=30, discount_pct=20),
        ],
    }
    fields.update(overrides)
    return Tariff(**fields)


def tariffs(*items: Tariff) -> TariffTable:
    return TariffTable(tariffs=list(items) or [tariff()])


def small_grid(run: str = "run-a", model: str = "tiny-llama") -> list[ResultRow]:
    """A complete 2-GPU grid: quantization {none (reference), bnb-int8, bnb-nf4} × KV {auto, int8}
    × batch {1, 4} × context {128, 512}. Decode speeds and perplexities follow simple rules so
    that effects and classes are predictable:

    - ppl: none 100, bnb-int8 100.05 (class 99.9), bnb-nf4 100.5 (class 99); KV int8 adds 0.02 %.
    - decode tok/s = base(GPU) × batch × quant speed-up ÷ (1 + context / 1024).
    """
    out = []
    speed = {"none": 1.0, "bnb-int8": 0.8, "bnb-nf4": 1.3}
    ppl_of = {"none": 100.0, "bnb-int8": 100.05, "bnb-nf4": 100.5}
    base = {"H100-SXM-80GB": 1000.0, "RTX-4090": 400.0}
    for gpu, quant, kv, batch, context in itertools.product(
        base, speed, ("auto", "int8"), (1, 4), (128, 512)
    ):
        ppl = ppl_of[quant] * (1.0002 if kv == "int8" else 1.0)
        decode = base[gpu] * batch * speed[quant] / (1 + context / 1024)
        out.append(
            row(
                run=run,
                model=model,
                gpu=gpu,
                quantization=quant,
                kv_cache_dtype=kv,
                batch=batch,
                context=context,
                is_reference=quant == "none" and kv == "auto",
                decode_tok_s=decode,
                total_tok_s=decode * 1.5,
                tpot_ms_p50=1000.0 * batch / decode,
                peak_mib_decode=1000.0 + batch * context / 8,
                predicted_peak_mib=950.0 + batch * context / 8,
                **quality(ppl, half_ci=0.0002),
            )
        )
    return out


# The columns issue 5 names for cost.csv (a contract for people who download it).
COST_CSV_CONTRACT = (
    "model", "quality_class", "gpu", "package_days", "package_price_usd", "gpus_in_package",
    "gpus_used", "utilisation", "quantization", "kv_cache_dtype", "batch", "context",
    "decode_tok_s", "total_tok_s", "usd_per_mtok_output", "usd_per_mtok_total",
    "tokens_per_package", "breakeven_utilisation",
)  # fmt: skip


def write_manifest(run_dir: Path, rows: list[ResultRow], **entry: Any) -> Path:
    """A manifest as ``harness.run.sweep.start_manifest`` writes it (through the store): one run
    entry recording the rows' corpus hash, harness version and groups (override any field)."""
    from harness.run.store import MANIFEST
    from harness.run.store import write_manifest as store_write_manifest

    hashes = {r.provenance.corpus_hash for r in rows if r.provenance.corpus_hash}
    versions = {r.provenance.harness for r in rows if r.provenance.harness}
    fields: dict[str, Any] = {
        "started": "2026-05-01T00:00:00+0000",
        "mode": "in-process",
        "scenario": "scenarios/test.yaml",
        "scenario_hash": "5ce4a110",
        "groups": sorted({r.group for r in rows if r.group}),
        "added_reference_groups": [],
        "skipped": [],
        **({"corpus_hash": min(hashes)} if hashes else {}),
        **({"harness": min(versions)} if versions else {}),
    }
    fields.update(entry)
    store_write_manifest(run_dir, {"name": run_dir.name, "runs": [fields]})
    return run_dir / MANIFEST


def work_context(run_dir: Path, quality: QualitySettings) -> WorkContext:
    """A device-side WorkContext for a run folder: the default reference, transformers."""
    return WorkContext(
        run_dir=str(run_dir), run="t", reference=Reference(), quality=quality,
        reference_backend="transformers",
    )  # fmt: skip


def tiny_point(quality: QualitySettings, **overrides: Any) -> Point:
    """A tiny-llama offline point on the CPU scored with `quality`'s window settings."""
    base: dict[str, Any] = dict(
        model="tiny-llama", backend="transformers", quantization="none", kv_cache_dtype="auto",
        batch=2, context=16, output_tokens=4, target="cpu", repeats=2, warmups=1,
        window_tokens=quality.window_tokens, max_windows=quality.max_windows,
    )  # fmt: skip
    return Point.model_validate({**base, **overrides})
