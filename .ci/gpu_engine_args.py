"""Every vLLM group of the GPU scenarios, as the installed vLLM's own `EngineArgs` (GPU venv).

    python .ci/gpu_engine_args.py SCENARIO...

For each scenario: plan it (harness.run.sweep.prepare); for each vLLM group, the backend's
`engine_kwargs` on a CUDA device (offline groups: the offline runner's longest sequence; serving
groups: `vllm serve`'s configuration through the serving runner), adapted by the engine's dialect
as the backend adapts them, then `vllm.engine.arg_utils.EngineArgs(**kwargs)`. An argument this
vLLM does not know (a TypeError there, or the dialect's UserInputError) fails with the group named.
No weights are read: EngineArgs only holds the arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.backends.base import BackendOptions
from harness.backends.vllm.args import engine_kwargs
from harness.backends.vllm.dialect import EngineDialect
from harness.errors import UserInputError
from harness.modes.offline.device.run import engine_max_context
from harness.run import sweep


def check(scenario: Path, dialect: EngineDialect) -> int:
    from vllm.engine.arg_utils import EngineArgs

    plan = sweep.prepare(scenario, Path("/nonexistent") / scenario.stem)  # nothing is written
    checked = 0
    for work in plan.work:
        group = work.group
        if group.backend != "vllm":
            continue
        if any(p.serving is not None for p in work.points):
            from harness.modes.serving.device.run import max_model_len

            levels = [p.serving for p in work.points if p.serving is not None]
            max_context = max_model_len(group, levels)
        else:
            max_context = engine_max_context(group, work.points, plan.context)
        options = BackendOptions(
            device="cuda",
            model_path=group.model,
            vllm=plan.context.vllm,
            max_context=max_context,
            random_weights=group.weights == "random",
        )
        try:
            adapted, dropped = dialect.adapt(engine_kwargs(group, options))
            EngineArgs(**adapted)
        except (TypeError, UserInputError) as exc:
            print(f"gpu-venv: FAIL: {scenario}: {group.label}: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
        note = f" (dropped as optional: {', '.join(dropped)})" if dropped else ""
        print(f"gpu-venv:   {scenario.name}: {group.label}: EngineArgs ok{note}")
        checked += 1
    return checked


def main() -> None:
    dialect = EngineDialect.detect()
    total = sum(check(Path(arg), dialect) for arg in sys.argv[1:])
    print(f"gpu-venv: vLLM {dialect.version}: {total} vLLM group(s) built as EngineArgs")
    if total == 0:
        print("gpu-venv: FAIL: no vLLM group in the GPU scenarios", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
