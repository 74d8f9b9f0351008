"""The fine-tuning text, its contiguous train/eval split, and the micro-batches of each step.

Files under ``harness/data/train/`` (byte-identical to upstream, licences in ``LICENSES.md``).
The text is tokenized whole (no special tokens) and split at one cut: the eval block is the last
``eval_fraction`` of the tokens, the train block everything before (contiguous blocks, no
shuffling across the cut). Step s, micro-batch m takes the train block's windows in order
(wrapping round at its end), so a step's data depends only on its index: a resumed run reads
exactly the data the uninterrupted one would have.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

from harness import corpus

DATA_DIR: Path = Path(__file__).resolve().parents[2] / "data" / "train"
FILES: dict[str, Path] = {"tinyshakespeare": DATA_DIR / "tinyshakespeare.txt"}


def text(name: str) -> str:
    with FILES[name].open(encoding="utf-8", newline="") as handle:
        return handle.read()


@functools.cache
def data_hash(name: str) -> str:
    """First 16 hex digits of the sha256 of the file's bytes."""
    return hashlib.sha256(FILES[name].read_bytes()).hexdigest()[:16]


def split_point(n_tokens: int, eval_fraction: float) -> int:
    """Index of the first eval token: the last ⌈n × eval_fraction⌉ tokens are the eval block."""
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    return n_tokens - math.ceil(n_tokens * eval_fraction)


def split_text(name: str, eval_fraction: float) -> tuple[str, str]:
    """The train and eval blocks as text, cut at the same share of the characters (for the
    leakage check, which reads text, not tokens)."""
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
    if train_name == eval_name:
        ids = tokenize(tokenizer_dir, train_name)
        cut = split_point(len(ids), eval_fraction)
        return Split(train=ids[:cut], eval=ids[cut:])
    return Split(train=tokenize(tokenizer_dir, train_name), eval=tokenize(tokenizer_dir, eval_name))


def clip_ids(ids: list[int], vocab_size: int) -> list[int]:
    """Ids below the model's vocabulary (a borrowed tokenizer on a random-weights model)."""
    top = vocab_size - 1
    return [min(t, top) for t in ids]
