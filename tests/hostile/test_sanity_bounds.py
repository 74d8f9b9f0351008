"""Accepted without a word no more: a serving level whose expected duration (requests ÷ rate) is
beyond the per-level cap is refused in one line; every quoted value is at most 40 characters with
its control characters escaped, so a message stays one line and never drives the terminal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.errors import QUOTE_CHARS, UserInputError, quote
from harness.modes.serving.spec import MAX_SERVING_DURATION_S

SERVING = Path(__file__).parents[1] / "fixtures" / "serving.yaml"


def plan(tmp_path: Path, text: str) -> tuple[int, str]:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["plan", str(path)])
    return result.exit_code, result.output


@pytest.mark.parametrize(("rate", "requests"), [("1.0e-9", 100000), ("0.001", 16), ("1.0", 5000)])
def test_a_serving_level_longer_than_the_cap_is_refused(
    tmp_path: Path, rate: str, requests: int
) -> None:
    text = SERVING.read_text()
    text = re.sub(r"request_rate: \[.*\]", f"request_rate: [{rate}]", text)
    text = re.sub(r"requests: \d+", f"requests: {requests}", text)
    code, output = plan(tmp_path, text)
    assert code == 2, output
    assert "request_rate" in output and f"{MAX_SERVING_DURATION_S:g} s" in output
    assert len(output.strip().splitlines()) == 1


def test_a_serving_level_within_the_cap_still_plans(tmp_path: Path) -> None:
    code, output = plan(tmp_path, SERVING.read_text())
    assert code == 0, output


IDS = ["org/" + "x" * 196, "x" * 200, "org/na\nme", "na\x1b[31mme", "a\rb", "tab\there"]


@pytest.mark.parametrize("model", IDS, ids=range(len(IDS)))
def test_a_hostile_model_id_is_quoted_short_on_one_line(tmp_path: Path, model: str) -> None:
    text = (
        f"name: h\nmodels: [{json.dumps(model)}]\nbackend: [transformers]\nquantization: [none]\n"
        "batch: [1]\ncontext: [16]\noutput_tokens: 4\ntargets: [cpu]\n"
    )
    code, output = plan(tmp_path, text)
    assert code == 2, output
    assert len(output.strip().splitlines()) == 1, output
    assert "\x1b" not in output and "\r" not in output
    quoted = re.search(r"unknown model ('.*?(?:'|…))[:( ]", output)
    assert quoted is not None, output
    assert len(quoted.group(1)) <= QUOTE_CHARS


def test_quote_cuts_and_escapes() -> None:
    assert len(quote("y" * 500)) <= QUOTE_CHARS and quote("a\nb") == "'a\\nb'"
    assert quote(list(range(100))) == "<list of 100 items>"


def test_a_message_never_carries_a_terminal_control_character() -> None:
    line = UserInputError("bad \x1b[2J value\r", file="x\ny.yaml", field="a\x07").render()
    assert "\x1b" not in line and "\r" not in line and "\x07" not in line
    assert "\n" not in line  # a file or field name is one line
