"""The scenario's `serving:` block: what it expands to, and the exact error each malformed one
yields (file, line, field, what was expected)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from harness import __version__, budget, corpus
from harness import plan as planner
from harness.errors import UserInputError
from harness.modes.serving.prompts import cut_prompts
from harness.modes.serving.spec import Lengths, ServingLevel
from harness.run import sweep
from harness.spec import models, scenario

TINY_MODEL = str(models.PACKAGE_DATA / "tiny-llama")
BASE = """name: s
models: [tiny-llama]
backend: [transformers, vllm]
quantization: [fp32]
batch: [1, 4]
context: [64]
output_tokens: 16
targets: [cpu]
serving:
  concurrency: [1, 4]
  request_rate: [2.0]
  requests: 32
  prompt_tokens: {mean: 64, sd: 16}
  output_tokens: {mean: 16, sd: 4}
  slo: {ttft_ms_p99: 2000, tpot_ms_p99: 100}
  attainment: 0.95
"""


def with_serving(**lines: str) -> str:
    """BASE with some `serving:` keys replaced (value None: the key removed)."""
    out = []
    for line in BASE.splitlines():
        key = line.strip().split(":")[0]
        if line.startswith("  ") and key in lines:
            if lines[key]:
                out.append(f"  {key}: {lines[key]}")
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def test_each_vllm_group_gets_one_serving_point_per_level() -> None:
    grid = scenario.expand(scenario.parse(BASE))
    served = [p for p in grid.points if p.serving is not None]
    assert [(p.backend, p.serving.label) for p in served if p.serving] == [
        ("vllm", "c1"),
        ("vllm", "c4"),
        ("vllm", "r2"),
    ]
    c4 = served[1]
    assert (c4.batch, c4.context, c4.output_tokens, c4.repeats) == (4, 64, 16, 1)
    assert served[2].batch == 1  # a rate level has no client count
    assert all(p.mode == "serving" and p.serving and p.serving.requests == 32 for p in served)
    assert all(p.serving and p.serving.attainment == 0.95 for p in served)


def test_a_transformers_group_gets_skipped_serving_points_with_the_reason() -> None:
    grid = scenario.expand(scenario.parse(BASE))
    skipped = [s for s in grid.skipped if s.point.serving is not None]
    assert len(skipped) == 3 and all(s.point.backend == "transformers" for s in skipped)
    assert all("[rule serving-needs-server]" in s.reason for s in skipped)


def test_the_sweep_writes_skipped_serving_rows_with_mode_serving(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE)
    plan = sweep.prepare(path, tmp_path / "run")
    rows = [r for r in sweep.skipped_rows(plan) if r.mode == "serving"]
    assert len(rows) == 3 and all(
        r.status == "skipped" and r.backend == "transformers" for r in rows
    )
    assert all("no server" in (r.error or "") for r in rows)
    # serving points never add reference points: the reference comes from offline points
    served = [p for w in plan.work for p in w.points if p.serving is not None]
    assert len(served) == 3 and all(p.backend == "vllm" for p in served)


def test_serving_keys_differ_from_offline_keys_and_from_each_other() -> None:
    grid = scenario.expand(scenario.parse(BASE))
    keys = [p.key("h") for p in grid.points]
    assert len(set(keys)) == len(keys)
    offline = next(p for p in grid.points if p.serving is None and p.backend == "vllm")
    same_shape = offline.model_copy(update={"batch": 1, "context": 64, "repeats": 1})
    level = next(p for p in grid.points if p.serving is not None)
    # the serving settings alone make the key differ
    assert level.model_copy(update={"serving": None}).key("h") == same_shape.key("h")
    assert level.key("h") != same_shape.key("h")


def test_an_offline_point_keeps_its_key_whether_or_not_the_scenario_serves() -> None:
    with_block = scenario.expand(scenario.parse(BASE)).points
    without = scenario.expand(scenario.parse(BASE.split("serving:")[0])).points
    offline = [p.key("h") for p in with_block if p.serving is None]
    assert offline == [p.key("h") for p in without]
    raw = without[0].model_dump()
    assert raw["serving"] is None  # the field exists, and a None leaves the key as it was


SHIPPED_SERVING = Path(__file__).resolve().parents[3] / "scenarios" / "serving.yaml"
# `Point.model_dump()` of two of scenarios/serving.yaml's serving points, as printed at aae55bd
# (before the spec, `slo` and the load generator shared one set of serving types): the stored
# points' keys, which the types may not change.
DUMPED_AT_AAE55BD: dict[str, dict[str, Any]] = {
    "c1": {
        "model": "tiny-llama", "revision": "main", "weights": "checkpoint", "backend": "vllm",
        "quantization": "fp32", "kv_cache_dtype": "auto", "batch": 1, "context": 128,
        "output_tokens": 64, "target": "cpu", "repeats": 1, "warmups": 1, "min_duration_s": 0.0,
        "seed": 0, "window_tokens": 256, "max_windows": 16,
        "serving": {
            "concurrency": 1, "request_rate": None, "requests": 32,
            "prompt_tokens": {"mean": 128, "sd": 0.0}, "output_tokens": {"mean": 64, "sd": 0.0},
            "slo": {"ttft_ms_p99": 1000.0, "tpot_ms_p99": 50.0}, "attainment": 0.9, "seed": 0,
        },
        "training": None,
    },
    "r4": {
        "model": "tiny-llama", "revision": "main", "weights": "checkpoint", "backend": "vllm",
        "quantization": "fp32", "kv_cache_dtype": "auto", "batch": 1, "context": 128,
        "output_tokens": 64, "target": "cpu", "repeats": 1, "warmups": 1, "min_duration_s": 0.0,
        "seed": 0, "window_tokens": 256, "max_windows": 16,
        "serving": {
            "concurrency": None, "request_rate": 4.0, "requests": 32,
            "prompt_tokens": {"mean": 128, "sd": 0.0}, "output_tokens": {"mean": 64, "sd": 0.0},
            "slo": {"ttft_ms_p99": 1000.0, "tpot_ms_p99": 50.0}, "attainment": 0.9, "seed": 0,
        },
        "training": None,
    },
}  # fmt: skip


def key_of_dump(dump: dict[str, Any], corpus_hash: str) -> str:
    """A serving checkpoint point's key from its dump, as `Point.key` made it at aae55bd."""
    fields = {k: v for k, v in dump.items() if k not in ("weights", "training")}
    payload = {**fields, "mode": "serving", "harness": __version__, "corpus": corpus_hash}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


@pytest.mark.engine
def test_the_shipped_serving_points_keep_their_dumps_and_keys() -> None:
    points = scenario.expand(scenario.load(SHIPPED_SERVING)).points
    served = {p.serving.label: p for p in points if p.serving is not None}
    assert sorted(served) == ["c1", "c4", "c8", "r4"]
    for label, dump in DUMPED_AT_AAE55BD.items():
        point = served[label]
        # fields added since (the adapter, the layout, the files read, speculative decoding) are
        # unset here and left out of the key
        assert point.adapter is None and point.inputs == () and point.speculative is None
        added = {"adapter", "layout", "inputs", "speculative"}
        assert point.model_dump(exclude=added) == dump, label
        assert point.key("h") == key_of_dump(dump, "h"), label
        # the JSON a point is stored as reads back as the same point
        assert scenario.Point.model_validate_json(point.model_dump_json()) == point
    # the other levels differ from c1 only in their load and batch
    for label, concurrency in (("c4", 4), ("c8", 8)):
        dump = json.loads(json.dumps(DUMPED_AT_AAE55BD["c1"]))
        dump["batch"] = dump["serving"]["concurrency"] = concurrency
        assert served[label].key("h") == key_of_dump(dump, "h"), label


def test_the_drawn_lengths_are_the_load_generators_lengths() -> None:
    level = next(
        p.serving for p in scenario.expand(scenario.parse(BASE)).points if p.serving is not None
    )
    assert isinstance(level, ServingLevel)
    prompts = cut_prompts(
        TINY_MODEL, level.requests, Lengths(mean=64, sd=16), Lengths(mean=16, sd=4),
        seed=level.seed, text=corpus.eval_text()[:20_000],
    )  # fmt: skip
    assert [p.output_tokens for p in prompts] == [o for _, o in level.drawn_lengths()]
    assert max(p.prompt_tokens + p.output_tokens for p in prompts) <= level.longest_sequence()


def test_duration_s_sets_the_requests_of_a_rate_level() -> None:
    text = with_serving(concurrency="", requests="", attainment="0.9")
    text = text.replace("  request_rate: [2.0]", "  request_rate: [2.5]\n  duration_s: 10.0")
    grid = scenario.expand(scenario.parse(text))
    (point,) = [p for p in grid.points if p.serving is not None]
    assert point.serving is not None and point.serving.requests == 25


def test_a_request_longer_than_the_model_is_skipped() -> None:
    text = with_serving(prompt_tokens="{mean: 50000, sd: 0}")
    grid = scenario.expand(scenario.parse(text))
    reasons = [s.reason for s in grid.skipped if s.point.serving and s.point.backend == "vllm"]
    assert len(reasons) == 3 and all("[rule max-positions]" in r for r in reasons)


def test_the_plan_budgets_a_server_start_and_each_level() -> None:
    grid = scenario.expand(scenario.parse(BASE))
    plan = budget.plan_grid(grid)
    served = [p for p in plan.points if p.point.serving is not None]
    assert len(served) == 3
    assert all(p.est_seconds >= planner.GENERATOR_START_S for p in served)
    # the 2 requests/s level lasts at least its arrivals' span
    assert served[2].est_seconds >= 32 / 2.0
    server_start_s = 90.0  # the serving mode's server start before any history (harness.modes)
    assert plan.budget.est_server_start_seconds == server_start_s  # one vLLM group
    offline_only = budget.plan_grid(scenario.expand(scenario.parse(BASE.split("serving:")[0])))
    assert plan.budget.est_seconds == pytest.approx(
        offline_only.budget.est_seconds + server_start_s + sum(p.est_seconds for p in served)
    )
    contract = plan.contract()["points"]
    assert [c.get("mode") for c in contract].count("serving") == 3


MALFORMED: dict[str, tuple[str, str]] = {
    "no load level": (
        with_serving(concurrency="", request_rate=""),
        "bad.yaml:10: serving: give at least one load level: concurrency: [...] and/or "
        "request_rate, or search",
    ),
    "both requests and duration": (
        with_serving(requests="32\n  duration_s: 5.0"),
        "bad.yaml:10: serving: give exactly one of requests (per level) or duration_s",
    ),
    "duration with concurrency levels": (
        with_serving(requests="", request_rate="[2.0]\n  duration_s: 5.0"),
        "bad.yaml:10: serving: duration_s fixes the requests of request_rate levels (rate × "
        "duration_s); concurrency levels have no arrival rate: give requests instead",
    ),
    "a string where a number goes": (
        with_serving(requests='"32"'),
        "bad.yaml:12: serving.requests: Input should be a valid integer (got '32')",
    ),
    "zero concurrency": (
        with_serving(concurrency="[0, 4]"),
        "bad.yaml:10: serving.concurrency[0]: Input should be greater than 0 (got 0)",
    ),
    "a level twice": (
        with_serving(concurrency="[4, 4]"),
        "bad.yaml:10: serving: concurrency lists a value twice; give each level once",
    ),
    "attainment above one": (
        with_serving(attainment="1.5"),
        "bad.yaml:16: serving.attainment: Input should be less than or equal to 1 (got 1.5)",
    ),
    "unknown slo target": (
        with_serving(slo="{ttft_ms_p99: 2000, tpot_ms_p99: 100, e2e_ms: 5}"),
        "bad.yaml:15: serving.slo.e2e_ms: unknown field; expected one of: ttft_ms_p99, tpot_ms_p99",
    ),
    "negative sd": (
        with_serving(prompt_tokens="{mean: 64, sd: -1.0}"),
        "bad.yaml:13: serving.prompt_tokens.sd: Input should be greater than or equal to 0 "
        "(got -1.0)",
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_serving_block_names_file_line_field_and_expectation(name: str) -> None:
    text, expected = MALFORMED[name]
    with pytest.raises(UserInputError) as caught:
        scenario.parse(text, "bad.yaml")
    assert caught.value.render() == expected
