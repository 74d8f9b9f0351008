"""config.json is read as strictly as a scenario: every key the planner reads is typed and
bounded (harness.spec.catalog.ConfigJson); a bad one is one line naming the file and the key,
exit 2 — never a traceback, an "invalid literal for int()", or silently halved weights."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.spec import catalog

BASE = {"num_attention_heads": 4, "hidden_size": 256, "num_hidden_layers": 4,
        "vocab_size": 4096, "intermediate_size": 768, "model_type": "llama"}  # fmt: skip
BAD = {
    "max_position_embeddings": [math.inf, -1, math.nan, "4096", 0, 10**12, 4096.0],
    "sliding_window": [math.inf, -5, "4096", math.nan],
    "num_local_experts": [0, -8, "8", math.inf, 10**6],
    "num_experts_per_tok": [0, "2", math.nan],
    "torch_dtype": ["float64x", 16, "int4"],
    "dtype": ["fp9"],
    "num_key_value_heads": [3, "2"],  # 3 does not divide 4 heads
    "tie_word_embeddings": ["yes", 1],
    "attention_bias": ["false"],
    "model_type": [7, ""],
}
CASES = [(key, value) for key, values in BAD.items() for value in values]


def plan(tmp_path: Path, config: dict[str, object]) -> tuple[int, str, Path]:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(config))  # NaN, Infinity as Python writes them
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"name: h\nmodels: ['{model}']\nbackend: [transformers]\nquantization: [none]\n"
        "batch: [1]\ncontext: [16]\noutput_tokens: 4\ntargets: [cpu]\n"
    )
    result = CliRunner().invoke(app, ["plan", str(scenario)])
    return result.exit_code, result.output, model / "config.json"


@pytest.mark.parametrize(("key", "value"), CASES, ids=[f"{k}={v!r}" for k, v in CASES])
def test_a_bad_planner_key_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, key: str, value: object
) -> None:
    code, output, config = plan(tmp_path, {**BASE, key: value})
    assert code == 2, output
    assert str(config) in output and key in output
    assert "Traceback" not in output and "invalid literal" not in output
    assert len(output.strip().splitlines()) == 1


def test_experts_per_token_above_the_experts_is_refused(tmp_path: Path) -> None:
    code, output, _ = plan(tmp_path, {**BASE, "num_local_experts": 2, "num_experts_per_tok": 4})
    assert code == 2 and "num_experts_per_tok" in output


def test_good_values_are_read_as_given() -> None:
    arch = catalog.arch_from_config(
        "m",
        {**BASE, "num_local_experts": 8, "num_experts_per_tok": 2, "torch_dtype": "float32",
         "sliding_window": 1024, "max_position_embeddings": 8192, "num_key_value_heads": 2},
    )  # fmt: skip
    assert (arch.num_experts, arch.experts_per_token, arch.dtype_bytes) == (8, 2, 4)
    assert (arch.sliding_window, arch.sliding_layers, arch.max_positions) == (1024, 4, 8192)


def test_a_window_switched_off_by_use_sliding_window_is_no_window() -> None:
    arch = catalog.arch_from_config(
        "m", {**BASE, "sliding_window": 1024, "use_sliding_window": False}
    )
    assert arch.sliding_window is None and arch.sliding_layers == 0


def test_every_shipped_and_catalog_config_still_reads() -> None:
    catalog.catalog_models.cache_clear()
    assert len(catalog.catalog_models()) >= 8
