"""Fuzzing (hypothesis) of the inputs rlsight parses from outside: config and engine metrics.

The store readers are fuzzed in tests/store/test_hostile_input.py and trace carriers in
tests/propagation/test_propagation_decorator.py. Each property is the fail-soft rule: any
input gives a result or rlsight's own clear error, never another exception.
"""

from __future__ import annotations

import contextlib
import math
import warnings

from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.config import SETTINGS, TelemetryConfig
from rlsight.engines import EngineMetricsReader
from rlsight.errors import ConfigError, RlsightWarning

_env_text = st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
                    max_size=30)
_env = st.dictionaries(
    st.sampled_from([s.env for s in SETTINGS] + ["OTEL_EXPORTER_OTLP_ENDPOINT",
                                                  "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME"]),
    _env_text | st.sampled_from(["true", "0", "5000", "http://localhost:4318", "grpc", "{}",
                                 '{"a": 1}', "all", "..", "9" * 30, "-1"]),
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(env=_env)
def test_any_environment_gives_a_config_or_a_config_error(env: dict[str, str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlsightWarning)
        try:
            config = TelemetryConfig.from_env(env)
        except ConfigError:
            return
    assert TelemetryConfig.from_env(config.to_env()) == config  # what is accepted round-trips


_json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _env_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_env_text, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(mapping=st.dictionaries(st.sampled_from([s.name for s in SETTINGS]) | _env_text, _json_value,
                               max_size=6))
def test_any_yaml_section_gives_a_config_or_a_config_error(mapping: dict[str, object]) -> None:
    with warnings.catch_warnings(), contextlib.suppress(ConfigError):
        warnings.simplefilter("ignore", RlsightWarning)
        TelemetryConfig.from_mapping(mapping)


_SERIES = ["vllm:prompt_tokens_total", "vllm:generation_tokens_total",
           "vllm:num_preemptions_total", "vllm:request_prompt_tokens"]
_number = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70)


def _sample(name: str, value: float, labels: str) -> str:
    text = "NaN" if isinstance(value, float) and math.isnan(value) else repr(value).replace("inf", "Inf")
    return f"{name}{{{labels}}} {text}"


_exposition = st.lists(
    st.one_of(
        st.builds(_sample, st.sampled_from(_SERIES), _number,
                  st.sampled_from(['model_name="m"', 'le="1.0"', 'le="+Inf"', 'finished_reason="stop"'])),
        st.sampled_from(["# TYPE vllm:prompt_tokens_total counter",
                         "# TYPE vllm:request_prompt_tokens histogram", "# HELP x y", "garbage {", ""]),
        _env_text,
    ),
    max_size=12,
).map("\n".join)


@settings(max_examples=100, deadline=None)
@given(first=_exposition, second=_exposition)
def test_any_engine_exposition_gives_deltas_or_an_empty_read(first: str, second: str) -> None:
    """Whatever a /metrics endpoint returns, reading it never raises into the training step."""
    from prometheus_client.parser import text_string_to_metric_families

    pages = iter([first, second])
    reader = EngineMetricsReader(lambda: list(text_string_to_metric_families(next(pages))),
                                 flavor="vllm", source="fuzz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlsightWarning)
        assert reader.read_delta() == {}
        deltas = reader.read_delta()
    assert isinstance(deltas, dict)
