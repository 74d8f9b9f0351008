"""harness.peers.optimum: our transformers-5 model config made readable by transformers 4.x, and
the grid runner that is copied into optimum-benchmark's venv."""

from __future__ import annotations

import ast

from harness.peers.optimum import GRID_RUNNER, transformers4_config


def test_nested_rope_and_dtype_are_spelled_as_transformers_4_reads_them() -> None:
    config = {
        "dtype": "float32",
        "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
    }
    old = transformers4_config(config)
    assert old["rope_theta"] == 500000.0
    assert old["rope_scaling"] is None
    assert old["torch_dtype"] == "float32"
    assert "rope_theta" not in config  # the input is not changed


def test_a_scaled_rope_is_kept_as_rope_scaling_and_old_keys_win() -> None:
    rope = {"rope_theta": 10000.0, "rope_type": "llama3", "factor": 8.0}
    assert transformers4_config({"rope_parameters": rope})["rope_scaling"] == rope
    old = {"rope_theta": 1.0, "torch_dtype": "bfloat16", "dtype": "float32"}
    assert transformers4_config(old) == old


def test_the_grid_runner_imports_nothing_of_the_harness() -> None:
    tree = ast.parse(GRID_RUNNER.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {n for n in names if n.split(".")[0] == "harness"}
    assert "optimum_benchmark" in names
