"""Train ``tiny-llama-retrieval`` (harness/data/tiny-llama-retrieval/): the shipped tiny Llama
continued on generated long-context retrieval tasks mixed with text, so that the long-context
quality tasks (``harness.tasks.longctx``) have a model here that can find a needle.

Recipe (CPU, one thread by default: the machine is shared):
- start from harness/data/tiny-llama (same tokenizer, same 4.2 M-parameter Llama), its position
  limit raised to 4,096 (RoPE, no new weights);
- each step: a batch of about 2,048 tokens (4,096 for the 4k steps) of generated items, every
  family of ``harness.tasks.longctx.FAMILIES`` (multi-key items carry every key's question, so one
  context gives four answers), haystack half WikiText (wiki.valid.raw, never the test file) and
  half noise; context lengths follow a curriculum 256-512, 512-1k, 1k-2k, 2k-4k over the steps;
- loss: mean next-token NLL over the text plus mean NLL over the answer tokens;
- AdamW lr 2e-3, 30 warm-up steps then cosine to 10 %, weight decay 0.1, grad clip 1.0;
- training seeds from ``base.TRAIN_SEED_START`` on (evaluation seeds lie below it; the range used
  is recorded in training.json, where the leak report reads it).

Afterwards: held-out exact match per family at 1k and 4k on evaluation seeds (WikiText test
haystack), and wiki.test perplexity on 256-token windows as for the tiny model.

Usage: .venv/bin/python scripts/train_retrieval_model.py --minutes 38
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
from harness.tasks.longctx import FAMILIES, multi_key  # noqa: E402
from harness.tasks.longctx.base import TRAIN_SEED_START, LongItem  # noqa: E402

BASE = REPO / "harness" / "data" / "tiny-llama"
MAX_POSITIONS = 4096
BATCH_TOKENS = 2048
LR = 2e-3
WARMUP = 30
MIN_LR_FRACTION = 0.10
WEIGHT_DECAY = 0.1
TIMING_STEPS = 10
FAMILY_WEIGHTS = {"single_needle": 0.4, "multi_key": 0.4, "variable_tracking": 0.1,
                  "frequent_words": 0.1}  # fmt: skip
CURRICULUM = ((0.30, (256, 512)), (0.55, (512, 1024)), (0.75, (1024, 2048)), (1.0, (2048, 4096)))
EVAL_LENGTHS = (1024, 4096)
EVAL_ITEMS = 20  # per family and length, depths spread evenly over 0..1
CHECKPOINT_EVERY = 100

MODEL_CARD = """\
# tiny-llama-retrieval

The shipped `tiny-llama` (4.2 M parameters, same tokenizer) continued on generated long-context
retrieval tasks (`harness.tasks.longctx`: single needle, multiple keys with decoys, variable
tracking, frequent words) mixed with WikiText, on one CPU thread by
`scripts/train_retrieval_model.py`. A test instrument for the long-context quality gate, not a
useful language model. Contexts, steps, training time, held-out exact match per family and
context, the seed range trained on and the perplexity: `training.json`.

Haystack text came only from `wiki.valid.raw`; evaluation items use `wiki.test.raw` and seeds below
the training range (the leak report checks a task's seeds against `train_seed_range`).

Training data attribution: WikiText-2 (raw) by Stephen Merity, Caiming Xiong, James Bradbury and
Richard Socher (Salesforce Research), from "Pointer Sentinel Mixture Models", arXiv:1609.07843
(2016), (c) Wikipedia contributors, CC BY-SA 3.0. See `harness/data/corpus/LICENSES.md`.
"""


def lr_at(step: int, total: int) -> float:
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = min(1.0, (step - WARMUP) / max(1, total - WARMUP))
    return LR * (MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * progress)))


def lengths_at(step: int, total: int) -> tuple[int, int]:
    progress = step / max(1, total)
    for until, pair in CURRICULUM:
        if progress < until:
            return pair
    return CURRICULUM[-1][1]


def training_sequence(item: LongItem, encode: Any) -> tuple[list[int], list[int]]:
    """(token ids, answer mask) of one training item: the context, then each question with its
    prefix and answer (multi-key: every key's)."""
    qa = ([(q, p, a) for q, p, a in multi_key.decoy_questions(item)]
          if item.family == multi_key.NAME
          else [(item.question, item.prefix, item.answer)])  # fmt: skip
    ids = encode(item.context)
    mask = [0] * len(ids)
    for question, prefix, answer in qa:
        head = encode(question + prefix)
        tail = encode(answer)
        ids += head + tail
        mask += [0] * len(head) + [1] * len(tail)
    return ids, mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--minutes", type=float, default=38.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--eval-items", type=int, default=EVAL_ITEMS)
    parser.add_argument("--init", type=Path, default=BASE, help="weights to continue from")
    parser.add_argument(
        "--max-context",
        type=int,
        default=MAX_POSITIONS,
        help="the curriculum's longest context (tokens)",
    )
    parser.add_argument("--batch-tokens", type=int, default=BATCH_TOKENS)
    parser.add_argument("--note", default="", help="recorded in training.json")
    parser.add_argument(
        "--prior-steps",
        type=int,
        default=0,
        help="steps of earlier runs this one continues (recorded)",
    )
    parser.add_argument(
        "--prior-seconds",
        type=float,
        default=0.0,
        help="training seconds of earlier runs this one continues (recorded)",
    )
    parser.add_argument(
        "--seed-offset",
        type=int,
        default=0,
        help="first training seed = TRAIN_SEED_START + this (past an earlier run's)",
    )
    parser.add_argument("--out", type=Path,
                        default=REPO / "harness" / "data" / "tiny-llama-retrieval")  # fmt: skip
    args = parser.parse_args()

    import numpy as np
    import safetensors
    import tokenizers
    import torch
    import transformers
    from transformers import AutoTokenizer, LlamaForCausalLM

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(BASE)
    tokenizer.model_max_length = MAX_POSITIONS

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def count(text: str) -> int:
        return len(encode(text))

    model = LlamaForCausalLM.from_pretrained(args.init, dtype=torch.float32)
    model.config.max_position_embeddings = MAX_POSITIONS
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY},
         {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.95),
    )  # fmt: skip
    rng = random.Random(args.seed)
    families = list(FAMILY_WEIGHTS)
    weights = [FAMILY_WEIGHTS[f] for f in families]
    next_seed = TRAIN_SEED_START + args.seed_offset

    def batch_at(step: int, total: int) -> tuple[Any, Any, Any]:
        nonlocal next_seed
        length = min(args.max_context, rng.choice(lengths_at(step, total)))
        rows = max(1, args.batch_tokens // length)
        seqs = []
        for _ in range(rows):
            family = rng.choices(families, weights)[0]
            kind = "text" if rng.random() < 0.5 else "noise"
            item = FAMILIES[family](next_seed, length, rng.random(), kind, "train", count)
            next_seed += 1
            seqs.append(training_sequence(item, encode))
        width = max(len(ids) for ids, _ in seqs)
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        ans = torch.zeros(len(seqs), width, dtype=torch.bool)
        keep = torch.zeros(len(seqs), width, dtype=torch.bool)
        for row, (seq, mask) in enumerate(seqs):
            ids[row, : len(seq)] = torch.tensor(seq)
            ans[row, : len(seq)] = torch.tensor(mask, dtype=torch.bool)
            keep[row, : len(seq)] = True
        return ids, ans, keep

    def step_loss(ids: Any, ans: Any, keep: Any) -> tuple[Any, float]:
        logits = model(input_ids=ids, attention_mask=keep.long()).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        ).view(ids.shape[0], -1)
        target_ans, target_keep = ans[:, 1:], keep[:, 1:]
        text = target_keep & ~target_ans
        lm = (nll * text).sum() / text.sum().clamp(min=1)
        answer = (nll * target_ans).sum() / target_ans.sum().clamp(min=1)
        return lm + answer, float(answer)

    t_start = time.perf_counter()
    total = args.steps
    model.train()
    step = 0
    log: list[dict[str, float]] = []
    ckpt = args.out.with_name(f".{args.out.name}.checkpoint")
    while total is None or step < total:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total if total is not None else 10**9)
        ids, ans, keep = batch_at(step, total if total is not None else 10**9)
        loss, answer_nll = step_loss(ids, ans, keep)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        log.append({"step": step, "loss": float(loss), "answer_nll": answer_nll,
                    "length": float(ids.shape[1])})  # fmt: skip
        if total is None and step == TIMING_STEPS:
            per_step = (time.perf_counter() - t_start) / TIMING_STEPS
            # later steps are longer on average (4k steps carry 4,096 tokens): x1.15
            total = max(WARMUP + 1, int(args.minutes * 60 / (per_step * 1.15)))
            print(f"{per_step:.2f} s/step at the start: training {total} steps", flush=True)
        if step % 10 == 0:
            recent = log[-10:]
            print(f"step {step}/{total} loss {sum(r['loss'] for r in recent) / 10:.3f} "
                  f"answer {sum(r['answer_nll'] for r in recent) / 10:.3f} len {ids.shape[1]} "
                  f"({time.perf_counter() - t_start:.0f} s)", flush=True)  # fmt: skip
        if step % CHECKPOINT_EVERY == 0:
            model.save_pretrained(ckpt, safe_serialization=True)
    train_seconds = time.perf_counter() - t_start
    train_seed_range = [TRAIN_SEED_START, next_seed]

    model.train(False)
    eval_lengths = [n for n in EVAL_LENGTHS if n <= args.max_context] or [args.max_context]
    if args.max_context < EVAL_LENGTHS[0] or args.max_context < EVAL_LENGTHS[-1]:
        eval_lengths = [args.max_context // 2, args.max_context]
    t_eval = time.perf_counter()
    held_out: dict[str, dict[str, Any]] = {}
    with torch.inference_mode():
        for family, make in FAMILIES.items():
            for length in eval_lengths:
                hits = 0
                for i in range(args.eval_items):
                    depth = i / max(1, args.eval_items - 1)
                    item = make(i, length, depth, "text", "eval", count)
                    prompt = torch.tensor([encode(item.prompt())])
                    n_new = count(item.answer) + 1
                    made: Any = model.generate(  # type: ignore[misc]
                        prompt, max_new_tokens=n_new, do_sample=False, pad_token_id=0
                    )
                    text = str(tokenizer.decode(made[0, prompt.shape[1] :]))
                    words = tuple(text.replace(".", " ").split()[: len(item.gold)])
                    hits += words == item.gold
                held_out.setdefault(family, {})[str(length)] = {
                    "exact_match": round(hits / args.eval_items, 4),
                    "items": args.eval_items,
                }
                print(f"held-out {family} at {length}: {hits}/{args.eval_items}", flush=True)
    eval_seconds = time.perf_counter() - t_eval

    test_ids = encode(corpus.eval_text())
    windows = corpus.windows(test_ids, 256, None)[:256]
    total_nll, n_tok = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(windows), 16):
            ids = torch.tensor(windows[start : start + 16])
            logits = model(input_ids=ids).logits[:, :-1].float()
            total_nll += float(
                torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum"
                )
            )
            n_tok += ids[:, 1:].numel()
    ppl = math.exp(total_nll / n_tok)
    facts: dict[str, Any] = {
        "base": "tiny-llama", "steps": step + args.prior_steps,
        "seconds": round(train_seconds + args.prior_seconds, 1),
        "eval_seconds": round(eval_seconds, 1), "threads": args.threads, "seed": args.seed,
        "params": sum(p.numel() for p in model.parameters()),
        "final_loss_mean_last_10": (round(sum(r["loss"] for r in log[-10:]) / 10, 4)
                                    if log else None),
        "final_answer_nll_mean_last_10": (round(sum(r["answer_nll"] for r in log[-10:]) / 10, 4)
                                          if log else None),
        "max_position_embeddings": MAX_POSITIONS,
        "recipe": {"batch_tokens": args.batch_tokens, "lr": LR, "warmup_steps": WARMUP,
                   "min_lr_fraction": MIN_LR_FRACTION, "weight_decay": WEIGHT_DECAY,
                   "family_weights": FAMILY_WEIGHTS, "curriculum": CURRICULUM,
                   "haystack": "half wiki.valid.raw text, half noise"},
        "train_seed_range": train_seed_range,
        "held_out": held_out, "held_out_lengths": eval_lengths,
        "init": str(args.init.name), "max_context": args.max_context, "note": args.note,
        "held_out_selection": "evaluation seeds 0..items-1, depths spread evenly, text haystack "
                              "from wiki.test.raw, greedy generation, exact match on the words",
        "test_ppl": round(ppl, 3), "test_ppl_windows": len(windows), "test_ppl_window_tokens": 256,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "safetensors": safetensors.__version__, "numpy": np.__version__},
    }  # fmt: skip
    out: Path = args.out.resolve()
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for name in ("tokenizer_config.json", "tokenizer.json"):
            shutil.copy(BASE / name, tmp / name)
        (tmp / "training.json").write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(MODEL_CARD, encoding="utf-8")
        tmp.chmod(0o755)
        for path in tmp.iterdir():
            path.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(ckpt, ignore_errors=True)
    print(json.dumps(facts, indent=2))


if __name__ == "__main__":
    main()
