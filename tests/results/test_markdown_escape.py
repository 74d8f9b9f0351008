"""Markdown excerpts escaped as Markdown: readable in the raw file, literal when rendered
(CommonMark, as markdown-it-py renders it: the library rich itself uses)."""

from __future__ import annotations

from markdown_it import MarkdownIt

from harness.results.publish.format import md_escape
from harness.results.publish.markdown import md_table

EXCERPT = 'the <formula> of a | b & "c" \\ d\nnext line'


def test_an_excerpt_stays_readable_in_the_raw_file() -> None:
    cell = md_escape(EXCERPT)
    assert cell == 'the \\<formula\\> of a \\| b \\& "c" \\\\ d next line'
    assert "&lt;" not in cell and "\n" not in cell  # no HTML entity, one line


def test_a_rendered_table_shows_the_excerpt_as_itself_in_one_cell() -> None:
    html = (
        MarkdownIt("commonmark")
        .enable("table")
        .render(md_table([{"window": "w:1", "excerpt": EXCERPT}]))
    )
    assert html.count("<td>") == 2  # the pipe did not split the cell
    # the tag is text, not a tag; the ampersand and backslash come out as themselves
    assert "<formula>" not in html
    assert "&lt;formula&gt; of a | b &amp; &quot;c&quot; \\ d next line" in html


def test_axis_ticks_carry_the_digits_that_tell_them_apart() -> None:
    from harness.results.publish.svg import nice_ticks, tick_labels

    ticks = nice_ticks(254.795, 254.845)  # the cost-vs-perplexity front's ppl axis
    labels = tick_labels(ticks)
    assert len(set(labels)) == len(labels) > 1
    assert labels[:2] == ["254.8", "254.82"]  # steps of 0.02 from 254.80
    assert tick_labels([1000.0, 2000.0]) == ["1000", "2000"]  # no needless digits
