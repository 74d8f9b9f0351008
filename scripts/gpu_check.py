#!/usr/bin/env python3
"""`make gpu-check`: the CUDA (or ROCm) path end to end on a GPU node, with nothing downloaded.

What each check is, and the exit status: harness.peers.gpu_check. Run from the repository root
(scripts/gpu/node_check.sh does), where the harness need not be installed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from harness.peers.gpu_check import TINY_MODEL, Options, decode_tok_s, run

__all__ = ["decode_tok_s", "main", "parse_args"]  # decode_tok_s: tests/backends load it here


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", default=os.environ.get("OUT") or "results/gpu-check")
    parser.add_argument("--model", default=str(TINY_MODEL), help="the small model for (a)-(c)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32", "none"])
    parser.add_argument("--window-tokens", type=int, default=128)
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--k", type=int, default=5, help="top-k log-probs kept per position")
    parser.add_argument("--batches", default="1,64", help="batches for (e), comma-separated")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument(
        "--vllm-memory", type=float, default=0.4, help="vLLM gpu_memory_utilization"
    )
    parser.add_argument("--skip-8b", action="store_true", help="skip (e), the 8B architecture")
    parser.add_argument("--only", help="run just this step, e.g. vllm-fp8-kv")
    return Options(**vars(parser.parse_args(argv)))


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
