"""Text columns of few phrases (harness.results.frame.Phrases): chosen, joined and made a
column through a table of phrases, with the values and the dtype a column of Python strings
would have had (the gate's verdict and reason columns, built this way for `make perf`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.results.frame import Phrases, joined_phrases


def test_a_column_of_phrases_is_the_string_column_of_its_texts() -> None:
    phrases = Phrases(np.array([2, 0, 1, 2]), ("pass", "fail", "undecided"))
    inferred = pd.Series(["undecided", "pass", "fail", "undecided"])
    assert pd.Series(phrases.column()).equals(inferred)  # same values, same (str) dtype
    assert phrases.is_("undecided").tolist() == [True, False, False, True]


def test_where_takes_each_side_and_map_changes_the_table_only() -> None:
    base = Phrases.of(["", "no ppl", "", "no ref"])
    cause = Phrases.constant("unpaired", 4).where(base.is_("") & np.array([1, 1, 0, 0], bool), base)
    assert cause.texts().tolist() == ["unpaired", "no ppl", "", "no ref"]
    clause = cause.map(lambda t: f"ppl: {t}" if t else "")
    assert clause.texts().tolist() == ["ppl: unpaired", "ppl: no ppl", "", "ppl: no ref"]


def test_joined_phrases_skip_the_empty_ones_and_keep_the_order() -> None:
    ppl = Phrases.flag(np.array([1, 0, 1, 0]), "ppl")
    tasks = Phrases.flag(np.array([1, 1, 0, 0]), "tasks")
    joined = joined_phrases([ppl, tasks], ", ")
    assert joined.texts().tolist() == ["ppl, tasks", "tasks", "ppl", ""]
    # 2 × 2 combinations, 4 present: each joined once
    assert sorted(joined.table) == ["", "ppl", "ppl, tasks", "tasks"]


def test_joined_phrases_of_wide_tables_join_what_each_row_holds() -> None:
    n = 70_000  # 70,000 × 70,000 combinations: past the counting range, joined by sorting
    first = Phrases.of([f"a{i}" for i in range(n)])
    second = Phrases.of([f"b{i}" for i in range(n)])
    joined = joined_phrases([first, second], "; ")
    assert joined.texts()[[0, 69_999]].tolist() == ["a0; b0", "a69999; b69999"]


def test_no_rows_and_no_parts_give_empty_columns() -> None:
    assert len(Phrases.constant("x", 0).column()) == 0
    assert len(joined_phrases([], ", ")) == 0
