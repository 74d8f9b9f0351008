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
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from harness.errors import UserInputError

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
