"""Declared metric groups, the step tee, efficiency and GenAI metrics, on the real OTel SDK."""

from __future__ import annotations

import math
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.check.tables import metrics_table
from rlsight.errors import MetricSpecError, RlsightWarning
from rlsight.metrics import (
    DOC_BEGIN,
    DOC_END,
    MetricSpec,
    metric_groups_table,
    record_inference,
    record_metrics,
    register_metric_group,
    registered_metric_groups,
    tee_step_metrics,
)
from rlsight.spans import efficiency_span, setup_span
from rlsight.store import read_metrics
from rlsight.testing import CapturedPoint, FakeClock, capture_telemetry, isolated_metric_groups

LOSS = MetricSpec("test.loss", "train/loss", "gauge", "1", "Training loss.")
SAMPLES = MetricSpec("test.samples", "train/samples", "counter", "{sample}", "Samples seen.")
GRAD = MetricSpec("test.grad_norm", "train/grad_norm", "histogram", "1", "Gradient norm.")


@pytest.fixture(autouse=True)
def _isolated_groups() -> Iterator[None]:
    """Each test registers its own groups; the process-wide registry is restored after."""
    with isolated_metric_groups():
        yield


def points(capture: object, name: str) -> list[CapturedPoint]:
    return [p for p in capture.metrics() if p.name == name]  # type: ignore[attr-defined]


class TestRegistration:
    def test_duplicate_logger_key_raises_naming_group_key_and_specs(self) -> None:
        twin = MetricSpec("test.loss2", "train/loss", "gauge", "1", "Same key.")
        with pytest.raises(MetricSpecError, match=r"'trainer' declares logger key 'train/loss' "
                           r"twice \(specs #1 and #3\)"):
            register_metric_group("trainer", [LOSS, SAMPLES, twin])

    def test_duplicate_metric_name_raises(self) -> None:
        twin = MetricSpec("test.loss", "train/other", "gauge", "1", "Same name.")
        with pytest.raises(MetricSpecError, match=r"metric name 'test\.loss' twice"):
            register_metric_group("trainer", [LOSS, twin])

    def test_empty_spec_list_raises(self) -> None:
        with pytest.raises(MetricSpecError, match="'trainer' declares no metric specs"):
            register_metric_group("trainer", [])

    def test_second_registration_of_a_group_raises(self) -> None:
        register_metric_group("trainer", [LOSS])
        with pytest.raises(MetricSpecError, match="'trainer' is already registered"):
            register_metric_group("trainer", [SAMPLES])

    def test_registration_errors_are_value_errors(self) -> None:
        with pytest.raises(ValueError, match="trainer"):
            register_metric_group("trainer", [])

    def test_name_owned_by_another_group_raises(self) -> None:
        register_metric_group("trainer", [LOSS])
        other = MetricSpec("test.loss", "critic/loss", "gauge", "1", "Critic loss.")
        with pytest.raises(MetricSpecError, match="already declared by group 'trainer'"):
            register_metric_group("critic", [other])

    def test_name_rlsight_records_itself_raises(self) -> None:
        mine = MetricSpec("rl.engine.generation_tokens", "gen/tokens", "counter", "1", "Tokens.")
        with pytest.raises(MetricSpecError, match="a name rlsight records itself"):
            register_metric_group("trainer", [mine])

    def test_names_that_differ_only_in_case_are_one_metric(self) -> None:
        # OpenTelemetry compares instrument names case-insensitively: 'TEST.LOSS' would be
        # recorded as a second 'test.loss' of another kind, and 'RL.goodput.pct' as rlsight's.
        register_metric_group("trainer", [LOSS])
        shout = MetricSpec("TEST.LOSS", "critic/loss", "counter", "1", "Critic loss.")
        with pytest.raises(MetricSpecError, match=r"'TEST\.LOSS', already declared by group "
                           r"'trainer' as 'test\.loss'.*case"):
            register_metric_group("critic", [shout])
        with pytest.raises(MetricSpecError, match=r"metric name 'test\.b' twice.*case"):
            register_metric_group("twins", [MetricSpec("test.a", "a", "gauge", "1", "A."),
                                            MetricSpec("test.b", "b", "gauge", "1", "B."),
                                            MetricSpec("Test.B", "c", "gauge", "1", "C.")])
        mine = MetricSpec("RL.goodput.pct", "gp", "gauge", "%", "Goodput.")
        with pytest.raises(MetricSpecError, match="a name rlsight records itself"):
            register_metric_group("mine", [mine])

    def test_unknown_kind_raises(self) -> None:
        with pytest.raises(MetricSpecError, match="kind 'summary'"):
            MetricSpec("test.x", "x", "summary", "1", "Bad kind.")  # type: ignore[arg-type]

    @pytest.mark.parametrize("name", ["train loss", "1st.loss", "myrl.löss", "x" * 256, ".loss"])
    def test_a_name_opentelemetry_refuses_is_refused_at_declaration(self, name: str) -> None:
        # The SDK raises a bare Exception when the instrument is made, at the first tee, and
        # the whole group's points are lost every step; the spec is where the name is written.
        with pytest.raises(MetricSpecError, match=r"is not a valid OpenTelemetry metric name"):
            MetricSpec(name, "train/loss", "gauge", "1", "Loss.")

    def test_a_unit_opentelemetry_refuses_is_refused_at_declaration(self) -> None:
        with pytest.raises(MetricSpecError, match=r"unit 'µs', which OpenTelemetry refuses"):
            MetricSpec("test.latency", "latency", "gauge", "µs", "Latency.")

    @settings(max_examples=200, deadline=None)
    @given(st.text(alphabet="aZ09._-/ :é", min_size=0, max_size=8) | st.sampled_from(["a" * 255, "a" * 256]))
    def test_a_spec_accepts_exactly_the_names_the_sdk_accepts(self, name: str) -> None:
        from opentelemetry.sdk.metrics import MeterProvider

        try:
            MeterProvider().get_meter("test").create_gauge(name)
            sdk_accepts = True
        except Exception:
            sdk_accepts = False
        try:
            MetricSpec(name, "train/loss", "gauge", "1", "Loss.")
            spec_accepts = True
        except MetricSpecError:
            spec_accepts = False
        assert spec_accepts == (sdk_accepts and name != "")

    def test_missing_otel_api_is_a_separate_error_naming_the_dependency(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "opentelemetry.metrics", None)
        with pytest.raises(ImportError, match="opentelemetry-api") as caught:
            register_metric_group("trainer", [LOSS])
        assert not isinstance(caught.value, ValueError)
        assert "trainer" not in registered_metric_groups()

    def test_otel_api_without_sync_gauges_is_an_error_naming_the_version(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """opentelemetry-api < 1.23 has no Meter.create_gauge; that API is simulated here."""
        from opentelemetry.metrics import Meter

        monkeypatch.delattr(Meter, "create_gauge")
        register_metric_group("counters_only", [SAMPLES])
        with pytest.raises(ImportError, match=r"installed opentelemetry-api \d"):
            register_metric_group("trainer", [LOSS])

    def test_registered_groups_are_listed_in_order_read_only(self) -> None:
        register_metric_group("trainer", [LOSS, SAMPLES])
        groups = registered_metric_groups()
        assert groups["trainer"] == (LOSS, SAMPLES)
        with pytest.raises(TypeError):
            groups["other"] = ()  # type: ignore[index]


class TestRecordMetrics:
    def test_values_are_recorded_by_kind_with_the_given_attributes(self) -> None:
        register_metric_group("trainer", [LOSS, SAMPLES, GRAD])
        with capture_telemetry() as cap:
            record_metrics("trainer", {"train/loss": 0.5, "train/samples": 64,
                                       "train/grad_norm": 2.0}, {"rl.step": 3})
            assert [(p.value, p.attributes) for p in points(cap, "test.loss")] == [
                (0.5, {"rl.step": 3})]
            assert [p.value for p in points(cap, "test.samples")] == [64]
            assert [(p.count, p.sum) for p in points(cap, "test.grad_norm")] == [(1, 2.0)]

    def test_missing_gauge_key_leaves_a_gap_not_a_zero(self) -> None:
        register_metric_group("trainer", [LOSS])
        with capture_telemetry() as cap:
            record_metrics("trainer", {})
            assert points(cap, "test.loss") == []

    def test_missing_key_is_counted_as_skipped_with_its_name_and_reason(self) -> None:
        register_metric_group("trainer", [LOSS, SAMPLES])
        with capture_telemetry() as cap:
            record_metrics("trainer", {"train/samples": 1}, {"rl.step": 2})
            (skipped,) = points(cap, "rl.metrics.skipped")
        assert skipped.value == 1
        assert skipped.attributes == {
            "rl.step": 2, "rl.metric.name": "test.loss", "rl.metric.reason": "missing"}

    def test_missing_counter_and_histogram_keys_record_nothing(self) -> None:
        register_metric_group("trainer", [SAMPLES, GRAD])
        with capture_telemetry() as cap:
            record_metrics("trainer", {"unrelated": 1.0})
            assert points(cap, "test.samples") == [] and points(cap, "test.grad_norm") == []

    def test_nan_gauge_value_warns_once_and_is_counted_not_finite(self) -> None:
        register_metric_group("trainer", [LOSS])
        with capture_telemetry() as cap:
            with pytest.warns(RlsightWarning, match="only finite values"):
                record_metrics("trainer", {"train/loss": math.nan})
            record_metrics("trainer", {"train/loss": math.inf})
            assert points(cap, "test.loss") == []
            reasons = [p.attributes["rl.metric.reason"] for p in points(cap, "rl.metrics.skipped")]
        assert reasons == ["not_finite"]  # one point: both skips on the same attribute set

    def test_string_value_warns_once_per_key_and_is_skipped(self) -> None:
        register_metric_group("trainer", [LOSS])
        with capture_telemetry() as cap:
            with pytest.warns(RlsightWarning, match="'train/loss'.*str value, not a number"):
                record_metrics("trainer", {"train/loss": "0.5"})
            record_metrics("trainer", {"train/loss": None})  # same key: no second warning
            assert points(cap, "test.loss") == []

    def test_tensor_like_with_item_is_accepted(self) -> None:
        register_metric_group("trainer", [LOSS, SAMPLES])
        with capture_telemetry() as cap:
            record_metrics("trainer", {"train/loss": np.array([0.25]), "train/samples": np.int64(8)})
            assert [p.value for p in points(cap, "test.loss")] == [0.25]
            assert [p.value for p in points(cap, "test.samples")] == [8]

    def test_tensor_like_whose_item_fails_warns_and_is_skipped(self) -> None:
        register_metric_group("trainer", [LOSS])
        with capture_telemetry() as cap:
            with pytest.warns(RlsightWarning, match="ndarray value"):
                record_metrics("trainer", {"train/loss": np.array([0.1, 0.2])})
            assert points(cap, "test.loss") == []

    def test_negative_counter_value_warns_and_is_skipped(self) -> None:
        register_metric_group("trainer", [SAMPLES])
        with capture_telemetry() as cap:
            with pytest.warns(RlsightWarning, match="a counter only adds"):
                record_metrics("trainer", {"train/samples": -3})
            assert points(cap, "test.samples") == []

    def test_negative_histogram_value_warns_and_is_counted_not_dropped_by_the_sdk(self) -> None:
        # OpenTelemetry's SDK drops a negative histogram measurement with only a log line: a
        # negative reward would vanish without a gap being counted.
        register_metric_group("trainer", [GRAD])
        with capture_telemetry() as cap:
            with pytest.warns(RlsightWarning, match="histogram takes no negative value.*as a gauge"):
                record_metrics("trainer", {"train/grad_norm": -0.5}, {"rl.step": 4})
            record_metrics("trainer", {"train/grad_norm": 0.0}, {"rl.step": 5})
            assert [(p.count, p.sum) for p in points(cap, "test.grad_norm")] == [(1, 0.0)]
            (skipped,) = points(cap, "rl.metrics.skipped")
        assert skipped.attributes == {
            "rl.step": 4, "rl.metric.name": "test.grad_norm", "rl.metric.reason": "negative"}

    def test_unregistered_group_warns_once_and_records_nothing(self) -> None:
        with capture_telemetry() as cap:
            with pytest.warns(RlsightWarning, match="'nope' is not registered"):
                record_metrics("nope", {"train/loss": 1.0})
            record_metrics("nope", {"train/loss": 1.0})
            assert cap.metrics() == []

    def test_without_telemetry_recording_is_a_silent_no_op(self) -> None:
        register_metric_group("trainer", [LOSS])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            record_metrics("trainer", {"train/loss": "not even a number"})
            record_metrics("unregistered", {})
            tee_step_metrics(1, {"train/loss": 1.0})
            record_inference(1.0, 1, 1, model="m", operation="chat")
        with capture_telemetry() as cap:
            assert cap.metrics() == []


class TestTee:
    def test_every_group_is_recorded_with_step_and_window(self) -> None:
        register_metric_group("trainer", [LOSS])
        register_metric_group("data", [SAMPLES])
        with capture_telemetry(span_groups=()) as cap:
            tee_step_metrics(7, {"train/loss": 1.5, "train/samples": 32}, window="run")
            (loss,) = points(cap, "test.loss")
            (samples,) = points(cap, "test.samples")
        assert loss.attributes == {"rl.step": 7, "rl.window": "run"}
        assert (loss.value, samples.value) == (1.5, 32)

    def test_step_is_an_int_as_step_span_reads_it_and_minus_one_when_not_whole(self) -> None:
        # Points of one metric must not carry rl.step as an int, a str and a float by turns
        # (nor None, which OpenTelemetry refuses): the same reading as step_span and the
        # driver's goodput metrics (-1, the value kept in rl.step.value).
        register_metric_group("trainer", [LOSS])
        with capture_telemetry(span_groups=()) as cap:
            for step in ("3", 4.0, np.int64(5)):
                tee_step_metrics(step, {"train/loss": 1.0})  # type: ignore[arg-type]
            with pytest.warns(RlsightWarning, match=r"tee_step_metrics\(2\.5\).*rl\.step=-1"):
                tee_step_metrics(2.5, {"train/loss": 1.0})  # type: ignore[arg-type]
            tee_step_metrics(None, {"train/loss": 1.0})  # type: ignore[arg-type]
            loss = [p.attributes for p in points(cap, "test.loss")]
        assert loss == [{"rl.step": 3, "rl.window": "step"}, {"rl.step": 4, "rl.window": "step"},
                        {"rl.step": 5, "rl.window": "step"},
                        {"rl.step": -1, "rl.step.value": 2.5, "rl.window": "step"},
                        {"rl.step": -1, "rl.window": "step"}]
        assert all(type(a["rl.step"]) is int for a in loss)

    def test_efficiency_share_of_the_given_step_time_is_marked_step(self) -> None:
        with capture_telemetry(clock=FakeClock()) as cap:
            assert cap.clock is not None
            with efficiency_span("idle/barrier"):
                cap.clock.advance(0.5)
            tee_step_metrics(1, {}, denominator_s=2.0)
            (seconds,) = points(cap, "rl.efficiency.seconds")
            (pct,) = points(cap, "rl.efficiency.pct")
        assert seconds.attributes == {
            "rl.step": 1, "rl.efficiency.category": "idle/barrier", "rl.efficiency.measurement": "span"
        }
        assert seconds.value == pytest.approx(0.5)
        assert pct.attributes["rl.window"] == "step"
        assert pct.value == pytest.approx(25.0)

    def test_efficiency_share_without_a_denominator_is_of_the_run_and_marked_run(self) -> None:
        with capture_telemetry(clock=FakeClock()) as cap:
            assert cap.clock is not None
            cap.clock.advance(1.5)
            with efficiency_span("idle/barrier"):
                cap.clock.advance(0.5)
            tee_step_metrics(1, {})
            (pct,) = points(cap, "rl.efficiency.pct")
        assert pct.attributes["rl.window"] == "run"
        assert pct.value == pytest.approx(25.0)  # 0.5 s of the 2 s since setup

    def test_efficiency_seconds_are_drained_each_step(self) -> None:
        with capture_telemetry(clock=FakeClock()) as cap:
            assert cap.clock is not None
            with efficiency_span("wasted/recompute"):
                cap.clock.advance(0.25)
            tee_step_metrics(1, {}, denominator_s=1.0)
            tee_step_metrics(2, {}, denominator_s=1.0)
            by_step = {p.attributes["rl.step"]: p.value for p in points(cap, "rl.efficiency.seconds")}
        assert by_step == {1: pytest.approx(0.25), 2: 0.0}

    def test_bad_denominator_warns_and_falls_back_to_the_run_window(self) -> None:
        with capture_telemetry() as cap:
            with efficiency_span("idle/barrier"):
                pass
            with pytest.warns(RlsightWarning, match="denominator_s=0"):
                tee_step_metrics(1, {}, denominator_s=0)
            (pct,) = points(cap, "rl.efficiency.pct")
        assert pct.attributes["rl.window"] == "run"


class TestInference:
    def test_a_client_timed_call_is_a_client_operation_duration(self) -> None:
        """Issue #18: a caller's timing was recorded as gen_ai.server.request.duration."""
        with capture_telemetry() as cap:
            record_inference(1.25, 100, 20, model="qwen", operation="text_completion",
                             provider="vllm")
            assert points(cap, "gen_ai.server.request.duration") == []
            (duration,) = points(cap, "gen_ai.client.operation.duration")
            usage = {p.attributes["gen_ai.token.type"]: p for p in points(cap, "gen_ai.client.token.usage")}
        expected = {"gen_ai.request.model": "qwen", "gen_ai.operation.name": "text_completion",
                    "gen_ai.provider.name": "vllm"}
        assert (duration.sum, duration.unit, duration.attributes) == (1.25, "s", expected)
        assert usage["input"].sum == 100 and usage["output"].sum == 20
        assert usage["input"].unit == "{token}"

    def test_a_server_timed_request_is_a_server_request_duration_without_token_usage(self) -> None:
        with capture_telemetry() as cap:
            record_inference(0.75, 100, 20, model="qwen", operation="chat", side="server")
            assert points(cap, "gen_ai.client.operation.duration") == []
            assert points(cap, "gen_ai.client.token.usage") == []
            (duration,) = points(cap, "gen_ai.server.request.duration")
        assert duration.sum == 0.75
        assert duration.attributes == {"gen_ai.request.model": "qwen", "gen_ai.operation.name": "chat"}

    def test_an_unknown_side_is_a_value_error_even_without_telemetry(self) -> None:
        with pytest.raises(ValueError, match="side='engine'"):
            record_inference(1.0, 1, 1, model="m", operation="chat", side="engine")  # type: ignore[arg-type]

    def test_negative_duration_warns_and_only_the_tokens_are_recorded(self) -> None:
        with capture_telemetry() as cap:
            with pytest.warns(RlsightWarning, match="duration_s=-1.0"):
                record_inference(-1.0, 10, 2, model="m", operation="chat")
            assert points(cap, "gen_ai.client.operation.duration") == []
            assert len(points(cap, "gen_ai.client.token.usage")) == 2


class TestStore:
    def test_flush_telemetry_writes_the_store_and_keeps_what_a_capture_saw(self, tmp_path: Path) -> None:
        """flush_telemetry flushes rlsight's own readers only: a test's in-memory reader keeps
        the points recorded before the flush."""
        from rlsight import flush_telemetry

        register_metric_group("trainer", [LOSS])
        with capture_telemetry(run_dir=tmp_path) as cap:
            tee_step_metrics(3, {"train/loss": 0.5})
            assert flush_telemetry(2000)
            on_disk = [p for p in read_metrics(tmp_path).points if p.name == "test.loss"]
            assert [(p.attributes["rl.step"], p.value) for p in on_disk] == [(3, 0.5)]
            tee_step_metrics(4, {"train/loss": 0.25})
            assert [p.value for p in points(cap, "test.loss")] == [0.5, 0.25]

    def test_store_metric_files_hold_the_teed_points_with_attributes(self, tmp_path: Path) -> None:
        register_metric_group("trainer", [LOSS, SAMPLES])
        with capture_telemetry(run_dir=tmp_path):
            with setup_span("workers"):
                pass
            with efficiency_span("idle/generation_wait"):
                pass
            tee_step_metrics(4, {"train/loss": 0.75, "train/samples": 16}, denominator_s=1.0)
            record_inference(0.5, 8, 4, model="m", operation="chat")
        result = read_metrics(tmp_path)
        assert result.skipped == []
        by_name = {p.name: p for p in result.points}
        assert by_name["test.loss"].value == 0.75
        assert by_name["test.loss"].attributes == {"rl.step": 4, "rl.window": "step"}
        assert by_name["test.samples"].value == 16
        assert by_name["rl.efficiency.pct"].attributes["rl.efficiency.category"] == (
            "idle/generation_wait")
        assert by_name["rl.setup.duration"].attributes == {"phase": "workers"}
        assert by_name["gen_ai.client.operation.duration"].sum == 0.5

    def test_a_missing_key_shows_in_the_store_as_a_skip_not_a_zero(self, tmp_path: Path) -> None:
        register_metric_group("trainer", [LOSS])
        with capture_telemetry(run_dir=tmp_path):
            tee_step_metrics(1, {})
        stored = read_metrics(tmp_path).points
        assert [p for p in stored if p.name == "test.loss"] == []
        # Only this group's: another module imported earlier may have registered its own.
        (skipped,) = [p for p in stored if p.name == "rl.metrics.skipped"
                      and p.attributes["rl.metric.name"] == "test.loss"]
        assert skipped.attributes["rl.metric.reason"] == "missing"
        assert skipped.attributes["rl.step"] == 1


class TestDocs:
    def test_docs_table_matches_the_metrics_rlsight_records(self) -> None:
        text = (Path(__file__).parents[1] / "docs" / "metrics.md").read_text()
        block = re.search(re.escape(DOC_BEGIN) + r"\n(.*?)\n" + re.escape(DOC_END), text, re.S)
        assert block is not None, f"docs/metrics.md lacks the {DOC_BEGIN} block"
        assert block.group(1) == metrics_table()

    def test_groups_table_lists_each_spec_with_its_logger_key(self) -> None:
        table = metric_groups_table({"trainer": (LOSS,)})
        assert "| `test.loss` | gauge | `1` |" in table
        assert "`train/loss`" in table and "(group `trainer`)" in table
