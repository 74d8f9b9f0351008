"""Property: any YAML text either loads into a valid scenario (or tariff table) or raises the
harness's UserInputError (exit 2); never another exception."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import UserInputError
from harness.spec import scenario, tariffs

KEYS = [
    *scenario.Scenario.model_fields,
    "id",
    "revision",
    "window_tokens",
    "hourly_usd",
    "tariffs",
    "provider",
    "gpu",
    "source",
    "date",
    "packages",
    "days",
    "discount_pct",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "tiny-llama",
            "transformers",
            "vllm",
            "none",
            "bf16",
            "cpu",
            "cuda",
            "auto",
            "H100-SXM-80GB",
            "2026-01",
            "=1+2",
            "",
            "8",
            "true",
        ]
    ),
    st.text(max_size=20),
)
DATA = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=8),
    ),
    max_leaves=30,
)
BASE = {
    "name": "t",
    "models": ["tiny-llama"],
    "backend": ["transformers"],
    "quantization": ["none"],
    "batch": [1],
    "context": [16],
    "output_tokens": 4,
    "targets": ["cpu"],
}


def loads_or_refuses(text: str, parse: object) -> None:
    try:
        parse(text, "p.yaml")  # type: ignore[operator]
    except UserInputError as exc:
        assert exc.render()
        assert len(exc.render()) < 2000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_any_text_is_a_scenario_or_a_user_input_error(text: str) -> None:
    loads_or_refuses(text, scenario.parse)
    loads_or_refuses(text, tariffs.parse_tariffs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), DATA, max_size=6))
def test_any_yaml_mapping_near_a_scenario_is_a_scenario_or_a_user_input_error(
    changes: dict[str, object],
) -> None:
    text = yaml.safe_dump({**BASE, **changes}, allow_unicode=True)
    loads_or_refuses(text, scenario.parse)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DATA)
def test_any_yaml_document_is_a_tariff_table_or_a_user_input_error(data: object) -> None:
    text = yaml.safe_dump({"tariffs": [data]}, allow_unicode=True)
    loads_or_refuses(text, tariffs.parse_tariffs)
