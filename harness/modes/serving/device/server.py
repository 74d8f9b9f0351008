"""A real `vllm serve` for one configuration, as a context manager.

    with VllmServer(config, log_path=run_dir / "server.log") as server:
        ... server.base_url ...          # http://127.0.0.1:<free port>

- Started with vLLM's own command line (`python -m harness.modes.serving.device.vllm_cli serve
  ...`, see that module for why not the bare `vllm` script) in its own session, so it leads a new
  process group that holds everything it starts (API server, engine core, worker, resource
  tracker), in the environment `env.subprocess_env` builds (with the caller's `env` on top).
- Bound to 127.0.0.1 on a port that was free a moment before (`free_port`).
- Ready when `GET /health` answers 200 and `GET /v1/models` lists the served name, within
  `startup_timeout_s`; a server that exits or does not get ready is stopped and a `ServerError`
  carries the last lines of its log.
- Stopped with its whole process group: SIGTERM, then SIGKILL after `grace_s` for whatever is
  left, at the end of the block and on any failure inside it. Zombies do not count as left.
- Its output (stdout and stderr) goes to `log_path`, which stays for the run folder.

On the CPU the KV pool is sized with `--kv-cache-memory-bytes` (the plan's figure, as the offline
backend does); on GPUs vLLM takes `gpu_memory_utilization` x the card.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

import psutil
from pydantic import BaseModel, ConfigDict

from harness.measure.speculation import Counters, from_prometheus
from harness.modes.serving.device.env import subprocess_env

# The `vllm` command as this package runs it.
VLLM_COMMAND: tuple[str, ...] = (sys.executable, "-m", "harness.modes.serving.device.vllm_cli")
LOG_TAIL_LINES = 40
# vLLM's own Prometheus counters (vllm/v1/metrics/loggers.py), in prompt tokens: looked up in
# the prefix cache, and found there. A counter is exposed with the `_total` suffix.
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
# The server's development endpoints (POST /reset_prefix_cache), on for a server that caches
# prefixes, so that each level starts with an empty cache.
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


class ServerError(RuntimeError):
    """The server did not start, or died; `log_tail` holds the last lines of its log."""

    def __init__(self, message: str, log_tail: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.log_tail = list(log_tail)

    def __str__(self) -> str:
        base = super().__str__()
        if not self.log_tail:
            return base
        return base + "\n--- last lines of the server log ---\n" + "\n".join(self.log_tail)


class ServerConfig(BaseModel):
    """What `vllm serve` is started with, in vLLM's own names (`--dtype float32`, ...).

    `from_engine_kwargs` takes the offline backend's `engine_kwargs` (after the dialect's
    `adapt`), so the server runs exactly the configuration the offline rows measured.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    served_model_name: str = "harness"
    tokenizer: str | None = None
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None
    enforce_eager: bool = False
    seed: int = 0
    kv_cache_memory_bytes: int | None = None  # the CPU's KV pool (bytes)
    gpu_memory_utilization: float | None = None  # GPUs: the share vLLM takes up front
    max_num_seqs: int | None = None
    enable_prefix_caching: bool = False  # as offline: every prompt computed in full
    load_format: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    # a LoRA adapter served under `served_model_name` (the base under "<name>-base"), so every
    # request that names the served model runs the adapter; max_lora_rank from engine_kwargs
    lora_path: str | None = None
    max_lora_rank: int | None = None
    extra_args: tuple[str, ...] = ()  # further `vllm serve` flags, verbatim
    # the group's layout (backends.vllm.args.layout_kwargs): `vllm serve -tp k` and its kin
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    enable_expert_parallel: bool = False
    # what starts the ranks (harness.spec.capabilities.layout_executor); passed for "mp" and
    # "ray" only, so a one-card server's arguments stay the server's defaults
    distributed_executor_backend: str | None = None
    # what the server's processes must see for the layout (the engine's environment,
    # harness.backends.vllm.args.engine_environment: each CPU rank's cores)
    environment: dict[str, str] = {}
    # the group's speculative decoding (backends.vllm.args.speculative_kwargs): vLLM's
    # `speculative_config`, passed as `--speculative-config '{json}'`; None without
    speculative_config: dict[str, Any] | None = None

    # Offline engine arguments with no meaning for a server (or set by the server itself).
    IGNORED_ENGINE_KWARGS: ClassVar[frozenset[str]] = frozenset(
        {
            "worker_extension_cls",
            "disable_log_stats",
            "max_logprobs",
            "enable_lora",  # implied by lora_path (serve_args)
            "max_loras",  # one adapter per server
        }
    )

    @classmethod
    def from_engine_kwargs(
        cls, kwargs: Mapping[str, Any], *, served_model_name: str = "harness", **overrides: Any
    ) -> ServerConfig:
        """A config from `backends.vllm.engine_kwargs(...)`; unknown keys are an error."""
        known = set(cls.model_fields) - {"served_model_name", "extra_args"}
        fields: dict[str, Any] = {"served_model_name": served_model_name}
        unknown = []
        for key, value in kwargs.items():
            if key in cls.IGNORED_ENGINE_KWARGS:
                continue
            if key in known:
                fields[key] = value
            else:
                unknown.append(key)
        if unknown:
            raise ValueError(f"engine arguments with no `vllm serve` mapping here: {unknown}")
        fields.update(overrides)
        return cls(**fields)

    def serve_args(self, host: str, port: int) -> list[str]:
        """The arguments after `vllm serve`."""
        args = [self.model, "--host", host, "--port", str(port)]
        if self.lora_path is None:
            args += ["--served-model-name", self.served_model_name]
        else:  # requests name the adapter, served under the name the base would have had
            args += ["--served-model-name", f"{self.served_model_name}-base", "--enable-lora"]
            args += ["--max-loras", "1", "--max-lora-rank", str(self.max_lora_rank or 8)]
            args += ["--lora-modules", f"{self.served_model_name}={self.lora_path}"]
        args += ["--tokenizer", self.tokenizer or self.model]
        args += ["--dtype", self.dtype, "--kv-cache-dtype", self.kv_cache_dtype]
        args += ["--seed", str(self.seed)]
        if self.quantization is not None:
            args += ["--quantization", self.quantization]
        if self.max_model_len is not None:
            args += ["--max-model-len", str(self.max_model_len)]
        if self.enforce_eager:
            args.append("--enforce-eager")
        if self.kv_cache_memory_bytes is not None:
            args += ["--kv-cache-memory-bytes", str(self.kv_cache_memory_bytes)]
        if self.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        if self.tensor_parallel_size > 1:
            args += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.pipeline_parallel_size > 1:
            args += ["--pipeline-parallel-size", str(self.pipeline_parallel_size)]
        if self.enable_expert_parallel:
            args.append("--enable-expert-parallel")
        if self.distributed_executor_backend in ("mp", "ray"):
            args += ["--distributed-executor-backend", self.distributed_executor_backend]
        if self.max_num_seqs is not None:
            args += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.speculative_config is not None:
            args += ["--speculative-config", json.dumps(self.speculative_config, sort_keys=True)]
        args.append(
            "--enable-prefix-caching"
            if self.enable_prefix_caching
            else "--no-enable-prefix-caching"
        )
        if self.load_format is not None:
            args += ["--load-format", self.load_format]
        if self.revision is not None:
            args += ["--revision", self.revision]
        if self.trust_remote_code:
            args.append("--trust-remote-code")
        args.append("--disable-uvicorn-access-log")  # one line per request would drown the log
        return [*args, *self.extra_args]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now (the kernel's choice); the server binds it right after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def tail_lines(path: Path, n: int = LOG_TAIL_LINES) -> list[str]:
    """The last `n` lines of a text file (fewer or none when it is short or absent)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-n:]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group `pgid`."""
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getpgid(proc.info["pid"]) == pgid:
                members.append(int(proc.info["pid"]))
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def stop_group(proc: subprocess.Popen[bytes], pgid: int, grace_s: float) -> None:
    """SIGTERM the whole group, wait up to `grace_s` for it to empty, then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader so that it does not linger as a zombie
        if not group_members(pgid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)


def metric_samples(metrics_text: str) -> list[tuple[str, dict[str, str], float]]:
    """A Prometheus text page as (name, labels, value) samples (comments and lines that do not
    parse are skipped; label values are vLLM's: no escaped quotes or commas)."""
    samples = []
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels: dict[str, str] = {}
        for pair in rest.rstrip("}").split(","):
            key, sep, text = pair.partition("=")
            if sep:
                labels[key.strip()] = text.strip().strip('"')
        try:
            samples.append((name.strip(), labels, float(value)))
        except ValueError:
            continue
    return samples


def counter_total(metrics_text: str, name: str) -> float | None:
    """The sum of a Prometheus counter's samples over its label sets (`name_total`, or `name`
    as older clients expose it); None when the text has no sample of it."""
    total, seen = 0.0, False
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        sample = line.split("{", 1)[0].split(" ", 1)[0]
        if sample in (name + "_total", name):
            total += float(line.rsplit(" ", 1)[-1])
            seen = True
    return total if seen else None


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""


class VllmServer:
    """One `vllm serve` process group; see the module docstring."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        log_path: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout_s: float = 600.0,
        grace_s: float = 15.0,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] = VLLM_COMMAND,
    ) -> None:
        self.config = config
        self.log_path = Path(log_path)
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.startup_timeout_s = startup_timeout_s
        self.grace_s = grace_s
        self._env = dict(env or {})
        self._command = tuple(command)
        self._proc: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.startup_s: float | None = None

    # -- facts -----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def argv(self) -> list[str]:
        return [*self._command, "serve", *self.config.serve_args(self.host, self.port)]

    def alive(self) -> bool:
        """The server's leader process is still running."""
        return self._proc is not None and self._proc.poll() is None

    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def log_tail(self, n: int = LOG_TAIL_LINES) -> list[str]:
        return tail_lines(self.log_path, n)

    def prefix_cache_counters(self) -> tuple[float, float] | None:
        """(tokens queried, tokens hit) from the server's /metrics now; None when unreadable."""
        try:
            status, body = _get(self.base_url + "/metrics", 10.0)
        except (OSError, ValueError):
            return None
        if status != 200:
            return None
        text = body.decode("utf-8", "replace")
        queries, hits = (
            counter_total(text, PREFIX_CACHE_QUERIES),
            counter_total(text, PREFIX_CACHE_HITS),
        )
        return None if queries is None and hits is None else (queries or 0.0, hits or 0.0)

    def metrics_text(self) -> str | None:
        """The server's /metrics page now; None when unreadable."""
        try:
            status, body = _get(self.base_url + "/metrics", 10.0)
        except (OSError, ValueError):
            return None
        return body.decode("utf-8", "replace") if status == 200 else None

    def speculation_counters(self) -> Counters | None:
        """The engine's speculative-decoding counters from /metrics now (``from_prometheus``);
        None without speculation or when the page is unreadable."""
        if self.config.speculative_config is None or (text := self.metrics_text()) is None:
            return None
        return from_prometheus(metric_samples(text))

    def reset_prefix_cache(self) -> bool:
        """Empty the server's prefix cache (POST /reset_prefix_cache, a development endpoint:
        `DEV_MODE_ENV`); whether it answered 200."""
        request = urllib.request.Request(self.base_url + "/reset_prefix_cache", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30.0) as response:
                return int(response.status) == 200
        except (OSError, ValueError):
            return False

    # -- life ------------------------------------------------------------------------------
    def start(self) -> VllmServer:
        if self._proc is not None:
            raise RuntimeError("server already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = subprocess_env(self._env)
        started = time.monotonic()
        with self.log_path.open("wb") as log:
            log.write(f"$ {' '.join(self.argv)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # leader of a new process group: stopped as a whole
            )
        self.pgid = self._proc.pid  # a session leader's pgid is its pid
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started
        return self

    def _wait_ready(self, started: float) -> None:
        deadline = started + self.startup_timeout_s
        healthy = False
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServerError(
                    f"vllm serve exited with code {self.returncode()} before it was ready "
                    f"(log: {self.log_path})",
                    self.log_tail(),
                )
            try:
                if not healthy:
                    healthy = _get(self.base_url + "/health", 5.0)[0] == 200
                if healthy:
                    status, body = _get(self.base_url + "/v1/models", 5.0)
                    if status == 200 and self.config.served_model_name in _model_ids(body):
                        return
            except (OSError, ValueError):
                pass  # not listening yet
            time.sleep(0.5)
        raise ServerError(
            f"vllm serve was not ready after {self.startup_timeout_s:.0f} s (log: {self.log_path})",
            self.log_tail(),
        )

    def stop(self) -> None:
        """Stop the whole process group (idempotent)."""
        if self._proc is None or self.pgid is None:
            return
        stop_group(self._proc, self.pgid, self.grace_s)

    def kill(self) -> None:
        """SIGKILL the whole group at once: a server that dies (tests, a lost node)."""
        if self.pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGKILL)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _model_ids(body: bytes) -> set[str]:
    data = json.loads(body)
    return {str(item.get("id")) for item in data.get("data", []) if isinstance(item, dict)}
