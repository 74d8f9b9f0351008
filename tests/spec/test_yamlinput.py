"""harness.spec.yamlinput: a YAML file people write → a validated model, or one error naming
file, line and field (what was expected, a near miss named); the caps refused while reading."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, field_validator

from harness.errors import UserInputError
from harness.spec import yamlinput


class Engine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Literal["vllm", "transformers"]
    batch: int = 1


class Sweep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str
    engines: list[Engine]
    tags: list[str] = []

    @field_validator("tags")
    @classmethod
    def tags_once(cls, tags: list[str]) -> list[str]:
        return yamlinput.unique(tags)


def error_of(text: str) -> UserInputError:
    with pytest.raises(UserInputError) as caught:
        yamlinput.parse_model(text, Sweep, "s.yaml", "sweep")
    return caught.value


def test_a_good_file_is_its_model(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("title: t\nengines:\n  - {name: vllm, batch: 4}\n")
    found = yamlinput.load_model(path, Sweep, "sweep")
    assert found == Sweep(title="t", engines=[Engine(name="vllm", batch=4)])


def test_an_unknown_field_names_its_line_path_and_the_near_miss() -> None:
    # line 3 holds the typo `bach` inside engines[0]
    err = error_of("title: t\nengines:\n  - name: vllm\n    bach: 4\n")
    assert (err.file, err.line, err.field) == ("s.yaml", 4, "engines[0].bach")
    assert err.message == "unknown field (did you mean 'batch'?); expected one of: name, batch"


def test_a_value_outside_a_literal_lists_the_choices() -> None:
    err = error_of("title: t\nengines:\n  - name: vlm\n")
    assert (err.line, err.field) == (3, "engines[0].name")
    assert err.message == (
        "'vlm' is not allowed (did you mean 'vllm'?); expected one of: vllm, transformers"
    )


def test_a_missing_field_a_wrong_type_and_a_validator_message() -> None:
    missing = error_of("engines: []\n")
    assert (missing.field, missing.message) == ("title", "required field is missing")
    typed = error_of("title: t\nengines:\n  - {name: vllm, batch: many}\n")
    assert typed.field == "engines[0].batch" and "(got 'many')" in typed.message
    twice = error_of("title: t\nengines: []\ntags: [a, b, a]\n")
    assert (twice.line, twice.field) == (3, "tags")
    assert twice.message == "duplicate value 'a'; give each value once"


def test_a_key_given_twice_is_refused_with_both_lines() -> None:
    err = error_of("title: t\nengines: []\ntitle: u\n")
    assert (err.line, err.field) == (3, "title")
    assert err.message == "key given twice (first on line 1); give each key once"


def test_not_yaml_and_not_a_mapping_are_one_line_each() -> None:
    bad = error_of("title: [unclosed\n")
    assert bad.message.startswith("not valid YAML") and bad.line is not None
    listed = error_of("- a\n- b\n")
    assert listed.line == 1
    assert listed.message == "expected a mapping of sweep fields at the top, found list"


def test_the_caps_depth_and_aliases_are_refused_while_reading() -> None:
    deep = "a: " + "[" * (yamlinput.MAX_DEPTH + 1) + "]" * (yamlinput.MAX_DEPTH + 1) + "\n"
    with pytest.raises(UserInputError, match=f"nested deeper than {yamlinput.MAX_DEPTH} levels"):
        yamlinput.parse_yaml(deep, "d.yaml")
    # a billion laughs: each level 10 aliases of the last; 10**5 values at level 5 > 100,000
    bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    for level in range(1, 6):
        bomb += f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]\n"
    with pytest.raises(UserInputError, match="more than 100,000 values"):
        yamlinput.parse_yaml(bomb, "b.yaml")


def test_a_missing_file_and_an_oversized_text_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="sweep file not found") as caught:
        yamlinput.load_model(tmp_path / "nope.yaml", Sweep, "sweep")
    assert caught.value.file == str(tmp_path / "nope.yaml")
    big = "x" * (yamlinput.MAX_INPUT_BYTES + 1)
    with pytest.raises(UserInputError, match="1,048,577 characters; the limit is 1,048,576"):
        yamlinput.parse_yaml(big, "big.yaml")


def test_an_excerpt_is_cut_to_its_limit() -> None:
    # repr of the first 10 characters is 12 long: its first 9 and the mark, 10 in all
    assert yamlinput.excerpt("a" * 100, 10) == "'" + "a" * 8 + "…"
    assert len(yamlinput.excerpt("a" * 100)) == yamlinput.EXCERPT_CHARS


def test_a_field_path_reads_as_the_file_writes_it() -> None:
    assert yamlinput.field_path(("engines", 0, "name")) == "engines[0].name"
    assert yamlinput.data_location(("engines", 0, "list[int]", "name")) == ("engines", 0, "name")
    assert yamlinput.known_fields(Sweep, ("engines", 0)) == ["name", "batch"]
