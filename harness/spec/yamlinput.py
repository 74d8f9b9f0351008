"""YAML files people write → validated pydantic models, or one error naming file, line and field.

Shared by scenario and tariff files: read, parse, validate; the first problem becomes a
UserInputError with the line of the offending node, the field path, what was expected and, for
near misses, what was meant.

One strict reading, capped before any work: a regular file only (``harness.files``: never a FIFO
or a device), at most ``MAX_INPUT_BYTES`` of text, ``MAX_DEPTH`` levels of nesting and
``MAX_NODES`` values once aliases are expanded (an alias bomb is refused while it is composed,
before anything is built from it); a mapping key given twice is refused with the line of the
second one (never last-wins). Messages quote at most ``EXCERPT_CHARS`` of a value.
"""

from __future__ import annotations

import contextlib
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Tag, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from harness.errors import QUOTE_CHARS, UserInputError, as_field, did_you_mean, quote
from harness.files import decode_utf8, read_capped

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Input(Strict):
    """What a person writes: no coercion, no inf/nan."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


MAX_INPUT_BYTES = 1 << 20  # 1 MiB: the largest shipped file is a few KiB
MAX_DEPTH = 32  # nesting levels of mappings and lists
MAX_NODES = 100_000  # values in the document, aliases expanded
EXCERPT_CHARS = QUOTE_CHARS  # the most of a value an error message quotes


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """`repr(value)`, cut to `limit` characters (``harness.errors.quote``, the one quoting rule)."""
    return quote(value, limit)


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the caps above and duplicate keys refused."""

    def __init__(self, text: str, filename: str) -> None:
        super().__init__(text)
        self.filename = filename
        self.depth = 0
        self.sizes: dict[int, int] = {}  # id(node) → values it expands to

    def refuse(self, message: str, node: yaml.Node | None = None) -> UserInputError:
        line = node.start_mark.line + 1 if node is not None else None
        return UserInputError(message, file=self.filename, line=line)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise UserInputError(
                    f"nested deeper than {MAX_DEPTH} levels (the limit)",
                    file=self.filename,
                    line=event.start_mark.line + 1,
                )
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if node is None or id(node) in self.sizes:  # an alias: counted again by its parent
            return node
        size = 1
        if isinstance(node, yaml.SequenceNode):
            size += sum(self.sizes.get(id(child), 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            size += sum(self.sizes.get(id(k), 1) + self.sizes.get(id(v), 1) for k, v in node.value)
        if size > MAX_NODES:
            raise self.refuse(f"more than {MAX_NODES:,} values (aliases expanded; the limit)", node)
        self.sizes[id(node)] = size
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.refuse("a mapping key must be a plain value", key_node)
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise UserInputError(
                    f"key given twice (first on line {seen[key]}); give each key once",
                    file=self.filename,
                    line=line,
                    field=excerpt(key).strip("'\""),
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def unique(values: list[Any]) -> list[Any]:
    """`values`, refused (a ValueError a validator raises) when one is given twice."""
    seen: list[Any] = []  # a list, not a set: a value need not be hashable
    for value in values:
        if value in seen:
            raise ValueError(f"duplicate value {excerpt(value)}; give each value once")
        seen.append(value)
    return values


def load_model(path: str | Path, model: type[M], what: str) -> M:
    """Read `path` and validate it as `model`; `what` names the file kind in errors."""
    path = Path(path)
    try:
        raw = read_capped(path, MAX_INPUT_BYTES, f"{what} file")
    except FileNotFoundError:
        raise UserInputError(f"{what} file not found", file=str(path)) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserInputError(f"cannot read {what} file: {reason}", file=str(path)) from None
    return parse_model(decode_utf8(raw, path, f"the {what} file"), model, str(path), what)


def parse_yaml(text: str, filename: str) -> tuple[yaml.Node | None, Any]:
    """The composed document (for line numbers) and its data, under the caps above."""
    if len(text) > MAX_INPUT_BYTES:
        raise UserInputError(
            f"{len(text):,} characters; the limit is {MAX_INPUT_BYTES:,}", file=filename
        )
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text, filename)  # the reader checks the characters here
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserInputError(
            f"not valid YAML: {problem}", file=filename, line=mark.line + 1 if mark else None
        ) from None
    except RecursionError:  # the depth cap stops nesting first; this is the backstop
        raise UserInputError(f"nested deeper than {MAX_DEPTH} levels", file=filename) from None
    finally:
        if loader is not None:
            loader.dispose()
    return root, data


def parse_model(text: str, model: type[M], filename: str, what: str) -> M:
    root, data = parse_yaml(text, filename)
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
    except RecursionError:
        raise UserInputError(f"nested deeper than {MAX_DEPTH} levels", file=filename) from None


def first_error(
    exc: ValidationError, root: yaml.Node | None, filename: str, model: type[BaseModel]
) -> UserInputError:
    # An unknown key usually explains a "missing" one (a typo), so report it first.
    err = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
    loc = data_location(err["loc"])
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        known = known_fields(model, err["loc"][:-1])
        listed = f"; expected one of: {', '.join(known)}" if known else ""
        message = f"unknown field{did_you_mean(loc[-1], known)}{listed}"
    elif kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        message = (
            f"{excerpt(value)} is not allowed{did_you_mean(value, choices)}; expected one of: "
            f"{', '.join(choices)}"
        )
    elif kind == "missing":
        message = "required field is missing"
    elif kind == "value_error":
        message = str(err["msg"]).removeprefix("Value error, ")
    else:
        message = f"{err['msg']} (got {excerpt(value)})" if value is not None else str(err["msg"])
    return UserInputError(message, file=filename, line=line_of(root, loc), field=field_path(loc))


def data_location(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The error's path in the data, without pydantic's union-member tags (e.g. 'list[int]',
    or a discriminated union's tags, which hold a '-')."""
    return tuple(p for p in loc if isinstance(p, int) or not any(c in p for c in "[(-"))


def field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        part = part if isinstance(part, int) else as_field(part)
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def known_fields(model: type[BaseModel], parent: tuple[Any, ...]) -> list[str]:
    """The fields of the (nested) model that pydantic's error location `parent` (union tags
    included) points into; [] when it points into no model."""
    annotation: Any = model
    for part in parent:
        annotation = _inner(annotation, part)
    models = [t for t, _ in members(annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    return list(models[0].model_fields) if len(models) == 1 else []


def members(annotation: Any) -> list[tuple[Any, str | None]]:
    """(type, its discriminator tag or None) of each member of a type: an `Annotated` unwrapped,
    a union (an optional one too) flattened."""
    tag = None
    while get_origin(annotation) is Annotated:
        annotation, *metadata = get_args(annotation)
        tag = next((m.tag for m in metadata if isinstance(m, Tag)), tag)
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in members(arg)]
    return [(annotation, tag)]


def _inner(annotation: Any, part: str | int) -> Any:
    """The type one step of an error location leads into: a model's field, a list's item, a
    dict's value, or a union's member named by its tag (a tag it cannot name stays put)."""
    found = members(annotation)
    for kind, tag in found:
        if isinstance(part, str) and part in (tag, getattr(kind, "__name__", None)):
            return kind
    for kind, _ in found:
        origin = get_origin(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            if isinstance(part, str) and part in kind.model_fields:
                return kind.model_fields[part].annotation
        elif isinstance(part, int) and origin in (list, tuple, set, frozenset):
            return get_args(kind)[0]
        elif isinstance(part, str) and origin is dict:
            return get_args(kind)[1]
    return annotation


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


def located(loc: tuple[int | str, ...], message: str, value: object) -> ValidationError:
    """A validator's refusal of one element inside its field (``loc`` below the field), so the
    error names that element's line and path, not the field's."""
    error = PydanticCustomError("value_error", "{message}", {"message": message})
    return ValidationError.from_exception_data(
        "Scenario", [InitErrorDetails(type=error, loc=loc, input=value)]
    )


def field_line(path: str, field: str) -> int | None:
    """The line of ``field`` (``serving.workload.trace``, ``models[0].id``) in the YAML file at
    ``path``, read again for a refusal found after it was loaded; None where it cannot say."""
    try:
        raw = read_capped(Path(path), MAX_INPUT_BYTES, "a YAML file")
        root, _ = parse_yaml(decode_utf8(raw, path, "the YAML file"), path)
    except (OSError, UserInputError):
        return None
    parts = [p for p in re.split(r"[.\[\]]+", field) if p]
    return line_of(root, tuple(int(p) if p.isdigit() else p for p in parts)) if root else None


@contextlib.contextmanager
def fields_of(path: str | None) -> Iterator[None]:
    """A refusal of a field of the file at ``path`` (one with a field and no file of its own)
    raised inside, with that file and the field's line in it."""
    try:
        yield
    except UserInputError as exc:
        if exc.file is not None or path is None or not exc.field:
            raise
        line = field_line(path, exc.field)
        raise UserInputError(exc.message, file=path, line=line, field=exc.field) from None
