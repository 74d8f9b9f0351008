"""`harness ledger` as a group: the default command (fit) with its hostile cases (--out on a
folder, nothing to compare, skipped rows, --strict), and `harness ledger check` on a hand-made
ledger and held-out CSV, by hand."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app

HEAD = (
    "gpu,gpus,engine,engine_version,model,weights,batch,input_tokens,output_tokens,tpot_ms,source\n"
)
# batch 1: 100 tok/s on the H100, 130 on the H200, 60 on the A100 (tests/projection/test_check)
ROWS = (
    "H100-SXM-80GB,1,vllm,x,m/a,fp16,1,128,128,10,s\n"
    "H200-141GB,1,vllm,x,m/a,fp16,1,128,128,7.6923076923,s\n"
    "A100-SXM-80GB,1,vllm,x,m/a,fp16,1,128,128,16.6666666667,s\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["ledger", *args])
    return result.exit_code, result.output


def test_out_on_a_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    code, output = invoke(str(write(tmp_path, "x.csv", HEAD + ROWS)), "--out", str(tmp_path))
    assert code == 2
    (line,) = output.strip().splitlines()
    assert line == f"error: {tmp_path}: --out: is a folder: expected a file to write the CSV to"


def test_a_file_with_no_key_on_two_cards_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", HEAD + ROWS.splitlines(keepends=True)[0])
    code, output = invoke("fit", str(path))
    assert code == 0
    assert "no key is measured on two cards or more (cards: H100-SXM-80GB)" in output


def test_every_card_left_out_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", HEAD + ROWS)
    code, output = invoke(str(path), "--exclude", "H100", "--exclude", "H200", "--exclude", "A100")
    assert code == 0
    assert "every card is left out (A100-SXM-80GB, H100-SXM-80GB, H200-141GB)" in output


def test_rows_on_unknown_cards_are_counted_and_strict_refuses_them(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", HEAD + ROWS + "TPU,1,vllm,x,m/a,fp16,1,128,128,5,s\n")
    code, output = invoke(str(path))
    assert code == 0
    assert "1 row skipped: 1 card 'TPU' not in the catalog (first line 5)" in output
    code, output = invoke(str(path), "--strict")
    assert code == 2 and output.startswith(f"error: {path}:5: gpu: unknown GPU 'TPU'")


def check_rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as handle:
        return {r["klass"]: r for r in csv.DictReader(handle)}


def test_check_scores_a_held_out_csv_against_a_ledger_fitted_on_a_file(tmp_path: Path) -> None:
    # the ledger: fitted on the same three cards, one key (fewer than the 9 a band needs), so
    # every pair gets no band and the check says why; MAPE and τ as tests/projection/test_check
    ledger_path = write(tmp_path, "mine.csv", HEAD + ROWS)
    out = tmp_path / "check.csv"
    held_out = write(tmp_path, "held.csv", HEAD + ROWS)
    code, output = invoke("check", str(held_out), "--ledger", str(ledger_path), "--out", str(out))
    assert code == 0, output
    assert "6 pairs got no band. 6: no validated band: measure it" in output
    line = check_rows(out)["all"]
    # 6 pairs, none banded; MAPE 38.9663 / 6 = 6.4944 %; τ 1 over one key
    assert (line["ledger"], line["pairs"], line["banded"]) == ("mine.csv", "6", "0")
    assert line["coverage_pct"] == "" and float(line["unbanded_pct"]) == 100.0
    assert float(line["mape_pct"]) == pytest.approx(6.49440, rel=1e-5)
    assert float(line["tau"]) == pytest.approx(1.0)


def test_check_with_an_unknown_ledger_is_one_line_and_exit_2(tmp_path: Path) -> None:
    code, output = invoke("check", str(write(tmp_path, "h.csv", HEAD + ROWS)), "--ledger", "x")
    assert code == 2 and len(output.strip().splitlines()) == 1
    assert "no shipped ledger 'x'" in output and "argonne" in output


def test_check_runs_a_ledger_fitted_on_the_mlperf_extract(tmp_path: Path) -> None:
    out = tmp_path / "check.csv"
    mlperf = "harness/data/external/mlperf/results.csv"
    code, output = invoke("check", mlperf, "--ledger", mlperf, "--out", str(out))
    assert code == 0, output
    line = check_rows(out)["all"]
    # 52 pairs on the catalog's cards today (more once it has the B200, H200 NVL, …); the
    # ledger's own data: every pair lies inside its scope
    assert line["ledger"] == "results.csv" and int(line["pairs"]) >= 52
    assert "outside" not in output


def test_check_gives_no_band_to_rows_outside_the_ledgers_scope(tmp_path: Path) -> None:
    # Argonne's ledger is fitted on static batches: MLPerf's offline and server rows lie outside
    out = tmp_path / "check.csv"
    mlperf = "harness/data/external/mlperf/results.csv"
    code, output = invoke("check", mlperf, "--ledger", "argonne", "--out", str(out))
    assert code == 0, output
    assert "outside shipped Argonne's data: scenario offline (its data: static)" in output
    line = check_rows(out)["all"]
    assert (line["ledger"], line["banded"], float(line["unbanded_pct"])) == (
        "shipped Argonne", "0", 100.0,
    )  # fmt: skip
