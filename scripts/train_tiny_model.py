"""Train the tiny Llama shipped in harness/data/tiny-llama/ (scenarios call it ``id: tiny-llama``).

Recipe (CPU, two threads, a few minutes):
- byte-level BPE tokenizer trained with ``tokenizers`` on wiki.valid.raw, vocab 4,096, specials
  ``<pad> <s> </s> <unk>`` = ids 0-3, saved as a ``PreTrainedTokenizerFast``; no special token is
  added on encode and decoding does not clean up spaces, so text round-trips exactly;
- LlamaConfig(hidden 256, intermediate 768, 4 layers, 4 heads, 2 KV heads, tied embeddings),
  float32, about 4.2 M parameters (16.8 MB as safetensors);
- AdamW (lr 3e-3, betas 0.9/0.95, weight decay 0.1 on matrices only), 30 linear warm-up steps then
  cosine to 10 % of the peak, gradient clipping at 1.0, batch 16 x 256 tokens sampled at random
  offsets of the wiki.valid.raw tokens from a seeded generator.

``--steps N`` trains exactly N steps: given the seed and N the weights are deterministic (on the
same CPU type, library versions and thread count). ``--minutes M`` (used when --steps is not given)
times the first warm-up steps, fixes the step count that fits M minutes, and trains that many; the
warm-up does not depend on the step count, so ``--steps <recorded steps>`` reproduces such a run.

The model is written to a temporary directory next to the target and renamed into place only when
complete (config, weights, tokenizer, training.json with the recipe, steps, seconds, final loss,
the wiki.test perplexity and library versions, and a README with the data attribution).

Usage: .venv/bin/python scripts/train_tiny_model.py --steps 400
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

from harness import corpus  # noqa: E402

VOCAB = 4096
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0, 1, 2, 3
SEQ = 256
BATCH = 16
LR = 3e-3
WARMUP = 30
MIN_LR_FRACTION = 0.10
WEIGHT_DECAY = 0.1
EVAL_WINDOWS = 256
TIMING_STEPS = 10  # --minutes: steps timed before the step count is fixed (all inside the warm-up)

MODEL_CARD = """\
# tiny-llama

A 4.2 M-parameter Llama trained in a few minutes on two CPU cores by
`scripts/train_tiny_model.py`, so that the harness's default bench, examples and tests have a real
model with real quality numbers without a GPU or a model hub. It is a test instrument, not a
useful language model. Training facts (steps, seconds, loss, perplexity, versions):
`training.json`.

Tokenizer and weights were trained only on `wiki.valid.raw` (WikiText-2 raw, validation split); the
perplexity corpus `wiki.test.raw` shares no paragraph with it.

Training data attribution: WikiText-2 (raw) by Stephen Merity, Caiming Xiong, James Bradbury and
Richard Socher (Salesforce Research), from "Pointer Sentinel Mixture Models", arXiv:1609.07843
(2016). Text extracted from verified Good and Featured articles of the English Wikipedia,
(c) Wikipedia contributors. Licensed under CC BY-SA 3.0
(https://creativecommons.org/licenses/by-sa/3.0/). See `harness/data/corpus/LICENSES.md`.
"""


def train_tokenizer(text: str) -> Any:
    """Byte-level BPE on ``text`` wrapped as a PreTrainedTokenizerFast (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)
    for i, name in enumerate(SPECIALS):
        if tok.token_to_id(name) != i:
            raise RuntimeError(f"special token {name} got id {tok.token_to_id(name)}, wanted {i}")
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
        model_max_length=2048,
    )


def portable_tokenizer_class(path: Path) -> None:
    """Name the tokenizer class ``PreTrainedTokenizerFast``, which every transformers release
    (4.x included, as in some engine containers) resolves; 5.x writes its own class name."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config.pop("backend", None)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def lr_at(step: int, total: int) -> float:
    """Linear warm-up over WARMUP steps, then cosine from LR down to MIN_LR_FRACTION * LR."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = min(1.0, (step - WARMUP) / max(1, total - WARMUP))
    return LR * (MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * progress)))


def perplexity(model: Any, token_ids: list[int], max_windows: int | None) -> tuple[float, int]:
    """exp(mean NLL) over the first ``max_windows`` non-overlapping SEQ-token windows."""
    import torch

    all_windows = corpus.windows(token_ids, SEQ, None)
    chosen = all_windows if max_windows is None else all_windows[:max_windows]
    total_nll = 0.0
    count = 0
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(chosen), BATCH):
            ids = torch.tensor(chosen[start : start + BATCH], dtype=torch.long)
            logits = model(input_ids=ids).logits[:, :-1].float()
            nll = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum"
            )
            total_nll += float(nll)
            count += ids[:, 1:].numel()
    return math.exp(total_nll / count), len(chosen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="train exactly this many steps")
    parser.add_argument("--minutes", type=float, default=6.0, help="wall budget if no --steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--out", type=Path, default=REPO / "harness" / "data" / "tiny-llama", help="model dir"
    )
    parser.add_argument(
        "--full-eval", action="store_true", help="also record the PPL over all test windows"
    )
    args = parser.parse_args()

    import numpy as np
    import safetensors
    import tokenizers
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    t_start = time.perf_counter()
    with corpus.CALIBRATION_FILE.open(encoding="utf-8", newline="") as handle:
        train_text = handle.read()
    tokenizer = train_tokenizer(train_text)
    train_ids = torch.tensor(
        tokenizer(train_text, add_special_tokens=False, verbose=False)["input_ids"],
        dtype=torch.long,
    )
    print(f"tokenizer: {len(tokenizer)} tokens, {train_ids.numel():,} training tokens", flush=True)

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        dtype="float32",
    )
    model = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    model.to(torch.float32)  # type: ignore[arg-type]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params:,} parameters", flush=True)

    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": WEIGHT_DECAY},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=LR,
        betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(args.seed)
    n_starts = train_ids.numel() - SEQ + 1

    total = args.steps if args.steps is not None else None
    losses: list[float] = []
    model.train()
    t_train = time.perf_counter()
    step = 0
    while total is None or step < total:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total if total is not None else 10**9)
        starts = torch.randint(0, n_starts, (BATCH,), generator=gen)
        batch = torch.stack([train_ids[s : s + SEQ] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.detach().item())
        step += 1
        if total is None and step == TIMING_STEPS:
            per_step = (time.perf_counter() - t_train) / TIMING_STEPS
            budget = args.minutes * 60 - (time.perf_counter() - t_start)
            total = max(WARMUP + 1, TIMING_STEPS + int(budget / per_step))
            print(f"--minutes {args.minutes}: {per_step:.2f} s/step, training {total} steps")
        if step % 25 == 0 or step == total:
            elapsed = time.perf_counter() - t_train
            print(f"step {step}/{total} loss {losses[-1]:.3f} ({elapsed:.0f} s)", flush=True)
    train_seconds = time.perf_counter() - t_train

    test_ids = tokenizer(corpus.eval_text(), add_special_tokens=False, verbose=False)["input_ids"]
    ppl, n_windows = perplexity(model, test_ids, EVAL_WINDOWS)
    print(f"wiki.test PPL over the first {n_windows} windows of {SEQ}: {ppl:.2f}", flush=True)
    facts: dict[str, Any] = {
        "steps": step,
        "seconds": round(train_seconds, 1),
        "final_loss": round(losses[-1], 4),
        "final_loss_mean_last_10": round(sum(losses[-10:]) / len(losses[-10:]), 4),
        "seed": args.seed,
        "threads": args.threads,
        "params": n_params,
        "recipe": {
            "batch": BATCH,
            "seq": SEQ,
            "lr": LR,
            "warmup_steps": WARMUP,
            "min_lr_fraction": MIN_LR_FRACTION,
            "weight_decay": WEIGHT_DECAY,
            "betas": [0.9, 0.95],
            "grad_clip": 1.0,
            "sampling": "random offsets into wiki.valid.raw tokens, torch.Generator(seed)",
        },
        "train_file": corpus.CALIBRATION_FILE.name,
        "train_tokens": train_ids.numel(),
        "test_file": corpus.EVAL_FILE.name,
        "test_tokens": len(test_ids),
        "corpus_hash": corpus.corpus_hash(),
        "test_ppl": round(ppl, 3),
        "test_ppl_windows": n_windows,
        "test_ppl_window_tokens": SEQ,
        "test_ppl_selection": f"the first {n_windows} non-overlapping windows",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "safetensors": safetensors.__version__,
            "numpy": np.__version__,
        },
    }
    if args.full_eval:
        ppl_all, n_all = perplexity(model, test_ids, None)
        print(f"wiki.test PPL over all {n_all} windows of {SEQ}: {ppl_all:.2f}", flush=True)
        facts["test_ppl_all_windows"] = round(ppl_all, 3)
        facts["test_ppl_all_windows_count"] = n_all

    out: Path = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "training.json").write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(MODEL_CARD, encoding="utf-8")
        portable_tokenizer_class(tmp / "tokenizer_config.json")
        tmp.chmod(0o755)
        for path in tmp.iterdir():
            path.chmod(0o644)
        old = out.with_name(f".{out.name}.old")
        if old.exists():
            shutil.rmtree(old)
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = sum(f.stat().st_size for f in out.iterdir())
    print(
        f"saved {out} ({size / 2**20:.1f} MiB): " + ", ".join(sorted(p.name for p in out.iterdir()))
    )
    print(json.dumps(facts, indent=2))


if __name__ == "__main__":
    main()
