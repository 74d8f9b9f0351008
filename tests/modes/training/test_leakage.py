"""Leakage: n-gram overlap between what a model saw and what it is scored on."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.modes.training import leakage
from harness.modes.training.leakage import Text


def test_a_planted_duplicate_is_found_and_counted() -> None:
    eval_block = Text("eval", "eval", " ".join(f"e{i}" for i in range(200)))  # words e0 … e199
    planted = " ".join(f"e{i}" for i in range(50, 80))  # 30 of its words, copied into a seen text
    clean = Text("clean", "seen", "the quick brown fox jumps over the lazy dog " * 50)
    dirty = Text("dirty", "seen", clean.text + "\n" + planted)
    found = {o.seen: o for o in leakage.overlaps([clean, dirty], [eval_block])}
    assert found["clean"].shared == 0
    # 30 planted words hold 30 − 13 + 1 = 18 distinct 13-grams, all of the eval block's; the
    # 13-grams across the seam with the clean text are not the eval block's
    assert found["dirty"].shared == 18
    # the eval block's 200 words hold 200 − 13 + 1 = 188 distinct 13-grams
    assert found["dirty"].eval_ngrams == 188
    assert found["dirty"].overlap == pytest.approx(18 / 188)


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
