"""Ray's token authentication, on for every cluster the harness starts or joins.

A Ray cluster without a token runs code for anyone who reaches its ports, and Ray's gRPC servers
listen on every interface whatever node address they advertise (measured with Ray 2.60:
`gcs_server` and `raylet` on `*:<port>` even with `_node_ip_address="127.0.0.1"`), so loopback
binding cannot close a local cluster: the token does. The token lives in one file, readable by its
owner only; the harness prints that file's location, never the token.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from harness.atomic import atomic_write_bytes
from harness.errors import UserInputError

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


def has_token() -> bool:
    if os.environ.get(TOKEN_VAR, "").strip():
        return True
    path = token_path()
    return path.is_file() and path.stat().st_size > 0


def ensure_token() -> Path | None:
    """For a cluster started here: the token file, created (0600) when missing, tightened to 0600
    when it exists. None when the token comes from RAY_AUTH_TOKEN or auth is disabled."""
    if token_auth_disabled() or os.environ.get(TOKEN_VAR, "").strip():
        return None
    path = token_path()
    if not (path.is_file() and path.stat().st_size > 0):
        write_secret(path, secrets.token_hex(32))
    path.chmod(0o600)
    return path


def write_secret(path: Path, text: str) -> None:
    """Atomically, readable by the owner only, in a folder only the owner can enter if new."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write_bytes(path, text.encode(), mode=0o600)


def require_token_to_join(address: str) -> None:
    """Joining a cluster needs its token here first: one line saying what to set, exit 2."""
    if token_auth_disabled() or has_token():
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
    """Lines `harness node start --head` prints: how a worker or driver joins; no secret in them."""
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
