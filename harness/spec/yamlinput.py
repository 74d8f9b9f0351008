"""YAML files people write → validated pydantic models, or one error naming file, line and field.

Shared by scenario and tariff files: read, parse, validate; the first problem becomes a
UserInputError with the line of the offending node, the field path, what was expected and, for
near misses, what was meant.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from harness.errors import UserInputError, did_you_mean

M = TypeVar("M", bound=BaseModel)


def load_model(path: str | Path, model: type[M], what: str) -> M:
    """Read `path` and validate it as `model`; `what` names the file kind in errors."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserInputError(f"{what} file not found", file=str(path)) from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise UserInputError(f"cannot read {what} file: {exc}", file=str(path)) from None
    return parse_model(text, model, str(path), what)


def parse_model(text: str, model: type[M], filename: str, what: str) -> M:
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise UserInputError(
            f"not valid YAML: {problem}", file=filename, line=mark.line + 1 if mark else None
        ) from None
    if not isinstance(data, dict):
        raise UserInputError(
            f"expected a mapping of {what} fields at the top, found {type(data).__name__}",
            file=filename,
            line=1,
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise first_error(exc, root, filename, model) from None


def first_error(
    exc: ValidationError, root: yaml.Node | None, filename: str, model: type[BaseModel]
) -> UserInputError:
    # An unknown key usually explains a "missing" one (a typo), so report it first.
    err = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
    loc = data_location(err["loc"])
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        known = known_fields(model, loc[:-1])
        message = (
            f"unknown field{did_you_mean(loc[-1], known)}; expected one of: {', '.join(known)}"
        )
    elif kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        message = (
            f"{value!r} is not allowed{did_you_mean(value, choices)}; expected one of: "
            f"{', '.join(choices)}"
        )
    elif kind == "missing":
        message = "required field is missing"
    elif kind == "value_error":
        message = str(err["msg"]).removeprefix("Value error, ")
    else:
        message = f"{err['msg']} (got {value!r})" if value is not None else str(err["msg"])
    return UserInputError(message, file=filename, line=line_of(root, loc), field=field_path(loc))


def data_location(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The error's path in the data, without pydantic's union-member tags (e.g. 'list[int]')."""
    return tuple(p for p in loc if isinstance(p, int) or not any(c in p for c in "[(-"))


def field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def known_fields(model: type[BaseModel], parent: tuple[Any, ...]) -> list[str]:
    """The fields of the (nested) model that the location `parent` points into."""
    for part in parent:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[str(part)].annotation
        inner = getattr(annotation, "__args__", (annotation,))
        nested = [a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            break
        model = nested[0]
    return list(model.model_fields)


def line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest YAML node that the error location reaches."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        child = None
        if isinstance(node, yaml.MappingNode):
            for key, val in node.value:
                if key.value == str(part):
                    child = val
                    break
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            child = node.value[part]
        if child is None:
            break
        node = child
        line = node.start_mark.line + 1
    return line
