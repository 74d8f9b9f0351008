"""What this machine has, and how it joins the Ray cluster saying so.

`detect()` asks nvidia-smi, then amd-smi (rocm-smi as a fallback), and otherwise calls the node a
CPU node. It never imports torch: a Ray head or a driver must be able to describe itself without
an engine installed. The parsers are pure functions of the tools' text output so tests can feed
them recorded samples.

Every node advertises custom Ray resources and two labels, which the driver routes by:

    NVIDIA  resources {"accel:nvidia": 8, "gpu:H100-SXM-80GB": 8}
            labels    {"vendor": "nvidia", "gpu": "H100-SXM-80GB"}
    AMD     resources {"accel:amd": 8, "gpu:MI300X": 8}
            labels    {"vendor": "amd", "gpu": "MI300X"}
    CPU     resources {"accel:cpu": 1}
            labels    {"vendor": "cpu", "gpu": "none"}

`gpu:<name>` uses the catalog name when the reported device name is a catalog alias, else the
reported name made safe for Ray (letters, digits, `-`, `_`, `.`; at most 63 characters, which is
also what a Ray or Kubernetes label value accepts). A CPU node offers one `accel:cpu` slot: one
CPU group at a time per node, since a CPU benchmark wants every core to itself.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import psutil
from pydantic import BaseModel, ConfigDict, Field

from harness.errors import UserInputError, quote
from harness.spec.catalog import Vendor, gpu_for_device_name
from harness.units import GIB, MIB, to_gib

TARGET_VENDOR: dict[str, Vendor] = {"cuda": "nvidia", "rocm": "amd", "cpu": "cpu"}

SMI_TIMEOUT_S = 30.0  # amd-smi static takes seconds on an 8-GPU node
NVIDIA_QUERY = [
    "--query-gpu=name,memory.total,driver_version",
    "--format=csv,noheader,nounits",
]
ROCM_BIN = Path("/opt/rocm/bin")
# Tools print "MiB"/"GiB" or, meaning the same, "MB"/"GB".
UNIT_BYTES = {"B": 1, "KB": 2**10, "MB": MIB, "GB": GIB, "KIB": 2**10, "MIB": MIB, "GIB": GIB}


class GpuReading(NamedTuple):
    """One device as a vendor tool reports it."""

    name: str
    memory_gib: float  # 0.0 when the tool did not say
    driver: str | None


class NodeInventory(BaseModel):
    """What one machine offers the cluster."""

    model_config = ConfigDict(extra="forbid")
    vendor: Vendor
    gpu_count: int = Field(ge=0)
    gpu_names: list[str] = Field(default_factory=list)  # as the vendor tool reports them
    catalog_gpu: str | None = None  # catalog name when every device maps to the same entry
    memory_gib: list[float] = Field(default_factory=list)  # per device, GiB (0.0 = unknown)
    driver: str | None = None
    cpus: int = Field(ge=1)
    ram_gib: float = Field(ge=0)
    hostname: str


# --------------------------------------------------------------------------- parsing (pure)


def parse_nvidia_smi(text: str) -> list[GpuReading]:
    """Rows of nvidia-smi with NVIDIA_QUERY (csv, no header, no units): name, MiB, driver.

    memory.total is in MiB. Blank lines are skipped; a value such as `[N/A]` reads as unknown.
    """
    readings: list[GpuReading] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.rsplit(",", 2)]
        if len(parts) != 3:
            raise ValueError(f"unexpected nvidia-smi row {raw!r}: expected 'name, MiB, driver'")
        name, mib, driver = parts
        readings.append(GpuReading(name, _mib_to_gib(mib), _known(driver)))
    return readings


def parse_amd_smi(json_text: str) -> list[GpuReading]:
    """Devices in `amd-smi static --json`.

    Accepts the layouts amd-smi has used: a list of per-GPU objects (ROCm 6.x), the same list
    under "gpu_data" (newer releases), or a single object. VRAM size is `{"value": N, "unit":
    "MB"}`, a string such as "196592 MB", or a bare number of MB; amd-smi's MB are MiB.
    """
    data: Any = json.loads(json_text)
    if isinstance(data, dict):
        data = data.get("gpu_data", [data])
    if not isinstance(data, list):
        raise ValueError("amd-smi JSON: expected a list of GPUs or an object with 'gpu_data'")
    readings: list[GpuReading] = []
    for gpu in data:
        if not isinstance(gpu, dict):
            continue
        asic = _as_dict(gpu.get("asic"))
        board = _as_dict(gpu.get("board"))
        name = _known(asic.get("market_name")) or _known(board.get("product_name")) or "AMD GPU"
        vram = _as_dict(gpu.get("vram"))
        size = vram.get("size", vram.get("vram_size"))
        driver = _as_dict(gpu.get("driver"))
        version = _known(driver.get("version")) or _known(driver.get("driver_version"))
        readings.append(GpuReading(name, _size_to_gib(size), version))
    return readings


def parse_rocm_smi(json_text: str) -> list[GpuReading]:
    """Devices in `rocm-smi --showproductname --showmeminfo vram --showdriverversion --json`."""
    data: Any = json.loads(json_text)
    if not isinstance(data, dict):
        raise ValueError("rocm-smi JSON: expected an object keyed by card")
    system = _as_dict(data.get("system"))
    driver = _known(_get_ci(system, "driver version"))
    readings: list[GpuReading] = []
    for key in sorted(data, key=_card_index):
        if not key.lower().startswith("card"):
            continue
        card = _as_dict(data[key])
        name = (
            _known(_get_ci(card, "card series")) or _known(_get_ci(card, "card model")) or "AMD GPU"
        )
        total_b = _known(_get_ci(card, "vram total memory (b)"))
        gib = to_gib(float(total_b)) if total_b and total_b.isdigit() else 0.0
        readings.append(GpuReading(name, round(gib, 2), driver))
    return readings


# --------------------------------------------------------------------------- detection


def detect() -> NodeInventory:
    """Inventory of this machine: NVIDIA if nvidia-smi lists GPUs, else AMD, else CPU.

    A tool that is missing, fails, hangs past SMI_TIMEOUT_S or prints something unreadable
    counts as "no GPUs from this vendor".
    """
    nvidia = _tool("nvidia-smi")
    if nvidia:
        readings = _safe(parse_nvidia_smi, _run([nvidia, *NVIDIA_QUERY]))
        if readings:
            return inventory_from("nvidia", readings)
    amd = _tool("amd-smi")
    if amd:
        readings = _safe(parse_amd_smi, _run([amd, "static", "--json"]))
        if readings:
            return inventory_from("amd", readings)
    rocm = _tool("rocm-smi")
    if rocm:
        argv = [rocm, "--showproductname", "--showmeminfo", "vram", "--showdriverversion", "--json"]
        readings = _safe(parse_rocm_smi, _run(argv))
        if readings:
            return inventory_from("amd", readings)
    return inventory_from("cpu", [])


def inventory_from(vendor: Vendor, readings: list[GpuReading]) -> NodeInventory:
    """Combine device readings with this host's CPUs, RAM and name."""
    names = [r.name for r in readings]
    catalog = {_catalog_name(n) for n in names}
    return NodeInventory(
        vendor=vendor,
        gpu_count=len(readings),
        gpu_names=names,
        catalog_gpu=catalog.pop() if len(catalog) == 1 else None,
        memory_gib=[r.memory_gib for r in readings],
        driver=next((r.driver for r in readings if r.driver), None),
        cpus=_cpu_count(),
        ram_gib=round(to_gib(psutil.virtual_memory().total), 2),
        hostname=socket.gethostname(),
    )


# --------------------------------------------------------------------------- Ray


def gpu_key(name: str) -> str:
    """The `gpu:<key>` part for a reported device name: catalog name, else a sanitized name."""
    return _catalog_name(name) or sanitize(name)


def sanitize(name: str) -> str:
    """A name Ray accepts as a resource suffix and as a label value ([A-Za-z0-9_.-], <= 63)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-_.")[:63].rstrip("-_.")
    return cleaned or "unknown"


def ray_resources(inv: NodeInventory) -> dict[str, float]:
    """Custom resources this node offers: accelerator slots and per-model GPU counts."""
    if inv.vendor == "cpu" or inv.gpu_count == 0:
        return {"accel:cpu": 1.0}
    resources: dict[str, float] = {f"accel:{inv.vendor}": float(inv.gpu_count)}
    for key, count in Counter(gpu_key(n) for n in inv.gpu_names).items():
        resources[f"gpu:{key}"] = float(count)
    return resources


def ray_labels(inv: NodeInventory) -> dict[str, str]:
    """Node labels: vendor, and the GPU model ('none' on CPU nodes, 'mixed' if models differ)."""
    if inv.vendor == "cpu" or inv.gpu_count == 0:
        return {"vendor": "cpu", "gpu": "none"}
    keys = {gpu_key(n) for n in inv.gpu_names}
    return {"vendor": inv.vendor, "gpu": keys.pop() if len(keys) == 1 else "mixed"}


def actor_options(target: str, gpu: str | None = None) -> dict[str, Any]:
    """Ray actor options for one group (one actor per group) on `target` (cpu | cuda | rocm).

    GPU targets take one whole GPU (`num_gpus=1`, so Ray sets CUDA_VISIBLE_DEVICES or
    HIP_VISIBLE_DEVICES) and no CPU slot (`num_cpus=0`): the accelerator is the scarce thing, and a
    GPU pod with a small CPU reservation must still place one actor per GPU. CPU targets take
    the node's single `accel:cpu` slot and one CPU. Ray then sets OMP_NUM_THREADS=1 inside the
    actor unless the environment already sets it, so a CPU worker should size its own thread
    pool (e.g. torch.set_num_threads(len(os.sched_getaffinity(0)))).

    `gpu` (a catalog name or a reported name) pins the group to that GPU model.
    """
    if target not in TARGET_VENDOR:
        raise ValueError(f"unknown target {target!r}; expected one of {', '.join(TARGET_VENDOR)}")
    vendor = TARGET_VENDOR[target]
    resources: dict[str, float] = {f"accel:{vendor}": 1.0}
    if gpu is not None:
        if vendor == "cpu":
            raise ValueError(f"target 'cpu' cannot ask for GPU {gpu!r}")
        resources[f"gpu:{gpu_key(gpu)}"] = 1.0
    if vendor == "cpu":
        return {"num_cpus": 1, "num_gpus": 0, "resources": resources}
    return {"num_cpus": 0, "num_gpus": 1, "resources": resources}


def start_command(
    head: bool,
    address: str | None,
    inv: NodeInventory,
    port: int = 6379,
    block: bool = False,
) -> list[str]:
    """The `ray start` argv for this node (Ray 2.60 CLI).

    A head listens on `port` with its dashboard bound to 127.0.0.1; a worker joins `address`
    (HOST:PORT). GPUs are declared explicitly (0 on CPU nodes, so Ray does not guess). Labels use
    Ray's `key=value,...` form; `--labels` is hidden in `ray start --help` but supported.
    """
    if head and address:
        raise ValueError("a head node starts a cluster; it takes no --address")
    if not head and not address:
        raise ValueError("a worker node needs --address HOST:PORT of the head")
    gpus = inv.gpu_count if inv.vendor != "cpu" else 0
    labels = ",".join(f"{k}={v}" for k, v in sorted(ray_labels(inv).items()))
    argv = [_ray_executable(), "start"]
    if head:
        argv += ["--head", f"--port={port}", "--dashboard-host=127.0.0.1"]
    else:
        argv += [f"--address={address}"]
    argv += [
        f"--num-gpus={gpus}",
        "--resources=" + json.dumps(ray_resources(inv), sort_keys=True, separators=(",", ":")),
        f"--labels={labels}",
        "--disable-usage-stats",
    ]
    if block:
        argv.append("--block")
    return argv


# A head's address: HOST:PORT, HOST a hostname (labels of letters, digits, `-` and `_`, which
# container networks use) or an IP address, an IPv6 one in brackets.
HOST_PORT = re.compile(r"(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]+)):(?P<port>\d{1,5})")
HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
MAX_HOSTNAME = 253
CONNECT_TIMEOUT_S = 10.0  # a head answers a TCP connect in milliseconds; Ray waits for minutes


def head_address(address: str) -> tuple[str, int]:
    """The (host, port) of a head's HOST:PORT: the host a hostname or an IP address, the port
    1..65535; otherwise a UserInputError quoting the address (never handed to a shell or Ray)."""
    expected = "expected HOST:PORT, HOST a hostname or IP address ([IPv6] in brackets)"
    match = HOST_PORT.fullmatch(address)
    if match is None:
        raise UserInputError(
            f"{quote(address)} is not a head address: {expected}", field="--address"
        )
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise UserInputError(
            f"{quote(address)}: port {port} is outside 1..65535", field="--address"
        )
    host = match["ip6"] or match["host"]
    if not (_is_ip(host) if match["ip6"] else _is_ip(host) or _is_hostname(host)):
        raise UserInputError(
            f"{quote(address)}: {quote(host)} is neither a hostname nor an IP address: {expected}",
            field="--address",
        )
    return host, port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_hostname(host: str) -> bool:
    labels = host.removesuffix(".").split(".")
    if labels[-1].isdigit():  # no top-level name is a number: an IP address that is not one
        return False
    return len(host) <= MAX_HOSTNAME and all(HOST_LABEL.fullmatch(label) for label in labels)


def reachable(address: str, timeout_s: float | None = None) -> None:
    """A HOST:PORT head must accept a TCP connection within ``CONNECT_TIMEOUT_S`` (Ray itself
    retries a head that is not there for minutes without a word): otherwise one line. Other
    addresses (``auto``, ``ray://…``) are left to Ray, which resolves them itself."""
    if HOST_PORT.fullmatch(address) is None:
        return
    host, port = head_address(address)
    try:
        socket.create_connection((host, port), timeout=timeout_s or CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        cause = exc.strerror or type(exc).__name__
        raise UserInputError(
            f"no Ray cluster answers at {address} ({cause}); start one with "
            "`harness node start --head` or give the head's HOST:PORT",
            field="--address",
        ) from None


def this_host_address() -> str:
    """The address other machines would use to reach this one (no packet is sent: a UDP
    socket's connect only picks the outgoing interface), or the hostname if there is none."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: routing only
        return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostname()
    finally:
        probe.close()


# --------------------------------------------------------------------------- helpers


def _ray_executable() -> str:
    """`ray` from the running interpreter's environment when there is one, else from PATH."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.is_file() else "ray"


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidate = ROCM_BIN / name
    return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None


def _run(argv: list[str]) -> str | None:
    """stdout of a vendor tool, or None if it is missing, fails, or hangs."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _safe(parse: Callable[[str], list[GpuReading]], text: str | None) -> list[GpuReading]:
    if not text:
        return []
    try:
        return parse(text)
    except (ValueError, TypeError, KeyError):
        return []


def _catalog_name(name: str) -> str | None:
    spec = gpu_for_device_name(name)
    return spec.name if spec is not None else None


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _known(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return None if not text or text.upper() in {"N/A", "[N/A]", "[NOT SUPPORTED]"} else text


def _mib_to_gib(text: str) -> float:
    try:
        return round(to_gib(float(text) * MIB), 2)
    except ValueError:
        return 0.0


def _size_to_gib(size: object) -> float:
    value: object = size
    unit = "MB"
    if isinstance(size, dict):
        value, unit = size.get("value"), str(size.get("unit") or "MB")
    elif isinstance(size, str):
        parts = size.split()
        value = parts[0] if parts else None
        unit = parts[1] if len(parts) > 1 else "MB"
    try:
        number = float(str(value))
    except ValueError:
        return 0.0
    return round(to_gib(number * UNIT_BYTES.get(unit.upper(), MIB)), 2)


def _as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _get_ci(mapping: dict[str, Any], key: str) -> Any:
    for k, v in mapping.items():
        if k.lower() == key:
            return v
    return None


def _card_index(key: str) -> tuple[int, str]:
    digits = "".join(ch for ch in key if ch.isdigit())
    return (int(digits) if digits else 1 << 30, key)


def node_threads() -> int:
    """Threads for a CPU group: the CPUs its node advertises to Ray (a CPU group owns its node's
    single accel:cpu slot), never more than this process may run on. Simulated nodes that share
    one machine then do not oversubscribe it."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    advertised = next((n["Resources"].get("CPU", 1) for n in ray.nodes() if n["NodeID"] == here), 1)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(int(advertised), usable or 1))


def host_name(node_id: str, driver_tag: str) -> str:
    """The Ray name of a node's host actor (the driver creates it and hands its handle to each
    group's task; the name is for `ray list actors`). `driver_tag` is the driver's own, so two
    drivers' hosts never share a name."""
    return f"harness-host-{driver_tag}-{node_id}"


# Ports `ray start` takes for itself when none are given (Ray 2.60's defaults; read from Ray's own
# `ray start` options where Ray is installed): a head port among them fails inside Ray.
RAY_CLIENT_SERVER_PORT = 10001  # "default to 10001" (Ray's --ray-client-server-port help)
FALLBACK_PORTS = {"min_worker_port": 10002, "max_worker_port": 19999, "dashboard_port": 8265,
                  "dashboard_agent_listen_port": 52365}  # fmt: skip


def ray_default_ports() -> dict[str, int]:
    """`ray start`'s default ports, from Ray's own command when it can be imported."""
    try:
        from ray.scripts.scripts import start
    except ImportError:
        return dict(FALLBACK_PORTS)
    found = {p.name: p.default for p in start.params if p.name in FALLBACK_PORTS}
    return {k: v if isinstance(v, int) else FALLBACK_PORTS[k] for k, v in found.items()}


def port_problem(port: int) -> str | None:
    """Why a head cannot listen on `port` beside the ports Ray opens by default, or None."""
    if not 1024 <= port <= 65535:
        return f"--port {port} is outside 1024..65535"
    ports = ray_default_ports()
    low, high = ports["min_worker_port"], ports["max_worker_port"]
    if low <= port <= high:
        return f"--port {port} is inside Ray's worker-port range {low}..{high}"
    taken = {RAY_CLIENT_SERVER_PORT: "Ray client server", ports["dashboard_port"]: "dashboard",
             ports["dashboard_agent_listen_port"]: "dashboard agent"}  # fmt: skip
    if port in taken:
        return f"--port {port} is Ray's {taken[port]} port"
    return None
