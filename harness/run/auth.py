"""Ray's token authentication, on for every cluster the harness starts or joins.

A Ray cluster without a token runs code for anyone who reaches its ports, and Ray's gRPC servers
listen on every interface whatever node address they advertise (measured with Ray 2.60:
`gcs_server` and `raylet` on `*:<port>` even with `_node_ip_address="127.0.0.1"`), so loopback
binding cannot close a local cluster: the token does. The token lives in one file, readable by its
owner only; the harness prints that file's location, never the token.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import stat
import sys
from pathlib import Path

from harness.atomic import atomic_write_bytes
from harness.errors import UserInputError
from harness.files import read_capped

MODE_VAR = "RAY_AUTH_MODE"
TOKEN_VAR = "RAY_AUTH_TOKEN"
TOKEN_PATH_VAR = "RAY_AUTH_TOKEN_PATH"


def token_path() -> Path:
    """Where Ray reads the token: RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token."""
    configured = os.environ.get(TOKEN_PATH_VAR)
    return Path(configured) if configured else Path.home() / ".ray" / "auth_token"


def token_auth_disabled() -> bool:
    """True only when the person running the harness turned token auth off explicitly."""
    return os.environ.get(MODE_VAR, "").strip().lower() == "disabled"


def require_token_mode() -> None:
    """Token mode for this process and the Ray processes it starts, unless explicitly disabled.

    Ray's core reads RAY_AUTH_MODE into its config once; when Ray is already imported the config
    is re-read, as Ray itself does when it turns token mode on for a new local cluster (without
    that, the driver would not send the token its own new cluster requires)."""
    if token_auth_disabled() or os.environ.get(MODE_VAR) == "token":
        return
    os.environ[MODE_VAR] = "token"
    if "ray._raylet" in sys.modules:
        from ray._raylet import Config  # type: ignore[attr-defined]  # a Cython module

        Config.initialize("")


# A token as Ray and the harness make one (``secrets.token_hex(32)``): hex, 128 bits at least.
TOKEN_FORM = re.compile(r"[0-9a-fA-F]{32,1024}")
MAX_TOKEN_BYTES = 4096
PROBE_TIMEOUT_S = 3.0  # the head answers a token check in milliseconds


def has_token() -> bool:
    if os.environ.get(TOKEN_VAR, "").strip():
        return True
    return os.path.lexists(token_path())


def read_token_file(path: Path) -> str:
    """The token in `path`, which must be a regular file (not a link), owned by this user, not
    readable by group or others, holding one well-formed token; otherwise a UserInputError in
    one line, and the file is left exactly as it is (never chmod-ed, never rewritten)."""
    untouched = "the file is left as it is"
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        why = "is a symlink: point it at the token file itself"
    elif not stat.S_ISREG(info.st_mode):
        why = "is not a regular file"
    elif info.st_uid != os.geteuid():
        why = f"belongs to user id {info.st_uid}, not to you ({os.geteuid()})"
    elif info.st_mode & 0o077:
        why = (
            f"is readable by others (mode {stat.S_IMODE(info.st_mode):04o}): if it is your token, "
            "`chmod 600` it"
        )
    else:
        text = read_capped(path, MAX_TOKEN_BYTES, "Ray token file").decode("ascii", "replace")
        if TOKEN_FORM.fullmatch(text.strip()):
            return text.strip()
        why = "does not hold a Ray token (32 to 1,024 hex digits, as Ray and the harness make)"
    raise UserInputError(f"{TOKEN_PATH_VAR}: {path} {why}; {untouched}", field=TOKEN_PATH_VAR)


def ensure_token() -> Path | None:
    """For a cluster started here: the token file, created (0600) when missing; an existing one
    is used only when ``read_token_file`` accepts it (it is never chmod-ed or rewritten). None
    when the token comes from RAY_AUTH_TOKEN or auth is disabled."""
    if token_auth_disabled() or os.environ.get(TOKEN_VAR, "").strip():
        return None
    path = token_path()
    if not os.path.lexists(path):
        write_secret(path, secrets.token_hex(32))
    read_token_file(path)
    return path


def token_value() -> str | None:
    """This machine's token: RAY_AUTH_TOKEN, else the checked token file; None when neither."""
    value = os.environ.get(TOKEN_VAR, "").strip()
    if value:
        return value
    path = token_path()
    return read_token_file(path) if os.path.lexists(path) else None


def check_token_accepted(address: str) -> None:
    """Ask the head at HOST:PORT (its GCS) once whether it takes this machine's token, within
    ``PROBE_TIMEOUT_S``: Ray's InvalidAuthToken becomes one line (Ray itself retries for ~20 s
    and then suggests `ray stop`, which would stop the head). Anything else (no answer, no token
    auth there) is left to ``ray.init``."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    token = token_value()
    if token is None or token_auth_disabled():
        return
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.GetClusterId(
                gcs_service_pb2.GetClusterIdRequest(),  # type: ignore[attr-defined]
                metadata=(("authorization", f"Bearer {token}"),),
                timeout=PROBE_TIMEOUT_S,
            )
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAUTHENTICATED:
                return
            where = f"${TOKEN_VAR}" if os.environ.get(TOKEN_VAR, "").strip() else token_path()
            raise UserInputError(
                f"the Ray cluster at {address} refuses this machine's token (Ray: "
                f"InvalidAuthToken): {where} must hold the head's token; copy the head's token "
                "file here again",
                field="--address",
            ) from None


def write_secret(path: Path, text: str) -> None:
    """Atomically, readable by the owner only, in a folder only the owner can enter if new."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write_bytes(path, text.encode(), mode=0o600)


def require_token_to_join(address: str) -> None:
    """Joining a cluster needs its token here first: one line saying what to set, exit 2."""
    if token_auth_disabled():
        return
    if has_token():
        token_value()  # a token file that is not one: refused, left as it is
        return
    raise UserInputError(
        f"joining the Ray cluster at {address} needs its token: copy the head's token file "
        f"(its location is printed by `harness node start --head`) to this machine and set "
        f"{TOKEN_PATH_VAR}=<that file> (or {TOKEN_VAR}); looked in {token_path()}",
        field="--address",
    )


def refused_hint() -> str:
    """What a refused join most often means under token auth (Ray says only 'failed to connect')."""
    return (
        f"if the cluster runs with token auth (the harness default), this machine's token "
        f"({TOKEN_VAR} or {token_path()}) must be the head's"
    )


def join_instructions(head_address: str) -> list[str]:
    """Lines `harness node start --head` prints: how a worker or driver joins; no secret in them,
    every value in a command shell-quoted."""
    head_address = shlex.quote(head_address)
    if token_auth_disabled():
        return [
            f"token auth is OFF ({MODE_VAR}=disabled): anyone who reaches this node's Ray ports "
            "can run code on it",
            f"join from a worker: harness node start --address {head_address}",
        ]
    where = f"${TOKEN_VAR} (set here)" if os.environ.get(TOKEN_VAR, "").strip() else token_path()
    return [
        f"token auth is on; the cluster token is in {where} (never printed)",
        "copy it to each worker over a channel you trust (e.g. scp), then on the worker:",
        f"  {TOKEN_PATH_VAR}=<copied file> harness node start --address {head_address}",
        f"and drivers: {TOKEN_PATH_VAR}=<copied file> harness run --address {head_address} ...",
    ]
