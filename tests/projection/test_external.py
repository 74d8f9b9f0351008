"""The external CSV: read strictly, one-line errors naming file, line and column; rows on cards
the catalog lacks or with values in unknown columns skipped and counted (refused with --strict);
hostile input (non-ASCII digits, a huge file, quoted newlines, conflicting duplicates)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UserInputError
from harness.projection import ledger
from harness.projection.external import MAX_BYTES, parse_external, read_external

HEAD = (
    "gpu,gpus,engine,engine_version,model,weights,batch,input_tokens,output_tokens,e2e_s,source\n"
)
ROW = "H100,1,vllm,0.6,meta-llama/Llama-2-7b-hf,fp16,16,128,128,2.5,paper\n"


def refusal(text: str, strict: bool = False) -> str:
    with pytest.raises(UserInputError) as caught:
        parse_external(text, "x.csv", strict)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400
    return message


def test_a_valid_row_is_read_with_the_catalog_name_of_its_card() -> None:
    read = parse_external(HEAD + ROW, "x.csv")
    (row,) = read.rows
    assert row.gpu == "H100-SXM-80GB" and row.load == 16 and row.e2e_s == 2.5 and row.line == 2
    assert read.skipped == [] and row.scenario == "static"


@pytest.mark.parametrize(
    ("row", "field"),
    [
        (ROW.replace(",16,", ",0,"), "batch"),
        (ROW.replace(",2.5,", ",nan,"), "e2e_s"),
        (ROW.replace(",2.5,", ",,"), "output_tok_s"),  # no figure at all
        (ROW.replace(",paper", ","), "source"),
        (ROW.replace(",16,", ",1²,"), "batch"),  # str.isdigit says yes, int() says ValueError
        (ROW.replace(",16,", ",١٦,"), "batch"),  # Arabic-Indic digits
        (ROW.replace(",2.5,", ",٢.٥,"), "e2e_s"),  # float() would read them
        (ROW.replace(",2.5,", ",1_0,"), "e2e_s"),
        (ROW.replace(",2.5,", ",1e999,"), "e2e_s"),  # inf
    ],
)
def test_a_bad_cell_is_one_line_naming_the_file_line_and_column(row: str, field: str) -> None:
    assert refusal(HEAD + row).startswith(f"x.csv:2: {field}: expected ")


def test_a_row_on_a_card_the_catalog_lacks_is_skipped_and_counted() -> None:
    text = HEAD + ROW + ROW.replace("H100", "TPU").replace("16,", "1,", 1) * 2
    read = parse_external(text, "x.csv")
    assert [r.line for r in read.rows] == [2]
    assert [(s.line, s.reason) for s in read.skipped] == [
        (3, "card 'TPU' not in the catalog"),
        (4, "card 'TPU' not in the catalog"),
    ]
    assert read.skipped_text() == "2 rows skipped: 2 card 'TPU' not in the catalog (first line 3)"
    assert refusal(text, strict=True).startswith("x.csv:3: gpu: unknown GPU 'TPU'")


def test_an_unknown_column_skips_the_rows_that_fill_it_and_strict_refuses_it() -> None:
    head = HEAD.replace("source\n", "source,tp_size\n")
    text = head + ROW.replace("\n", ",\n") + ROW.replace("\n", ",4\n").replace("16", "8", 1)
    read = parse_external(text, "x.csv")
    assert [r.line for r in read.rows] == [2]  # its tp_size cell is empty: nothing unknown
    assert [(s.line, s.reason) for s in read.skipped] == [
        (3, "a value in unknown column 'tp_size'")
    ]
    assert refusal(text, strict=True).startswith("x.csv:1: unknown column 'tp_size'")


def test_a_quoted_cell_over_two_lines_keeps_the_next_rows_line_number() -> None:
    quoted = ROW.replace(",paper", ',"paper,\nsecond line"')  # lines 2 and 3
    # the bad row starts on line 4 of the file (the third record)
    assert refusal(HEAD + quoted + ROW.replace(",2.5,", ",x,")).startswith("x.csv:4: e2e_s:")
    read = parse_external(HEAD + quoted + ROW.replace("16", "8", 1), "x.csv")
    assert [r.line for r in read.rows] == [2, 4]


def test_conflicting_duplicates_are_refused_naming_both_lines() -> None:
    message = refusal(HEAD + ROW + ROW + ROW.replace(",2.5,", ",3.5,"))
    assert message.startswith("x.csv:4: the same measurement as line 2 with other figures")
    assert "2.5" in message and "3.5" in message


def test_the_same_figures_twice_are_read_once() -> None:
    read = parse_external(HEAD + ROW + ROW + ROW, "x.csv")
    assert [r.line for r in read.rows] == [2]
    assert read.skipped_text() == (
        "2 rows skipped: 2 the same measurement as an earlier row (first line 3)"
    )


def test_engine_version_is_part_of_the_key() -> None:
    # the same card, model and load under two engine versions: two measurements, no conflict,
    # and no pair between them in the ledger
    other = ROW.replace(",0.6,", ",0.7,").replace(",2.5,", ",2.0,")
    h200 = ROW.replace("H100", "H200").replace(",2.5,", ",2.0,")
    read = parse_external(HEAD + ROW + other + h200, "x.csv")
    assert len(read.rows) == 3 and read.rows[0].key != read.rows[1].key
    pairs = ledger.leave_one_card_out(ledger.observations(read.rows))
    # only the 0.6 rows pair up: H100 ↔ H200, both directions
    assert {(e.source, e.target) for e in pairs} == {
        ("H100-SXM-80GB", "H200-141GB"), ("H200-141GB", "H100-SXM-80GB"),
    }  # fmt: skip


OFFLINE_HEAD = "gpu,gpus,engine,engine_version,model,weights,scenario,input_tokens,output_tokens,"
OFFLINE_HEAD += "output_tok_s,tpot_ms,source\n"


def test_an_offline_row_needs_no_batch_or_lengths_and_only_output_tok_s() -> None:
    row = "H100,1,tensorrt,10.2,m/a,fp8,offline,,,3000,,mlperf\n"
    (read,) = parse_external(OFFLINE_HEAD + row, "x.csv").rows
    assert (read.scenario, read.load, read.input_tokens, read.output_tok_s) == (
        "offline", 0, None, 3000.0,
    )  # fmt: skip
    assert read.stack == "tensorrt 10.2 (offline)"
    bad = row.replace("3000,,", "3000,12,")
    assert refusal(OFFLINE_HEAD + bad).startswith("x.csv:2: tpot_ms: expected no value")
    assert refusal(OFFLINE_HEAD + row.replace("offline", "burst")).startswith(
        "x.csv:2: scenario: expected one of static, offline, server"
    )


def test_a_static_row_still_needs_its_lengths() -> None:
    row = "H100,1,vllm,0.6,m/a,fp16,static,,128,100,,s\n"
    assert refusal(OFFLINE_HEAD.replace("scenario,", "scenario,batch,") + row.replace(
        "static,", "static,1,"
    )).startswith("x.csv:2: input_tokens: expected a value")  # fmt: skip


def test_a_file_over_the_limit_is_refused_by_its_size_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    huge = tmp_path / "huge.csv"
    with huge.open("wb") as handle:
        handle.truncate(3 * 2**30)  # a sparse 3 GiB file: no disk used
    monkeypatch.setattr(Path, "open", lambda *a, **k: pytest.fail("the file was opened"))
    monkeypatch.setattr(Path, "read_bytes", lambda *a, **k: pytest.fail("the file was read"))
    with pytest.raises(UserInputError, match=r"huge.csv: larger than 32 MiB"):
        read_external(huge)
    assert MAX_BYTES == 32 * 2**20


def test_a_file_just_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    with path.open("wb") as handle:
        handle.truncate(MAX_BYTES + 1)
    with pytest.raises(UserInputError, match="larger than 32 MiB"):
        read_external(path)


def test_the_shipped_argonne_extract_reads() -> None:
    read = read_external("harness/data/external/argonne/results.csv")
    assert len(read.rows) == 2478 and read.skipped == []  # 2454 static + 24 TTFT rows (README)
    assert {r.gpu for r in read.rows} == {
        "A100-SXM-80GB", "H100-SXM-80GB", "GH200-96GB", "MI250-GCD", "MI300X",
    }  # fmt: skip


def test_the_shipped_mlperf_extract_reads_and_counts_the_cards_the_catalog_lacks() -> None:
    read = read_external("harness/data/external/mlperf/results.csv")
    # 64 rows (README): 40 on catalog cards, 24 on cards it lacks today (B200, GB200, …)
    assert len(read.rows) + len(read.skipped) == 64 and len(read.rows) >= 40
    assert all(s.reason.startswith("card ") for s in read.skipped)
    assert {"H100-SXM-80GB", "H200-141GB", "MI300X", "MI325X"} <= {r.gpu for r in read.rows}
    assert {r.scenario for r in read.rows} == {"offline", "server"}
    assert all(r.source.startswith("mlcommons/inference_results_v") for r in read.rows)
