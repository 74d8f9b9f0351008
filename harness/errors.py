"""Errors meant for people: where (file, line, field), what was found, what would be right."""

from __future__ import annotations

import difflib
import errno
import os
from collections.abc import Iterable


class UserInputError(Exception):
    """Bad input from a person. The CLI prints it and exits with code 2, writing nothing."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.message = message
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.file:
            where = without_controls(self.file, IN_A_NAME) + (f":{self.line}" if self.line else "")
        if self.field:
            field = without_controls(self.field, IN_A_NAME)
            where = f"{where}: {field}" if where else field
        message = without_controls(self.message)
        return f"{where}: {message}" if where else message


# Characters a terminal acts on (escape sequences, carriage return, C1 codes such as U+009B, an
# 8-bit CSI, …): never printed raw. A newline stays (a message of several runs lists one per
# line); a quoted value escapes it.
CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if chr(c) not in "\n\t"}
IN_A_NAME = {**CONTROLS, ord("\n"): "\\n"}  # a file or field name is one line, always


def without_controls(text: str, table: dict[int, str] = CONTROLS) -> str:
    return text.translate(table)


QUOTE_CHARS = 40  # the most of a value an error message quotes


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """`repr(value)` (control characters escaped: a message stays one line), cut to `limit`
    characters, never rendering more than a few items of a collection."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 8:
        text = f"<{type(value).__name__} of {len(value)} items>"
    elif isinstance(value, str) and len(value) > limit:
        text = repr(value[:limit])
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """' (did you mean 'bf16'?)' for a near miss, '' otherwise (a long value is no typo, and
    difflib is quadratic)."""
    text = str(value)
    if len(text) > 2 * QUOTE_CHARS:
        return ""
    matches = difflib.get_close_matches(text, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {quote(matches[0])}?)" if matches else ""


LISTED_CHARS = 4 * QUOTE_CHARS  # the most of a message a list of choices takes


def one_of(choices: Iterable[object], limit: int = LISTED_CHARS) -> str:
    """'a, b, c' for a message's "expected one of: …": the choices (each quoted short when
    long) that fit in `limit` characters, at least one, and how many more there are."""
    every = [str(c) for c in choices]
    shown: list[str] = []
    for choice in every:
        text = choice if len(choice) <= QUOTE_CHARS else quote(choice)
        if shown and sum(len(c) + 2 for c in shown) + len(text) > limit:
            break
        shown.append(text)
    more = f", … ({len(every) - len(shown):,} more)" if len(every) > len(shown) else ""
    return ", ".join(shown) + more


def as_field(key: object) -> str:
    """A key from a person's input as the field of an error: shortened like a quoted value."""
    return quote(str(key)).strip("'\"")


# Faults of the machine, not of the input: each is one line (``fault_line``) and exit 2; every
# file the harness writes is atomic, so what was written before stays and a resume goes on.
FAULTS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EEXIST: "a file is in the way where a folder is needed",
    errno.ENOTDIR: "a file is in the way where a folder is needed",
}


def fault_line(exc: OSError) -> str | None:
    """One line for an operational fault (full disk, read-only or unwritable folder, a file
    where a folder goes), naming the path; None for any other OSError."""
    words = FAULTS.get(exc.errno or 0)
    if words is None:
        return None
    path = exc.filename if exc.filename is not None else "?"
    name = errno.errorcode.get(exc.errno or 0, "?")
    return (
        f"{quote(os.fsdecode(path), 200)}: {words} ({name}); what was written is kept: fix "
        "it and run the command again (measure and run resume where they stopped)"
    )
