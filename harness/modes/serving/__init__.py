"""Serving mode: a real `vllm serve` per configuration, driven by vLLM's own load generator
(`vllm bench serve`), its per-request data turned into typed per-level records with SLO
attainment and goodput. Roles of the files: see `harness.modes.base`.

- `spec`, `points`, `plan`, `price`, `report`: the serving block and the serving types (a length
  distribution, the SLO targets, a load, a level: stated once, read by every file here), its
  points, their plan, the level at the SLO priced per package, the report's serving charts.
- `device/server`   the server process: start on a free port in its own process group, health check,
             stop the whole group (SIGTERM, then SIGKILL), its log's last lines on failure.
- `prompts`  a level's prompts: token slices of the shipped corpus (or a workload's prompt
             ids) decoded with the model's tokenizer, written as the generator's dataset.
- `device/loadgen`  one `vllm bench serve` run per load level, its JSON parsed into a
             `LevelResult`.
- `search`   the highest load that meets the SLO: bracket, then bisect, the stopping rule and
             the plan's worst case (pure; the device's probe loop is in `device/run`).
- `slo`      the SLO rule (on `spec.SloTargets`) and the pure figures: per-request attainment,
             goodput, saturation across levels, the level chosen at the SLO.
- `device/vllm_cli`  `python -m harness.modes.serving.device.vllm_cli ...` = the `vllm` command.

Nothing here imports vLLM, torch or an engine at module level: the engine runs in child
processes only.
"""
