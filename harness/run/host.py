"""A node's host: one long-lived process per node that has imported the engines, and a fresh
child forked from it per group. Device side: the child runs the group's generator (the worker
hands in `harness.run.worker.iter_group`; this module imports no worker, so no cycle, and at
run time nothing of the harness but itself: the host server starts in a fraction of a second).

The host server (`host.main(NAME)` in a fresh interpreter, its authkey on stdin) is a plain
process:
1. it starts a `multiprocessing` forkserver that imports `PRELOAD` once (torch, transformers,
   the llama modeling module, bitsandbytes and torchao where installed, the harness device
   side), in the background;
2. it listens on a local socket (`multiprocessing.connection`, the authkey checked on every
   connection) and serves each connection in a thread: one group, forked into a fresh child;
3. it ends when its parent does (its stdin reaches end of file), and its forkserver and the
   children with it.

Who starts it: the driver, before it starts Ray, for its own node when the run is local (the
engines import while Ray starts); on every other node that can run a group, the driver's
`NodeHost` actor (owned by the driver, so it never outlives the run). The driver hands each
group's task every node's way to its server: the `ServerInfo` of the server it started itself,
and each other node's `NodeHost` (named, pinned), which answers with its own.

A group's Ray task (`relay_group`: it holds the group's resources, and Ray sets its
CUDA_VISIBLE_DEVICES) connects to the server (`run_group_via`) with its device environment and
the group, pickled by the driver; the server asks the forkserver for a child, which

1. sets that environment before any CUDA call (torch reads CUDA_VISIBLE_DEVICES when CUDA
   initializes, not at import) and its torch threads, and freezes what it inherited out of the
   garbage collector's reach (`gc.freeze`: the preloaded modules are never garbage, and a
   `gc.collect()` between points then costs milliseconds, not 0.15 s; the forkserver imported
   them with the collector off, `harness.run.preload`);
2. says hello (`ChildStart`): its pid, whether torch was already imported (the point of the
   forkserver), and whether forking was safe (no CUDA context inherited); an unsafe child exits
   at once and the group runs in a fresh actor instead (`Fallback`);
3. unpickles the group and runs it (harness.run.worker.measure_in_child), sends each
   `GroupItem` pickled (`Pickled`) over a `multiprocessing` Pipe, then `DONE`, and exits, so
   its memory figures (RSS, CUDA allocator) are its own.

Only the driver and the child unpickle a group or its rows: the server and the task relay
bytes, so neither imports the harness's models, and Ray reuses the task's worker process (a
group starts a few hundredths of a second after the one before it ends).

A child that dies before `DONE` (killed, `os._exit`, the OOM killer) raises `ChildDied` naming
its exit code or signal; the task's stream then fails as a lost actor's does, and the driver
retries the group's remaining points or writes them `node_lost` (harness.run.driver). A caller
that disappears (its worker killed, its connection closed) has its child killed within `POLL_S`.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, Listener
from multiprocessing.context import BaseContext
from typing import Any, TypeAlias, cast

import psutil

from harness.run.forking import Fallback, ServerInfo, Started

# imported once per node by the forkserver; a module that is not installed is skipped by it
PRELOAD = (
    "harness.run.preload",  # first: the garbage collector off while the engines import
    "torch",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "bitsandbytes",
    "torchao",
    "harness.run.worker",
    "harness.modes.offline.device.run",
    "harness.backends.transformers.backend",
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


@dataclass(frozen=True)
class Pickled:
    """One GroupItem as the child pickled it: relayed as bytes, unpickled by the driver."""

    data: bytes


@dataclass(frozen=True)
class ChildFailed:
    """The group raised in the child: the exception pickled (when it pickles; unpickled only
    where it is raised again) and its traceback."""

    error: bytes | None
    text: str


class ChildDied(RuntimeError):
    """A group's child ended before sending every item (killed, os._exit, out of memory)."""


@dataclass(frozen=True)
class Request:
    """A group for a child: `payload` is `forking.group_payload` (made by the driver),
    `extra` the keyword arguments only the caller knows (its Ray node's id), `env` the device
    environment, `caller_pid` the process whose death stops the child (None: none)."""

    payload: bytes
    env: dict[str, str | None]
    extra: dict[str, str]
    caller_pid: int | None = None


HostItem: TypeAlias = "ChildStart | Fallback | Pickled"
CONNECT_S = 20.0  # how long a group's task retries reaching a server that is still starting


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


# --- the host server ----------------------------------------------------------------------


@dataclass
class HostServer:
    """A started host server (this process is its parent: it ends when this process does)."""

    process: subprocess.Popen[bytes]
    info: ServerInfo

    def __enter__(self) -> HostServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """End the server (and its forkserver, and any child) and wait for it."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(JOIN_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server() -> HostServer:
    """Start a host server for this node; it returns at once (the engines import in the
    background, and a group's task waits for them only at its first fork)."""
    name = f"harness-host-{uuid.uuid4().hex}"
    authkey = os.urandom(32)
    # not `-m harness.run.host`: as __main__, this module's functions would not pickle by name
    command = "import sys; from harness.run import host; host.main(sys.argv[1])"
    process = subprocess.Popen(
        [sys.executable, "-c", command, name], stdin=subprocess.PIPE, close_fds=True
    )
    assert process.stdin is not None
    process.stdin.write(authkey.hex().encode() + b"\n")
    process.stdin.flush()  # kept open: its end of file tells the server this process is gone
    return HostServer(process, ServerInfo(socket_address(name), authkey))


def socket_address(name: str) -> str:
    """Linux: an abstract socket (no file to leave behind); elsewhere a file in the temp dir."""
    if sys.platform.startswith("linux"):
        return "\0" + name
    import tempfile

    return os.path.join(tempfile.gettempdir(), name)


def serve(name: str, authkey: bytes) -> None:
    """The host server's main: the forkserver first (its imports take seconds), then each
    connection in a thread. Ends, with everything it forked, when its parent is gone."""
    os.setsid()  # a process group of its own: the forkserver and its children join it
    threading.Thread(target=exit_with_parent, daemon=True).start()
    context: BaseContext | str
    try:
        context = start_forkserver()
    except (OSError, ValueError, RuntimeError) as exc:  # every group then runs fresh, told why
        context = f"the forkserver did not start ({type(exc).__name__}: {exc})"
    with Listener(socket_address(name), family="AF_UNIX", authkey=authkey) as listener:
        while True:
            try:
                conn = listener.accept()
            except (OSError, EOFError, multiprocessing.AuthenticationError):
                continue  # a caller without the key, or one that hung up while greeting
            threading.Thread(target=serve_group, args=(context, conn), daemon=True).start()


def exit_with_parent() -> None:
    """Block on stdin (the parent holds its other end); at end of file end this process's
    group: the server, its forkserver (even one still importing) and every child."""
    sys.stdin.buffer.read()
    os.killpg(os.getpgid(0), signal.SIGKILL)


def serve_group(context: BaseContext | str, conn: Connection) -> None:
    """One connection, one group: the request (`Request`), then every message of the child,
    then DONE or the failure. A caller that hangs up stops it. `context` is a string when the
    forkserver did not start: why (the group then runs fresh)."""
    with closing(conn):
        try:
            request: Request = conn.recv()
            if isinstance(context, str):
                conn.send(Fallback(context))
                return
            with closing(fork_group(context, request)) as stream:
                for message in stream:
                    conn.send(message)
            conn.send(DONE)
        except (EOFError, OSError):
            return  # the caller went away: closing the stream has stopped its child
        except BaseException as exc:  # the child died, or it failed: the caller re-raises it
            try:
                conn.send(failure(exc))
            except OSError:
                return


def relay_group(
    payload: bytes, hosts: dict[str, Any]
) -> Iterator[tuple[bytes | Fallback | Started, str]]:
    """A Ray task per group that can fork (harness.run.launchers.forked.GroupTask): it holds
    the group's Ray resources and relays, while the group runs in a fresh child of its node's
    host server (the engines already imported). It yields `Started` once the child said hello,
    then each item as the child pickled it, each with the node's id; a `Fallback` first (no
    host, or it cannot fork) asks the driver for a fresh actor instead. A failure once the child has
    started ends the stream as a lost actor's does.
    `hosts`: node id -> its NodeHost actor, or the driver's own node's ServerInfo."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    server = node_server(node_id, hosts)
    if isinstance(server, str):
        yield Fallback(server), node_id
        return
    from harness.run import node

    env = {**device_env(), "OMP_NUM_THREADS": str(node.node_threads())}
    request = Request(payload, env, {"node_id": node_id}, os.getpid())
    for item in run_group_via(server, request):
        if isinstance(item, Fallback):
            yield item, node_id
            return
        if isinstance(item, Pickled):
            yield item.data, node_id
        else:  # the child's hello
            yield Started(), node_id


def node_server(node_id: str, hosts: dict[str, Any]) -> ServerInfo | str:
    """How to reach this node's host server: the driver's own node's is handed over as it is;
    another node's NodeHost actor knows (the driver hands every node's actor handle, so a host
    still starting is waited for, never missed); or why there is none."""
    import ray
    from ray.exceptions import RayActorError

    entry = hosts.get(node_id)
    if entry is None:
        return "no host on this node (it joined after its wave started)"
    if isinstance(entry, ServerInfo):
        return entry
    try:
        return cast("ServerInfo | str", ray.get(entry.server.remote()))
    except RayActorError as exc:
        return f"the node's host is gone ({type(exc).__name__})"


def run_group_via(server: ServerInfo, request: Request) -> Iterator[HostItem]:
    """The request's group in a fresh child of the node's host server: its ChildStart, then
    each item pickled (or one Fallback). Raises what the child raised, or ChildDied."""
    try:
        conn = connect(server)
    except (OSError, EOFError, multiprocessing.AuthenticationError) as exc:
        yield Fallback(f"the node's host server cannot be reached ({type(exc).__name__}: {exc})")
        return
    with closing(conn):
        conn.send(request)
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                raise ChildDied("the node's host server ended before the group's last row") from (
                    None
                )
            if message == DONE:
                return
            if isinstance(message, ChildFailed):
                raise_failure(message)
            yield message
            if isinstance(message, Fallback):
                return


def connect(server: ServerInfo) -> Connection:
    """A connection to the server, retried while it is still starting (not yet listening)."""
    deadline = time.monotonic() + CONNECT_S
    while True:
        try:
            return Client(server.address, family="AF_UNIX", authkey=server.authkey)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class NodeHost:
    """A Ray actor on each node but the driver's (that one's server the driver started itself,
    before Ray), owned by the driver: it starts its node's host server, which ends with it.
    The forked launcher (harness.run.launchers.forked) starts it by reference: the driver never
    imports the device side."""

    def __init__(self) -> None:
        self.own: HostServer | None = None
        self.info: ServerInfo | str
        try:
            self.own = start_server()
            self.info = self.own.info
        except OSError as exc:
            self.info = f"the host server did not start ({type(exc).__name__}: {exc})"

    def server(self) -> ServerInfo | str:
        """How to reach this node's server, or why there is none."""
        return self.info


# --- forking one group ----------------------------------------------------------------------


def fork_group(
    context: BaseContext, request: Request
) -> Generator[HostItem | ChildFailed, None, None]:
    """Fork a child that sets the request's env and runs its group (unpickled only there, so
    the server never imports the device side); yield what it sends: ChildStart, then each item
    pickled, and last a ChildFailed if the group raised; a Fallback (the child was unsafe)
    ends it early. The child is killed however this ends (its caller gone, the consumer
    stopped, an error)."""
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=child_main, args=(send, request), daemon=False)  # type: ignore[attr-defined]
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
            message = next_message(receive, child, request.caller_pid)
            if message == DONE:
                return
            if isinstance(message, ChildStart) and message.unsafe is not None:
                yield Fallback(message.unsafe)
                return
            yield message
            if isinstance(message, ChildFailed):  # raised by whoever reads it (run_group_via)
                return
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
        error: BaseException = pickle.loads(failed.error)
        error.add_note(f"in the group's child process:\n{failed.text}")
        raise error
    raise RuntimeError(f"the group failed in its child process:\n{failed.text}")


def end_child(child: Any) -> None:
    if child.is_alive():
        child.kill()
    child.join(JOIN_S)


def child_main(conn: Connection, request: Request) -> None:
    """A group's child (forked by the forkserver): the device env first, then the group."""
    die_with_parent()
    gc.freeze()  # what the forkserver imported is never scanned again (harness.run.preload)
    gc.enable()
    preloaded = "torch" in sys.modules
    apply_env(request.env)
    import torch

    unsafe = fork_unsafe(torch)
    conn.send(ChildStart(os.getpid(), preloaded, unsafe))
    if unsafe is not None:
        conn.close()
        return
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    try:
        run, kwargs = pickle.loads(request.payload)
        for item in run(**kwargs, **request.extra):
            conn.send(Pickled(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)))
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
    text = "".join(traceback.format_exception(exc))
    try:
        pickled = pickle.dumps(exc)
        pickle.loads(pickled)
    except Exception:
        return ChildFailed(None, text)
    return ChildFailed(pickled, text)


def main(name: str) -> None:
    """The host server's entry (start_server): its socket's name; its authkey on stdin."""
    serve(name, bytes.fromhex(sys.stdin.buffer.readline().decode().strip()))
