"""The shipped corpus: what every quality and timing measurement reads.

Files (under ``harness/data/corpus/``, byte-identical to upstream, licences in ``LICENSES.md``):

- ``wiki.test.raw``  WikiText-2 raw test split: the perplexity corpus (``EVAL_FILE``).
- ``wiki.valid.raw`` WikiText-2 raw validation split: calibration text for quantizers and the
  training text of the shipped tiny model (``CALIBRATION_FILE``); it shares no paragraph with the
  test split (only generic section headings such as `` = = Reception = = ``).
- ``arc_easy.jsonl`` ARC-Easy test, 2,376 four-way multiple-choice items (``ARC_FILE``), read
  as the shipped ``arc-easy`` task by ``harness.tasks.arc``.

Text is read as UTF-8 with ``newline=""`` so that no line ending is ever translated: the bytes
that are hashed are the bytes that are tokenized. ``corpus_hash()`` goes into every result.

Nothing here imports torch, and ``tokenizers`` / ``transformers`` are imported only inside the
functions that need them, so planning and aggregation run where no engine is installed.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness.atomic import atomic_write_bytes

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

CORPUS_DIR: Path = Path(__file__).resolve().parent / "data" / "corpus"
EVAL_FILE: Path = CORPUS_DIR / "wiki.test.raw"
CALIBRATION_FILE: Path = CORPUS_DIR / "wiki.valid.raw"
ARC_FILE: Path = CORPUS_DIR / "arc_easy.jsonl"

# Files whose bytes define a tokenizer; whichever of them a model directory has are hashed.
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
)


def _read_text(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as handle:
        return handle.read()


@functools.cache
def corpus_hash() -> str:
    """First 16 hex digits of a sha256 over the eval file and the ARC file.

    Each file contributes its name, its length and its bytes, so the hash changes whenever either
    file changes by a single byte (a line-ending conversion included).
    """
    digest = hashlib.sha256()
    for path in (EVAL_FILE, ARC_FILE):
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def eval_text() -> str:
    """The whole WikiText-2 raw test split, exactly as shipped (no newline translation)."""
    return _read_text(EVAL_FILE)


def calibration_texts(n: int, min_chars: int = 200) -> list[str]:
    """The first ``n`` paragraphs of ``wiki.valid.raw`` with at least ``min_chars`` characters.

    A paragraph is one line of the file, stripped of its surrounding whitespace; blank lines and
    headings (`` = Title = ``) are skipped. The validation split shares no paragraph with the
    eval text, so calibrating a quantizer on these does not leak into perplexity. Deterministic.
    """
    if n < 1:
        raise ValueError(f"calibration_texts: n must be at least 1, got {n}")
    paragraphs: list[str] = []
    for line in _read_text(CALIBRATION_FILE).splitlines():
        text = line.strip()
        if not text or text.startswith("="):
            continue
        if len(text) >= min_chars:
            paragraphs.append(text)
            if len(paragraphs) == n:
                return paragraphs
    raise ValueError(
        f"calibration_texts: asked for {n} paragraphs of at least {min_chars} characters, but "
        f"{CALIBRATION_FILE.name} has only {len(paragraphs)}; ask for fewer or lower min_chars"
    )


def evenly_spaced(total: int, n: int | None) -> list[int]:
    """Indices of ``n`` items spread evenly over ``total``: ``round(i * total / n)`` for i < n.

    All ``range(total)`` when ``n`` is None or not smaller than ``total``. The indices are distinct
    and increasing, start at 0 and stay below ``total``.
    """
    if n is None or n >= total:
        return list(range(total))
    if n < 1:
        raise ValueError(f"the number of items to take must be at least 1, got {n}")
    return [round(i * total / n) for i in range(n)]


def windows(
    token_ids: Sequence[int], window_tokens: int, max_windows: int | None
) -> list[list[int]]:
    """Cut ``token_ids`` into non-overlapping windows of exactly ``window_tokens`` tokens.

    Window ``k`` is ``token_ids[k * window_tokens : (k + 1) * window_tokens]``; the ragged tail
    that does not fill a window is dropped. With ``total`` full windows and ``max_windows``
    smaller than ``total``, the windows with indices ``round(i * total / max_windows)`` for
    ``i = 0 .. max_windows - 1`` are kept: a deterministic subset spread evenly over the whole
    corpus (not its first pages only), in corpus order. ``max_windows=None`` keeps all of them.
    """
    if window_tokens < 1:
        raise ValueError(f"windows: window_tokens must be at least 1, got {window_tokens}")
    if max_windows is not None and max_windows < 1:
        raise ValueError(f"windows: max_windows must be at least 1 or None, got {max_windows}")
    total = len(token_ids) // window_tokens
    return [
        list(token_ids[k * window_tokens : (k + 1) * window_tokens])
        for k in evenly_spaced(total, max_windows)
    ]


def prompt_windows(token_ids: Sequence[int], batch: int, context: int) -> list[list[int]]:
    """``batch`` distinct prompts of exactly ``context`` real-text tokens, for timing.

    Row ``i`` starts at offset ``i * (N - context + 1) // batch`` of the ``N`` eval tokens, so the
    rows start at different places and share no prefix (a prefix cache cannot short-cut them).
    When the corpus is too short for that (``N - context + 1 < batch``), the tokens are read as a
    ring instead: row ``i`` starts at ``i * N // batch`` and wraps from the end to the beginning.
    Deterministic; raises when there are fewer tokens than rows.
    """
    n_tokens = len(token_ids)
    if batch < 1 or context < 1:
        raise ValueError(f"prompt_windows: batch and context must be >= 1, got {batch}, {context}")
    if n_tokens < batch:
        raise ValueError(
            f"prompt_windows: {n_tokens} tokens cannot give {batch} distinct prompts; "
            "use a longer corpus or a smaller batch"
        )
    span = n_tokens - context + 1
    if span >= batch:
        starts = [i * span // batch for i in range(batch)]
        return [list(token_ids[s : s + context]) for s in starts]
    ring = list(token_ids)
    repeats = -(-(n_tokens + context) // n_tokens)  # enough copies for any start below n_tokens
    ring = ring * repeats
    starts = [i * n_tokens // batch for i in range(batch)]
    return [ring[s : s + context] for s in starts]


def load_tokenizer(model_dir: str) -> PreTrainedTokenizerBase:
    """The tokenizer saved in ``model_dir`` (a local directory; the hub is never contacted)."""
    from transformers import AutoTokenizer

    tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
        model_dir, local_files_only=True
    )
    return tokenizer


def tokenizer_hash(model_dir: str) -> str:
    """First 16 hex digits of a sha256 over the tokenizer files in ``model_dir`` (and the version
    of ``tokenizers`` that will apply them): the tokenizer's identity for caches."""
    import tokenizers

    root = Path(model_dir)
    digest = hashlib.sha256(f"tokenizers=={tokenizers.__version__}\0".encode())
    found = False
    for name in _TOKENIZER_FILES:
        path = root / name
        if path.is_file():
            data = path.read_bytes()
            digest.update(f"{name}\0{len(data)}\0".encode())
            digest.update(data)
            found = True
    if not found:
        raise FileNotFoundError(
            f"no tokenizer files in {root} (looked for {', '.join(_TOKENIZER_FILES)})"
        )
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """``$HARNESS_CACHE_DIR``, else ``$XDG_CACHE_HOME/harness``, else ``~/.cache/harness``."""
    explicit = os.environ.get("HARNESS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "harness"


def tokenize_eval(model_dir: str) -> list[int]:
    """The whole eval text tokenized once by ``model_dir``'s tokenizer, no special tokens added.

    Cached on disk as ``<cache_dir>/tokens/<corpus_hash>-<tokenizer_hash>.npy`` (int32), keyed by
    both the corpus and the tokenizer's identity, and written atomically (temp file, rename).
    """
    return tokenize_cached(model_dir, corpus_hash(), eval_text)


def tokenize_cached(model_dir: str, text_key: str, text: Callable[[], str]) -> list[int]:
    """``text()`` tokenized by ``model_dir``'s tokenizer (no special tokens), cached as
    ``<cache_dir>/tokens/<text_key>-<tokenizer_hash>.npy`` (int32, written atomically); the text
    is read only when the cache has no entry. ``text_key`` must change whenever the text does."""
    import numpy as np

    path = cache_dir() / "tokens" / f"{text_key}-{tokenizer_hash(model_dir)}.npy"
    if path.is_file():
        try:
            cached: list[int] = np.load(path, allow_pickle=False).tolist()
            return cached
        except (OSError, ValueError):
            path.unlink(missing_ok=True)  # a damaged cache entry: rebuild it

    tokenizer = load_tokenizer(model_dir)
    ids: list[int] = list(tokenizer(text(), add_special_tokens=False, verbose=False)["input_ids"])
    array = np.asarray(ids, dtype=np.int32)  # numpy refuses ids that do not fit

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    atomic_write_bytes(path, buffer.getvalue())
    return ids
