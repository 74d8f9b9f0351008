"""A local model whose config.json is hostile: one line naming the model and the key, exit 2,
nothing written — never a KeyError, ZeroDivisionError or TypeError traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app

BASE = {"num_attention_heads": 4, "hidden_size": 256, "num_hidden_layers": 4,
        "vocab_size": 4096, "intermediate_size": 768, "model_type": "llama"}  # fmt: skip
CASES = {
    "missing-heads": ({k: v for k, v in BASE.items() if k != "num_attention_heads"},
                      "config.json: no 'num_attention_heads'"),
    "zero-heads": ({**BASE, "num_attention_heads": 0}, "num_attention_heads must be a whole"),
    "zero-kv-heads": ({**BASE, "num_key_value_heads": 0}, "num_key_value_heads must be a whole"),
    "string-layers": ({**BASE, "num_hidden_layers": "4"}, "num_hidden_layers must be a whole"),
    "bool-vocab": ({**BASE, "vocab_size": True}, "vocab_size must be a whole"),
    "huge-hidden": ({**BASE, "hidden_size": 10**12}, "hidden_size must be a whole"),
    "negative-head-dim": ({**BASE, "head_dim": -64}, "head_dim must be a whole"),
    "a-list": ([BASE], "config.json must be a JSON object, got a list"),
    "not-json": ("{not json", "config.json is not readable JSON"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_config_json_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    config, message = CASES[case]
    model = tmp_path / "model"
    model.mkdir()
    text = config if isinstance(config, str) else json.dumps(config)
    (model / "config.json").write_text(text)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"name: h\nmodels: ['{model}']\nbackend: [transformers]\nquantization: [none]\n"
        "kv_cache_dtype: [auto]\nbatch: [1]\ncontext: [16]\noutput_tokens: 4\ntargets: [cpu]\n"
    )
    before = sorted(tmp_path.rglob("*"))
    result = CliRunner().invoke(app, ["plan", str(scenario)])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 3
    assert sorted(tmp_path.rglob("*")) == before
