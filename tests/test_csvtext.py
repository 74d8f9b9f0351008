"""Every CSV the harness writes goes through harness.csvtext (issue 43, items 6 and 11): a text
cell a spreadsheet would run as a formula is neutralised, numbers stay numbers, list cells are
JSON, not Python's repr."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pandas as pd

from harness.cli.projection import ledger_csv
from harness.csvtext import csv_rows, csv_text


def read(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def test_a_list_cell_is_written_as_json() -> None:
    frame = pd.DataFrame({"model": ["a", "b"], "tasks": [["arc-easy", "snips"], ("x",)]})
    frame["lengths"] = [np.array([1, 2]), {"k": -1}]
    rows = read(csv_text(frame))
    assert rows[0] == ["model", "tasks", "lengths"]
    # json.dumps, not repr: double quotes, no tuple parentheses
    assert rows[1] == ["a", '["arc-easy", "snips"]', "[1, 2]"]
    assert rows[2] == ["b", '["x"]', '{"k": -1}']
    assert json.loads(rows[1][1]) == ["arc-easy", "snips"]


def test_every_formula_start_is_neutralised_and_negative_numbers_stay() -> None:
    text = csv_rows([["=HYPERLINK(1)", "+1", "-x", "@y", "\tz", "\rw", -2.5, -3, "ok"]])
    (row,) = read(text)
    # the CR (a row break to a spreadsheet, unquoted by the csv module) is written as a quoted LF
    assert row == ["'=HYPERLINK(1)", "'+1", "'-x", "'@y", "'\tz", "'\nw", "-2.5", "-3", "ok"]


def test_the_ledger_s_source_cell_never_reaches_a_spreadsheet_as_a_formula() -> None:
    text = ledger_csv([], [], '=HYPERLINK("http://evil","x")')
    (header,) = read(text)
    assert header == ["table", "data_source"]
    from harness.projection.ledger import LedgerLine  # a line of the ledger, by its fields

    fields = {name: None for name in LedgerLine.model_fields}
    line = LedgerLine.model_construct(**fields)
    rows = read(ledger_csv([line], [], '=HYPERLINK("http://evil","x")'))
    assert rows[1][-1] == '\'=HYPERLINK("http://evil","x")'
