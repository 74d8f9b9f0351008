"""What issue 26 fixed in the image files, read from the files themselves (no Docker engine):
the CPU image's build args and run-time packages, the init, the build-time-only CA, the build
context, the Makefile's image targets and compose under token auth. .ci/images.sh builds and
runs the image where an engine can be had; these tests hold everywhere."""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = ROOT / "containers"
DOCKERFILES = {kind: CONTAINERS / kind / "Dockerfile" for kind in ("cuda", "rocm", "cpu")}
RUN_TIME_PACKAGES = {"gcc", "g++", "libnuma1"}  # vLLM's CPU path: inductor's g++, libnuma


def steps(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped, blanks squeezed."""
    joined = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in joined.splitlines():
        stripped = " ".join(line.split())
        if stripped and not stripped.startswith("#"):
            word, _, rest = stripped.partition(" ")
            out.append((word.upper(), rest))
    return out


def runs(kind: str) -> list[str]:
    return [a for w, a in steps(DOCKERFILES[kind]) if w == "RUN"]


def apt_packages(run: str) -> list[str]:
    """The package words of an `apt-get install` in a RUN (options and the rest dropped)."""
    match = re.search(r"apt-get install ([^&;]*)", run)
    return [w for w in shlex.split(match.group(1)) if not w.startswith("-")] if match else []


def arg_defaults(kind: str) -> dict[str, str]:
    return dict(a.partition("=")[::2] for w, a in steps(DOCKERFILES[kind]) if w == "ARG")


# --------------------------------------------------------------------------- CPU image


def test_cpu_image_takes_a_base_an_index_find_links_and_a_ca_url_as_build_args() -> None:
    defaults = arg_defaults("cpu")
    assert (
        defaults["BASE_IMAGE"].startswith("python:3.11.")
        and "slim-bookworm" in defaults["BASE_IMAGE"]
    )
    assert defaults["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert defaults["PIP_FIND_LINKS"] == "" and defaults["EXTRA_CA_URL"] == ""
    first = steps(DOCKERFILES["cpu"])
    assert first[0] == ("ARG", f"BASE_IMAGE={defaults['BASE_IMAGE']}")  # before FROM: usable there
    assert first[1] == ("FROM", "${BASE_IMAGE}")
    assert not DOCKERFILES["cpu"].read_text().startswith("# syntax=")  # no frontend to pull


def test_cpu_image_installs_libnuma_and_compilers_for_run_time_pinned() -> None:
    (apt,) = [r for r in runs("cpu") if "apt-get install" in r]
    packages = dict(p.split("=", 1) for p in apt_packages(apt))
    assert RUN_TIME_PACKAGES | {"tini"} <= set(packages)
    assert all(version for version in packages.values())  # DL3008: every package pinned
    assert "--no-install-recommends" in apt and "rm -rf /var/lib/apt/lists/*" in apt
    # one image, no builder stage: vLLM compiles at run time, so g++ must stay in the image
    assert [w for w, _ in steps(DOCKERFILES["cpu"])].count("FROM") == 1


def test_cpu_image_enters_through_tini_forwarding_signals_to_the_process_group() -> None:
    (entry,) = [a for w, a in steps(DOCKERFILES["cpu"]) if w == "ENTRYPOINT"]
    argv = yaml.safe_load(entry)
    assert argv[0] == "/usr/bin/tini" and "-g" in argv and argv[-2:] == ["--", "/entrypoint.sh"]


def test_the_build_time_ca_is_written_used_and_deleted_in_one_step() -> None:
    (pip_run,) = [r for r in runs("cpu") if "EXTRA_CA_URL" in r]
    assert "PIP_CERT=/tmp/pip-ca.pem" in pip_run
    assert pip_run.rstrip().endswith("rm -f /tmp/pip-ca.pem")  # the same layer removes it
    assert "requirements/cpu.lock.txt" in pip_run  # every pip download happens inside it
    copies = " ".join(a for w, a in steps(DOCKERFILES["cpu"]) if w in {"COPY", "ADD"})
    assert ".pem" not in copies and ".crt" not in copies and "ca-certificates" not in copies
    assert not [a for w, a in steps(DOCKERFILES["cpu"]) if w == "ENV" and "CERT" in a]


def test_cpu_image_carries_the_test_suite_it_says_it_runs() -> None:
    assert ("COPY", "tests/ tests/") in steps(DOCKERFILES["cpu"])


# --------------------------------------------------------------------------- GPU images


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
def test_gpu_images_add_the_compilers_and_libnuma_when_their_base_lacks_them(kind: str) -> None:
    (apt,) = [r for r in runs(kind) if "apt-get install" in r]
    looped = re.search(r"for pkg in ([^;]*);", apt)
    assert looped and set(looped.group(1).split()) == RUN_TIME_PACKAGES
    assert 'apt-get install -y --no-install-recommends "$@"' in apt  # exactly the missing ones
    waiver = re.search(r"# hadolint ignore=([\w,]+)\nRUN set --;", DOCKERFILES[kind].read_text())
    assert waiver and waiver.group(1) == "DL3008"  # only the unpinnable versions, this step only


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_every_image_has_the_token_volumes_folder_open_to_its_user(kind: str) -> None:
    text = " ".join(runs(kind))
    assert "mkdir -p /app/results" in text and "/run/harness-auth" in text
    assert re.search(r"chmod 1777 [^&]*/run/harness-auth", text)


# --------------------------------------------------------------------------- build context


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore semantics for the patterns used here (no `!` exceptions)."""
    for pattern in patterns:
        base = pattern.removeprefix("**/")
        parts = Path(path).parts
        if fnmatch.fnmatch(path, pattern) or any(
            fnmatch.fnmatch("/".join(parts[i:]), base) or fnmatch.fnmatch(part, base)
            for i, part in enumerate(parts)
        ):
            return True
    return False


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_dockerignore_keeps_wheels_venvs_and_caches_out_of_the_context() -> None:
    patterns = dockerignore()
    assert ".whl" not in patterns  # the old typo matched only a file named ".whl"
    wheels = ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "dist/a-1-py3-none-any.whl")
    others = (".venv", ".venv-cuda", ".git", "results", "harness/__pycache__", ".mypy_cache")
    for path in (*wheels, *others):
        assert ignored(path, patterns), path


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_nothing_an_image_copies_is_ignored(kind: str) -> None:
    patterns = dockerignore()
    for word, args in steps(DOCKERFILES[kind]):
        if word == "COPY":
            for source in args.split()[:-1]:
                for path in ROOT.glob(source.rstrip("/")) if "*" in source else [ROOT / source]:
                    assert not ignored(str(path.relative_to(ROOT)), patterns), source


# --------------------------------------------------------------------------- make


def make_n(*args: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_each_image_has_its_own_target_which_passes_image_build_args(kind: str) -> None:
    (line,) = re.findall(
        r"^docker build .*$",
        make_n(f"image-{kind}", "IMAGE_BUILD_ARGS=--network=host --build-arg BASE_IMAGE=b:1"),
        re.M,
    )
    argv = shlex.split(line)
    assert argv[2:5] == ["--network=host", "--build-arg", "BASE_IMAGE=b:1"]
    assert argv[argv.index("-f") + 1] == f"containers/{kind}/Dockerfile"
    assert argv[argv.index("-t") + 1] == f"harness:{kind}"


def test_make_images_builds_cpu_first_and_names_the_gpu_images_it_cannot_build() -> None:
    out = make_n("images")
    first = out.index("docker build")
    assert "-t harness:cpu ." in out[first : out.index("\n", first)]
    loop = out[out.index("for kind in cuda rocm") :]
    assert "docker pull" in loop and "not built" in loop  # a base it cannot get is named, not fatal
    assert "-t harness:$kind ." in loop


# --------------------------------------------------------------------------- compose


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CONTAINERS / "compose.yaml").read_text())
    return data


def test_compose_has_no_top_level_name_which_compose_1_29_refuses(compose: dict[str, Any]) -> None:
    assert set(compose) - {"services", "volumes", "networks", "secrets"} == {
        k for k in compose if k.startswith("x-")
    }


def test_every_node_runs_token_auth_with_the_token_on_a_shared_volume(
    compose: dict[str, Any],
) -> None:
    assert "auth" in compose["volumes"]
    for name, service in compose["services"].items():
        env = service["environment"]
        assert env["RAY_AUTH_MODE"] == "token", name
        assert env["RAY_AUTH_TOKEN_PATH"] == "/run/harness-auth/token", name
        assert "auth:/run/harness-auth" in service["volumes"], name
        assert "RAY_AUTH_TOKEN" not in env, name  # never the token itself in this file
        assert service["init"] is True, name


def test_the_heads_healthcheck_is_rays_own_under_the_nodes_token_env(
    compose: dict[str, Any],
) -> None:
    head = compose["services"]["head"]
    assert head["healthcheck"]["test"][:3] == ["CMD", "ray", "health-check"]
    assert head["environment"]["RAY_AUTH_MODE"] == "token"  # the check authenticates with it


@pytest.mark.container
@pytest.mark.parametrize("accel", sorted(DOCKERFILES))
def test_debians_docker_compose_accepts_the_file(accel: str, tmp_path: Path) -> None:
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.skip("docker-compose (Debian's 1.29) is not installed")
    done = subprocess.run(
        [tool, "-p", "harness", "-f", str(CONTAINERS / "compose.yaml"), "--profile", accel,
         "config", "-q"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HARNESS_ACCEL": accel},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
