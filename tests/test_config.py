"""TelemetryConfig: validation, env projection round trip, OTEL fallbacks (rlsight.config)."""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.config import MAX_SHUTDOWN_TIMEOUT_MS, SETTINGS, TelemetryConfig, run_id_problem
from rlsight.errors import ConfigError, RlsightWarning

_OTEL_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults must not depend on the machine's SLURM or OTEL variables."""
    for var in (*_OTEL_VARS, "SLURM_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    for var in list(os.environ):
        if var.startswith("RLSIGHT_"):
            monkeypatch.delenv(var)


# -- env round trip ----------------------------------------------------------------------------

# Text an environment variable can hold: no NUL, no lone surrogates.
_env_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20
)
_nonblank = _env_text.filter(lambda s: bool(s.strip()))
_group_name = st.from_regex(r"[a-z][a-z0-9_.]{0,12}", fullmatch=True)
_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_finite = st.floats(allow_nan=False, allow_infinity=False)
_attr_value = st.one_of(
    st.booleans(), _int64, _finite, _env_text,
    st.lists(st.booleans(), max_size=3), st.lists(_int64, max_size=3),
    st.lists(_finite, max_size=3), st.lists(_env_text, max_size=3),
)
_urls = st.from_regex(r"https?://[a-z][a-z0-9.-]{0,20}(:[1-9][0-9]{0,3})?/?", fullmatch=True)
_configs = st.builds(
    TelemetryConfig,
    enabled=st.booleans(),
    run_id=_nonblank.filter(lambda s: run_id_problem(s) is None),
    run_dir=_env_text.map(lambda s: "/runs/" + s.replace("\x00", "")),
    span_groups=st.lists(_group_name, max_size=5).map(tuple),
    otlp_endpoint=st.none() | _urls,
    otlp_protocol=st.sampled_from(["http/protobuf", "http/json", "grpc"]),
    local_store=st.booleans(),
    service_name=_env_text.filter(bool),
    resource_attributes=st.dictionaries(_env_text, _attr_value, max_size=4),
    engine_native_tracing=st.booleans(),
    shutdown_timeout_ms=st.integers(min_value=1, max_value=MAX_SHUTDOWN_TIMEOUT_MS),
    algorithm=st.none() | _env_text,
    strict=st.booleans(),
    otlp_traces_endpoint=st.none() | _urls,
    otlp_metrics_protocol=st.none() | st.sampled_from(["http/protobuf", "http/json", "grpc"]),
)


def _typed(value: Any) -> Any:
    """``value`` with every leaf paired with its type, so 1, 1.0 and True compare unequal."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_typed(v) for v in value])
    return (type(value).__name__, value)


class TestEnvRoundTrip:
    @given(config=_configs)
    @settings(max_examples=200, deadline=None)
    def test_from_env_of_to_env_is_the_same_config_with_the_same_types(self, config: TelemetryConfig) -> None:
        back = TelemetryConfig.from_env(config.to_env())
        assert back == config
        for f in dataclasses.fields(TelemetryConfig):
            if not f.init:
                continue
            assert _typed(getattr(back, f.name)) == _typed(getattr(config, f.name)), f.name

    @given(config=_configs)
    @settings(max_examples=50, deadline=None)
    def test_every_projected_variable_is_a_str_named_rlsight(self, config: TelemetryConfig) -> None:
        env = config.to_env()
        assert all(k.startswith("RLSIGHT_") and isinstance(v, str) for k, v in env.items())

    def test_none_fields_are_left_out_of_the_projection(self) -> None:
        env = TelemetryConfig(run_id="r").to_env()
        assert "RLSIGHT_OTLP_ENDPOINT" not in env and "RLSIGHT_ALGORITHM" not in env
        assert env["RLSIGHT_RUN_ID"] == "r"

    def test_numbers_and_lists_keep_their_types_through_the_env(self) -> None:
        config = TelemetryConfig(
            run_id="r", shutdown_timeout_ms=1234,
            resource_attributes={"i": 3, "f": 3.0, "b": True, "l": [1, 2], "s": "3"},
        )
        back = TelemetryConfig.from_env(config.to_env())
        assert back.shutdown_timeout_ms == 1234 and type(back.shutdown_timeout_ms) is int
        assert _typed(back.resource_attributes) == _typed(
            {"i": 3, "f": 3.0, "b": True, "l": (1, 2), "s": "3"}
        )

    def test_settings_table_covers_every_field_once(self) -> None:
        names = [s.name for s in SETTINGS]
        assert sorted(names) == sorted(f.name for f in dataclasses.fields(TelemetryConfig) if f.init)
        assert all(s.env == "RLSIGHT_" + s.name.upper() for s in SETTINGS)


# -- validation --------------------------------------------------------------------------------


class TestValidation:
    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("enabled", "yes"),
            ("enabled", 1),
            ("local_store", None),
            ("shutdown_timeout_ms", "5000"),
            ("shutdown_timeout_ms", 5.0),
            ("shutdown_timeout_ms", True),
            ("shutdown_timeout_ms", 0),
            ("otlp_protocol", "http"),
            ("service_name", ""),
            ("service_name", 3),
            ("otlp_endpoint", 4318),
            ("span_groups", [1, 2]),
            ("span_groups", 5),
            ("resource_attributes", [("a", 1)]),
            ("resource_attributes", {"a": {"nested": 1}}),
            ("resource_attributes", {"a": [[1]]}),
            ("resource_attributes", {1: "x"}),
            ("resource_attributes", {"a": b"bytes"}),
        ],
    )
    def test_wrong_type_raises_config_error_naming_field_and_value(self, field: str, value: Any) -> None:
        with pytest.raises(ConfigError) as excinfo:
            TelemetryConfig(**{field: value})
        message = str(excinfo.value)
        assert f"TelemetryConfig.{field}" in message
        assert repr(value) in message or repr(next(iter(value.values()))) in message

    @pytest.mark.parametrize("value", [float("nan"), float("inf"), [1.0, float("-inf")]])
    def test_non_finite_resource_attribute_is_rejected_at_construction(self, value: Any) -> None:
        """A NaN accepted here used to break ``to_env`` later, in the middle of a launch."""
        with pytest.raises(ConfigError, match=r"resource_attributes\['x'\]"):
            TelemetryConfig(resource_attributes={"x": value})

    @pytest.mark.parametrize("name", ["", " ", "a,b"])
    def test_span_group_name_that_cannot_round_trip_is_rejected(self, name: str) -> None:
        with pytest.raises(ConfigError, match="span_groups"):
            TelemetryConfig(span_groups=("per_step", name))

    def test_span_group_names_are_stripped(self) -> None:
        assert TelemetryConfig(span_groups=[" per_step ", "engine"]).span_groups == ("per_step", "engine")

    def test_span_groups_accepts_a_comma_separated_string(self) -> None:
        assert TelemetryConfig(span_groups="per_step, engine").span_groups == ("per_step", "engine")  # type: ignore[arg-type]

    @pytest.mark.parametrize("run_id", ["", "   ", "a/b"])
    def test_bad_run_id_is_rejected(self, run_id: str) -> None:
        with pytest.raises(ConfigError, match="run_id"):
            TelemetryConfig(run_id=run_id)

    def test_config_error_is_a_value_error(self) -> None:
        with pytest.raises(ValueError):
            TelemetryConfig(enabled="no")  # type: ignore[arg-type]

    def test_with_changes_validates_like_the_constructor(self) -> None:
        with pytest.raises(ConfigError, match="shutdown_timeout_ms"):
            TelemetryConfig().with_changes(shutdown_timeout_ms=-1)

    def test_with_changes_returns_a_modified_copy(self) -> None:
        config = TelemetryConfig(run_id="r")
        changed = config.with_changes(algorithm="grpo")
        assert changed.algorithm == "grpo" and config.algorithm is None and changed.run_id == "r"

    def test_config_is_immutable(self) -> None:
        with pytest.raises(dataclasses.FrozenInstanceError):
            TelemetryConfig().enabled = False  # type: ignore[misc]

    @pytest.mark.parametrize(
        ("var", "raw"),
        [
            ("RLSIGHT_ENABLED", "maybe"),
            ("RLSIGHT_SHUTDOWN_TIMEOUT_MS", "5s"),
            ("RLSIGHT_RESOURCE_ATTRIBUTES", "{not json"),
            ("RLSIGHT_RESOURCE_ATTRIBUTES", "[1, 2]"),
        ],
    )
    def test_unparsable_env_var_raises_config_error_naming_it(self, var: str, raw: str) -> None:
        with pytest.raises(ConfigError, match=var):
            TelemetryConfig.from_env({var: raw})

    @pytest.mark.parametrize(
        ("var", "raw", "field"),
        [
            ("RLSIGHT_STALL_AFTER_S", "0", "stall_after_s"),
            ("RLSIGHT_SHUTDOWN_TIMEOUT_MS", "-5", "shutdown_timeout_ms"),
            ("RLSIGHT_SHUTDOWN_TIMEOUT_MS", str(MAX_SHUTDOWN_TIMEOUT_MS + 1), "shutdown_timeout_ms"),
            ("RLSIGHT_PROMETHEUS_PORT", "70000", "prometheus_port"),
            ("RLSIGHT_STORE_TRANSPORT", "carrier-pigeon", "store_transport"),
            ("RLSIGHT_RUN_ID", "a/b", "run_id"),
            ("RLSIGHT_OTLP_ENDPOINT", "localhost:4318", "otlp_endpoint"),
            ("RLSIGHT_RESOURCE_ATTRIBUTES", '{"x": {"y": 1}}', "resource_attributes"),
            ("OTEL_SERVICE_NAME", " ", None),  # blank: ignored, not an error
        ],
    )
    def test_a_parsable_but_wrong_env_value_names_the_variable_and_the_field(
        self, var: str, raw: str, field: str | None,
    ) -> None:
        """The user set the variable, not the field: the error must point where to fix it."""
        if field is None:
            assert TelemetryConfig.from_env({var: raw}).service_name == "rlsight"
            return
        for build in (lambda: TelemetryConfig.from_env({var: raw}),
                      lambda: TelemetryConfig().with_env_fallbacks({var: raw})):
            with pytest.raises(ConfigError) as info:
                build()
            assert str(info.value).startswith(f"{var}={raw!r} (TelemetryConfig.{field}"), info.value

    @pytest.mark.parametrize(("raw", "expected"), [("1", True), ("on", True), ("No", False), ("", False)])
    def test_env_bools_accept_the_usual_spellings(self, raw: str, expected: bool) -> None:
        assert TelemetryConfig.from_env({"RLSIGHT_LOCAL_STORE": raw}).local_store is expected


    def test_an_empty_variable_counts_as_docs_configuration_md_says(self) -> None:
        quiet = {"RLSIGHT_ENABLED": False, "RLSIGHT_LOCAL_STORE": False, "RLSIGHT_STRICT": False,
                 "RLSIGHT_ENGINE_NATIVE_TRACING": False, "RLSIGHT_SPAN_GROUPS": (),
                 "RLSIGHT_ALGORITHM": ""}
        for setting in SETTINGS:
            if setting.env == "RLSIGHT_RUN_DIR":
                empty = TelemetryConfig.from_env({setting.env: "", "RLSIGHT_RUN_ID": "r"})
                assert empty.run_dir == TelemetryConfig(run_id="r").run_dir
            elif setting.env in quiet:
                config = TelemetryConfig.from_env({setting.env: ""})
                assert getattr(config, setting.name) == quiet[setting.env]
            else:
                with pytest.raises(ConfigError):
                    TelemetryConfig.from_env({setting.env: ""})
            if setting.otel_env is not None:  # OpenTelemetry's rule: empty is unset
                given = TelemetryConfig(run_id="r").with_env_fallbacks({setting.otel_env: ""})
                assert getattr(given, setting.name) == getattr(TelemetryConfig(run_id="r"), setting.name)


# -- YAML / mapping ----------------------------------------------------------------------------


class TestFromMapping:
    def test_known_keys_are_used(self) -> None:
        mapping = {"run_id": "r", "span_groups": ["all"], "shutdown_timeout_ms": 10}
        config = TelemetryConfig.from_mapping(mapping)
        assert (config.run_id, config.span_groups, config.shutdown_timeout_ms) == ("r", ("all",), 10)

    def test_unknown_keys_warn_once_naming_them_and_are_ignored(self) -> None:
        old = f"old_key_{uuid.uuid4().hex[:6]}"
        with pytest.warns(RlsightWarning, match=old):
            config = TelemetryConfig.from_mapping({old: 1, "run_id": "r"})
        assert config.run_id == "r"
        TelemetryConfig.from_mapping({old: 2})  # a second warning would fail: warnings are errors

    def test_wrong_type_in_a_mapping_raises(self) -> None:
        with pytest.raises(ConfigError, match="enabled"):
            TelemetryConfig.from_mapping({"enabled": "sure"})


# -- defaults and fallbacks --------------------------------------------------------------------


class TestDefaults:
    def test_generated_run_id_is_utc_time_and_hex(self) -> None:
        assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", str(TelemetryConfig().run_id))

    def test_generated_run_ids_differ(self) -> None:
        assert TelemetryConfig().run_id != TelemetryConfig().run_id

    def test_slurm_job_id_is_the_run_id(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SLURM_JOB_ID", "424242")
        assert TelemetryConfig().run_id == "424242"

    def test_explicit_run_id_wins_over_slurm(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SLURM_JOB_ID", "424242")
        assert TelemetryConfig(run_id="mine").run_id == "mine"

    def test_default_run_dir_is_absolute_under_rlsight_runs(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.chdir(tmp_path)
        config = TelemetryConfig(run_id="r1")
        assert config.run_dir == str(tmp_path / "rlsight-runs" / "r1")

    def test_relative_run_dir_is_made_absolute(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.chdir(tmp_path)
        config = TelemetryConfig(run_dir="out/run")
        assert Path(str(config.run_dir)).is_absolute()
        assert config.run_path == tmp_path / "out" / "run"

    def test_home_in_run_dir_is_expanded(self) -> None:
        assert TelemetryConfig(run_dir="~/runs").run_path == Path("~/runs").expanduser()

    def test_defaults_match_the_design(self) -> None:
        config = TelemetryConfig()
        assert config.enabled and config.local_store and not config.engine_native_tracing
        assert config.span_groups == ("per_step",)
        assert config.otlp_endpoint is None and config.otlp_protocol == "http/protobuf"
        assert config.shutdown_timeout_ms == 5000 and config.service_name == "rlsight"


class TestOtelFallbacks:
    def test_otel_variables_fill_unset_fields(self) -> None:
        config = TelemetryConfig.from_env({
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_SERVICE_NAME": "trainer",
        })
        assert config.otlp_endpoint == "http://collector:4317"
        assert config.otlp_protocol == "grpc"
        assert config.service_name == "trainer"

    def test_rlsight_variables_win_over_otel_ones(self) -> None:
        config = TelemetryConfig.from_env({
            "RLSIGHT_OTLP_ENDPOINT": "http://mine:4318",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://theirs:4318",
        })
        assert config.otlp_endpoint == "http://mine:4318"

    def test_rlsight_variable_equal_to_the_default_still_wins_over_otel(self) -> None:
        """A worker must rebuild the driver's config even where the node sets OTEL_* differently."""
        driver = TelemetryConfig(run_id="r", otlp_protocol="http/protobuf", service_name="rlsight")
        env = {**driver.to_env(), "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "other"}
        worker = TelemetryConfig.from_env(env)
        assert worker.otlp_protocol == "http/protobuf" and worker.service_name == "rlsight"

    def test_with_env_fallbacks_fills_default_fields_of_a_code_config(self) -> None:
        config = TelemetryConfig(run_id="r").with_env_fallbacks({"OTEL_SERVICE_NAME": "svc"})
        assert config.service_name == "svc"

    def test_with_env_fallbacks_keeps_explicit_non_default_values(self) -> None:
        config = TelemetryConfig(service_name="mine").with_env_fallbacks({"OTEL_SERVICE_NAME": "svc"})
        assert config.service_name == "mine"

    def test_bad_otel_protocol_names_the_field(self) -> None:
        with pytest.raises(ConfigError, match="otlp_protocol"):
            TelemetryConfig.from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/xml"})

    def test_nan_in_env_attributes_is_rejected(self) -> None:
        with pytest.raises(ConfigError, match="RLSIGHT_RESOURCE_ATTRIBUTES"):
            TelemetryConfig.from_env({"RLSIGHT_RESOURCE_ATTRIBUTES": '{"x": NaN}'})


class TestPrecedence:
    """explicit > RLSIGHT_* > OTEL_* > default, for a config built in code (issue #9.2)."""

    def test_rlsight_variables_fill_fields_a_code_config_left_at_default(self) -> None:
        config = TelemetryConfig(run_id="r").with_env_fallbacks(
            {"RLSIGHT_ENABLED": "false", "RLSIGHT_SPAN_GROUPS": "minimal"})
        assert config.enabled is False and config.span_groups == ("minimal",)

    def test_explicit_fields_win_over_rlsight_variables(self) -> None:
        config = TelemetryConfig(span_groups=("all",)).with_env_fallbacks(
            {"RLSIGHT_SPAN_GROUPS": "minimal"})
        assert config.span_groups == ("all",)

    def test_explicit_value_equal_to_the_default_still_wins_over_otel(self) -> None:
        """Passing service_name='rlsight' is a choice; OTEL_SERVICE_NAME must not replace it."""
        config = TelemetryConfig(service_name="rlsight").with_env_fallbacks({"OTEL_SERVICE_NAME": "svc"})
        assert config.service_name == "rlsight"

    def test_rlsight_variable_wins_over_otel_for_a_code_config(self) -> None:
        config = TelemetryConfig().with_env_fallbacks(
            {"RLSIGHT_SERVICE_NAME": "mine", "OTEL_SERVICE_NAME": "theirs"})
        assert config.service_name == "mine"

    def test_given_names_what_was_passed_not_what_was_defaulted(self) -> None:
        assert TelemetryConfig(service_name="rlsight").given == {"service_name"}
        assert TelemetryConfig().given == frozenset()
        assert TelemetryConfig.from_mapping({"algorithm": "grpo"}).given == {"algorithm"}

    def test_a_run_id_from_the_environment_moves_a_defaulted_run_dir_with_it(self) -> None:
        config = TelemetryConfig().with_env_fallbacks({"RLSIGHT_RUN_ID": "from-env"})
        assert config.run_id == "from-env" and config.run_path.name == "from-env"

    def test_a_generated_run_id_survives_resolution_and_changes(self) -> None:
        config = TelemetryConfig()
        assert config.with_env_fallbacks({}).run_id == config.run_id
        assert config.with_changes(algorithm="ppo").run_id == config.run_id

    def test_with_changes_keeps_the_record_of_what_was_given(self) -> None:
        config = TelemetryConfig(service_name="mine").with_changes(algorithm="ppo")
        assert config.given == {"service_name", "algorithm"}
        assert config.with_env_fallbacks({"RLSIGHT_SPAN_GROUPS": "minimal"}).span_groups == ("minimal",)


class TestOtlpSignals:
    """Signal-specific OTEL_EXPORTER_OTLP_{TRACES,METRICS}_* and every OTel protocol value."""

    def test_http_json_is_accepted(self) -> None:
        config = TelemetryConfig.from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
        assert config.otlp_protocol == "http/json"

    def test_signal_endpoint_is_used_as_given(self) -> None:
        config = TelemetryConfig.from_env({
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://all:4318",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/custom",
        })
        assert config.otlp_signal_endpoint("traces") == "http://traces:4318/custom"
        assert config.otlp_signal_endpoint("metrics") == "http://all:4318/v1/metrics"

    def test_a_traces_endpoint_alone_sends_no_metrics(self) -> None:
        config = TelemetryConfig.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/v1/traces"})
        assert config.otlp_signal_endpoint("traces") == "http://t:4318/v1/traces"
        assert config.otlp_signal_endpoint("metrics") is None

    def test_signal_protocol_overrides_the_generic_one(self) -> None:
        config = TelemetryConfig.from_env({
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc",
        })
        assert config.otlp_signal_protocol("metrics") == "grpc"
        assert config.otlp_signal_protocol("traces") == "http/protobuf"
        assert config.otlp_signal_endpoint("metrics") == "http://c:4317"

    def test_otel_signal_variables_never_beat_an_explicit_endpoint(self) -> None:
        config = TelemetryConfig(otlp_endpoint="http://mine:4318").with_env_fallbacks(
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://theirs:4318/v1/traces"})
        assert config.otlp_signal_endpoint("traces") == "http://mine:4318/v1/traces"
