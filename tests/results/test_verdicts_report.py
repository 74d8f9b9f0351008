"""The verdict as the report shows it: the rule, the counts, the undecided table and its advice."""

from __future__ import annotations

import math

from harness.measure import verdict
from harness.results.aggregate import aggregate
from harness.results.frame import frame_from_rows
from harness.results.publish import verdicts
from harness.results.publish.html import report_html
from harness.results.publish.markdown import readme
from tests import factories as F


def rows() -> list:  # type: ignore[type-arg]
    return [
        F.reference(**F.quality(100.0)),
        F.row(quantization="bnb-int8", **F.quality(100.05)),  # pass 99.9
        F.row(quantization="quanto-int4", **F.quality(100 / 0.99)),  # on the class-99 line
        F.row(quantization="bnb-fp4", **F.quality(101.5)),  # fail
    ]


def test_the_undecided_table_says_which_metric_and_how_many_more_windows() -> None:
    result = aggregate(frame_from_rows(rows()), F.tariffs())
    table = verdicts.undecided_table(result, "99")
    assert list(table["configuration"]) == ["transformers quanto-int4 kv=auto"]
    assert list(table["undecided_on"]) == ["ppl"]
    # on the margin no practical sample decides: said so, not advised as a number to score
    assert "no practical sample decides it" in table["to_decide"].iloc[0]
    assert verdicts.verdict_counts(result)["99"] == {"pass": 2, "fail": 1, "undecided": 1}
    # configurations, not rows: a second point of the same group counts once
    twice = aggregate(
        frame_from_rows([*rows(), F.row(quantization="bnb-fp4", batch=8, **F.quality(101.5))])
    )
    assert verdicts.verdict_counts(twice)["99"]["fail"] == 1


def test_a_near_miss_gets_the_windows_that_would_decide_it_by_the_formula() -> None:
    near = F.quality(100 * math.exp(0.0095), half_ci=0.002)  # d 0.0095 < m 0.01005, wide CI
    result = aggregate(frame_from_rows([F.reference(**F.quality(100.0)), F.row(**near)]))
    (line,) = verdicts.undecided_table(result, "99").to_dict("records")
    sd, d, m = near["dnll_sd"], near["dnll_vs_ref"], -math.log(0.99)
    needed = math.ceil((verdict.Z * sd / (m - d)) ** 2)  # n = ⌈(z·s/|m − d|)²⌉
    assert f"score {needed - F.WINDOWS} more windows" in line["to_decide"]


def test_readme_and_report_state_the_rule_and_the_undecided_table() -> None:
    result = aggregate(frame_from_rows(rows()), F.tariffs())
    text = readme(result, F.tariffs(), "99")
    # no row scored ARC and no manifest names the gate: gated on what the rows scored (ppl)
    assert verdicts.rule_line("99", ("ppl",)) in text
    assert "1 pass" not in text and "2 pass, 1 fail, 1 undecided" in text
    assert "Undecided in class 99, and what would decide them" in text
    assert "one-sided 95 %" in text  # the method section, from measure.verdict.METHOD
    page = report_html(result, F.tariffs(), "99")
    assert 'id="undecided"' in page and "2 pass, 1 fail, 1 undecided" in page
