"""What was measured beats what was planned (issue 43, item 1): a configuration measured on a
card is priced on that card even where the plan says it cannot fit there, and the projection says
the plan disagrees and by how much; each projection's fit includes what the configuration loads
beside the model (its draft's weights and KV under speculative decoding)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.plan import plan_point
from harness.plan.measured import measured_fit
from harness.projection import book, rent
from harness.spec import catalog

ROWS = Path(__file__).parents[2] / "results/example/h200-2026-11-29/gpu_rows.json"


def h200_row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {**json.loads(ROWS.read_text())[0], **changes}
    return row


def test_a_row_measured_on_a_card_the_plan_refuses_is_priced_there_saying_by_how_much() -> None:
    # a batch the plan cannot fit on the H200 (the KV cache alone is past the card), measured
    # there all the same at a peak of 100 GiB (102,400 MiB)
    row = h200_row(batch=4096, context=8192, peak_mib_decode=102_400.0)
    card = catalog.gpu("H200-141GB")
    got = rent.project_row(row, card, book.shipped_books())
    planned = plan_point(rent.point_on(row, card), card)
    assert not planned.fits  # the planner's verdict, which the measurement overrules
    assert got.label == rent.MEASURED and got.fits and got.usable
    gap = planned.total_gib - 100.0
    assert got.memory.startswith("measured on this card; the plan disagrees: it plans ")
    assert f"where 100.00 GiB was measured ({gap:+.2f} GiB, " in got.memory
    assert got.largest_batch is not None and got.largest_batch >= 4096  # the batch that ran


def test_the_plan_of_a_measured_row_that_fits_is_kept_as_it_is() -> None:
    card = catalog.gpu("H200-141GB")
    plan = plan_point(rent.point_on(h200_row(), card), card)
    assert plan.fits and measured_fit(plan, 1024.0) == (True, plan.reason)


def test_a_projection_plans_the_draft_its_configuration_loads() -> None:
    card = catalog.gpu("H100-SXM-80GB")
    plain = rent.point_on(h200_row(), card)
    drafted = rent.point_on(h200_row(speculative="ngram:k=4,lookup=2-4"), card)
    assert plain.speculative is None and drafted.speculative is not None
    row = h200_row(model="meta-llama/Llama-3.1-8B-Instruct", backend="vllm",
                   speculative="draft:k=5,model=llama-3.2-1b")  # fmt: skip
    with_draft = plan_point(rent.point_on(row, card), card)
    without = plan_point(rent.point_on({**row, "speculative": None}, card), card)
    assert with_draft.draft_weights_gib > 0
    assert with_draft.weights_gib == without.weights_gib + with_draft.draft_weights_gib
