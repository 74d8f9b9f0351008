"""The fine-tuning text, its contiguous train/eval split, and the micro-batches of each step.

Files under ``harness/data/train/`` (byte-identical to upstream, licences in ``LICENSES.md``).
The text is tokenized whole (no special tokens) and split at one cut: the eval block is the last
``eval_fraction`` of the tokens, the train block everything before (contiguous blocks, no
shuffling across the cut). Step s, micro-batch m takes the train block's windows in order
(wrapping round at its end), so a step's data depends only on its index: a resumed run reads
exactly the data the uninterrupted one would have.

``snips`` is made of examples, not one text: each SNIPS item of the tasks' TRAIN split
(``harness.tasks.builtin.snips_split("train")``, items 40-99 of each intent, disjoint from the
scored 10-39 and the few-shot 0-9) rendered by the tasks' own templates, once per built-in task
(intent, slots): ``render_prompt`` + ``render_target`` + a newline (the scorer cuts a generation
there; ``snips-intent``: the intent task alone). The prompt's tokens are fed but never
predicted (``prompt_tokens``): the loss is the answer's. Items are interleaved across intents
(item 40 of each intent, then 41, ...), so every step sees every intent; the eval rows are the
few-shot split (items 0-9), rendered the same way.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness import corpus
from harness.modes.training.spec import EXAMPLE_DATA
from harness.tasks.builtin import SNIPS_TASKS, builtin_task, snips_split
from harness.tasks.spec import BuiltinTask, TaskItem, render_prompt, render_target

DATA_DIR: Path = Path(__file__).resolve().parents[2] / "data" / "train"
FILES: dict[str, Path] = {"tinyshakespeare": DATA_DIR / "tinyshakespeare.txt"}
EXAMPLES = EXAMPLE_DATA  # data made of (prompt, answer) examples, not one text
ANSWER_END = "\n"  # after each answer: where the scorer cuts a generation
# the built-in tasks each example set renders every item with
EXAMPLE_TASKS: dict[str, tuple[BuiltinTask, ...]] = {
    "snips": SNIPS_TASKS,
    "snips-intent": ("snips-intent",),
}


def interleaved(items: list[TaskItem]) -> list[TaskItem]:
    """Items round-robin across their categories (the first of each, then the second, ...)."""
    by: dict[str, list[TaskItem]] = {}
    for item in items:
        by.setdefault(item.category, []).append(item)
    longest = max((len(v) for v in by.values()), default=0)
    return [v[i] for i in range(longest) for v in by.values() if i < len(v)]


def examples(split: Literal["train", "fewshot"], name: str = "snips") -> list[tuple[str, str]]:
    """(prompt, answer) pairs of a SNIPS split, each item once per task of the example set."""
    tasks = [builtin_task(task) for task in EXAMPLE_TASKS[name]]
    return [
        (render_prompt(task, item), render_target(task, item) + ANSWER_END)
        for item in interleaved(snips_split(split))
        for task in tasks
    ]


def text(name: str) -> str:
    if name in EXAMPLES:  # the rendered train examples (leakage reads text)
        return "".join(p + a for p, a in examples("train", name))
    with FILES[name].open(encoding="utf-8", newline="") as handle:
        return handle.read()


@functools.cache
def data_hash(name: str) -> str:
    """First 16 hex digits of the sha256 of the file's bytes (of an example set: its rendered
    train text)."""
    raw = text(name).encode() if name in EXAMPLES else FILES[name].read_bytes()
    return hashlib.sha256(raw).hexdigest()[:16]


def split_point(n_tokens: int, eval_fraction: float) -> int:
    """Index of the first eval token: the last ⌈n × eval_fraction⌉ tokens are the eval block."""
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    return n_tokens - math.ceil(n_tokens * eval_fraction)


def split_text(name: str, eval_fraction: float) -> tuple[str, str]:
    """The train and eval blocks as text, cut at the same share of the characters (for the
    leakage check, which reads text, not tokens)."""
    if name in EXAMPLES:
        return text(name), "".join(p + a for p, a in examples("fewshot", name))
    whole = text(name)
    cut = split_point(len(whole), eval_fraction)
    return whole[:cut], whole[cut:]


@dataclass(frozen=True)
class Split:
    train: list[int]
    eval: list[int]

    def micro_batches(
        self, step: int, micro_batch: int, grad_accum: int, seq_len: int
    ) -> list[list[list[int]]]:
        """The `grad_accum` micro-batches of `micro_batch` windows of `seq_len` tokens of step
        `step` (0-based): consecutive windows of the train block, wrapping round at its end."""
        per_step = micro_batch * grad_accum
        n_windows = len(self.train) // seq_len
        if n_windows < 1:
            raise ValueError(f"the train block has {len(self.train)} tokens, fewer than {seq_len}")
        out: list[list[list[int]]] = []
        for m in range(grad_accum):
            rows = []
            for b in range(micro_batch):
                w = (step * per_step + m * micro_batch + b) % n_windows
                rows.append(self.train[w * seq_len : (w + 1) * seq_len])
            out.append(rows)
        return out

    def eval_windows(self, seq_len: int, max_windows: int) -> list[list[int]]:
        """Non-overlapping eval windows of `seq_len` tokens, evenly spread over the eval block."""
        return corpus.windows(self.eval, seq_len, max_windows)


def tokenize(tokenizer_dir: str, name: str) -> list[int]:
    """The whole text tokenized (no special tokens), cached on disk as
    ``<cache_dir>/tokens/train-<data_hash>-<tokenizer_hash>.npy`` (int32, written atomically)."""
    return corpus.tokenize_cached(tokenizer_dir, f"train-{data_hash(name)}", lambda: text(name))


def load_split(tokenizer_dir: str, train_name: str, eval_name: str, eval_fraction: float) -> Split:
    """Train and eval blocks: one text cut once, or (two texts) each text whole for its role."""
    if train_name in EXAMPLES or eval_name in EXAMPLES:
        return load_examples(tokenizer_dir, train_name, eval_name)
    if train_name == eval_name:
        ids = tokenize(tokenizer_dir, train_name)
        cut = split_point(len(ids), eval_fraction)
        return Split(train=ids[:cut], eval=ids[cut:])
    return Split(train=tokenize(tokenizer_dir, train_name), eval=tokenize(tokenizer_dir, eval_name))


def prompt_tokens(ids: list[int]) -> list[int]:
    """A prompt's ids as a row stores them: ``-1 - id`` (fed to the model, never predicted)."""
    return [-1 - t for t in ids]


@dataclass(frozen=True)
class ExampleSplit(Split):
    """Rows of (prompt, answer) examples: ``train`` and ``eval`` hold every row's tokens end to
    end (for the counts a row reports); ``rows`` and ``eval_rows`` the rows themselves."""

    rows: tuple[tuple[int, ...], ...] = ()
    eval_rows: tuple[tuple[int, ...], ...] = ()

    def micro_batches(
        self, step: int, micro_batch: int, grad_accum: int, seq_len: int
    ) -> list[list[list[int]]]:
        """The step's micro-batches of whole examples in order (wrapping round), each cut to
        `seq_len` tokens."""
        per_step = micro_batch * grad_accum
        n = len(self.rows)
        return [
            [
                list(self.rows[(step * per_step + m * micro_batch + b) % n][:seq_len])
                for b in range(micro_batch)
            ]
            for m in range(grad_accum)
        ]

    def eval_windows(self, seq_len: int, max_windows: int) -> list[list[int]]:
        """The first `max_windows` eval examples, each cut to `seq_len` tokens."""
        return [list(r[:seq_len]) for r in self.eval_rows[:max_windows]]


def encode_examples(tokenizer_dir: str, pairs: list[tuple[str, str]]) -> list[tuple[int, ...]]:
    """Each (prompt, answer) as one row: the prompt's ids masked, then the answer's (each text
    tokenized on its own, as the scorer tokenizes a context and its continuation)."""
    tokenizer = corpus.load_tokenizer(tokenizer_dir)

    def ids(s: str) -> list[int]:
        return list(tokenizer(s, add_special_tokens=False, verbose=False)["input_ids"])

    return [tuple(prompt_tokens(ids(p)) + ids(a)) for p, a in pairs]


def load_examples(tokenizer_dir: str, train: str = "snips", eval_: str = "snips") -> ExampleSplit:
    """The SNIPS train rows of `train` and the few-shot split's rows of `eval_` as eval."""
    rows = encode_examples(tokenizer_dir, examples("train", train))
    held = encode_examples(tokenizer_dir, examples("fewshot", eval_))
    return ExampleSplit(train=fed(rows), eval=fed(held), rows=tuple(rows), eval_rows=tuple(held))


def fed(rows: list[tuple[int, ...]]) -> list[int]:
    """Every row's ids as the model is fed them, end to end (prompt tokens unmasked)."""
    return [-1 - t if t < 0 else t for r in rows for t in r]


def clip_ids(ids: list[int], vocab_size: int) -> list[int]:
    """Ids below the model's vocabulary (a borrowed tokenizer on a random-weights model)."""
    top = vocab_size - 1
    return [min(t, top) for t in ids]
