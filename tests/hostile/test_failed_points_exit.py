"""A point that fails at measure time is written as an `error` row, and the run says so with
exit code 3 and a count per status (an `oom` row would be a measured outcome, exit 0)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import EXIT_FAILED_POINTS, app

# Loads an engine or starts Ray: not in `make test-fast` (tests/conftest.py).
pytestmark = pytest.mark.engine

TINY = Path(__file__).parents[2] / "harness" / "data" / "tiny-llama"


def checkpoint_with_a_misshapen_tensor(folder: Path) -> Path:
    """The tiny model with one weight of the wrong shape: config and files are valid, loading
    fails inside the worker (transformers refuses the size mismatch)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(TINY, folder)
    tensors = load_file(str(folder / "model.safetensors"))
    name = next(n for n in sorted(tensors) if n.endswith("q_proj.weight"))
    tensors[name] = torch.zeros(tensors[name].shape[0] + 1, tensors[name].shape[1])
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def test_a_point_that_fails_is_an_error_row_and_exit_3(tmp_path: Path) -> None:
    model = checkpoint_with_a_misshapen_tensor(tmp_path / "broken-tiny")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"name: broken\nmodels: [{model}]\nbackend: [transformers]\nquantization: [none]\n"
        "batch: [1]\ncontext: [16]\noutput_tokens: 4\ntargets: [cpu]\nrepeats: 1\nwarmups: 0\n"
        "quality: {window_tokens: 32, max_windows: 2, arc_items: 0, bootstrap_samples: 50}\n"
    )
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["measure", str(scenario), "--out", str(out)])
    assert result.exit_code == EXIT_FAILED_POINTS == 3, result.output[-3000:]
    assert "points by status: 1 error" in result.output
    rows = [json.loads(p.read_text()) for p in (out / "points").glob("*.json")]
    assert [r["status"] for r in rows] == ["error"]
    assert "size" in rows[0]["error"].lower() or "shape" in rows[0]["error"].lower()
