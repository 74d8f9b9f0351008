"""Leakage: the n-gram overlap between every text a model or a quantizer saw and the texts it is
scored on (pure; no torch).

An n-gram is n consecutive words (lower-cased runs of letters and digits, as contamination
studies count them: 13 by default). For a pair (seen text, eval text): `shared` is the number of
distinct eval n-grams that also occur in the seen text, `eval_ngrams` the number of distinct
eval n-grams, `overlap` their ratio. Computed once per set of inputs (their hashes) and kept in
the cache; the run's manifest and its report carry the table.

Texts seen (source → role):
  tiny-llama pretraining    wiki.valid.raw: the shipped tiny model's whole training text
                            (scripts/train_tiny_model.py)
  gptq calibration          the 64 wiki.valid.raw paragraphs GPTQ calibrates on
                            (harness.backends.transformers, corpus.calibration_texts)
  fine-tuning train block   the train block of a training scenario's data (`data`)
  generator seeds           a shipped model's `train_seed_range` (training.json: the seeds of
                            the generated long-context items it was trained on), checked
                            against each long-context task's evaluation seeds (`seed_leaks`)
Texts scored: the inference eval corpus (wiki.test.raw), each training scenario's eval block, and
each task of the scenario (`quality: {tasks: [...]}`: its prompts and answers, every split), a
user's task file included: one that shares any n-gram with a text seen is warned about when the
run starts (`leaked_tasks`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import corpus
from harness.atomic import atomic_write_text
from harness.modes.training import data

NGRAM = 13
TASK_EVAL = "task "  # an eval text's name for a scored task: "task <name>"
GPTQ_CALIBRATION_SAMPLES = 64  # as harness.backends.transformers calibrates
_WORD = re.compile(r"\w+")


def ngrams(text: str, n: int = NGRAM) -> set[int]:
    """The distinct word n-grams of `text`, each as a stable 64-bit hash."""
    words = _WORD.findall(text.lower())
    out: set[int] = set()
    for i in range(len(words) - n + 1):
        gram = " ".join(words[i : i + n]).encode()
        out.add(int.from_bytes(hashlib.blake2b(gram, digest_size=8).digest(), "big"))
    return out


@dataclass(frozen=True)
class Text:
    name: str
    role: str  # "seen" | "eval"
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Overlap:
    seen: str
    eval: str
    n: int
    shared: int  # distinct eval n-grams also in the seen text
    eval_ngrams: int
    overlap: float  # shared / eval_ngrams
    seen_sha256: str
    eval_sha256: str


def overlaps(seen: Sequence[Text], evals: Sequence[Text], n: int = NGRAM) -> list[Overlap]:
    """Every (seen, eval) pair's overlap."""
    grams = {t.name: ngrams(t.text, n) for t in [*seen, *evals]}
    out = []
    for s in seen:
        for e in evals:
            shared = len(grams[s.name] & grams[e.name])
            total = len(grams[e.name])
            ratio = shared / total if total else 0.0
            out.append(Overlap(s.name, e.name, n, shared, total, ratio, s.sha256, e.sha256))
    return out


def shipped_texts(
    train_data: Iterable[tuple[str, float]] = (), tasks: Iterable[tuple[str, str]] = ()
) -> tuple[list[Text], list[Text]]:
    """(seen, eval) texts of this harness: the tiny model's pretraining text and GPTQ's
    calibration text against the eval corpus; each training data set's train block against its
    eval block (`train_data`: (name, eval_fraction) pairs); each scored task's text (`tasks`:
    (name, text) pairs, harness.tasks) against every text seen."""
    seen = [
        Text("tiny-llama pretraining (wiki.valid.raw)", "seen", _read(corpus.CALIBRATION_FILE)),
        Text(
            "gptq calibration (64 wiki.valid paragraphs)",
            "seen",
            "\n".join(corpus.calibration_texts(GPTQ_CALIBRATION_SAMPLES)),
        ),
    ]
    evals = [Text("eval corpus (wiki.test.raw)", "eval", corpus.eval_text())]
    for name, fraction in dict.fromkeys(train_data):
        train, held_out = data.split_text(name, fraction)
        seen.append(Text(f"fine-tuning train block ({name}, {1 - fraction:g})", "seen", train))
        evals.append(Text(f"fine-tuning eval block ({name}, {fraction:g})", "eval", held_out))
    evals += [Text(f"{TASK_EVAL}{name}", "eval", text) for name, text in dict.fromkeys(tasks)]
    return seen, evals


def _read(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as handle:
        return handle.read()


def cached_overlaps(
    seen: Sequence[Text], evals: Sequence[Text], n: int = NGRAM
) -> list[dict[str, object]]:
    """`overlaps`, computed once per set of inputs (their hashes) and kept in the cache."""
    ident = json.dumps([n, *((t.name, t.sha256) for t in [*seen, *evals])])
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    path = corpus.cache_dir() / "leakage" / f"{digest}.json"
    if path.is_file():
        try:
            cached: list[dict[str, object]] = json.loads(path.read_text())
            return cached
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
    found = [asdict(o) for o in overlaps(seen, evals, n)]
    atomic_write_text(path, json.dumps(found, indent=1))
    return found


def leaked_tasks(table: Sequence[dict[str, object]]) -> list[str]:
    """A line per (task, text seen) pair of a leakage table with shared n-grams: the warning a
    run prints when it starts (a task scored on text a model or quantizer saw)."""
    out = []
    for row in table:
        name, shared = str(row.get("eval", "")), row.get("shared")
        if name.startswith(TASK_EVAL) and isinstance(shared, int) and shared > 0:
            out.append(
                f"{name} shares {shared} of its {row.get('eval_ngrams')} distinct "
                f"{row.get('n')}-grams with {row.get('seen')} (overlap {row.get('overlap'):.3g}): "
                "its scores may be inflated by what the model saw"
            )
    return out


def trained_seed_ranges(data_dir: Path | None = None) -> dict[str, tuple[int, int]]:
    """Per shipped model (a folder of harness/data with a training.json recording
    ``train_seed_range``): the [start, end) generator seeds it was trained on."""
    root = data_dir or Path(__file__).resolve().parents[2] / "data"
    out: dict[str, tuple[int, int]] = {}
    for facts in sorted(root.glob("*/training.json")):
        try:
            seeds = json.loads(facts.read_text(encoding="utf-8")).get("train_seed_range")
        except (OSError, ValueError):
            continue
        if isinstance(seeds, list) and len(seeds) == 2:
            out[facts.parent.name] = (int(seeds[0]), int(seeds[1]))
    return out


def seed_leaks(
    task_seeds: Iterable[tuple[str, tuple[int, int]]],
    trained: dict[str, tuple[int, int]] | None = None,
) -> list[dict[str, object]]:
    """Per (long-context task, shipped model trained on generated items): the task's evaluation
    seeds [start, end), the model's training seeds, and how many they share (0: apart)."""
    ranges = trained_seed_ranges() if trained is None else trained
    out: list[dict[str, object]] = []
    for name, (start, end) in task_seeds:
        for model, (t_start, t_end) in ranges.items():
            shared = max(0, min(end, t_end) - max(start, t_start))
            out.append({"eval": f"{TASK_EVAL}{name}", "seen": f"{model} training seeds",
                        "eval_seeds": [start, end], "train_seeds": [t_start, t_end],
                        "shared": shared})  # fmt: skip
    return out


def leaked_seeds(table: Sequence[dict[str, object]]) -> list[str]:
    """A warning line per long-context task whose evaluation seeds a model was trained on."""
    return [
        f"{row['eval']} uses {row['shared']} generator seed(s) {row['seen']} used "
        f"(eval {row['eval_seeds']}, train {row['train_seeds']}): its items were trained on"
        for row in table
        if isinstance(row.get("shared"), int) and int(row["shared"]) > 0  # type: ignore[call-overload]
    ]
