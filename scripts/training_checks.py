"""The training checks on the shipped tiny model (CPU, seeded), with their figures printed:

- accumulation equivalence: micro_batch 4 × accumulation 1 against 1 × 4 on fixed windows, the
  max relative gradient difference (‖g_a − g_b‖ / ‖g_a‖, worst tensor) with equal-length windows
  and with padded ones, for a token-normalised loss and for a per-micro-batch mean;
- resume: 6 LoRA steps straight against 3 + save + resume + 3, with and without the optimizer's
  state: the largest loss difference over the resumed steps (nats/token).

    .venv/bin/python scripts/training_checks.py

The checks themselves are the training mode's (harness.modes.training.device.checks); this entry
point only prints their figures. It stays outside harness.peers: a tool there would reach into a
mode's modules, which only the mode's own files and the registry may do.
"""

from __future__ import annotations

import argparse

from harness.modes.training import data
from harness.modes.training.device import checks, trainer
from harness.modes.training.spec import TrainingPoint
from harness.spec import models

TINY = str(models.PACKAGE_DATA / "tiny-llama")


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    split = data.load_split(TINY, "tinyshakespeare", "tinyshakespeare", 0.1)
    full = TrainingPoint(method="full", micro_batch=4, grad_accum=1, seq_len=32, steps=1)
    model = trainer.load_model(TINY, full, "cpu", seed=0)
    same = [split.train[i * 32 : (i + 1) * 32] for i in range(4)]
    padded = [same[0], same[1][:20], same[2][:9], same[3][:27]]
    print(f"accumulation equivalence (tolerance {checks.ACCUMULATION_TOLERANCE:g}):")
    for name, sequences in (("equal lengths", same), ("padded", padded)):
        for norm in ("token", "micro-mean"):
            got = checks.accumulation_equivalence(model, sequences, normalisation=norm)
            verdict = "pass" if got.passed else "FAIL"
            print(f"  {name:13} {norm:10} max rel diff {got.max_rel_diff:.2e}  {verdict}")
    lora = TrainingPoint(method="lora", micro_batch=2, grad_accum=2, seq_len=32, steps=6, lr=1e-2)

    def batches(step: int) -> list[list[list[int]]]:
        return split.micro_batches(step, 2, 2, 32)

    print(f"resume after 3 of 6 steps (tolerance {checks.RESUME_TOLERANCE:g} nats/token):")
    for keep in (True, False):
        resumed = checks.resume_trajectory(TINY, lora, batches, stop_after=3, optimizer_state=keep)
        label = "with optimizer state" if keep else "without optimizer state"
        verdict = "pass" if resumed.passed else "FAIL"
        print(f"  {label:24} max |Δloss| {resumed.max_abs_diff:.2e}  {verdict}")


if __name__ == "__main__":
    main()
