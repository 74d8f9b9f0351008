"""harness.cli.projection: `harness ledger` on a tiny external CSV written here (two cards, one
key), its CSV by hand, a card left out, and bad input as one line with exit 2."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.cli.projection import sources

HEAD = (
    "gpu,gpus,engine,engine_version,model,weights,batch,input_tokens,output_tokens,tpot_ms,source\n"
)
# batch 1: tpot 10 ms → 100 tok/s on the H100, 7.6923 ms → 130 tok/s on the H200
ROWS = (
    "H100-SXM-80GB,1,vllm,x,m/a,fp16,1,128,128,10,repo@abc file.md\n"
    "H200-141GB,1,vllm,x,m/a,fp16,1,128,128,7.6923076923,https://example.org/b\n"
)


def external(tmp_path: Path, text: str = HEAD + ROWS) -> Path:
    path = tmp_path / "ext.csv"
    path.write_text(text, encoding="utf-8")
    return path


def ledger_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_ledger_of_two_cards_by_hand(tmp_path: Path) -> None:
    out = tmp_path / "ledger.csv"
    result = CliRunner().invoke(app, ["ledger", str(external(tmp_path)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Projection ledger (leave one card out): ext.csv" in result.output
    assert f"written: {out}" in result.output
    rows = ledger_rows(out)
    lines = {(r["phase"], r["klass"]): r for r in rows if r["table"] == "ledger"}
    assert set(lines) == {
        ("decode", "nvidia → nvidia"),
        ("decode", "same vendor"),
        ("decode", "all"),
    }
    line = lines[("decode", "all")]
    # H100 → H200: 100 × 4,800 / 3,350 = 143.2836 against 130: 10.2181 %;
    # H200 → H100: 130 × 3,350 / 4,800 = 90.7292 against 100: 9.2708 %; mean 9.7445 %
    assert (line["pairs"], line["keys"]) == ("2", "1")
    assert float(line["mape_pct"]) == pytest.approx(9.74449, rel=1e-5)
    assert line["tau"] == ""  # Kendall τ needs a key on 3 cards or more
    pairs = {(r["pair_source"], r["pair_target"]): r for r in rows if r["table"] == "pair"}
    assert list(pairs) == [("H100-SXM-80GB", "H200-141GB"), ("H200-141GB", "H100-SXM-80GB")]
    assert float(pairs[("H100-SXM-80GB", "H200-141GB")]["pair_mape_pct"]) == pytest.approx(
        10.21814, rel=1e-5
    )
    assert float(pairs[("H200-141GB", "H100-SXM-80GB")]["pair_mape_pct"]) == pytest.approx(
        9.27083, rel=1e-5
    )
    assert {r["data_source"] for r in rows} == {"https://example.org/b; repo@abc"}


def test_a_card_left_out_leaves_no_pair(tmp_path: Path) -> None:
    out = tmp_path / "ledger.csv"
    args = ["ledger", str(external(tmp_path)), "--exclude", "H200", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "without H200-141GB" in result.output  # the alias read as its catalog name
    assert out.read_text() == "table,data_source\n"  # no line, no pair: the header alone


def test_a_bad_row_is_one_line_naming_file_line_and_column_with_exit_2(tmp_path: Path) -> None:
    path = external(tmp_path, HEAD + ROWS.replace("7.6923076923", "fast"))
    out = tmp_path / "ledger.csv"
    result = CliRunner().invoke(app, ["ledger", str(path), "--out", str(out)])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    expected = "tpot_ms: expected a finite number > 0 (ASCII digits), got 'fast'"
    assert line == f"error: {path}:3: {expected}"
    assert not out.exists()  # nothing written


def test_an_unknown_card_to_leave_out_is_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["ledger", str(external(tmp_path)), "--exclude", "H999"])
    assert result.exit_code == 2 and "H999" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_sources_are_the_first_word_of_each_distinct_source() -> None:
    from harness.projection.external import parse_external

    assert sources(parse_external(HEAD + ROWS).rows) == "https://example.org/b; repo@abc"
