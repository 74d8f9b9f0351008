"""Hub ids end to end, from an offline Hugging Face cache in a temp dir (no hub reachable)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from tests.hfcache import COMMIT, LLAMA_8B_CONFIG, add_snapshot, hf_cache, tiny_files

__all__ = ["hf_cache"]

HUB_ID = "harness-test/tiny-llama"


def scenario(tmp_path: Path, model: str, **extra: str) -> Path:
    path = tmp_path / "hub.yaml"
    lines = [
        "name: hub",
        f"models: [{model}]",
        "backend: [transformers]",
        "quantization: [none]",
        "batch: [1]",
        "context: [16]",
        "output_tokens: 4",
        "targets: [cpu]",
        "repeats: 1",
        "warmups: 0",
        "quality: {window_tokens: 32, max_windows: 2, arc_items: 2, bootstrap_samples: 50}",
        *(f"{k}: {v}" for k, v in extra.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def plan_json(path: Path) -> dict[str, object]:
    result = CliRunner().invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    loaded: dict[str, object] = json.loads(result.stdout)
    return loaded


def test_plan_of_a_cached_hub_config_matches_its_catalog_twin(
    hf_cache: Path, tmp_path: Path
) -> None:
    add_snapshot(hf_cache, "someone/llama-3.1-8b-copy", {"config.json": LLAMA_8B_CONFIG})
    grid = "targets: [cuda]\ngpu: H100-SXM-80GB\nbatch: [1, 8]\ncontext: [1024, 8192]\n"
    figures = []
    for model in ("someone/llama-3.1-8b-copy", "meta-llama/Llama-3.1-8B-Instruct"):
        text = scenario(tmp_path, model).read_text()
        for key in ("targets", "batch", "context"):
            text = "\n".join(line for line in text.splitlines() if not line.startswith(key + ":"))
        path = tmp_path / "twin.yaml"
        path.write_text(text + "\n" + grid)
        contract = plan_json(path)
        points = contract["points"]
        assert isinstance(points, list) and len(points) == 4
        figures.append([{k: v for k, v in p.items() if "model" not in k} for p in points])
    assert figures[0] == figures[1]


@pytest.mark.engine
def test_plan_and_measure_a_hub_id_from_an_offline_cache(hf_cache: Path, tmp_path: Path) -> None:
    snapshot = add_snapshot(hf_cache, HUB_ID, tiny_files())
    path = scenario(tmp_path, HUB_ID)
    assert plan_json(path)["points"]
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["measure", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]
    assert rows and all(r["status"] == "ok" for r in rows), [r.get("error") for r in rows]
    assert {r["model"] for r in rows} == {HUB_ID}
    assert snapshot.name == COMMIT
    assert {r["provenance"]["model_commit"] for r in rows} == {COMMIT}


def bad(tmp_path: Path, model: str, *args: str) -> str:
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [*args, str(scenario(tmp_path, model)), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert not out.exists(), "nothing is written"
    assert result.output.count("error:") == 1, result.output  # one message
    return result.output


@pytest.mark.parametrize("command", ["measure", "run"])
def test_an_unknown_hub_id_offline_is_one_line_naming_pull(
    hf_cache: Path, tmp_path: Path, command: str
) -> None:
    line = bad(tmp_path, "nobody/nothing", command)
    assert "'nobody/nothing'" in line and "harness pull" in line


def test_a_repo_without_safetensors_is_one_line(hf_cache: Path, tmp_path: Path) -> None:
    files = {k: v for k, v in tiny_files().items() if k != "model.safetensors"}
    add_snapshot(hf_cache, HUB_ID, {**files, "pytorch_model.bin": b"pickle"})
    line = bad(tmp_path, HUB_ID, "measure")
    assert "no safetensors" in line and "allow_pickle" in line


def test_remote_code_not_opted_in_is_one_line(hf_cache: Path, tmp_path: Path) -> None:
    add_snapshot(hf_cache, HUB_ID, tiny_files(auto_map={"AutoModel": "modeling.Custom"}))
    line = bad(tmp_path, HUB_ID, "measure")
    assert "auto_map" in line and "trust_remote_code" in line


def test_a_revision_that_does_not_exist_is_one_line(hf_cache: Path, tmp_path: Path) -> None:
    add_snapshot(hf_cache, HUB_ID, tiny_files())
    line = bad(tmp_path, "{id: " + HUB_ID + ", revision: v9.9}", "measure")
    assert "'v9.9'" in line and "revision" in line


@pytest.mark.engine
@pytest.mark.ray
def test_run_on_ray_measures_a_hub_id_from_the_offline_cache(
    hf_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep on a local Ray cluster: the group's actor resolves the hub id from the same
    cache (the cluster's processes inherit this process's HF_HUB_CACHE and offline mode)."""
    add_snapshot(hf_cache, HUB_ID, tiny_files())
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(scenario(tmp_path, HUB_ID)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]
    assert rows and all(r["status"] == "ok" for r in rows), [r.get("error") for r in rows]
    assert {r["provenance"]["model_commit"] for r in rows} == {COMMIT}
    assert {r["provenance"]["node_id"] is not None for r in rows} == {True}  # measured under Ray
