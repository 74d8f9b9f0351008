"""Row admission (harness.results.admission, through frame.load_run): a row from another run,
one of a newer result schema, or one whose parts contradict each other never joins a run, and
is named, with its cause, among the unreadable files; ``allow_mixed`` admits a foreign row and
says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import UserInputError
from harness.results import admission
from harness.results.aggregate import aggregate_run
from harness.results.frame import load_run
from harness.row import SCHEMA_VERSION, Provenance, ResultRow
from tests import factories as F

CORPUS = "c0ffee" * 4
PROV = Provenance(device_name="NVIDIA H100 80GB HBM3", harness="0.1.0", corpus_hash=CORPUS)
GROUP = "tiny-llama|vllm|none|kv=auto|cuda"


def grid() -> list[ResultRow]:
    """A small grid of this run: its rows record its corpus hash and harness version."""
    return [
        r.model_copy(
            update={
                "provenance": PROV,
                "group": f"{r.model}|{r.backend}|{r.quantization}|kv={r.kv_cache_dtype}|cuda",
            }
        )
        for r in F.small_grid()
    ]


def run_with(tmp_path: Path, extra: list[ResultRow], rows: list[ResultRow] | None = None) -> Path:
    own = grid() if rows is None else rows
    run = F.write_run(tmp_path / "run-a", [*own, *extra])
    F.write_manifest(run, own)
    return run


def foreign(**overrides: Any) -> ResultRow:
    """The fastest class-99 row there could be, measured elsewhere on another corpus."""
    other = Provenance(
        device_name="NVIDIA H100 80GB HBM3", harness="0.1.0", corpus_hash="deadbeef" * 3,
        hostname="elsewhere",
    )  # fmt: skip
    fields: dict[str, Any] = {
        "key": "f0reign",
        "quantization": "bnb-nf4",
        "group": "tiny-llama|transformers|bnb-nf4|kv=auto|cuda",
        "decode_tok_s": 40_000.0,
        "total_tok_s": 60_000.0,
        "provenance": other,
        **F.quality(100.5, half_ci=0.0002),
    }
    fields.update(overrides)
    return F.row(**fields)


def refused(run: Path, key: str) -> str:
    frame, bad = load_run(run)
    assert key not in set(frame["key"])
    (why,) = [why for path, why in bad if Path(path).name == f"{key}.json"]
    return why


def serving(**overrides: Any) -> ResultRow:
    """A consistent serving level: 64 requests in 10 s, 60 of them within the SLO."""
    fields: dict[str, Any] = {
        "mode": "serving",
        "group": GROUP,
        "backend": "vllm",
        "concurrency": 8,
        "output_tokens": 128,
        "requests_sent": 64,
        "requests_ok": 64,
        "requests_failed": 0,
        "serving_duration_s": 10.0,
        "request_throughput": 6.4,
        "output_tok_s": 6.4 * 128,
        "slo_attainment": 60 / 64,
        "goodput_rps": 6.0,
        "decode_tok_s": None,
        "total_tok_s": None,
        "tpot_ms_p50": None,
        "provenance": PROV,
    }
    fields.update(overrides)
    return F.row(**fields)


# --- foreign rows ----------------------------------------------------------------------------


def test_a_row_of_another_corpus_is_refused_by_name_and_never_priced(tmp_path: Path) -> None:
    run = run_with(tmp_path, [foreign()])
    assert "foreign row: corpus hash deadbeef" in refused(run, "f0reign")
    result = aggregate_run(run, F.tariffs())
    assert "f0reign" not in set(result.points["key"])
    assert "f0reign" not in set(result.cheapest["key"])
    assert any("f0reign.json" in path for path, _ in result.unreadable)
    assert result.counts["mixed_rows"] == []


def test_allow_mixed_admits_a_foreign_row_and_the_report_states_it(tmp_path: Path) -> None:
    run = run_with(tmp_path, [foreign()])
    result = aggregate_run(run, F.tariffs(), allow_mixed=True)
    assert "f0reign" in set(result.points["key"])
    (mixed,) = result.counts["mixed_rows"]
    assert mixed["file"].endswith("f0reign.json") and "corpus hash" in mixed["why"]
    assert any("f0reign.json admitted" in line for line in result.counts["mixed_scenarios"])
    assert not any("f0reign" in path for path, _ in result.unreadable)


def test_a_row_of_another_harness_or_group_is_foreign(tmp_path: Path) -> None:
    later = PROV.model_copy(update={"harness": "9.9.9"})
    run = run_with(
        tmp_path,
        [
            foreign(key="v9", provenance=later),
            foreign(key="g", provenance=PROV, group="other-model|vllm|awq|kv=auto|cuda"),
        ],
    )
    assert "harness 9.9.9" in refused(run, "v9")
    assert "in none of the manifest's runs" in refused(run, "g")


def test_a_second_reference_configuration_is_refused(tmp_path: Path) -> None:
    claim = F.row(key="ref2", quantization="bnb-nf4", is_reference=True, provenance=PROV,
                  group="tiny-llama|transformers|bnb-nf4|kv=auto|cuda")  # fmt: skip
    run = run_with(tmp_path, [claim])
    assert "reference is transformers/none/auto" in refused(run, "ref2")


def test_a_folder_without_a_manifest_admits_its_rows_as_before(tmp_path: Path) -> None:
    run = F.write_run(tmp_path / "run-a", [*grid(), foreign()])
    frame, bad = load_run(run)
    assert "f0reign" in set(frame["key"]) and bad == []


# --- the result schema -----------------------------------------------------------------------


def test_a_row_of_a_newer_result_schema_is_refused_even_with_allow_mixed(tmp_path: Path) -> None:
    newer = F.row(key="v2", schema_version=SCHEMA_VERSION + 1, provenance=PROV)
    run = run_with(tmp_path, [newer])
    assert f"result schema version {SCHEMA_VERSION + 1}" in refused(run, "v2")
    assert "v2" not in set(aggregate_run(run, allow_mixed=True).points["key"])


def test_a_manifest_of_a_newer_result_schema_is_one_line_naming_it(tmp_path: Path) -> None:
    run = F.write_run(tmp_path / "run-a", grid())
    manifest = F.write_manifest(run, grid(), schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(UserInputError) as caught:
        load_run(run)
    text = str(caught.value)
    assert str(manifest) in text and "\n" not in text
    assert f"version {SCHEMA_VERSION + 1}" in text and f"writes version {SCHEMA_VERSION}" in text


# --- consistency -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "cause"),
    [
        ({"requests_ok": 1000, "requests_sent": 8, "requests_failed": 0}, "≠ requests_sent 8"),
        ({"goodput_rps": 1e6}, "goodput_rps 1e+06 is above request_throughput 6.4"),
        ({"request_throughput": 30.6}, "but requests_ok is 64"),
        ({"slo_attainment": 1.0}, "requests met the SLO, but slo_attainment 1"),
        (
            {
                "requests_ok": 32,
                "requests_failed": 32,
                "request_throughput": 3.2,
                "goodput_rps": 3.2,
                "output_tok_s": 400.0,
                "slo_attainment": 1.0,
            },
            "more than requests_ok 32",
        ),
        ({"output_tok_s": 5e6}, "output_tok_s 5e+06"),
    ],
)
def test_each_serving_inconsistency_is_refused_with_its_cause(
    tmp_path: Path, overrides: dict[str, Any], cause: str
) -> None:
    run = run_with(tmp_path, [serving(key="bad", **overrides)])
    assert cause in refused(run, "bad")


def test_a_consistent_serving_row_is_admitted(tmp_path: Path) -> None:
    run = run_with(tmp_path, [serving(key="good")], rows=[*grid(), serving(key="x")])
    frame, bad = load_run(run)
    assert {"good", "x"} <= set(frame["key"]) and bad == []


def test_a_training_row_with_wrong_tokens_per_step_is_refused(tmp_path: Path) -> None:
    def train(key: str, tokens: int) -> ResultRow:
        return F.row(key=key, mode="training", group=None, batch=2, context=256,
                     output_tokens=0, micro_batch=2, grad_accum=4, seq_len=256,
                     tokens_per_step=tokens, step_s=2.0, train_tok_s=tokens / 2.0,
                     provenance=PROV)  # fmt: skip

    run = run_with(tmp_path, [train("ok", 2 * 4 * 256), train("bad", 4096)])
    assert "tokens_per_step 4096 ≠ micro_batch 2 × grad_accum 4 × seq_len 256" in refused(
        run, "bad"
    )
    assert "ok" in set(load_run(run)[0]["key"])


def test_an_offline_row_faster_than_its_tokens_over_its_time_is_refused(tmp_path: Path) -> None:
    fast = F.row(key="fast", e2e_ms_p50=100.0, ttft_ms_p50=10.0, repeats_done=5,
                 total_tok_s=1e6, provenance=PROV, group=grid()[0].group)  # fmt: skip
    late = F.row(key="late", e2e_ms_p50=10.0, ttft_ms_p50=20.0, provenance=PROV,
                 group=grid()[0].group)  # fmt: skip
    run = run_with(tmp_path, [fast, late])
    assert "total_tok_s 1e+06 is above" in refused(run, "fast")
    assert "ttft_ms_p50 20 is above e2e_ms_p50 10" in refused(run, "late")


# --- property --------------------------------------------------------------------------------


COUNTS = st.integers(min_value=0, max_value=2_000)
# a factor on a consistent figure: mostly none (the row stays consistent), else anything
SKEW = st.one_of(st.just(1.0), st.just(1.0), st.floats(min_value=0.0, max_value=1e4))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ok=COUNTS, failed=COUNTS, extra=st.sampled_from([0, 0, 0, 1, -1, 1000]),
    duration=st.floats(0.01, 1e4), good=st.floats(0.0, 1.0), per_request=st.floats(0.0, 64.0),
    out=st.integers(1, 4096), skews=st.tuples(SKEW, SKEW, SKEW, SKEW),
)  # fmt: skip
def test_any_admitted_serving_row_satisfies_the_invariants(
    ok: int, failed: int, extra: int, duration: float, good: float, per_request: float,
    out: int, skews: tuple[float, float, float, float],
) -> None:  # fmt: skip
    sent = max(ok + failed + extra, 0)
    met = int(good * ok)
    throughput, goodput, tok_s = ok / duration * skews[0], met / duration * skews[1], 0.0
    tok_s = ok * per_request * out / duration * skews[2]
    attained = min(met / sent * skews[3], 1.0) if sent else 0.0
    row = serving(
        requests_sent=sent, requests_ok=ok, requests_failed=failed, serving_duration_s=duration,
        request_throughput=throughput, goodput_rps=goodput, output_tok_s=tok_s,
        slo_attainment=attained, output_tokens=out,
    )  # fmt: skip
    if admission.row_inconsistency(row) is not None:
        return
    tolerance = 1e-6
    assert ok + failed == sent
    assert goodput <= throughput * (1 + tolerance) + 1e-9
    assert abs(throughput * duration - ok) <= 0.5 + tolerance * max(throughput * duration, ok)
    counted = attained * sent
    assert counted <= ok * (1 + tolerance) + 0.05
    assert abs(goodput * duration - counted) <= 0.5 + tolerance * max(goodput * duration, counted)
    slack = 8.0  # harness.modes.serving.admission.OUTPUT_SLACK
    assert tok_s * duration <= ok * slack * out * (1 + tolerance) + 1e-9
