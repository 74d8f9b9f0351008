"""The formats table in docs/guide/formats.md lists every weight format with its bits (scales
included), the cards whose tensor units run it and its engine, as the capability rows say."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.spec import catalog
from harness.spec.capabilities import WEIGHT_FORMATS

DOC = Path(__file__).resolve().parents[2] / "docs" / "guide" / "formats.md"


def doc_rows() -> dict[str, str]:
    rows = {}
    for line in DOC.read_text().splitlines():
        if line.startswith("| `"):
            name = line.split("`")[1]
            rows.setdefault(name, line)
    return rows


def test_every_weight_format_has_a_row() -> None:
    assert set(WEIGHT_FORMATS) <= set(doc_rows())


@pytest.mark.parametrize(
    ("name", "bits", "written"),
    [
        # hand: NVFP4 4 + 8/16, MXFP4 4 + 8/32, block FP8 8 + 32/16384, W4A16 4 + 16/128
        ("nvfp4", 4.5, "= 4.5"),
        ("mxfp4", 4.25, "= 4.25"),
        ("fp8-block", 8 + 32 / 16384, "= 8.002"),
        ("w4a16", 4.125, "= 4.125"),
        ("gptq-int4", 4.3125, "= 4.3125"),
    ],
)
def test_the_bits_written_are_the_rows_bits(name: str, bits: float, written: str) -> None:
    assert WEIGHT_FORMATS[name].bits_per_weight == pytest.approx(bits)
    assert written in doc_rows()[name]


@pytest.mark.parametrize("flavour", ["nvfp4", "mxfp4"])
def test_the_fp4_rows_name_every_card_with_those_tensor_units(flavour: str) -> None:
    cards = [g.name for g in catalog.gpus().values() if flavour in g.fp4_flavours]
    assert cards and all(card in doc_rows()[flavour] for card in cards)


def test_each_row_names_its_engines() -> None:
    rows = doc_rows()
    for name, fmt in WEIGHT_FORMATS.items():
        assert all(engine in rows[name] for engine in fmt.engines()), name
