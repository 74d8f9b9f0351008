"""Hostile input: every bad scenario, tariff, result file and manifest gets one line, exit 2 (or 3),
within a second, and nothing written. Cases are generated from the tables below."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tests.factories as F
from harness.cli.main import app
from harness.run.store import write_row

SCENARIO = """name: t
models: [tiny-llama]
backend: [transformers]
quantization: [none]
batch: [1]
context: [128]
output_tokens: 16
targets: [cpu]
"""

TARIFF = """tariffs:
  - provider: P
    gpu: H100-SXM-80GB
    hourly_usd: 2.5
    source: s
    date: "2026-01"
"""


def swap(text: str, key: str, line: str) -> str:
    return "\n".join(line if x.startswith(key + ":") else x for x in text.splitlines()) + "\n"


def laughs(levels: int = 9) -> str:
    out = 'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels):
        out += f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    return out


def many(n: int) -> str:
    return "[" + ", ".join(str(i) for i in range(1, n + 1)) + "]"


# name → (scenario text, text the one-line message must contain)
SCENARIOS: dict[str, tuple[str, str]] = {
    "key given twice": (
        SCENARIO + "output_tokens: 32\n",
        "t.yaml:9: output_tokens: key given twice (first on line 7)",
    ),
    "nested key given twice": (
        SCENARIO + "quality: {window_tokens: 8, window_tokens: 9}\n",
        "window_tokens: key given twice",
    ),
    "quality window longer than the model's positions": (
        SCENARIO + "quality: {window_tokens: 4096}\n",
        "t.yaml: quality.window_tokens: 4096 tokens per quality window exceed tiny-llama's "
        "max_position_embeddings (2048)",
    ),
    "string batch": (
        swap(SCENARIO, "batch", 'batch: ["8"]'),
        "batch[0]: Input should be a valid integer (got '8')",
    ),
    "bool batch": (
        swap(SCENARIO, "batch", "batch: [true]"),
        "batch[0]: Input should be a valid integer (got True)",
    ),
    "float batch": (
        swap(SCENARIO, "batch", "batch: [2.5]"),
        "batch[0]: Input should be a valid integer",
    ),
    "batch too large": (swap(SCENARIO, "batch", "batch: [5000]"), "less than or equal to 4096"),
    "batch twice": (swap(SCENARIO, "batch", "batch: [1, 1]"), "batch: duplicate value 1"),
    "too many batch values": (swap(SCENARIO, "batch", f"batch: {many(65)}"), "at most 64 items"),
    "context too large": (
        swap(SCENARIO, "context", "context: [2000000]"),
        "less than or equal to 1048576",
    ),
    "context as string": (
        swap(SCENARIO, "context", 'context: ["128"]'),
        "context[0]: Input should be a valid integer",
    ),
    "output_tokens too large": (
        swap(SCENARIO, "output_tokens", "output_tokens: 100000"),
        "less than or equal to 65536",
    ),
    "output_tokens bool": (
        swap(SCENARIO, "output_tokens", "output_tokens: true"),
        "output_tokens: Input should be a valid integer",
    ),
    "repeats 1001": (
        SCENARIO + "repeats: 1001\n",
        "repeats: Input should be less than or equal to 100",
    ),
    "repeats string": (SCENARIO + 'repeats: "3"\n', "repeats: Input should be a valid integer"),
    "warmups 10^12": (
        SCENARIO + "warmups: 1000000000000\n",
        "warmups: Input should be less than or equal to 100",
    ),
    "negative warmups": (
        SCENARIO + "warmups: -1\n",
        "warmups: Input should be greater than or equal to 0",
    ),
    "min_duration inf": (
        SCENARIO + "min_duration_s: .inf\n",
        "min_duration_s: Input should be a finite number",
    ),
    "min_duration nan": (
        SCENARIO + "min_duration_s: .nan\n",
        "min_duration_s: Input should be a finite number",
    ),
    "min_duration hours": (SCENARIO + "min_duration_s: 100000\n", "less than or equal to 3600"),
    "seed negative": (SCENARIO + "seed: -5\n", "seed: Input should be greater than or equal to 0"),
    "seed beyond numpy": (SCENARIO + "seed: 99999999999\n", "less than or equal to 4294967295"),
    "model listed twice": (
        swap(SCENARIO, "models", "models: [tiny-llama, tiny-llama]"),
        "model 'tiny-llama' (revision 'main') is listed twice",
    ),
    "model id huge": (
        swap(SCENARIO, "models", "models: [" + "x" * 5000 + "]"),
        "at most 200 characters",
    ),
    "too many models": (
        swap(SCENARIO, "models", "models: [" + ", ".join(f"m{i}" for i in range(40)) + "]"),
        "at most 32 items",
    ),
    "window tokens huge": (
        SCENARIO + "quality: {window_tokens: 100000}\n",
        "less than or equal to 8192",
    ),
    "bootstrap huge": (
        SCENARIO + "quality: {bootstrap_samples: 10000000}\n",
        "less than or equal to 100000",
    ),
    "gpu util above one": (
        SCENARIO + "vllm: {gpu_memory_utilization: 1.5}\n",
        "less than or equal to 1",
    ),
    "gpu util string": (
        SCENARIO + 'vllm: {gpu_memory_utilization: "0.9"}\n',
        "Input should be a valid number",
    ),
    "max_model_len huge": (
        SCENARIO + "vllm: {max_model_len: 99999999}\n",
        "less than or equal to 1048576",
    ),
    "enforce_eager string": (
        SCENARIO + 'vllm: {enforce_eager: "yes"}\n',
        "Input should be a valid boolean",
    ),
    "exclude batch string": (SCENARIO + 'exclude: [{batch: "1"}]\n', "exclude[0].batch"),
    "grid too large": (
        swap(
            swap(SCENARIO, "batch", f"batch: {many(60)}"), "context", f"context: {many(60)}"
        ).replace("[none]", "[none, fp32, bf16]"),
        "the grid has 10,800 cells; the limit is 10,000",
    ),
    "alias bomb in a known field": (
        swap(SCENARIO, "batch", "batch: *l8").replace("name: t\n", "name: t\n" + laughs()),
        "more than 100,000 values (aliases expanded; the limit)",
    ),
    "alias bomb in an unknown field": (laughs() + SCENARIO, "more than 100,000 values"),
    "deep list nesting": (
        SCENARIO + "quality: " + "[" * 5000 + "]" * 5000 + "\n",
        "nested deeper than 32 levels",
    ),
    "deep map nesting": (
        SCENARIO + "quality: " + "{a: " * 200 + "1" + "}" * 200 + "\n",
        "nested deeper than 32 levels",
    ),
    "file over 1 MiB": (SCENARIO + "# " + "x" * (1 << 20) + "\n", "the limit is 1,048,576"),
    "top level is a list": (
        "- 1\n- 2\n",
        "expected a mapping of scenario fields at the top, found list",
    ),
    "not yaml": ("name: [unclosed\n", "not valid YAML"),
    "name with formula": (
        swap(SCENARIO, "name", "name: '=1+2'"),
        "name: String should match pattern",
    ),
    "non-scalar key": (SCENARIO + "? [a, b]\n: 1\n", "a mapping key must be a plain value"),
}

TARIFFS: dict[str, tuple[str, str]] = {
    "hourly given twice": (
        TARIFF + "    hourly_usd: 99\n",
        "t.yaml:7: hourly_usd: key given twice (first on line 4)",
    ),
    "hourly string": (
        TARIFF.replace("2.5", '"2.5"'),
        "tariffs[0].hourly_usd: Input should be a valid number (got '2.5')",
    ),
    "hourly inf": (
        TARIFF.replace("2.5", ".inf"),
        "tariffs[0].hourly_usd: Input should be a finite number",
    ),
    "hourly nan": (TARIFF.replace("2.5", ".nan"), "Input should be a finite number"),
    "hourly huge": (TARIFF.replace("2.5", "1000000.0"), "less than or equal to 10000"),
    "hourly zero": (TARIFF.replace("2.5", "0"), "greater than 0"),
    "hourly bool": (TARIFF.replace("2.5", "true"), "Input should be a valid number"),
    "tariff listed twice": (
        TARIFF + TARIFF.split("\n", 1)[1].replace("2.5", "0.5"),
        "tariffs[1] repeats tariffs[0]",
    ),
    "gpus per node huge": (TARIFF + "    gpus_per_node: 1000\n", "less than or equal to 64"),
    "gpus per node string": (
        TARIFF + '    gpus_per_node: "8"\n',
        "Input should be a valid integer",
    ),
    "package days huge": (
        TARIFF + "    packages: [{days: 100000, discount_pct: 5}]\n",
        "less than or equal to 3650",
    ),
    "package price inf": (TARIFF + "    packages: [{days: 3, price_usd: .inf}]\n", "finite number"),
    "package discount 100": (
        TARIFF + "    packages: [{days: 3, discount_pct: 100}]\n",
        "less than 100",
    ),
    "package days twice": (
        TARIFF + "    packages: [{days: 3, discount_pct: 5}, {days: 3, discount_pct: 6}]\n",
        "two packages of 3 days",
    ),
    "provider huge": (
        TARIFF.replace("provider: P", "provider: " + "p" * 1000),
        "at most 500 characters",
    ),
    "tariff alias bomb": (laughs() + TARIFF, "more than 100,000 values"),
    "tariff deep": (
        TARIFF + "note: " + "[" * 100 + "]" * 100 + "\n",
        "nested deeper than 32 levels",
    ),
}


def test_the_tables_hold_at_least_sixty_cases() -> None:
    assert len(SCENARIOS) + len(TARIFFS) + len(ROWS) + len(MANIFESTS) >= 60


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def one_line_error(output: str) -> str:
    lines = [x for x in output.splitlines() if x.strip()]
    assert len(lines) == 1, output[:2000]
    assert "Traceback" not in output
    assert len(lines[0]) < 600, lines[0][:600]
    return lines[0]


@pytest.mark.timeout(60)  # a hang guard (an alias bomb must stop while parsing)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_hostile_scenario_gets_one_line_exit_2_and_nothing_written(
    name: str, tmp_path: Path
) -> None:
    text, expected = SCENARIOS[name]
    path = tmp_path / "t.yaml"
    path.write_text(text)
    before = listing(tmp_path)
    result = CliRunner().invoke(app, ["measure", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output[:2000]
    assert expected in one_line_error(result.output)
    assert listing(tmp_path) == before


@pytest.mark.timeout(60)  # a hang guard (an alias bomb must stop while parsing)
@pytest.mark.parametrize("name", sorted(TARIFFS))
def test_a_hostile_tariff_file_gets_one_line_exit_2_and_nothing_written(
    name: str, tmp_path: Path
) -> None:
    text, expected = TARIFFS[name]
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("[cpu]", "[cuda]"))
    path = tmp_path / "t.yaml"
    path.write_text(text)
    before = listing(tmp_path)
    result = CliRunner().invoke(app, ["plan", str(scenario), "--tariffs", str(path)])
    assert result.exit_code == 2, result.output[:2000]
    assert expected in one_line_error(result.output)
    assert listing(tmp_path) == before


# name → (row overrides or raw text, the cause the aggregate names)
ROWS: dict[str, tuple[dict[str, object] | str, str]] = {
    "decode 1e400": ('"decode_tok_s": 1e400', "decode_tok_s is inf (not finite)"),
    "decode nan": ('"decode_tok_s": NaN', "decode_tok_s is nan (not finite)"),
    "decode negative": ({"decode_tok_s": -5.0}, "decode_tok_s = -5 is outside [0, 1e+09]"),
    "decode absurd": ({"decode_tok_s": 1e15}, "decode_tok_s = 1e+15 is outside [0, 1e+09]"),
    "negative perplexity": ({"ppl": -3.0}, "ppl = -3 is outside [1, inf]"),
    "perplexity below one": ({"ppl": 0.5}, "ppl = 0.5 is outside [1, inf]"),
    "top1 above one": ({"top1_agree": 1.5}, "top1_agree = 1.5 is outside [0, 1]"),
    # an earlier run's ARC field, read as the arc-easy task's score
    "arc negative": ({"arc_acc": -0.1, "arc_items": 10}, "tasks.0.score: Input should be greater"),
    "negative memory": ({"peak_mib_decode": -1.0}, "peak_mib_decode = -1 is outside [0, 1e+09]"),
    "negative ttft": ({"ttft_ms_p50": -2.0}, "ttft_ms_p50 = -2 is outside [0, 1e+09]"),
    "negative kl": ({"kl_vs_ref": -1.0}, "kl_vs_ref = -1 is outside"),
    "zero batch": ({"batch": 0}, "batch = 0 is outside [1, inf]"),
    "not json": ("{not json", "Invalid JSON"),
    "missing fields": ('{"key": "x", "status": "ok"}', "Field required"),
    "unknown status": ({"status": "great"}, "status: Input should be"),
}


def hostile_row_file(run: Path, spec: dict[str, object] | str) -> Path:
    path = run / "points" / "hostile.json"
    if isinstance(spec, dict):  # written as given: no model between the test and the file
        data = json.loads(F.row().model_dump_json())
        data.update(spec)
        path.write_text(json.dumps(data))
        return path
    if spec.startswith("{"):
        path.write_text(spec)
        return path
    text = F.row().model_dump_json()
    name = spec.split(":")[0]
    data = json.loads(text)
    data[name.strip('"')] = 0.0
    path.write_text(json.dumps(data).replace(f"{name}: 0.0", spec))
    return path


@pytest.mark.parametrize("name", sorted(ROWS))
def test_a_hostile_row_is_unreadable_and_named_with_its_cause(name: str, tmp_path: Path) -> None:
    spec, cause = ROWS[name]
    run = F.write_run(tmp_path / "run", [F.reference(), F.row(quantization="bnb-nf4")])
    bad = hostile_row_file(run, spec)
    result = CliRunner().invoke(app, ["aggregate", str(run)])
    assert result.exit_code == 0, result.output[:2000]
    flat = result.output
    assert f"unreadable, skipped: {bad}" in flat
    assert cause in flat, flat[-1500:]


@pytest.mark.parametrize("name", sorted(ROWS))
def test_a_run_of_only_hostile_rows_exits_2_and_publishes_nothing(
    name: str, tmp_path: Path
) -> None:
    spec, _ = ROWS[name]
    run = tmp_path / "run"
    (run / "points").mkdir(parents=True)
    hostile_row_file(run, spec)
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 2, result.output[:2000]
    assert "none of the 1 point files is readable" in one_line_error(result.output)
    assert not (run / "published").exists()


def test_two_files_with_one_point_key_stop_aggregate_naming_both(tmp_path: Path) -> None:
    fast = F.row(quantization="bnb-nf4")
    run = F.write_run(tmp_path / "run", [F.reference(), fast])
    copy = run / "points" / "copy.json"
    copy.write_text(fast.model_copy(update={"decode_tok_s": 10 * 1000.0}).model_dump_json())
    for command in ("aggregate", "report"):
        result = CliRunner().invoke(app, [command, str(run)])
        assert result.exit_code == 2, result.output[:2000]
        line = result.output
        assert f"two files hold point {fast.key}" in line and "copy.json" in line
        assert f"{fast.key}.json" in line
    assert not (run / "published").exists()


def test_rows_of_two_scenarios_stop_aggregate_unless_allow_mixed_which_the_report_states(
    tmp_path: Path,
) -> None:
    run = F.write_run(tmp_path / "run", [F.reference(), F.row(quantization="bnb-nf4")])
    runs = [{"scenario_hash": "aaaaaaaaaaaaaaaa"}, {"scenario_hash": "bbbbbbbbbbbbbbbb"}]
    (run / "manifest.json").write_text(json.dumps({"name": "run", "runs": runs}))
    for command in ("aggregate", "report"):
        result = CliRunner().invoke(app, [command, str(run)])
        assert result.exit_code == 2, result.output[:2000]
        line = one_line_error(result.output)
        assert "rows from 2 scenarios (aaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbb)" in line
        assert "--allow-mixed" in line
    assert not (run / "published").exists()
    result = CliRunner().invoke(app, ["report", str(run), "--allow-mixed"])
    assert result.exit_code == 0, result.output[-2000:]
    for name in ("README.md", "report.html"):
        text = (run / "published" / name).read_text()
        assert "aggregated as one (--allow-mixed)" in text and "bbbbbbbbbbbbbbbb" in text


MANIFESTS: dict[str, tuple[bytes, str]] = {
    "garbage": (b"garbage{", "unreadable manifest (Expecting value)"),
    "binary": (b"\xff\xfe\x00", "unreadable manifest"),
    "a key twice": (
        b'{"runs": [], "runs": []}',
        "unreadable manifest (key 'runs' given twice in one object; give it once)",
    ),
    "a list": (b"[1, 2]", "not a harness manifest"),
    "runs not a list": (b'{"runs": 5}', "not a harness manifest"),
    "foreign object": (b'{"hello": "world"}', "not a harness manifest"),
    "runs of strings": (b'{"runs": ["a"]}', "not a harness manifest"),
    "deep json": (b"[" * 100000 + b"]" * 100000, "manifest"),
    "another scenario": (
        b'{"name": "out", "runs": [{"scenario_hash": "0123456789abcdef"}]}',
        "holds a run of another scenario (hash 0123456789abcdef",
    ),
}


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_resume_refuses_a_broken_or_foreign_manifest_with_what_to_do(
    name: str, tmp_path: Path
) -> None:
    data, expected = MANIFESTS[name]
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_bytes(data)
    before = listing(tmp_path)
    result = CliRunner().invoke(app, ["measure", str(scenario), "--out", str(out)])
    assert result.exit_code == 2, result.output[:2000]
    line = one_line_error(result.output)
    assert expected in line
    assert "another scenario" in name or "move it away" in line
    assert listing(tmp_path) == before
    assert (out / "manifest.json").read_bytes() == data


@pytest.mark.ray
def test_an_unreachable_cluster_address_gives_one_line_and_exit_2_fast(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    started = time.perf_counter()
    result = CliRunner().invoke(
        app, ["run", str(scenario), "--address", "127.0.0.1:1", "--out", str(tmp_path / "o")]
    )
    assert time.perf_counter() - started < 30
    assert result.exit_code == 2, result.output[:2000]
    assert "no Ray cluster answers at 127.0.0.1:1" in one_line_error(result.output)
    assert not (tmp_path / "o" / "points").exists()


def test_written_files_take_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_row(tmp_path, F.row())
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        os.umask(0o077)
        path = write_row(tmp_path, F.row())
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_formula_cells_are_escaped_and_negative_numbers_stay_numbers() -> None:
    import pandas as pd

    from harness.results.publish.files import csv_text

    frame = pd.DataFrame(
        {"model": ["=1+2", "+x", "-y", "@z", "plain"], "gap": [-1.5, 2.0, -3.0, 0.0, 1.0]}
    )
    lines = csv_text(frame).splitlines()
    assert lines[1:] == ["'=1+2,-1.5", "'+x,2.0", "'-y,-3.0", "'@z,0.0", "plain,1.0"]
