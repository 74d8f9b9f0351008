"""`make gpu-check`: the CUDA (or ROCm) path end to end on a GPU node, with nothing downloaded.

(a) the transformers backend on the shipped tiny model: load, generate (token counts), score the
    corpus windows (`harness.corpus.windows`, as the worker cuts them), memory facts; then one
    small point per backend through `harness.run.worker.measure_group` (quality, timing, rows;
    on NVIDIA every row must carry NVML energy per phase: energy_source nvml, J/token);
(b) where vLLM imports, the vLLM backend on the same model and the same windows (and the worker
    point, compared with the transformers reference: ΔNLL, KL, top-1 agreement);
(c) both backends' perplexity on those windows: pass when they agree within 1 %;
(d) vLLM's FP8 KV caches (fp8, fp8_e5m2) on the tiny model: paired ΔNLL against its own
    model-dtype cache on the same windows;
(e) the Llama-3.1-8B architecture on random weights (its config.json ships in
    harness/spec/catalog/configs; nothing downloaded), bf16, batch 1 and 64: each backend's
    decode throughput against the bandwidth roofline (it can approach the ceiling, never pass
    it), its memory next to the plan's terms, and decode energy from NVML's cumulative counter.

Writes gpu_check.json under --out (default: $OUT, else results/gpu-check). Exit status: 0 when
every check that ran passed, 1 when one failed, 2 when there is no GPU. torch, transformers and
vLLM are imported only inside the steps, so this module imports anywhere. Entry point:
scripts/gpu_check.py (its --help lists the options).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.measure.quality import perplexity  # numpy only
from harness.spec.catalog import HERE as CATALOG_DIR
from harness.spec.models import PACKAGE_DATA

TINY_MODEL = PACKAGE_DATA / "tiny-llama"
PPL_TOLERANCE = 0.005  # relative: the engines agree within 0.5 % on the same windows and dtype
ROOFLINE_SLACK = 1.05  # a measured rate above 105 % of the ceiling is a measurement error
LLAMA_8B_CONFIG = CATALOG_DIR / "configs" / "llama-3.1-8b" / "config.json"
LLAMA_8B_CATALOG_ID = "meta-llama/Llama-3.1-8B-Instruct"  # the same architecture, for the plan
FP8_KV = ("fp8", "fp8_e5m2")


@dataclass(frozen=True)
class Options:
    """The command line's settings (scripts/gpu_check.py --help)."""

    out: str
    model: str  # the small model for (a)-(c)
    dtype: Literal["bf16", "fp16", "fp32", "none"]
    window_tokens: int
    windows: int
    k: int  # top-k log-probs kept per position
    batches: str  # for (e), comma-separated
    context: int
    new_tokens: int
    vllm_memory: float  # vLLM gpu_memory_utilization
    skip_8b: bool
    only: str | None  # run just this step


@dataclass
class Check:
    name: str
    ok: bool | None  # None: did not run (with the reason in note)
    note: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


Timed = Callable[[str, Callable[[], Check]], None]


# --- pure helpers (tested on CPU) ---------------------------------------------------------------


def relative_difference(value: float, reference: float) -> float:
    return abs(value - reference) / abs(reference)


def decode_tok_s(new_tokens: Sequence[int], step_ms: Sequence[float], e2e_ms: float) -> float:
    """Tokens after the first, over the time after the first (decode = e2e − prefill)."""
    if not step_ms:
        raise ValueError("the generation has no first-token time")
    decode_s = (e2e_ms - step_ms[0]) / 1e3
    tokens = sum(max(n - 1, 0) for n in new_tokens)
    if decode_s <= 0 or tokens == 0:
        raise ValueError(f"no decode phase to time ({tokens} tokens in {decode_s:.6f} s)")
    return tokens / decode_s


def roofline_verdict(per_batch: dict[str, Any], new_tokens: int) -> tuple[bool, str]:
    """(e)'s verdict: every batch generated `new_tokens` each and stayed under the roofline (a
    fraction in (0, ROOFLINE_SLACK]; no fraction where the GPU is not in the catalog); the note."""
    fractions = [e.get("roofline_fraction") for e in per_batch.values()]
    ok = all(f is None or 0 < f <= ROOFLINE_SLACK for f in fractions) and all(
        e["new_tokens"] == [new_tokens] for e in per_batch.values()
    )
    note = "; ".join(
        f"batch {b}: {e['decode_tok_s']:.0f} tok/s"
        + (f" = {e['roofline_fraction']:.1%} of roofline" if "roofline_fraction" in e else "")
        for b, e in per_batch.items()
    )
    return ok, note


def vllm_importable() -> bool:
    return importlib.util.find_spec("vllm") is not None


# --- steps that need a GPU ----------------------------------------------------------------------


def _backend(
    name: str,
    model_dir: Path,
    quantization: str,
    max_context: int,
    *,
    kv: str = "auto",
    random_weights: bool = False,
    **vllm: Any,
) -> Any:
    from harness.backends.base import BackendOptions, backend_class
    from harness.spec.engine_options import EngineBlocks
    from harness.spec.scenario import GroupKey

    group = GroupKey(
        target="cuda",
        model=model_dir.name,
        revision="main",
        backend=name,
        quantization=quantization,
        kv_cache_dtype=kv,
    )
    options = BackendOptions(
        device="cuda",
        model_path=str(model_dir),
        seed=0,
        max_context=max_context,
        engines=EngineBlocks.model_validate({"vllm": vllm} if name == "vllm" else {}),
        random_weights=random_weights,
    )
    return backend_class(name)(group, options)


def _timed(label: str, checks: list[Check], step: Callable[[], Check]) -> None:
    start = time.perf_counter()
    try:
        check = step()
    except Exception as exc:
        check = Check(label, False, f"{type(exc).__name__}: {exc}")
        check.figures["traceback"] = traceback.format_exc(limit=8)
    check.figures["seconds"] = round(time.perf_counter() - start, 2)
    checks.append(check)
    status = {True: "ok", False: "FAILED", None: "not run"}[check.ok]
    print(f"[gpu-check] {check.name}: {status} {check.note}", flush=True)


def _small_model_run(
    name: str, model_dir: Path, windows: list[list[int]], k: int, ref: Any, options: Options
) -> tuple[Check, Any]:
    extra: dict[str, Any] = {"gpu_memory_utilization": options.vllm_memory, "enforce_eager": True}
    max_context = options.window_tokens + 64
    backend = _backend(name, model_dir, options.dtype, max_context=max_context, **extra)
    try:
        backend.load()
        prompts = [w[:32] for w in windows[:4]]
        gen = backend.generate(prompts, 16)
        scores = backend.score_windows(windows, ref, k)
        memory = backend.memory_facts()
    finally:
        backend.close()
    counts_ok = gen.new_tokens == [16] * len(prompts)
    ppl = perplexity(scores.nll_sum, scores.tokens)
    check = Check(
        f"{name}-tiny",
        counts_ok and math.isfinite(ppl),
        "" if counts_ok else f"generated {gen.new_tokens}, expected 16 each",
        {"perplexity": ppl, "new_tokens": gen.new_tokens, "e2e_ms": gen.e2e_ms,
         "first_token_ms": gen.step_ms[:1], "memory": asdict(memory)},
    )  # fmt: skip
    return check, scores


def _agreement(scores: dict[str, Any], windows: list[list[int]], options: Options) -> Check:
    """(c): both backends' perplexity on the same windows, within PPL_TOLERANCE."""
    if not {"transformers", "vllm"} <= scores.keys():
        return Check("perplexity-agreement", None, "needs both backends' scores")
    a, b = scores["transformers"], scores["vllm"]
    ppl_a = perplexity(a.nll_sum, a.tokens)
    ppl_b = perplexity(b.nll_sum, b.tokens)
    diff = relative_difference(ppl_b, ppl_a)
    agree = float((a.argmax == b.argmax).mean())
    return Check("perplexity-agreement", diff <= PPL_TOLERANCE,
                 f"transformers {ppl_a:.4f} vs vLLM {ppl_b:.4f} ({diff:.2%})",
                 {"transformers": ppl_a, "vllm": ppl_b, "relative": diff,
                  "argmax_agreement": agree, "windows": len(windows),
                  "window_tokens": options.window_tokens})  # fmt: skip


def _worker_check(out: Path, names: list[str], options: Options) -> Check:
    """One small point per backend through the worker; the transformers group is the reference."""
    from harness.run.contracts import WorkContext
    from harness.run.worker import measure_group
    from harness.spec.engine_options import EngineBlocks
    from harness.spec.quality import QualitySettings
    from harness.spec.scenario import Point, Reference

    quality = QualitySettings(window_tokens=64, max_windows=4, arc_items=8)
    ctx = WorkContext(
        run_dir=str(out / "worker"),
        run="gpu-check",
        reference=Reference(quantization=options.dtype, kv_cache_dtype="auto"),
        quality=quality,
        engines=EngineBlocks.model_validate(
            {"vllm": {"gpu_memory_utilization": options.vllm_memory, "enforce_eager": True}}
        ),
        reference_backend="transformers",
    )
    rows: list[Any] = []
    for name in names:  # the reference first, so that vLLM's row is compared with it
        point = Point(model="tiny-llama", backend=name, quantization=options.dtype,
                      kv_cache_dtype="auto", batch=2, context=64, output_tokens=16,
                      target="cuda", repeats=2, warmups=1, window_tokens=quality.window_tokens,
                      max_windows=quality.max_windows)  # fmt: skip
        rows += measure_group(point.group, [point], ctx, lambda row: None)
    keep = ("status", "error", "ppl", "dnll_vs_ref", "kl_vs_ref", "top1_agree", "tasks",
            "decode_tok_s", "ttft_ms_p50", "generated_tokens", "engine_preallocated_mib",
            "weights_mib_measured", "energy_source", "energy_j_prefill", "energy_j_decode",
            "energy_j_quality", "j_per_token_decode", "avg_power_w_decode",
            "energy_unavailable_reason")  # fmt: skip
    figures = {row.backend: {k: getattr(row, k, None) for k in keep} for row in rows}
    bad = [f"{row.backend}: {row.status} {row.error or ''}" for row in rows if row.status != "ok"]
    # on NVIDIA the worker's rows carry NVML energy per phase (harness.measure.energy)
    import torch

    if torch.version.hip is None:
        bad += [
            f"{row.backend}: no NVML energy ({row.energy_unavailable_reason})"
            for row in rows
            if row.status == "ok"
            and (row.energy_source != "nvml" or row.j_per_token_decode is None)
        ]
    return Check("worker", not bad and len(rows) == len(names), "; ".join(bad), figures)


def _score_in_fresh_process(
    model_dir: str, windows: list[list[int]], kv: str, options: Options
) -> dict[str, Any]:
    """One vLLM engine in this (spawned) process: its window scores, or the error it raised."""
    backend = _backend("vllm", Path(model_dir), options.dtype, options.window_tokens + 64, kv=kv,
                       gpu_memory_utilization=options.vllm_memory, enforce_eager=True)  # fmt: skip
    try:
        backend.load()
        scores = backend.score_windows(windows, None, options.k)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:400], "traceback": traceback.format_exc()}
    finally:
        backend.close()
    return {"nll_sum": scores.nll_sum, "tokens": scores.tokens, "argmax": scores.argmax}


def _fp8_kv_quality(model_dir: Path, windows: list[list[int]], options: Options) -> Check:
    """vLLM with each FP8 KV cache against its model-dtype cache: paired ΔNLL per window.

    Each engine runs in a fresh process: vLLM 0.26 keeps per-process attention state, and a
    second engine with another KV dtype in the same process failed its profiling run
    (AssertionError, measured on the H200), as a fresh Ray actor per group avoids in a sweep.
    """
    import multiprocessing

    import numpy as np

    from harness.measure.quality import paired_dnll

    spawn = multiprocessing.get_context("spawn")
    results: dict[str, dict[str, Any]] = {}
    for kv in ("auto", *FP8_KV):
        with spawn.Pool(1) as pool:
            job = (str(model_dir), windows, kv, options)
            results[kv] = pool.apply(_score_in_fresh_process, job)
    base = results["auto"]
    if "error" in base:
        return Check("vllm-fp8-kv", False, f"auto KV: {base['error']}", {"auto": base})
    figures: dict[str, Any] = {"auto_ppl": perplexity(base["nll_sum"], base["tokens"])}
    for kv in FP8_KV:
        scores = results[kv]
        if "error" in scores:
            figures[kv] = {"error": scores["error"], "traceback": scores["traceback"][-1500:]}
            continue
        mean, low, high = paired_dnll(base["nll_sum"], scores["nll_sum"], base["tokens"])
        figures[kv] = {
            "ppl": perplexity(scores["nll_sum"], scores["tokens"]),
            "dnll_per_token": mean,
            "ci95": [low, high],
            "argmax_agreement": float(np.mean(scores["argmax"] == base["argmax"])),
        }
    ran = [kv for kv in FP8_KV if "error" not in figures[kv]]
    note = ", ".join(
        f"{kv} ΔNLL {figures[kv]['dnll_per_token']:+.4%}" if kv in ran else f"{kv}: refused"
        for kv in FP8_KV
    )
    ok = bool(ran) and all(math.isfinite(figures[kv]["ppl"]) for kv in ran)
    return Check("vllm-fp8-kv", ok, note, figures)


def _nvml_energy_mj() -> int | None:
    """NVML's cumulative energy counter of device 0 in mJ (None where it cannot be read)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(0)))
    except Exception:
        return None


def _llama_8b_dir(directory: Path, tokenizer_from: Path) -> None:
    """A model directory with the 8B config.json and a tokenizer both engines load (ids < 4096)."""
    shutil.copy(LLAMA_8B_CONFIG, directory / "config.json")
    for item in tokenizer_from.iterdir():
        if item.name.startswith(("tokenizer", "special_tokens")) and item.is_file():
            shutil.copy(item, directory / item.name)


def _decode_at(
    backend: Any, name: str, batch: int, generator: Any, spec: Any, options: Options
) -> dict[str, Any]:
    """(e) at one batch on a loaded backend: a warm-up, then one timed generation; its decode
    rate, timings, peak memory, NVML energy where readable, and the plan's terms and roofline
    where the GPU is in the catalog."""
    import torch

    from harness import plan
    from harness.spec.scenario import Point

    context, new = options.context, options.new_tokens
    prompts = torch.randint(0, 4096, (batch, context), generator=generator).tolist()
    backend.generate([p[: context // 2] for p in prompts], 8)  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    energy_before = _nvml_energy_mj()
    gen = backend.generate(prompts, new)
    torch.cuda.synchronize()
    energy_after = _nvml_energy_mj()
    rate = decode_tok_s(gen.new_tokens, gen.step_ms, gen.e2e_ms)
    point = Point(model=LLAMA_8B_CATALOG_ID, backend=name, quantization="bf16",
                  kv_cache_dtype="auto", batch=batch, context=context,
                  output_tokens=new, target="cuda")  # fmt: skip
    entry: dict[str, Any] = {
        "decode_tok_s": rate,
        "new_tokens": sorted(set(gen.new_tokens)),
        "ttft_ms": gen.step_ms[0],
        "e2e_ms": gen.e2e_ms,
        "tpot_ms": gen.tpot_ms,
        "timer": gen.timer,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
    }
    if energy_before is not None and energy_after is not None:
        joules = (energy_after - energy_before) / 1e3
        tokens = sum(gen.new_tokens)
        entry.update(energy_j_generate=joules, j_per_output_token=joules / tokens,
                     avg_power_w=joules / (gen.e2e_ms / 1e3))  # fmt: skip
    if spec is not None:
        predicted = plan.plan_point(point, spec, gpu_memory_utilization=options.vllm_memory)
        ceiling = predicted.roofline_decode_tok_s
        entry.update(ceiling_tok_s=ceiling, roofline_fraction=rate / ceiling,
                     plan_weights_gib=predicted.weights_gib,
                     plan_kv_cache_gib=predicted.kv_cache_gib,
                     plan_activations_gib=predicted.activations_gib,
                     plan_decode_gib=predicted.decode_gib,
                     plan_prefill_gib=predicted.prefill_gib)  # fmt: skip
    return entry


def _random_8b(name: str, directory: Path, options: Options) -> Check:
    """Decode at each batch of --batches on the 8B architecture, random bf16 weights."""
    import torch

    from harness import plan
    from harness.spec import catalog

    batches = [int(b) for b in options.batches.split(",")]
    max_context = options.context + options.new_tokens
    backend = _backend(name, directory, "bf16", max_context=max_context, random_weights=True,
                       gpu_memory_utilization=options.vllm_memory)  # fmt: skip
    arch = catalog.model(LLAMA_8B_CATALOG_ID)
    spec = catalog.gpu_for_device_name(torch.cuda.get_device_name(0))
    generator = torch.Generator().manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    try:
        backend.load()
        loaded_allocated = torch.cuda.memory_allocated()
        memory = backend.memory_facts()
        per_batch = {
            str(batch): _decode_at(backend, name, batch, generator, spec, options)
            for batch in batches
        }
    finally:
        backend.close()
    figures: dict[str, Any] = {
        "params": plan.param_counts(arch).total,
        "context": options.context,
        "new_tokens": options.new_tokens,
        "gpu": spec.name if spec else None,
        "allocated_after_load_gib": loaded_allocated / 2**30,
        "engine_memory": asdict(memory),
        "batches": per_batch,
    }
    ok, note = roofline_verdict(per_batch, options.new_tokens)
    return Check(f"{name}-8b-random", ok, note, figures)


def _tiny_model_checks(
    model_dir: Path, names: list[str], options: Options, checks: list[Check], timed: Timed
) -> None:
    """(a)-(d) on the small model: each backend alone, their agreement, vLLM's FP8 KV caches,
    and the worker's point per backend."""
    from harness import corpus

    tokens = corpus.tokenize_eval(str(model_dir))
    windows = corpus.windows(tokens, options.window_tokens, options.windows)
    scores: dict[str, Any] = {}

    def small(name: str) -> Callable[[], Check]:
        def step() -> Check:
            ref = scores["transformers"].topk_ids if "transformers" in scores else None
            check, scores[name] = _small_model_run(
                name, model_dir, windows, options.k, ref, options
            )
            return check

        return step

    for name in names:
        timed(f"{name}-tiny", small(name))
    if "vllm" not in names:
        checks.append(Check("vllm-tiny", None, "vLLM is not importable here"))
    checks.append(_agreement(scores, windows, options))
    if "vllm" in names:
        timed("vllm-fp8-kv", functools.partial(_fp8_kv_quality, model_dir, windows, options))
    timed("worker", lambda: _worker_check(Path(options.out), names, options))


def _torch() -> Any:
    """torch, or None where it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def run(options: Options) -> int:
    """Every check that applies, gpu_check.json rewritten after each; the exit status."""
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    checks: list[Check] = []
    report: dict[str, Any] = {"checks": checks, "vllm_importable": vllm_importable()}
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        report["ok"] = False
        report["error"] = "no CUDA/ROCm device visible to torch"
        _write(out, report)
        print("[gpu-check] no GPU: nothing to check", file=sys.stderr)
        return 2
    report["device"] = torch.cuda.get_device_name(0)

    def timed(label: str, step: Callable[[], Check]) -> None:
        if options.only and label != options.only:
            return
        _timed(label, checks, step)
        _write(out, report)  # after every step: a run cut short keeps what it measured

    report["torch"] = torch.__version__
    model_dir = Path(options.model)
    names = ["transformers"] + (["vllm"] if report["vllm_importable"] else [])
    if not (model_dir / "config.json").is_file():
        checks.append(Check("tiny-model", False, f"{model_dir} has no config.json"))
    else:
        _tiny_model_checks(model_dir, names, options, checks, timed)
    if options.skip_8b:
        checks.append(Check("8b-random", None, "skipped (--skip-8b)"))
    else:
        with tempfile.TemporaryDirectory(prefix="llama-8b-") as tmp:
            directory = Path(tmp)
            _llama_8b_dir(directory, model_dir)
            for name in names:
                timed(f"{name}-8b-random", functools.partial(_random_8b, name, directory, options))
    report["ok"] = all(c.ok is not False for c in checks)
    _write(out, report)
    return 0 if report["ok"] else 1


def _write(out: Path, report: dict[str, Any]) -> None:
    payload = {**report, "checks": [asdict(c) for c in report.get("checks", [])]}
    (out / "gpu_check.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"[gpu-check] wrote {out / 'gpu_check.json'}", flush=True)
