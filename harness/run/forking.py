"""What the orchestration side (driver, session, launchers) and a node's host (harness.run.host,
the device side) agree on about forking a group's process; at import the standard library only,
so that the host's server starts without importing the rest of the harness.

- ``FORKSERVER_SWITCH`` / ``forkserver_off``: `HARNESS_FORKSERVER=0` (or `false`, `no`, `off`)
  forks no group; `1` (`true`, `yes`, `on`, unset or empty) forks what may fork; any other value
  is refused in one line;
- ``unforkable``: why a group must start in a fresh process (the engine rule is
  `harness.modes.forks_from_host`: the engine's row and the modes' facts);
- ``ServerInfo``: how a group's task reaches its node's host server;
- ``group_payload``: a group as the driver hands it to a forked child (bytes: the host server
  and the group's task relay it without unpickling it);
- ``Fallback``: what a host answers when it cannot fork a group (it then runs in a fresh actor);
- ``Started``: a group's first message from its process, forked or fresh (the driver then knows
  the group's node before its first row, and watches that node).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# `HARNESS_FORKSERVER=0` (read by the driver): every group imports its engine in a fresh process
FORKSERVER_SWITCH = "HARNESS_FORKSERVER"
SWITCH_OFF = ("0", "false", "no", "off")
SWITCH_ON = ("1", "true", "yes", "on", "")  # empty: as if unset


def forkserver_off() -> str | None:
    """Why this run forks no group from a node host, or None: it does. A value that is neither
    (SWITCH_OFF, SWITCH_ON, any case) is a UserInputError: a typo must not fork silently."""
    raw = os.environ.get(FORKSERVER_SWITCH, "1")
    value = raw.strip().lower()
    if value in SWITCH_OFF:
        return f"{FORKSERVER_SWITCH}={value}"
    if value in SWITCH_ON:
        return None
    from harness.errors import UserInputError, quote  # here: at import, the standard library only

    raise UserInputError(
        f"{quote(raw)} is not a switch: set it to 0 (or false, no, off) to start every group in a "
        "fresh process, or 1 (true, yes, on) or leave it unset to fork from the node's host",
        field=FORKSERVER_SWITCH,
    )


def unforkable(group: Any, points: list[Any]) -> str | None:
    """Why a group must not run in a forked child (None: it may)."""
    from harness.modes import forks_from_host  # here: the host server never asks

    if forks_from_host(group.backend, {p.mode for p in points}):
        return None
    return f"a {group.backend} group with its own processes (its engine core, or a server)"


@dataclass(frozen=True)
class ServerInfo:
    """How a group's task reaches its node's host server: a local socket and its authkey."""

    address: str
    authkey: bytes


@dataclass(frozen=True)
class Fallback:
    """The group cannot run in a forked child: run it in a fresh actor (the path before hosts)."""

    reason: str


@dataclass(frozen=True)
class Started:
    """A group's process has started (a forked child said hello, or a fresh actor began): sent
    first, with the node's id, so the driver knows where the group runs before its first row."""


def group_payload(run: Callable[..., Any], kwargs: dict[str, Any]) -> bytes:
    """A group for a forked child, which runs `run(**kwargs, node_id=…)` (harness.run.host
    .child_main; `run` is pickled by reference: only the child imports it)."""
    return pickle.dumps((run, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
