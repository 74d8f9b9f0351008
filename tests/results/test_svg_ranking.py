"""The ranking chart (svg_ranking): one bar per card, hatched exactly where projected, whiskers
at the scale's coordinates, the cards without a bar listed with their reason. The scale by hand:
0 at x = RANK_LEFT (230), RANK_HEADROOM (1.1) × the largest value at WIDTH − RANK_RIGHT (610)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.results.publish.svg import RankBar, hatch_id, svg_ranking

NS = {"s": "http://www.w3.org/2000/svg"}
TITLE = "tiny-llama, 30-day package"
BARS = [
    RankBar("H200×1 (RunPod)", 4.0, 4.0, 4.0, True, "measured"),
    RankBar("L40S×1 (<b>Cloud</b>)", 5.5, 5.0, 10.0, False, "projected (from H200)"),
    RankBar("A100×1 (Vast)", 2.0, 1.0, 3.0, False, "projected (from H200)"),
]
MISSING = [("cpu×1 (AWS)", "CPU and GPU figures are not projected onto each other")]


def chart() -> ET.Element:
    return ET.fromstring(svg_ranking(TITLE, "$ per Mtok of output tokens", BARS, MISSING))


def bars(root: ET.Element) -> list[ET.Element]:
    return [r for r in root.iter(f"{{{NS['s']}}}rect") if "bar" in r.get("class", "").split()]


def test_one_bar_per_card_hatched_exactly_where_projected() -> None:
    root = chart()
    found = bars(root)
    assert len(found) == 3
    hatch = f"url(#{hatch_id(TITLE)})"
    assert [r.get("fill") == hatch for r in found] == [False, True, True]
    assert found[0].get("fill") == "#1f77b4"  # measured: filled
    patterns = root.findall(".//s:defs/s:pattern", NS)
    assert [p.get("id") for p in patterns] == [hatch_id(TITLE)]
    # the pattern is used by the two projected bars and the legend's swatch, nothing else
    fills = [e.get("fill") for e in root.iter() if e.get("fill") == hatch]
    assert len(fills) == 2 + 1


def test_bars_and_whiskers_sit_on_the_hand_computed_scale() -> None:
    root = chart()
    # top = 1.1 × 10 = 11; 380 units wide: x(v) = 230 + v / 11 × 380
    # widths: 4 → 138.18; 5.5 → 190.0; 2 → 69.09; rows at y = 52 + 22 × (i + 0.5), bar 14 high
    found = bars(root)
    assert [r.get("width") for r in found] == ["138.2", "190.0", "69.1"]
    assert [r.get("x") for r in found] == ["230", "230", "230"]
    assert [r.get("y") for r in found] == ["56.0", "78.0", "100.0"]
    whiskers = root.findall(".//s:g[@class='whisker']", NS)
    assert len(whiskers) == 2  # the measured bar has no band
    spans = [whisker.findall("s:line", NS)[0] for whisker in whiskers]
    # L40S: 230 + 5/11 × 380 = 402.73, 230 + 10/11 × 380 = 575.45, at y 85
    # A100: 230 + 1/11 × 380 = 264.55, 230 + 3/11 × 380 = 333.64, at y 107
    assert [(s.get("x1"), s.get("x2"), s.get("y1")) for s in spans] == [
        ("402.7", "575.5", "85.0"),
        ("264.5", "333.6", "107.0"),
    ]
    caps = whiskers[0].findall("s:line", NS)[1:]
    assert [(c.get("x1"), c.get("y1"), c.get("y2")) for c in caps] == [
        ("402.7", "80.0", "90.0"),
        ("575.5", "80.0", "90.0"),
    ]


def test_the_cards_without_a_bar_are_listed_with_their_reason_and_units_are_said() -> None:
    text = svg_ranking(TITLE, "$ per Mtok of output tokens", BARS, MISSING)
    assert "Not priced:" in text
    assert "cpu×1 (AWS): CPU and GPU figures are not projected onto each other" in text
    assert "$ per Mtok of output tokens" in text
    assert ">measured<" in text and ">projected<" in text  # the legend
    assert "<b>" not in text and "&lt;b&gt;Cloud&lt;/b&gt;" in text  # data escaped


def test_two_charts_on_one_page_get_their_own_hatch() -> None:
    assert hatch_id("a, 7-day package") != hatch_id("a, 30-day package")
