"""Reading an input file safely: a regular file only, at most a cap of bytes, one line when not.

Every file the harness reads from a person or a run folder (scenarios, tariffs, config.json, rows,
manifests, window scores, RAPL counters) goes through ``read_capped``. A file's size cannot be
trusted: a FIFO says 0 bytes and a read waits for a writer forever; a symlink to /dev/zero says
0 bytes and a read never ends; /proc and sysfs files say 0 or 4096 whatever they hold. So the
file is checked before it is opened (``os.stat``: nothing but a regular file is opened at all)
and again after (``os.fstat`` on the open descriptor, so a swap in between is caught), opened
with ``O_NONBLOCK`` (a FIFO put there in between opens at once instead of waiting for a writer),
and read to at most ``cap + 1`` bytes: what is read is judged, never what the size claims.

Refusals are ``UserInputError``s naming the file (through a symlink, also its target) and why,
in one line. A missing or unreadable file raises the ``OSError`` that ``open`` would, so each
caller keeps its own words for those.

A JSON-lines file a person writes (a task file, a serving trace) is read by the same two rules
everywhere: ``text_lines`` (UTF-8, a byte that is not UTF-8 named with its line; a line ends
at "\\n" only, since a JSON string may hold U+2028, U+2029 or U+0085, which
``str.splitlines`` breaks at) and ``strict_json`` (a key given twice in an object is refused,
never last-wins, and so is a number that is not finite: NaN, ±Infinity, 1e999).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from harness.errors import UserInputError, as_field

# The file types that are not regular files, in the words a message uses.
KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
)
# Never wait for a writer (a FIFO), never take a terminal, never leak into a child process.
FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class FileTooLarge(UserInputError):
    """A file holding more than the cap: ``size`` is its size if known, else None."""

    def __init__(self, path: Path, what: str, size: int | None, cap: int) -> None:
        self.size = size
        self.cap = cap
        told = (
            f"is {size:,} bytes; the limit is {cap:,}"
            if size is not None
            else f"is larger than {cap:,} bytes"
        )
        super().__init__(f"{what} {told}", file=str(path))


def kind_of(mode: int) -> str:
    return next((words for test, words in KINDS if test(mode)), "not a regular file")


def not_regular(path: Path, what: str, mode: int) -> UserInputError:
    through = ""
    if path.is_symlink():
        target = os.path.realpath(path)
        through = f", through a symlink to {target}" if len(target) <= 80 else ", through a symlink"
    return UserInputError(
        f"{what} is not a regular file ({kind_of(mode)}{through})",
        file=str(path),
    )


@contextlib.contextmanager
def open_regular(path: Path | str, what: str) -> Iterator[BinaryIO]:
    """`path` open for binary reading when it is a regular file (checked before the open and on
    the open descriptor), else a UserInputError naming it; OSError when it cannot be opened. For
    readers that stream a file the harness wrote itself (a regular file ends); anything read from
    a person goes through ``read_capped``."""
    path = Path(path)
    before = os.stat(path)
    if not stat.S_ISREG(before.st_mode):
        raise not_regular(path, what, before.st_mode)
    fd = os.open(path, FLAGS)
    try:
        after = os.fstat(fd)
        if not stat.S_ISREG(after.st_mode):
            raise not_regular(path, what, after.st_mode)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_capped(path: Path | str, cap_bytes: int, what: str) -> bytes:
    """The bytes of the regular file `path`, at most `cap_bytes` of them; `what` names the file
    kind in messages ("scenario file", "manifest"). Raises UserInputError when `path` is not a
    regular file, FileTooLarge when it holds more than `cap_bytes`, OSError when it cannot be
    opened or read (FileNotFoundError when it is not there)."""
    with open_regular(path, what) as handle:
        data = handle.read(cap_bytes + 1)
        claimed = os.fstat(handle.fileno()).st_size
    if len(data) > cap_bytes:  # the claimed size is told when it agrees, never trusted alone
        raise FileTooLarge(Path(path), what, claimed if claimed > cap_bytes else None, cap_bytes)
    return data


def decode_utf8(raw: bytes, path: Path | str, what: str) -> str:
    """The text of a UTF-8 file, or a UserInputError naming `path` and the line and column (in
    bytes) of the first byte that is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise UserInputError(
            f"{what} is not UTF-8: byte 0x{raw[exc.start]:02x} at column {column}",
            file=str(path),
            line=line,
        ) from None


def text_lines(raw: bytes, path: Path | str, what: str) -> list[str]:
    """The lines of a UTF-8 text file (each without its "\\n"; a last empty one dropped), or a
    UserInputError naming `path` and the line of the first byte that is not UTF-8."""
    lines = decode_utf8(raw, path, what).split("\n")
    return lines[:-1] if lines and not lines[-1] else lines


class JsonRefused(ValueError):
    """JSON that ``json.loads`` would take but a person's file may not hold; ``key``: the key
    given twice (None for a non-finite number)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JsonRefused(f"key {as_field(key)!r} given twice in one object; give it once", key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"{as_field(text)} is too large for a finite number")
    return value


def strict_json(text: str | bytes) -> Any:
    """``json.loads`` that refuses a key given twice in an object (``JsonRefused`` naming it)
    and a number that is not finite; ValueError or RecursionError for text that is not JSON."""
    return json.loads(
        text, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite
    )
