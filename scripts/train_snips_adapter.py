"""Train the SNIPS LoRA adapter of the shipped tiny model with the harness's own training mode.

    .venv/bin/python scripts/train_snips_adapter.py [--scenario S] [--run DIR] [--out DIR]

Runs ``harness measure`` on ``scenarios/examples/snips-adapter.yaml`` (one LoRA training point
with ``save_adapter: true``), then copies the adapter it saved (``<run>/adapters/<key>/``) to
``harness/data/adapters/tiny-llama-snips/`` (its README.md is kept) and prints the row's losses
and time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEEP = "README.md"  # the shipped folder's model card (recipe and measured figures), kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(REPO / "scenarios/examples/snips-adapter.yaml"))
    parser.add_argument("--run", default="results/snips-adapter")
    parser.add_argument("--out", default=str(REPO / "harness/data/adapters/tiny-llama-snips"))
    args = parser.parse_args()
    started = time.perf_counter()
    harness = [sys.executable, "-m", "harness.cli.main"]
    subprocess.run([*harness, "measure", args.scenario, "--out", args.run], check=True)
    seconds = time.perf_counter() - started
    saved = sorted(Path(args.run, "adapters").glob("*/adapter_config.json"))
    if len(saved) != 1:
        print(f"expected one saved adapter under {args.run}/adapters, found {len(saved)}")
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in saved[0].parent.iterdir():  # the folder's own README.md stays, not peft's card
        if path.name != KEEP:
            shutil.copy2(path, out / path.name)
    row = json.loads(next(Path(args.run, "points").glob("*.json")).read_text())
    print(
        json.dumps(
            {
                "adapter": str(out),
                "wall_s": round(seconds, 1),
                "train_s": row.get("train_s"),
                "steps": row.get("train_steps"),
                "loss_first_nats_per_token": row.get("loss_first"),
                "loss_last_nats_per_token": row.get("loss_last"),
                "eval_loss_start_nats_per_token": row.get("eval_loss_start"),
                "eval_loss_nats_per_token": row.get("eval_loss"),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
