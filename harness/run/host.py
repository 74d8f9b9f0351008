"""A node's host: one long-lived process per node that has imported the engines, and a fresh
child forked from it per group. Device side: the child runs the group's generator (the worker
hands in `harness.run.worker.iter_group`; this module imports no worker, so no cycle).

`NodeHost` is a Ray actor the driver creates on each node that can run a group (the driver owns
it, so it shares the driver's fate and never outlives the run). It owns a `multiprocessing`
forkserver: a process started fresh (not forked from the Ray worker, so no Ray or thread
state) that imports `PRELOAD` once (torch, transformers, the llama modeling module,
bitsandbytes and torchao where installed, the harness device-side modules). Each group's
`GroupActor` (a fresh Ray actor still: it holds the group's Ray resources, and Ray sets its
CUDA_VISIBLE_DEVICES) calls `NodeHost.run_group` with its device environment; the host asks the
forkserver for a child, which

1. sets that environment before any CUDA call (torch reads CUDA_VISIBLE_DEVICES when CUDA
   initializes, not at import) and its torch threads;
2. says hello (`ChildStart`): its pid, whether torch was already imported (the point of the
   forkserver), and whether forking was safe (no CUDA context inherited); an unsafe child exits
   at once and the group runs in its actor instead (`Fallback`);
3. runs the group (`iter_group`) and sends each `GroupItem` over a `multiprocessing` Pipe
   (pickle), then `DONE`, and exits, so its memory figures (RSS, CUDA allocator) are its own.

A child that dies before `DONE` (killed, `os._exit`, the OOM killer) raises `ChildDied` naming
its exit code or signal; the actor's stream then fails as a lost actor's does, and the driver
retries the group's remaining points or writes them `node_lost` (harness.run.driver). A caller
that disappears (its actor killed) has its child killed within `POLL_S`.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any

import psutil

from harness.run.contracts import GroupItem

# imported once per node by the forkserver; a module that is not installed is skipped by it
PRELOAD = (
    "torch",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "bitsandbytes",
    "torchao",
    "harness.run.worker",
    "harness.modes.offline.device.run",
    "harness.backends.transformers",
)
# what a group's child takes from its actor: the devices Ray gave it and its thread count
DEVICE_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
)
POLL_S = 1.0  # how often a waiting host checks that its caller is still alive
JOIN_S = 30.0  # how long a host waits for a finished child to exit
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): a signal for this process when its parent dies
DONE = "done"  # the child's last message: every item of the group was sent


@dataclass(frozen=True)
class ChildStart:
    """A child's first message. `preloaded`: torch was imported before the child began (by the
    forkserver); `unsafe`: why this child must not run the group (None: it may)."""

    pid: int
    preloaded: bool
    unsafe: str | None
    ready_s: float = 0.0  # seconds from the host's fork request to this message (the host's clock)


@dataclass(frozen=True)
class Fallback:
    """The group cannot run in a forked child: run it in the calling actor (today's path)."""

    reason: str


@dataclass(frozen=True)
class ChildFailed:
    """The group raised in the child: the exception (when it pickles) and its traceback."""

    error: BaseException | None
    text: str


class ChildDied(RuntimeError):
    """A group's child ended before sending every item (killed, os._exit, out of memory)."""


HostItem = ChildStart | Fallback | GroupItem
# the group's generator, called with keyword arguments in the child (pickled by reference)
GroupRun = Callable[..., Iterator[GroupItem]]


def device_env() -> dict[str, str | None]:
    """This process's device environment, to hand to a group's child (None: unset there)."""
    return {name: os.environ.get(name) for name in DEVICE_ENV}


def start_forkserver() -> BaseContext:
    """The forkserver context, its server started with `PRELOAD` (it imports in the background:
    the first fork waits for it). torch's CUDA check goes through NVML, so that importing a
    module that asks `torch.cuda.is_available()` leaves no CUDA driver state to fork."""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    from multiprocessing import forkserver

    forkserver.ensure_running()
    return context


class NodeHost:
    """A Ray actor, one per node, owned by the driver: forks one child per group (threaded, so
    groups on one node's several GPUs fork side by side). The CLI hands this class to the
    driver, which never imports the device side."""

    def __init__(self) -> None:
        self.broken: str | None = None
        self.context: BaseContext | None = None
        try:
            self.context = start_forkserver()
        except (OSError, ValueError, RuntimeError) as exc:
            self.broken = f"the forkserver did not start ({type(exc).__name__}: {exc})"

    def run_group(
        self, caller_pid: int, env: dict[str, str | None], run: GroupRun, kwargs: dict[str, Any]
    ) -> Iterator[HostItem]:
        """`run(**kwargs)` in a fresh child: its ChildStart, then each GroupItem (or one
        Fallback)."""
        if self.context is None:
            yield Fallback(self.broken or "no forkserver")
            return
        yield from run_group_in_child(self.context, env, run, kwargs, caller_pid=caller_pid)


def run_group_in_child(
    context: BaseContext,
    env: dict[str, str | None],
    run: GroupRun,
    kwargs: dict[str, Any],
    *,
    caller_pid: int | None = None,
) -> Iterator[HostItem]:
    """Fork a child that sets `env` and runs `run(**kwargs)`; yield what it sends: ChildStart,
    then each GroupItem; a Fallback (the child was unsafe) ends it early. The child is killed
    however this ends (its caller gone, the consumer stopped, an error)."""
    receive, send = context.Pipe(duplex=False)
    args = (send, env, run, kwargs)
    child = context.Process(target=child_main, args=args, daemon=False)  # type: ignore[attr-defined]
    began = time.perf_counter()
    try:
        child.start()
    except (OSError, EOFError) as exc:  # the forkserver died (a crash in its preload, say)
        send.close()
        receive.close()
        yield Fallback(f"the forkserver cannot fork ({type(exc).__name__}: {exc})")
        return
    send.close()  # the child holds the only write end: its exit is our EOF
    try:
        while True:
            message = next_message(receive, child, caller_pid)
            if message == DONE:
                return
            if isinstance(message, ChildFailed):
                raise_failure(message)
            if isinstance(message, ChildStart):
                if message.unsafe is not None:
                    yield Fallback(message.unsafe)
                    return
                message = ChildStart(
                    message.pid, message.preloaded, None, time.perf_counter() - began
                )
            yield message
    finally:
        receive.close()
        end_child(child)


def next_message(receive: Connection, child: Any, caller_pid: int | None) -> Any:
    """The child's next message; ChildDied when it ended without `DONE`."""
    while True:  # the caller is checked before every message and every POLL_S while waiting
        if caller_pid is not None and not psutil.pid_exists(caller_pid):
            raise ChildDied(f"the group's actor (pid {caller_pid}) is gone; its child is stopped")
        if receive.poll(POLL_S):
            break
    try:
        return receive.recv()
    except (EOFError, OSError):
        child.join(JOIN_S)
        raise ChildDied(
            f"the group's process (pid {child.pid}) {exit_words(child.exitcode)}"
        ) from None


def exit_words(code: int | None) -> str:
    if code is None:
        return "closed its pipe and did not exit"
    if code < 0:
        return f"was killed by signal {-code} ({signal.Signals(-code).name})"
    return f"exited with code {code} before its last row"


def raise_failure(failed: ChildFailed) -> None:
    """Re-raise the child's exception (with its traceback as a note) as if raised here."""
    if failed.error is not None:
        failed.error.add_note(f"in the group's child process:\n{failed.text}")
        raise failed.error
    raise RuntimeError(f"the group failed in its child process:\n{failed.text}")


def end_child(child: Any) -> None:
    if child.is_alive():
        child.kill()
    child.join(JOIN_S)


def child_main(
    conn: Connection, env: dict[str, str | None], run: GroupRun, kwargs: dict[str, Any]
) -> None:
    """A group's child (forked by the forkserver): the device env first, then the group."""
    die_with_parent()
    preloaded = "torch" in sys.modules
    apply_env(env)
    import torch

    unsafe = fork_unsafe(torch)
    conn.send(ChildStart(os.getpid(), preloaded, unsafe))
    if unsafe is not None:
        conn.close()
        return
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    try:
        for item in run(**kwargs):
            conn.send(item)
    except BaseException as exc:
        conn.send(failure(exc))
        conn.close()
        raise SystemExit(1) from None
    conn.send(DONE)
    conn.close()


def die_with_parent() -> None:
    """SIGKILL this child when the forkserver ends (it ends with its host, and the host with
    the driver), so a group never runs on after its run is gone. Linux only (prctl)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the forkserver ended before prctl took effect
        os._exit(1)


def apply_env(env: dict[str, str | None]) -> None:
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def fork_unsafe(torch: Any) -> str | None:
    """Why this forked child must not touch the device: the forkserver had a CUDA context (a
    forked CUDA context is unusable), or torch marks this process a bad fork."""
    if torch.cuda.is_initialized():
        return "a CUDA context already exists in the forkserver"
    bad_fork = getattr(torch.cuda, "_is_in_bad_fork", None)
    if bad_fork is not None and bad_fork():
        return "torch reports a bad fork (CUDA initialized before the fork)"
    return None


def failure(exc: BaseException) -> ChildFailed:
    import pickle

    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return ChildFailed(None, text)
    return ChildFailed(exc, text)
