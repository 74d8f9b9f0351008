"""The docs' claims checked against the tree: every file path and `harness.x.y` symbol a page
names in inline code, every `harness ...` command shown in a shell block (its subcommands and
options against the typer app), and every scenario YAML block through the scenario parser.

A block that is deliberately partial is marked by the line `<!-- partial -->` right above it; a
command that needs a GPU still has its subcommand and options checked (nothing here runs one).
"""

from __future__ import annotations

import importlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from harness.cli.main import app
from harness.errors import UserInputError
from harness.spec import catalog
from harness.spec import scenario as scen

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# What a path in inline code starts with to be a claim about the tree (results/<run>/… is output).
TREE_FOLDERS = (
    "harness", "tests", "scenarios", "tariffs", "containers", "scripts", "requirements",
    "docs", ".ci",
)  # fmt: skip
PATH = re.compile(rf"^(?:{'|'.join(re.escape(f) for f in TREE_FOLDERS)})/[\w./-]*$")
SYMBOL = re.compile(r"^harness(?:\.\w+)+$")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
PARTIAL = "<!-- partial -->"
GENERATED = {"docs/reference/cli.md", "docs/reference/columns.md"}  # built before the site


@dataclass(frozen=True)
class Stale:
    page: str
    line: int
    claim: str
    why: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.claim!r}: {self.why}"


def pages(root: Path = DOCS) -> list[Path]:
    return sorted(p for p in root.rglob("*.md") if p.relative_to(ROOT).as_posix() not in GENERATED)


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def without_fences(text: str) -> str:
    """The page with its fenced blocks blanked (same line numbers): inline code only."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def path_problem(claim: str, root: Path) -> str | None:
    if any(c in claim for c in "<>*{}…"):
        return None  # a pattern, not a path
    return None if (root / claim.rstrip("/")).exists() else "no such file or folder"


def symbol_problem(claim: str) -> str | None:
    """`harness.a.b.c`: the longest importable module, then attributes on it."""
    parts = claim.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:cut])} has no {attr!r}"
            obj = getattr(obj, attr)
        return None
    return "no such module"


def inline_claims(page: Path, root: Path = ROOT) -> list[Stale]:
    text = without_fences(page.read_text())
    name = page.relative_to(root).as_posix() if page.is_relative_to(root) else page.name
    found = []
    for match in CODE_SPAN.finditer(text):
        claim = match.group(1).strip()
        if PATH.match(claim):
            why = path_problem(claim, root)
        elif SYMBOL.match(claim):
            why = symbol_problem(claim)
        else:
            continue
        if why is not None:
            found.append(Stale(name, line_of(text, match.start()), claim, why))
    return found


def blocks(page: Path) -> list[tuple[str, int, str, bool]]:
    """(language, line, body, partial) of each fenced block of a page."""
    text = page.read_text()
    out = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        out.append(
            (match.group(1), line_of(text, match.start()), match.group(2), before == PARTIAL)
        )
    return out


def commands(body: str) -> list[tuple[int, list[str]]]:
    """The `harness ...` commands of a shell block (after a `$ ` prompt or an env assignment,
    continuation lines joined), with their line offset in the block."""
    found = []
    lines = body.replace("\\\n", " ").split("\n")
    for offset, line in enumerate(lines):
        line = line.split(" #")[0].strip().removeprefix("$ ")
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        while words and re.match(r"^\w+=", words[0]):
            words = words[1:]
        if words[:3] == ["python", "-m", "harness"] or words[:3] == [
            ".venv/bin/python",
            "-m",
            "harness",
        ]:
            words = ["harness", *words[3:]]
        if words and words[0] == "harness":
            cut = next((i for i, w in enumerate(words) if w in ("|", "&&", ";", ">", "2>&1")), None)
            found.append((offset, words[1:cut]))
    return found


def command_problem(words: list[str]) -> str | None:
    """The subcommands exist and every `--option` is one of the command reached."""
    command: Any = typer.main.get_command(app)  # typer's own click: a group has `commands`
    name = "harness"
    for word in words:
        if hasattr(command, "commands") and not word.startswith("-"):
            sub = command.commands.get(word)
            if sub is None:
                return f"no subcommand {word!r} (known: {', '.join(sorted(command.commands))})"
            command, name = sub, word
            continue
        if word.startswith("--"):
            option = word.split("=")[0]
            known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
            if option not in known | {"--help"}:
                return f"{name} has no option {option}"
    return None


def command_claims(page: Path) -> list[Stale]:
    name = page.relative_to(ROOT).as_posix()
    found = []
    for lang, line, body, _ in blocks(page):
        if lang not in ("bash", "sh", "shell", "console", ""):
            continue
        for offset, words in commands(body):
            why = command_problem(words)
            if why is not None:
                found.append(Stale(name, line + 1 + offset, "harness " + " ".join(words), why))
    return found


def looks_like_a_scenario(body: str) -> bool:
    return re.search(r"^(models|name|backends|quantizations):", body, re.M) is not None


def snippet_claims(page: Path) -> list[Stale]:
    name = page.relative_to(ROOT).as_posix()
    found = []
    for lang, line, body, partial in blocks(page):
        if lang not in ("yaml", "yml") or partial or not looks_like_a_scenario(body):
            continue
        try:
            scen.parse(body, f"{name}:{line}")
        except UserInputError as exc:
            found.append(Stale(name, line, body.split("\n", 1)[0], str(exc).splitlines()[0]))
    return found


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_path_and_symbol_a_page_names_exists(page: Path) -> None:
    stale = inline_claims(page)
    assert not stale, "\n".join(map(str, stale))


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_command_a_page_shows_parses_against_the_cli(page: Path) -> None:
    stale = command_claims(page)
    assert not stale, "\n".join(map(str, stale))


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_scenario_snippet_a_page_shows_parses(page: Path) -> None:
    stale = snippet_claims(page)
    assert not stale, "\n".join(map(str, stale))


def card_rows() -> list[tuple[str, int, str]]:
    """The card-catalog rows the docs show (a YAML block under `<!-- card -->`)."""
    found = []
    for page in pages():
        text = page.read_text()
        for match in FENCE.finditer(text):
            before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
            if before == "<!-- card -->":
                found.append((page.name, line_of(text, match.start()), match.group(2)))
    return found


def test_every_card_row_the_docs_show_is_a_catalog_row() -> None:
    rows = card_rows()
    assert rows, "docs/development/adding-a-card.md shows a row of gpus.yaml"
    for page, line, body in rows:
        for row in yaml.safe_load(body):
            shown = catalog.GpuSpec(**row)
            assert shown == catalog.gpus()[shown.name], f"{page}:{line}: not as gpus.yaml has it"


# Commands cheap enough to run for real here (no engine, no GPU, about a second each).
CHEAP = ("plan",)


def cheap_commands() -> list[tuple[str, int, list[str]]]:
    found = []
    for page in pages():
        for lang, line, body, _ in blocks(page):
            if lang in ("bash", "sh", "shell", "console", ""):
                found += [
                    (page.name, line + 1 + offset, words)
                    for offset, words in commands(body)
                    if words[0] in CHEAP and len(words) > 1 and (ROOT / words[1]).is_file()
                ]
    return found


@pytest.mark.parametrize("page, line, words", cheap_commands())
def test_every_cheap_command_the_docs_show_runs(page: str, line: int, words: list[str]) -> None:
    result = CliRunner().invoke(app, words)
    assert result.exit_code == 0, f"{page}:{line}: harness {' '.join(words)}\n{result.output}"


def test_the_scenarios_page_shows_every_top_level_key() -> None:
    """Its first YAML block names each field of the scenario model (set or in a comment)."""
    page = DOCS / "guide" / "scenarios.md"
    _, _, body, _ = next(b for b in blocks(page) if b[0] == "yaml")
    missing = [k for k in scen.Scenario.model_fields if not re.search(rf"\b{k}\b", body)]
    assert not missing, f"{page.relative_to(ROOT)} does not show {missing}"


def test_the_checker_fails_a_page_naming_a_missing_path_symbol_or_option(tmp_path: Path) -> None:
    """Broken on purpose: one stale claim of each kind on a made-up page, each found by line."""
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "real.py").write_text("")
    page = tmp_path / "page.md"
    page.write_text(
        "Real: `harness/real.py`. Gone: `harness/gone.py`.\n"  # line 1: one stale path
        "Symbol: `harness.spec.scenario.parse`, `harness.spec.scenario.no_such_thing`.\n"
    )
    stale = inline_claims(page, tmp_path)
    assert [(s.line, s.claim) for s in stale] == [
        (1, "harness/gone.py"),
        (2, "harness.spec.scenario.no_such_thing"),
    ]
    assert command_problem(["plan", "--no-such-option"]) == "plan has no option --no-such-option"
    assert command_problem(["no-such-command"]) is not None
    assert command_problem(["plan", "--help"]) is None


def test_a_partial_snippet_is_skipped_and_a_broken_one_is_found(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "page.md"
    page.write_text(
        "<!-- partial -->\n```yaml\nmodels: [tiny-llama]\n```\n\n"
        "```yaml\nmodels: [tiny-llama]\nno_such_key: 1\n```\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        stale = snippet_claims(page)
    finally:
        ROOT = saved
    assert [s.line for s in stale] == [6]
