"""Names from the user's disk reach the terminal and the published pages as text: a folder whose
name holds an escape sequence (ESC, BEL, an 8-bit CSI) or rich markup is shown escaped, and it
never sets the terminal's title, colours the rest of a line or ends a command in a traceback."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.table import Table
from typer.testing import CliRunner

from harness.cli.main import app
from harness.console import GroupProgress, SafeConsole, SweepProgress, shown
from harness.results.publish import report
from harness.spec.tariffs import load_tariffs
from tests import factories as F
from tests.spec.test_adapters import make_adapter

ROOT = Path(__file__).resolve().parents[2]
# an OSC title-set (ESC ] 0 ; … BEL), an 8-bit CSI (U+009B) and rich markup, in one folder name
HOSTILE = "lora\x1b]0;pwned\x07\x9b31m[red]"
RAW = ("\x1b", "\x07", "\x9b")


def test_shown_escapes_control_characters_and_markup() -> None:
    assert shown("a\x1b]0;t\x07b") == "a\\x1b]0;t\\x07b"
    assert shown("x\x9b31m") == "x\\x9b31m"  # C1: a terminal reads U+009B as CSI
    assert shown("two\nlines") == "two\\nlines"  # a name is one line
    assert shown("[red]x[/]") == "\\[red]x\\[/]"  # rich shows it as typed
    assert shown("plain name-1.0") == "plain name-1.0"


def test_the_console_never_writes_a_control_character_a_cell_holds() -> None:
    out = io.StringIO()
    console = SafeConsole(file=out, width=120, force_terminal=False)
    table = Table(title="t\x1b[2J")
    table.add_column("name")
    table.add_row("a\x1b]0;pwned\x07b")
    console.print(table)
    console.print("line \x1b[31mred\x07")
    text = out.getvalue()
    assert not any(c in text for c in RAW), repr(text)
    assert "a\\x1b]0;pwned\\x07b" in text and "t\\x1b[2J" in text and "line \\x1b[31mred" in text


def scenario_with_adapter(tmp_path: Path) -> Path:
    adapter = make_adapter(tmp_path / HOSTILE)
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: a\n"
        f"models: [tiny-llama, {{id: tiny-llama, adapter: {json.dumps(str(adapter))}}}]\n"
        "backend: [transformers]\nquantization: [none]\nkv_cache_dtype: [auto]\n"
        "batch: [1]\ncontext: [64]\noutput_tokens: 8\ntargets: [cpu]\n"
    )
    return path


def test_an_adapter_folder_named_with_an_escape_is_shown_escaped_in_the_plan(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(app, ["plan", str(scenario_with_adapter(tmp_path))])
    assert result.exit_code == 0, result.output[-2000:]
    assert not any(c in result.output for c in RAW), repr(result.output[-2000:])
    # the whole name, its markup as typed (not swallowed as a style)
    assert "tiny-llama+lora\\x1b]0;pwned\\x07\\x9b31m[red]" in result.output


def test_an_error_naming_a_path_with_markup_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "no[/bold]pe\x1b[2J"
    result = CliRunner().invoke(app, ["aggregate", str(missing)])
    assert result.exit_code == 2, result.output[-2000:]
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert "no[/bold]pe\\x1b[2J: run folder not found" in lines[0]


def test_progress_lines_show_a_hostile_group_label_as_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    label = f"tiny-llama+{HOSTILE}[/x] transformers none kv=auto"
    tracker = SweepProgress({label: GroupProgress(points=1, fixed_s=1.0, work_s=1.0)}, log=True)
    tracker.group_started(label, "node 1")
    tracker.row(label, "ok")
    err = capsys.readouterr().err
    assert not any(c in err for c in RAW), repr(err)
    assert "lora\\x1b]0;pwned\\x07\\x9b31m[red][/x]" in err  # markup as typed, no MarkupError


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("runs") / "run"
    name = f"tiny{HOSTILE}<img src=x onerror=alert(3)>"
    F.write_run(run, F.small_grid() + F.small_grid(model=name))
    report(run, load_tariffs(ROOT / "tariffs" / "example.yaml"))
    return run / "published"


@pytest.mark.parametrize("page", ["report.html", "README.md"])
def test_a_published_page_shows_a_hostile_model_name_escaped(published: Path, page: str) -> None:
    text = (published / page).read_text()
    assert not any(c in text for c in RAW), page
    assert "onerror" in text  # the model is on the page, as text
    assert "<img" not in text.replace("\\<img", "")  # HTML-escaped, or Markdown-escaped


def test_the_html_report_shows_the_escape_as_text(published: Path) -> None:
    html = (published / "report.html").read_text()
    assert "tiny" + "lora\\x1b]0;pwned\\x07\\x9b31m[red]&lt;img" in html
