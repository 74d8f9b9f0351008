"""`harness pull`: offline paths, and a disk too small, with no hub reachable."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.spec import models
from tests.cli.test_hub_models import HUB_ID, scenario
from tests.hfcache import add_snapshot, hf_cache, tiny_files

__all__ = ["hf_cache"]


def test_pull_offline_with_everything_cached_says_ready(hf_cache: Path, tmp_path: Path) -> None:
    add_snapshot(hf_cache, HUB_ID, tiny_files())
    result = CliRunner().invoke(app, ["pull", str(scenario(tmp_path, HUB_ID))])
    assert result.exit_code == 0, result.output
    assert "ready" in result.output


def test_pull_offline_and_missing_is_exit_2_naming_model_and_command(
    hf_cache: Path, tmp_path: Path
) -> None:
    add_snapshot(hf_cache, HUB_ID, {"config.json": tiny_files()["config.json"]})
    result = CliRunner().invoke(app, ["pull", str(scenario(tmp_path, HUB_ID))])
    assert result.exit_code == 2, result.output
    text = result.output
    assert HUB_ID in text and "harness pull" in text and result.output.count("error:") == 1


def test_pull_refuses_a_disk_too_small_before_fetching(
    hf_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_snapshot(hf_cache, HUB_ID, {"config.json": tiny_files()["config.json"]})
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")  # `make test` exports both as 1
    huge = [models.RemoteFile("model.safetensors", 1 << 60, cached=False)]
    monkeypatch.setattr(models, "remote_files", lambda *args: ("ab" * 20, huge))
    monkeypatch.setattr(models, "download", lambda *a, **k: pytest.fail("nothing is fetched"))
    result = CliRunner().invoke(app, ["pull", str(scenario(tmp_path, HUB_ID))])
    assert result.exit_code == 2, result.output
    assert "GiB free" in result.output
