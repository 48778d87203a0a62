"""rlsight.testing's tools and the run state the runtime owns: a fake clock, counting ids,
registries put back after a test, and nothing of a run left behind once it shuts down."""

from __future__ import annotations

import gc
import weakref

import pytest

import rlsight
from rlsight import (
    RL,
    SpanGroup,
    current_trace_carrier,
    declare_efficiency_categories,
    declared_efficiency_categories,
    efficiency_span,
    is_span_group_enabled,
    register_span_groups,
    registered_groups,
    span,
    step_span,
    tee_step_metrics,
)
from rlsight.metrics import MetricSpec, register_metric_group, registered_metric_groups
from rlsight.runtime import active_runtime
from rlsight.testing import (
    CountingIdGenerator,
    FakeClock,
    capture_telemetry,
    isolated_registries,
)


class TestFakeClock:
    def test_spans_last_exactly_what_the_clock_advanced(self) -> None:
        clock = FakeClock(start=100.0)
        with capture_telemetry(clock=clock) as cap:
            with span(RL.GENERATION, "rl.rollout.generate"):
                clock.advance(0.125)
            (recorded,) = cap.spans()
        assert recorded.start_time == 100_000_000_000
        assert recorded.end_time == 100_125_000_000

    def test_efficiency_seconds_and_the_step_summary_follow_the_clock(self) -> None:
        clock = FakeClock()
        with capture_telemetry(clock=clock) as cap:
            with step_span(4):
                clock.advance(1.5)
                with efficiency_span("idle/barrier"):
                    clock.advance(0.5)
            summary = rlsight.last_step_summary()
            assert cap.runtime.take_efficiency_seconds() == {"idle/barrier": 0.5}
        assert summary["rlsight/wall_s"] == 2.0
        assert summary["rlsight/idle_s"] == 0.5

    def test_it_never_goes_back(self) -> None:
        clock = FakeClock(start=5.0)
        with pytest.raises(ValueError, match="seconds >= 0"):
            clock.advance(-1.0)
        assert clock.time() == 5.0

    def test_without_a_clock_spans_keep_wall_time(self) -> None:
        with capture_telemetry() as cap:
            assert cap.clock is None and cap.runtime.clock is None
            with span(RL.GENERATION, "rl.rollout.generate"):
                pass
            (recorded,) = cap.spans()
        assert recorded.start_time is not None and recorded.start_time > FakeClock()()


class TestCountingIds:
    def test_ids_count_up_from_one_in_every_capture(self) -> None:
        def ids() -> list[tuple[int, int, int | None]]:
            with capture_telemetry(deterministic_ids=True) as cap:
                with step_span(1), span(RL.GENERATION, "rl.rollout.generate"):
                    pass
                return [(s.context.trace_id, s.context.span_id, s.parent.span_id if s.parent else None)
                        for s in cap.spans()]

        first = ids()
        assert first == [(1, 2, 1), (1, 1, None)]  # the child ends first
        assert ids() == first

    def test_the_generator_alone(self) -> None:
        generator = CountingIdGenerator()
        assert [generator.generate_span_id() for _ in range(3)] == [1, 2, 3]
        assert generator.generate_trace_id() == 1
        assert not generator.is_trace_id_random()


class TestNestedCapture:
    def test_a_capture_inside_a_set_up_process_hands_its_runtime_back(self, tmp_path) -> None:
        outer = rlsight.setup_telemetry(rlsight.TelemetryConfig(run_dir=str(tmp_path / "run"),
                                                                span_groups=("minimal",)))
        try:
            with capture_telemetry(span_groups=("generation",)) as cap:
                assert active_runtime() is cap.runtime
                assert is_span_group_enabled(RL.GENERATION)
            assert active_runtime() is outer
            assert not is_span_group_enabled(RL.GENERATION)
            assert is_span_group_enabled(RL.STEP)
        finally:
            rlsight.shutdown_telemetry()


    def test_a_capture_that_cannot_start_leaves_the_set_up_runtime_active(self, tmp_path) -> None:
        outer = rlsight.setup_telemetry(rlsight.TelemetryConfig(run_dir=str(tmp_path / "run"),
                                                                span_groups=("minimal",)))
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        try:
            with pytest.raises(OSError), pytest.warns(rlsight.RlsightWarning, match="could not start"):
                with capture_telemetry(run_dir=blocker / "run"):
                    pass
            assert active_runtime() is outer
            assert is_span_group_enabled(RL.STEP)
        finally:
            rlsight.shutdown_telemetry()


class TestIsolatedRegistries:
    def test_every_registry_is_put_back(self) -> None:
        spec = MetricSpec("test.isolated.loss", "isolated/loss", "gauge", "1", "A test metric.")
        with isolated_registries():
            register_span_groups("isolatedns", [SpanGroup("isolated_phase", "only here")])
            register_metric_group("isolated", [spec])
            declare_efficiency_categories("idle/isolated_wait")
            rlsight.set_span_group_spec(["isolated_phase"])
            assert "isolated_phase" in registered_groups()
        assert "isolated_phase" not in registered_groups()
        assert "isolated" not in registered_metric_groups()
        assert "idle/isolated_wait" not in declared_efficiency_categories()
        with pytest.warns(rlsight.RlsightWarning, match="isolated_phase"):
            # the spec set inside is gone too: the name is unknown again
            assert rlsight.set_span_group_spec(["isolated_phase"]).pending == ("isolated_phase",)
        rlsight.set_span_group_spec(["per_step"])

    def test_a_failing_block_still_puts_them_back(self) -> None:
        with pytest.raises(RuntimeError), isolated_registries():
            register_span_groups("isolatedfail", [SpanGroup("isolated_fail", "only here")])
            raise RuntimeError
        assert "isolated_fail" not in registered_groups()


class TestRunStateBelongsToTheRuntime:
    def test_a_new_capture_starts_with_empty_run_state(self) -> None:
        with capture_telemetry() as first:
            with efficiency_span("idle/barrier"), span(RL.GENERATION, "rl.rollout.generate"):
                assert current_trace_carrier() is not None
            tee_step_metrics(1, {})
            assert first.runtime.run_state.carriers
            assert first.runtime.run_state.run_efficiency
        with capture_telemetry() as second:
            state = second.runtime.run_state
            assert (state.carriers, state.remote_spans, state.undecorated) == ({}, {}, set())
            assert not state.run_efficiency and not state.ray_env_checked

    def test_a_shut_down_runtime_is_not_kept_alive_by_module_state(self) -> None:
        """Module globals (the run window, instrument caches) used to pin the last run."""
        with capture_telemetry() as cap:
            with efficiency_span("idle/barrier"), span(RL.GENERATION, "rl.rollout.generate"):
                current_trace_carrier()
            tee_step_metrics(1, {"x": 1.0})
            rlsight.record_inference(0.5, 10, 20, model="m", operation="chat")
            ref = weakref.ref(cap.runtime)
        del cap
        gc.collect()
        assert ref() is None
