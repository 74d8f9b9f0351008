"""The benchmark tools: comparisons with other tools, scaling and speed checks, the GPU node check.

A tool room beside `harness.cli`: it may import every other room, and no room imports it.
Engines (torch, transformers, vLLM, Ray, optimum-benchmark) are imported only inside functions.
`scripts/*.py` are the entry points (argument parsing and one call); the Makefile runs them.
Not here: scripts/training_checks.py prints the training mode's own checks (a tool here would
reach into a mode's modules), scripts/train_tiny_model.py trains the shipped model, and
scripts/perf_aggregate.py waits for the aggregate split.

- `machine`: what the machine did meanwhile (load average, busy CPU, the share others used), the
  tools' subprocess environment, the log line, the error exit, and a run's rows and their sums;
- `side_by_side`: optimum-benchmark 0.6.0 and `harness run` on one 12-point grid, alternating
  (`make side-by-side`);
- `optimum`: optimum-benchmark's side of it: its own venv, our model made readable to it, one
  timed grid run;
- `optimum_grid`: the grid runner that runs inside optimum-benchmark's venv (imports no harness);
- `side_by_side_vllm/`: vLLM's own benchmark and `harness measure` on the same points
  (`make side-by-side-vllm`): `parse`, `table`, `vllm_side`, `harness_side`, `run`;
- `serving_vs_offline`: serving at concurrency B against offline at batch B
  (`make serving-vs-offline`);
- `gpu_check`: the CUDA/ROCm path end to end on a GPU node (`make gpu-check`);
- `scaling`: Ray overhead, the same sweep on 1 and 2 simulated nodes (scripts/scaling.py);
- `perf_plan`: the speed of `harness plan` on a real-model grid (`make perf`);
- `as_other_provider`: a run folder rewritten as if another node had measured it
  (scripts/as_other_provider.py).
"""
