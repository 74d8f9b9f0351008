"""Leakage: n-gram overlap between what a model saw and what it is scored on."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.modes.training import leakage
from harness.modes.training.leakage import Text


def test_a_planted_duplicate_is_found_and_counted() -> None:
    _, evals = leakage.shipped_texts([("tinyshakespeare", 0.1)])
    eval_block = next(e for e in evals if "tinyshakespeare" in e.name)
    planted = eval_block.text[5000:5600]  # a passage of the eval block, copied into a seen text
    clean = Text("clean", "seen", "the quick brown fox jumps over the lazy dog " * 50)
    dirty = Text("dirty", "seen", clean.text + "\n" + planted)
    found = {o.seen: o for o in leakage.overlaps([clean, dirty], [eval_block])}
    assert found["clean"].shared == 0
    expected = len(leakage.ngrams(planted) & leakage.ngrams(eval_block.text))
    assert found["dirty"].shared == expected >= 50
    assert found["dirty"].overlap == pytest.approx(expected / found["dirty"].eval_ngrams)


def test_shorter_than_n_words_shares_nothing_and_case_does_not_matter() -> None:
    assert leakage.ngrams("one two three", 13) == set()
    words = " ".join(f"w{i}" for i in range(13))
    assert (
        leakage.ngrams(words.upper()) == leakage.ngrams(words) and len(leakage.ngrams(words)) == 1
    )


def test_the_shipped_texts_do_not_overlap_their_eval_texts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    seen, evals = leakage.shipped_texts([("tinyshakespeare", 0.1)])
    table = leakage.cached_overlaps(seen, evals)
    assert len(table) == len(seen) * len(evals) == 6
    assert all(row["shared"] == 0 for row in table), table  # measured: no shared 13-gram
    cached = list((tmp_path / "leakage").glob("*.json"))
    assert len(cached) == 1 and leakage.cached_overlaps(seen, evals) == table
