#!/usr/bin/env python3
"""`make gpu-check`: the CUDA (or ROCm) path end to end on a GPU node, with nothing downloaded.

(a) the transformers backend on the shipped tiny model: load, generate (token counts), score the
    corpus windows (`harness.corpus.windows`, as the worker cuts them), memory facts; then one
    small point per backend through `harness.worker.measure_group` (quality, timing, rows);
(b) where vLLM imports, the vLLM backend on the same model and the same windows (and the worker
    point, compared with the transformers reference: ΔNLL, KL, top-1 agreement);
(c) both backends' perplexity on those windows: pass when they agree within 1 %;
(d) a randomly initialised ~0.9B Llama built in memory from a LlamaConfig (hidden 2048, 16 layers,
    16 heads, 8 KV heads, intermediate 5632, vocab 32000), saved to a temp dir: each backend's
    decode throughput against the bandwidth roofline (it can approach the ceiling, never pass it).

Writes gpu_check.json under --out (default: $OUT, else results/gpu-check). Exit status: 0 when
every check that ran passed, 1 when one failed, 2 when there is no GPU. torch, transformers and
vLLM are imported only inside the steps, so this module imports anywhere.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness.measure.quality import perplexity  # noqa: E402  (numpy only)

TINY_MODEL = REPO / "harness" / "data" / "tiny-llama"
PPL_TOLERANCE = 0.01  # relative
ROOFLINE_SLACK = 1.05  # a measured rate above 105 % of the ceiling is a measurement error
LLAMA_1B = {
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "intermediate_size": 5632,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}


@dataclass
class Check:
    name: str
    ok: bool | None  # None: did not run (with the reason in note)
    note: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


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


def vllm_importable() -> bool:
    return importlib.util.find_spec("vllm") is not None


# --- steps that need a GPU ----------------------------------------------------------------------


def _backend(name: str, model_dir: Path, quantization: str, max_context: int, **vllm: Any) -> Any:
    from harness.backends.base import BackendOptions, backend_class
    from harness.scenario import GroupKey, VllmOptions

    group = GroupKey(
        target="cuda",
        model=model_dir.name,
        revision="main",
        backend=name,
        quantization=quantization,
        kv_cache_dtype="auto",
    )
    options = BackendOptions(
        device="cuda",
        model_path=str(model_dir),
        seed=0,
        max_context=max_context,
        vllm=VllmOptions(**vllm) if name == "vllm" else None,
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
    name: str, model_dir: Path, windows: list[list[int]], k: int, ref: Any, args: argparse.Namespace
) -> tuple[Check, Any]:
    extra = {"gpu_memory_utilization": args.vllm_memory, "enforce_eager": True}
    backend = _backend(name, model_dir, args.dtype, max_context=args.window_tokens + 64, **extra)
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


def _worker_check(out: Path, names: list[str], args: argparse.Namespace) -> Check:
    """One small point per backend through the worker; the transformers group is the reference."""
    from harness.scenario import Point, QualitySettings, Reference, VllmOptions
    from harness.worker import WorkContext, measure_group

    quality = QualitySettings(window_tokens=64, max_windows=4, arc_items=8)
    ctx = WorkContext(
        run_dir=str(out / "worker"),
        run="gpu-check",
        reference=Reference(quantization=args.dtype, kv_cache_dtype="auto"),
        quality=quality,
        vllm=VllmOptions(gpu_memory_utilization=args.vllm_memory, enforce_eager=True),
        reference_backend="transformers",
    )
    rows: list[Any] = []
    for name in names:  # the reference first, so that vLLM's row is compared with it
        point = Point(model="tiny-llama", backend=name, quantization=args.dtype,
                      kv_cache_dtype="auto", batch=2, context=64, output_tokens=16,
                      target="cuda", repeats=2, warmups=1, window_tokens=quality.window_tokens,
                      max_windows=quality.max_windows)  # fmt: skip
        rows += measure_group(point.group, [point], ctx, lambda row: None)
    keep = ("status", "error", "ppl", "dnll_vs_ref", "kl_vs_ref", "top1_agree", "arc_acc",
            "decode_tok_s", "ttft_ms_p50", "generated_tokens", "engine_preallocated_mib",
            "weights_mib_measured")  # fmt: skip
    figures = {row.backend: {k: getattr(row, k, None) for k in keep} for row in rows}
    bad = [f"{row.backend}: {row.status} {row.error or ''}" for row in rows if row.status != "ok"]
    return Check("worker", not bad and len(rows) == len(names), "; ".join(bad), figures)


def _throughput(name: str, model_dir: Path, cfg: dict[str, Any], args: argparse.Namespace) -> Check:
    import torch

    from harness import catalog, plan
    from harness.scenario import Point

    batch, context, new = args.batch, args.context, args.new_tokens
    backend = _backend(
        name, model_dir, "bf16", max_context=context + new, gpu_memory_utilization=args.vllm_memory
    )
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, int(cfg["vocab_size"]), (batch, context), generator=generator)
    try:
        backend.load()
        backend.generate(prompts[:, : context // 2].tolist(), 8)  # warm-up
        gen = backend.generate(prompts.tolist(), new)
    finally:
        backend.close()
    rate = decode_tok_s(gen.new_tokens, gen.step_ms, gen.e2e_ms)
    arch = catalog.arch_from_config("llama-1b-random", {**cfg, "torch_dtype": "bfloat16"})
    figures: dict[str, Any] = {"decode_tok_s": rate, "batch": batch, "context": context,
                               "new_tokens": gen.new_tokens[:1], "e2e_ms": gen.e2e_ms,
                               "first_token_ms": gen.step_ms[:1],
                               "params": plan.param_counts(arch).total}  # fmt: skip
    spec = catalog.gpu_for_device_name(torch.cuda.get_device_name(0))
    if spec is None:
        return Check(f"{name}-1b-decode", rate > 0, "GPU not in the catalog: no roofline", figures)
    point = Point(model=arch.id, backend=name, quantization="bf16", kv_cache_dtype="auto",
                  batch=batch, context=context, output_tokens=new, target="cuda")  # fmt: skip
    ceiling = plan.decode_ceiling_tok_s(spec, plan.weights_bytes(arch, "bf16"), arch, point)
    fraction = rate / ceiling
    figures.update(gpu=spec.name, ceiling_tok_s=ceiling, roofline_fraction=fraction)
    ok = 0 < fraction <= ROOFLINE_SLACK
    return Check(
        f"{name}-1b-decode", ok, f"{rate:.0f} tok/s = {fraction:.1%} of {ceiling:.0f}", figures
    )


def _build_llama_1b(directory: Path, tokenizer_from: Path) -> dict[str, Any]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**LLAMA_1B, dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(directory)  # safetensors
    del model
    torch.cuda.empty_cache()
    for item in tokenizer_from.iterdir():  # a tokenizer both engines can load; ids stay < 32000
        if item.name.startswith(("tokenizer", "special_tokens")) and item.is_file():
            shutil.copy(item, directory / item.name)
    return dict(LLAMA_1B)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checks: list[Check] = []
    report: dict[str, Any] = {"checks": checks, "vllm_importable": vllm_importable()}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        report["ok"] = False
        report["error"] = "no CUDA/ROCm device visible to torch"
        _write(out, report)
        print("[gpu-check] no GPU: nothing to check", file=sys.stderr)
        return 2
    report["device"] = torch.cuda.get_device_name(0)
    report["torch"] = torch.__version__
    model_dir = Path(args.model)
    names = ["transformers"] + (["vllm"] if report["vllm_importable"] else [])
    if not (model_dir / "config.json").is_file():
        checks.append(Check("tiny-model", False, f"{model_dir} has no config.json"))
    else:
        from harness import corpus

        tokens = corpus.tokenize_eval(str(model_dir))
        windows = corpus.windows(tokens, args.window_tokens, args.windows)
        scores: dict[str, Any] = {}

        def small(name: str) -> Callable[[], Check]:
            def step() -> Check:
                ref = scores["transformers"].topk_ids if "transformers" in scores else None
                check, scores[name] = _small_model_run(name, model_dir, windows, args.k, ref, args)
                return check

            return step

        for name in names:
            _timed(f"{name}-tiny", checks, small(name))
        if "vllm" not in names:
            checks.append(Check("vllm-tiny", None, "vLLM is not importable here"))
        if {"transformers", "vllm"} <= scores.keys():
            a, b = scores["transformers"], scores["vllm"]
            ppl_a = perplexity(a.nll_sum, a.tokens)
            ppl_b = perplexity(b.nll_sum, b.tokens)
            diff = relative_difference(ppl_b, ppl_a)
            agree = float((a.argmax == b.argmax).mean())
            checks.append(Check("perplexity-agreement", diff <= PPL_TOLERANCE,
                                f"transformers {ppl_a:.4f} vs vLLM {ppl_b:.4f} ({diff:.2%})",
                                {"transformers": ppl_a, "vllm": ppl_b, "relative": diff,
                                 "argmax_agreement": agree, "windows": len(windows),
                                 "window_tokens": args.window_tokens}))  # fmt: skip
        else:
            checks.append(Check("perplexity-agreement", None, "needs both backends' scores"))
        _timed("worker", checks, lambda: _worker_check(out, names, args))
    if args.skip_1b:
        checks.append(Check("1b-decode", None, "skipped (--skip-1b)"))
    else:
        with tempfile.TemporaryDirectory(prefix="llama-1b-") as tmp:
            directory = Path(tmp)
            try:
                cfg = _build_llama_1b(directory, model_dir)
            except Exception as exc:
                checks.append(Check("1b-build", False, f"{type(exc).__name__}: {exc}"))
            else:
                for name in names:
                    step = functools.partial(_throughput, name, directory, cfg, args)
                    _timed(f"{name}-1b-decode", checks, step)
    report["ok"] = all(c.ok is not False for c in checks)
    _write(out, report)
    return 0 if report["ok"] else 1


def _write(out: Path, report: dict[str, Any]) -> None:
    payload = {**report, "checks": [asdict(c) for c in report.get("checks", [])]}
    (out / "gpu_check.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"[gpu-check] wrote {out / 'gpu_check.json'}", flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", default=os.environ.get("OUT") or "results/gpu-check")
    parser.add_argument("--model", default=str(TINY_MODEL), help="the small model for (a)-(c)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32", "none"])
    parser.add_argument("--window-tokens", type=int, default=128)
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--k", type=int, default=5, help="top-k log-probs kept per position")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument(
        "--vllm-memory", type=float, default=0.4, help="vLLM gpu_memory_utilization"
    )
    parser.add_argument("--skip-1b", action="store_true", help="skip (d), the ~0.9B model")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
