"""Every vLLM or SGLang group of the GPU scenarios, as the installed engine's own arguments (GPU
venv).

    python .ci/gpu_engine_args.py [--engine vllm|sglang] SCENARIO...

For each scenario: plan it (harness.run.sweep.prepare); for each group of the engine, the
backend's arguments on a CUDA device (offline groups: the offline runner's longest sequence;
vLLM's serving groups: `vllm serve`'s configuration through the serving runner), then the
installed engine's own check of them:
- vLLM: adapted by the engine's dialect as the backend adapts them, then
  `vllm.engine.arg_utils.EngineArgs(**kwargs)`;
- SGLang (its own venv: it pins another torch than vLLM): `ServerArgs(**kwargs)` (every name a
  field of its namespaces) and its own command-line parser on `launch_server`'s arguments
  (every flag known, every choice one of its choices).
An argument the installed engine does not know fails with the group named. No weights are read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.backends.base import BackendOptions
from harness.errors import UserInputError
from harness.modes.offline.device.run import engine_max_context
from harness.run import sweep
from harness.run.sweep import SweepPlan


def groups(scenario: Path, engine: str) -> list[tuple[Any, BackendOptions, SweepPlan]]:
    """(group, its backend options on a CUDA device, the plan) for every group of `engine`."""
    plan = sweep.prepare(scenario, Path("/nonexistent") / scenario.stem)  # nothing is written
    found = []
    for work in plan.work:
        group = work.group
        if group.backend != engine:
            continue
        if engine == "vllm" and any(p.serving is not None for p in work.points):
            from harness.modes.serving.device.run import max_model_len

            levels = [p.serving for p in work.points if p.serving is not None]
            max_context = max_model_len(group, levels)
        else:
            max_context = engine_max_context(group, work.points, plan.context)
        options = BackendOptions(
            device="cuda",
            model_path=group.model,
            engines=plan.context.engines,
            max_context=max_context,
            random_weights=group.weights == "random",
        )
        found.append((group, options, plan))
    return found


def check_vllm(scenario: Path, dialect: Any) -> int:
    from vllm.engine.arg_utils import EngineArgs

    from harness.backends.vllm.args import engine_kwargs

    checked = 0
    for group, options, _ in groups(scenario, "vllm"):
        try:
            adapted, dropped = dialect.adapt(engine_kwargs(group, options))
            EngineArgs(**adapted)
        except (TypeError, UserInputError) as exc:
            fail(scenario, group, exc)
        note = f" (dropped as optional: {', '.join(dropped)})" if dropped else ""
        print(f"gpu-venv:   {scenario.name}: {group.label}: EngineArgs ok{note}")
        checked += 1
    return checked


def check_sglang(scenario: Path) -> int:
    from sglang.srt.server_args import ServerArgs

    from harness.backends.sglang.args import engine_kwargs, launch_args

    checked = 0
    for group, options, _ in groups(scenario, "sglang"):
        try:
            kwargs = engine_kwargs(group, options)
            ServerArgs(**kwargs)  # unresolved: field names only, no model or device touched
            parser = argparse.ArgumentParser(exit_on_error=False)
            ServerArgs.add_cli_args(parser)
            parser.parse_args(launch_args(kwargs, "127.0.0.1", 30000))
        except (TypeError, UserInputError, argparse.ArgumentError, SystemExit) as exc:
            fail(scenario, group, exc)
        print(f"gpu-venv:   {scenario.name}: {group.label}: ServerArgs and launch_server ok")
        checked += 1
    return checked


def fail(scenario: Path, group: Any, exc: BaseException) -> None:
    print(f"gpu-venv: FAIL: {scenario}: {group.label}: {exc}", file=sys.stderr)
    raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("scenarios", nargs="+", type=Path)
    args = parser.parse_args()
    if args.engine == "sglang":
        import sglang

        total = sum(check_sglang(s) for s in args.scenarios)
        version = f"SGLang {sglang.__version__}"
    else:
        from harness.backends.vllm.dialect import EngineDialect

        dialect = EngineDialect.detect()
        total = sum(check_vllm(s, dialect) for s in args.scenarios)
        version = f"vLLM {dialect.version}"
    print(f"gpu-venv: {version}: {total} {args.engine} group(s) built as its own arguments")
    if total == 0:
        print(f"gpu-venv: FAIL: no {args.engine} group in the GPU scenarios", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
