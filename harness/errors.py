"""Errors meant for people: where (file, line, field), what was found, what would be right."""

from __future__ import annotations

import difflib
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
            where = self.file + (f":{self.line}" if self.line else "")
        if self.field:
            where = f"{where}: {self.field}" if where else self.field
        return f"{where}: {self.message}" if where else self.message


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """' (did you mean 'bf16'?)' for a near miss, '' otherwise."""
    matches = difflib.get_close_matches(str(value), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""
