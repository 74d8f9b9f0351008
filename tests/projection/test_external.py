"""The external CSV: read strictly, one-line errors naming file, line and column."""

from __future__ import annotations

import pytest

from harness.errors import UserInputError
from harness.projection.external import parse_external, read_external

HEAD = (
    "gpu,gpus,engine,engine_version,model,weights,batch,input_tokens,output_tokens,e2e_s,source\n"
)
ROW = "H100,1,vllm,0.6,meta-llama/Llama-2-7b-hf,fp16,16,128,128,2.5,paper\n"


def test_a_valid_row_is_read_with_the_catalog_name_of_its_card() -> None:
    (row,) = parse_external(HEAD + ROW, "x.csv")
    assert row.gpu == "H100-SXM-80GB" and row.load == 16 and row.e2e_s == 2.5 and row.line == 2


@pytest.mark.parametrize(
    ("row", "field"),
    [
        (ROW.replace(",16,", ",0,"), "batch"),
        (ROW.replace(",2.5,", ",nan,"), "e2e_s"),
        (ROW.replace(",2.5,", ",,"), "output_tok_s"),  # no figure at all
        (ROW.replace("H100", "H900"), "gpu"),
        (ROW.replace(",paper", ","), "source"),
    ],
)
def test_a_bad_cell_is_one_line_naming_the_file_line_and_column(row: str, field: str) -> None:
    with pytest.raises(UserInputError) as caught:
        parse_external(HEAD + row, "x.csv")
    text = str(caught.value)
    assert text.startswith(f"x.csv:2: {field}: ") and "\n" not in text and len(text) < 400


def test_an_unknown_column_is_refused_on_the_header_line() -> None:
    with pytest.raises(UserInputError, match=r"x.csv:1: unknown column 'gpu_name'"):
        parse_external(HEAD.replace("gpu,", "gpu_name,", 1) + ROW, "x.csv")


def test_the_shipped_argonne_extract_reads() -> None:
    rows = read_external("harness/data/external/argonne/results.csv")
    assert len(rows) == 2478  # 2454 static-batch rows + 24 TTFT rows (README of the extract)
    assert {r.gpu for r in rows} == {
        "A100-SXM-80GB", "H100-SXM-80GB", "GH200-96GB", "MI250-GCD", "MI300X",
    }  # fmt: skip
