"""Span helpers (rlsight.spans) against the real OpenTelemetry SDK with an in-memory exporter."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from rlsight._span_manager import NOOP
from rlsight.buckets import bucket_scope, per_prompt_scope
from rlsight.errors import RlsightWarning, reset_warn_once
from rlsight.spans import (
    declare_efficiency_categories,
    declared_efficiency_categories,
    efficiency_span,
    job_span,
    load_model_span,
    setup_span,
    span,
    startup_span,
    step_span,
    traced,
    umbrella_span,
    umbrella_traced,
)
from rlsight.testing import Capture, capture_telemetry


def _one(cap: Capture, name: str) -> ReadableSpan:
    found = [s for s in cap.spans() if s.name == name]
    assert len(found) == 1, f"expected one {name!r} span, got {cap.span_names()}"
    return found[0]


def _attrs(s: ReadableSpan) -> dict[str, Any]:
    return dict(s.attributes or {})


def _is_child(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert parent.context is not None
    return child.parent is not None and child.parent.span_id == parent.context.span_id


# -- the gate ----------------------------------------------------------------------------------


class TestGate:
    def test_disabled_span_returns_the_shared_noop(self) -> None:
        with capture_telemetry(span_groups=["minimal"]) as cap:
            helper = span("generation", "rl.test.off", batch_size=8)
            assert helper is NOOP
            with helper as s:
                assert not s.is_recording()
            assert cap.spans() == ()

    @pytest.mark.parametrize(
        "make",
        [
            lambda: umbrella_span("rollout", "rl.test.rollout"),
            lambda: job_span(),
            lambda: step_span(1),
            lambda: startup_span(),
            lambda: load_model_span("vllm"),
            lambda: efficiency_span("idle/barrier"),
            lambda: setup_span("ray"),
        ],
        ids=["umbrella_span", "job_span", "step_span", "startup_span", "load_model_span", "efficiency_span",
             "setup_span"],
    )
    def test_every_disabled_helper_returns_the_shared_noop(self, make: Any) -> None:
        with capture_telemetry(span_groups=["generation"]) as cap:
            assert make() is NOOP
            assert cap.spans() == ()

    def test_every_helper_is_noop_without_a_runtime(self) -> None:
        assert span("generation", "rl.test.none") is NOOP
        assert setup_span("ray") is NOOP
        assert efficiency_span("idle/barrier") is NOOP

    def test_disabled_traced_function_runs_without_a_span(self) -> None:
        @traced("generation")
        def work(x: int) -> int:
            return x + 1

        with capture_telemetry(span_groups=["minimal"]) as cap:
            assert work(1) == 2
            assert cap.spans() == ()

    def test_disabled_noop_span_never_swallows_the_exception(self) -> None:
        with capture_telemetry(span_groups=["minimal"]), pytest.raises(KeyError):
            with span("generation", "rl.test.off"):
                raise KeyError("x")

    def test_span_of_the_only_enabled_group_is_emitted(self) -> None:
        with capture_telemetry(span_groups=["generation"]) as cap:
            with span("generation", "rl.test.on"):
                pass
            assert cap.span_names() == ["rl.test.on"]


# -- span() and its attributes -----------------------------------------------------------------


class TestSpan:
    def test_span_is_named_and_yields_the_recording_otel_span(self, capture: Capture) -> None:
        with span("generation", "rl.test.gen") as s:
            assert s.is_recording()
            assert trace.get_current_span() is s
        assert capture.span_names() == ["rl.test.gen"]

    def test_leaf_span_carries_bucket_group_and_thread_id(self, capture: Capture) -> None:
        with span("generation", "rl.test.gen"):
            pass
        attrs = _attrs(_one(capture, "rl.test.gen"))
        assert attrs["rl.bucket"] == "productive"
        assert attrs["rl.span_group"] == "generation"
        assert attrs["thread.id"] == threading.get_native_id()

    def test_overhead_group_span_is_bucketed_overhead(self, capture: Capture) -> None:
        with span("refit", "rl.test.refit"):
            pass
        assert _attrs(_one(capture, "rl.test.refit"))["rl.bucket"] == "overhead"

    def test_umbrella_span_carries_no_bucket(self, capture: Capture) -> None:
        with umbrella_span("rollout", "rl.test.rollout"):
            pass
        attrs = _attrs(_one(capture, "rl.test.rollout"))
        assert "rl.bucket" not in attrs
        assert attrs["rl.span_group"] == "rollout"
        assert isinstance(attrs["thread.id"], int)

    def test_umbrella_span_over_a_bucketed_group_carries_no_bucket(self, capture: Capture) -> None:
        with umbrella_span("generation", "rl.test.umbrella_gen"):
            pass
        assert "rl.bucket" not in _attrs(_one(capture, "rl.test.umbrella_gen"))

    def test_nested_span_is_a_child_of_the_enclosing_span(self, capture: Capture) -> None:
        with umbrella_span("rollout", "rl.test.parent"), span("generation", "rl.test.child"):
            pass
        assert _is_child(_one(capture, "rl.test.child"), _one(capture, "rl.test.parent"))

    def test_context_is_restored_after_the_span(self, capture: Capture) -> None:
        before = trace.get_current_span()
        with span("generation", "rl.test.gen"):
            pass
        assert trace.get_current_span() is before

    def test_undotted_attribute_keys_get_the_rl_prefix(self, capture: Capture) -> None:
        with span("generation", "rl.test.gen", batch_size=8, **{"gen_ai.request.model": "m"}):
            pass
        attrs = _attrs(_one(capture, "rl.test.gen"))
        assert attrs["rl.batch_size"] == 8
        assert attrs["gen_ai.request.model"] == "m"
        assert "batch_size" not in attrs

    def test_list_attribute_is_kept_as_a_sequence(self, capture: Capture) -> None:
        with span("generation", "rl.test.gen", lengths=[1, 2, 3]):
            pass
        assert tuple(_attrs(_one(capture, "rl.test.gen"))["rl.lengths"]) == (1, 2, 3)

    def test_none_attribute_is_left_out(self, capture: Capture) -> None:
        with span("generation", "rl.test.gen", maybe=None):
            pass
        assert "rl.maybe" not in _attrs(_one(capture, "rl.test.gen"))

    def test_concurrent_span_is_tagged(self, capture: Capture) -> None:
        with span("generation", "rl.test.gen", concurrent=True):
            pass
        assert _attrs(_one(capture, "rl.test.gen"))["rl.concurrent"] is True

    def test_exception_is_recorded_with_error_status_and_reraised_unchanged(self, capture: Capture) -> None:
        error = ValueError("boom")
        with pytest.raises(ValueError) as excinfo, span("generation", "rl.test.gen"):
            raise error
        assert excinfo.value is error
        finished = _one(capture, "rl.test.gen")
        assert finished.status.status_code is StatusCode.ERROR
        assert finished.status.description == "ValueError: boom"
        assert [e.name for e in finished.events] == ["exception"]

    def test_base_exception_ends_the_span_without_error_status(self, capture: Capture) -> None:
        with pytest.raises(KeyboardInterrupt), span("generation", "rl.test.gen"):
            raise KeyboardInterrupt
        assert _one(capture, "rl.test.gen").status.status_code is StatusCode.UNSET

    def test_span_works_as_an_async_context_manager(self, capture: Capture) -> None:
        async def scenario() -> None:
            async with umbrella_span("rollout", "rl.test.parent"):
                async with span("generation", "rl.test.child") as s:
                    assert trace.get_current_span() is s
                    await asyncio.sleep(0)
            assert _is_child(_one(capture, "rl.test.child"), _one(capture, "rl.test.parent"))

        asyncio.run(scenario())

    def test_async_span_records_and_reraises(self, capture: Capture) -> None:
        async def scenario() -> None:
            with pytest.raises(RuntimeError, match="late"):
                async with span("generation", "rl.test.gen"):
                    await asyncio.sleep(0)
                    raise RuntimeError("late")
            assert _one(capture, "rl.test.gen").status.description == "RuntimeError: late"

        asyncio.run(scenario())


# -- redaction and attribute types -------------------------------------------------------------


class TestRedaction:
    @pytest.mark.parametrize(
        "key",
        [
            "prompt", "prompts", "completion", "completions", "token", "tokens", "secret",
            "secrets", "password", "passwords", "api_key", "authorization", "Authorization",
            "gen_ai.prompt", "http.request.header.authorization", "rl.sampling.api_key",
        ],
    )
    def test_sensitive_last_segment_is_redacted(self, capture: Capture, key: str) -> None:
        with span("generation", "rl.test.gen", **{key: "hunter2"}):
            pass
        full = key if "." in key else "rl." + key
        assert _attrs(_one(capture, "rl.test.gen"))[full] == "<redacted>"

    @pytest.mark.parametrize(
        ("key", "value"),
        [("input_tokens", 12), ("output_tokens", 7), ("rl.prompt_len", 33), ("num_prompts", 4),
         ("token_budget", 1024), ("gen_ai.usage.input_tokens", 5)],
    )
    def test_counts_named_after_content_are_not_redacted(
        self, capture: Capture, key: str, value: int
    ) -> None:
        with span("generation", "rl.test.gen", **{key: value}):
            pass
        full = key if "." in key else "rl." + key
        assert _attrs(_one(capture, "rl.test.gen"))[full] == value

    def test_traced_static_attributes_are_redacted(self, capture: Capture) -> None:
        @traced("generation", "rl.test.traced", prompt="the prompt")
        def work() -> None:
            return None

        work()
        assert _attrs(_one(capture, "rl.test.traced"))["rl.prompt"] == "<redacted>"

    def test_non_scalar_attribute_warns_once_and_is_dropped(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match=r"'rl\.payload' has type dict"):
            with span("generation", "rl.test.first", payload={"a": 1}, kept=1):
                pass
        with span("generation", "rl.test.second", payload={"b": 2}):  # no second warning
            pass
        first = _attrs(_one(capture, "rl.test.first"))
        assert "rl.payload" not in first and first["rl.kept"] == 1
        assert "rl.payload" not in _attrs(_one(capture, "rl.test.second"))

    def test_non_scalar_warning_points_at_the_callers_line(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning) as record:
            with span("generation", "rl.test.gen", payload=object()):
                pass
        assert record[0].filename == __file__

    def test_scalar_like_objects_are_unwrapped_with_item(self, capture: Capture) -> None:
        class Scalar:
            def item(self) -> float:
                return 0.5

        with span("generation", "rl.test.gen", loss=Scalar()):
            pass
        assert _attrs(_one(capture, "rl.test.gen"))["rl.loss"] == 0.5


# -- traced: the four function kinds -----------------------------------------------------------


class TestTracedSync:
    def test_default_name_is_the_qualname(self, capture: Capture) -> None:
        class Worker:
            @traced("training")
            def step(self) -> int:
                return 3

        assert Worker().step() == 3
        assert capture.span_names() == [Worker.step.__qualname__]
        assert capture.span_names()[0].endswith("Worker.step")

    def test_explicit_name_wins(self, capture: Capture) -> None:
        @traced("training", "rl.test.train")
        def work() -> None:
            return None

        work()
        assert capture.span_names() == ["rl.test.train"]

    def test_wrapper_keeps_the_function_metadata(self) -> None:
        def work(a: int, *, b: str = "x") -> str:
            """Doc."""
            return b * a

        wrapped = traced("training")(work)
        assert wrapped.__name__ == "work" and wrapped.__doc__ == "Doc."
        assert wrapped.__wrapped__ is work  # type: ignore[attr-defined]

    def test_call_inside_a_span_is_its_child(self, capture: Capture) -> None:
        @traced("training", "rl.test.child")
        def work() -> None:
            return None

        with umbrella_span("step", "rl.test.parent"):
            work()
        assert _is_child(_one(capture, "rl.test.child"), _one(capture, "rl.test.parent"))

    def test_exception_is_recorded_and_reraised_unchanged(self, capture: Capture) -> None:
        error = ZeroDivisionError("nope")

        @traced("training", "rl.test.fail")
        def work() -> None:
            raise error

        with pytest.raises(ZeroDivisionError) as excinfo:
            work()
        assert excinfo.value is error
        assert _one(capture, "rl.test.fail").status.description == "ZeroDivisionError: nope"

    def test_umbrella_traced_carries_no_bucket(self, capture: Capture) -> None:
        @umbrella_traced("rollout", "rl.test.rollout")
        def rollout() -> str:
            return "done"

        assert rollout() == "done"
        assert "rl.bucket" not in _attrs(_one(capture, "rl.test.rollout"))


class TestTracedAsync:
    def test_coroutine_returns_its_value_inside_its_span(self, capture: Capture) -> None:
        async def scenario() -> None:
            @traced("reward", "rl.test.score")
            async def score(x: int) -> int:
                await asyncio.sleep(0)
                with span("data_plane", "rl.test.inner"):
                    pass
                return x * 2

            assert await score(21) == 42
            assert _is_child(_one(capture, "rl.test.inner"), _one(capture, "rl.test.score"))
            assert _attrs(_one(capture, "rl.test.score"))["rl.bucket"] == "productive"

        asyncio.run(scenario())

    def test_coroutine_exception_is_recorded_and_reraised(self, capture: Capture) -> None:
        async def scenario() -> None:
            error = TimeoutError("slow env")

            @traced("reward", "rl.test.score")
            async def score() -> None:
                await asyncio.sleep(0)
                raise error

            with pytest.raises(TimeoutError) as excinfo:
                await score()
            assert excinfo.value is error
            assert _one(capture, "rl.test.score").status.description == "TimeoutError: slow env"

        asyncio.run(scenario())

    def test_concurrent_calls_get_sibling_spans(self, capture: Capture) -> None:
        async def scenario() -> None:
            @traced("reward", "rl.test.score")
            async def score() -> None:
                await asyncio.sleep(0.001)

            async with umbrella_span("rollout", "rl.test.parent"):
                await asyncio.gather(score(), score(), score())
            parent = _one(capture, "rl.test.parent")
            scores = [s for s in capture.spans() if s.name == "rl.test.score"]
            assert len(scores) == 3 and all(_is_child(s, parent) for s in scores)

        asyncio.run(scenario())

    def test_wrapper_is_still_a_coroutine_function(self) -> None:
        @traced("reward")
        async def score() -> None:
            return None

        assert asyncio.iscoroutinefunction(score)


class TestTracedGenerator:
    def test_generator_yields_its_items_and_returns_its_value(self, capture: Capture) -> None:
        @traced("generation", "rl.test.gen")
        def produce() -> Iterator[int]:
            yield 1
            yield 2
            return 3  # type: ignore[misc]

        def consume() -> Any:
            return (yield from produce())

        consumer = consume()
        assert next(consumer) == 1
        assert next(consumer) == 2
        with pytest.raises(StopIteration) as stop:
            next(consumer)
        assert stop.value.value == 3
        assert capture.span_names() == ["rl.test.gen"]

    def test_send_values_reach_the_generator(self, capture: Capture) -> None:
        @traced("generation", "rl.test.gen")
        def accumulate() -> Any:
            total = 0
            while True:
                total += yield total

        gen = accumulate()
        assert next(gen) == 0
        assert gen.send(5) == 5
        assert gen.send(2) == 7
        gen.close()

    def test_throw_reaches_the_generator_which_may_handle_it(self, capture: Capture) -> None:
        @traced("generation", "rl.test.gen")
        def resilient() -> Any:
            try:
                yield "first"
            except KeyError as exc:
                yield f"handled {exc.args[0]}"
            yield "last"

        gen = resilient()
        assert next(gen) == "first"
        assert gen.throw(KeyError("k")) == "handled k"
        assert next(gen) == "last"
        gen.close()
        assert _one(capture, "rl.test.gen").status.status_code is StatusCode.UNSET

    def test_unhandled_throw_is_recorded_and_propagates(self, capture: Capture) -> None:
        @traced("generation", "rl.test.gen")
        def plain() -> Iterator[int]:
            yield 1

        gen = plain()
        next(gen)
        error = ValueError("from consumer")
        with pytest.raises(ValueError) as excinfo:
            gen.throw(error)
        assert excinfo.value is error
        assert _one(capture, "rl.test.gen").status.description == "ValueError: from consumer"

    def test_close_runs_the_generators_finally_and_ends_the_span_cleanly(self, capture: Capture) -> None:
        cleaned: list[bool] = []

        @traced("generation", "rl.test.gen")
        def produce() -> Iterator[int]:
            try:
                yield 1
                yield 2
            finally:
                cleaned.append(True)

        gen = produce()
        next(gen)
        gen.close()
        assert cleaned == [True]
        finished = _one(capture, "rl.test.gen")
        assert finished.status.status_code is StatusCode.UNSET and finished.end_time is not None

    def test_exception_inside_the_generator_is_recorded_and_reraised(self, capture: Capture) -> None:
        error = RuntimeError("mid-stream")

        @traced("generation", "rl.test.gen")
        def produce() -> Iterator[int]:
            yield 1
            raise error

        gen = produce()
        next(gen)
        with pytest.raises(RuntimeError) as excinfo:
            next(gen)
        assert excinfo.value is error
        assert _one(capture, "rl.test.gen").status.description == "RuntimeError: mid-stream"

    def test_generator_span_is_current_only_while_the_generator_runs(self, capture: Capture) -> None:
        """The consumer between resumes must not see the generator's span as current."""

        @traced("generation", "rl.test.gen")
        def produce() -> Iterator[None]:
            with span("data_plane", "rl.test.inside_first"):
                pass
            yield
            with span("data_plane", "rl.test.inside_second"):
                pass
            yield

        gen = produce()
        next(gen)
        with umbrella_span("rollout", "rl.test.consumer"):
            with span("reward", "rl.test.between"):
                pass
            next(gen)
        gen.close()
        gen_span = _one(capture, "rl.test.gen")
        consumer = _one(capture, "rl.test.consumer")
        assert _is_child(_one(capture, "rl.test.between"), consumer)
        assert _is_child(_one(capture, "rl.test.inside_first"), gen_span)
        assert _is_child(_one(capture, "rl.test.inside_second"), gen_span)
        assert not _is_child(gen_span, consumer)

    def test_wrapper_is_still_a_generator_function(self) -> None:
        import inspect

        @traced("generation")
        def produce() -> Iterator[int]:
            yield 1

        assert inspect.isgeneratorfunction(produce)


class TestTracedAsyncGenerator:
    def test_async_generator_yields_its_items_in_one_span(self, capture: Capture) -> None:
        async def scenario() -> None:
            @traced("generation", "rl.test.agen")
            async def produce() -> AsyncIterator[int]:
                for i in range(3):
                    await asyncio.sleep(0)
                    yield i

            assert [i async for i in produce()] == [0, 1, 2]
            assert capture.span_names() == ["rl.test.agen"]

        asyncio.run(scenario())

    def test_asend_values_reach_the_generator(self, capture: Capture) -> None:
        async def scenario() -> None:
            @traced("generation", "rl.test.agen")
            async def accumulate() -> AsyncIterator[int]:
                total = 0
                while True:
                    total += yield total

            agen = accumulate()
            assert await agen.asend(None) == 0
            assert await agen.asend(5) == 5
            assert await agen.asend(2) == 7
            await agen.aclose()

        asyncio.run(scenario())

    def test_athrow_reaches_the_generator_which_may_handle_it(self, capture: Capture) -> None:
        async def scenario() -> None:
            @traced("generation", "rl.test.agen")
            async def resilient() -> AsyncIterator[str]:
                try:
                    yield "first"
                except KeyError as exc:
                    yield f"handled {exc.args[0]}"
                yield "last"

            agen = resilient()
            assert await agen.asend(None) == "first"
            assert await agen.athrow(KeyError("k")) == "handled k"
            assert await agen.asend(None) == "last"
            await agen.aclose()
            assert _one(capture, "rl.test.agen").status.status_code is StatusCode.UNSET

        asyncio.run(scenario())

    def test_aclose_runs_the_generators_finally(self, capture: Capture) -> None:
        async def scenario() -> None:
            cleaned: list[bool] = []

            @traced("generation", "rl.test.agen")
            async def produce() -> AsyncIterator[int]:
                try:
                    yield 1
                    yield 2
                finally:
                    cleaned.append(True)

            agen = produce()
            assert await agen.asend(None) == 1
            await agen.aclose()
            assert cleaned == [True]
            assert _one(capture, "rl.test.agen").status.status_code is StatusCode.UNSET

        asyncio.run(scenario())

    def test_exception_inside_is_recorded_and_reraised(self, capture: Capture) -> None:
        async def scenario() -> None:
            error = ConnectionError("engine died")

            @traced("generation", "rl.test.agen")
            async def produce() -> AsyncIterator[int]:
                yield 1
                raise error

            agen = produce()
            await agen.asend(None)
            with pytest.raises(ConnectionError) as excinfo:
                await agen.asend(None)
            assert excinfo.value is error
            assert _one(capture, "rl.test.agen").status.description == "ConnectionError: engine died"

        asyncio.run(scenario())

    def test_disabled_async_generator_forwards_asend_and_athrow(self) -> None:
        async def scenario() -> None:
            @traced("generation", "rl.test.agen")
            async def echo() -> AsyncIterator[Any]:
                received: Any = None
                while True:
                    try:
                        received = yield received
                    except KeyError:
                        received = "caught"

            with capture_telemetry(span_groups=["minimal"]) as cap:
                agen = echo()
                assert await agen.asend(None) is None
                assert await agen.asend("x") == "x"
                assert await agen.athrow(KeyError("k")) == "caught"
                await agen.aclose()
                assert cap.spans() == ()

        asyncio.run(scenario())

    def test_consumer_in_another_task_does_not_see_the_generators_span(self, capture: Capture) -> None:
        async def scenario() -> None:
            @traced("generation", "rl.test.agen")
            async def produce() -> AsyncIterator[None]:
                with span("data_plane", "rl.test.inside"):
                    pass
                yield
                yield

            agen = produce()
            await agen.asend(None)

            async def consumer() -> None:
                async with umbrella_span("rollout", "rl.test.consumer"):
                    with span("reward", "rl.test.between"):
                        pass
                    await agen.asend(None)

            await asyncio.create_task(consumer())
            await agen.aclose()
            agen_span = _one(capture, "rl.test.agen")
            assert _is_child(_one(capture, "rl.test.inside"), agen_span)
            assert _is_child(_one(capture, "rl.test.between"), _one(capture, "rl.test.consumer"))
            assert not _is_child(_one(capture, "rl.test.between"), agen_span)

        asyncio.run(scenario())

    def test_wrapper_is_still_an_async_generator_function(self) -> None:
        import inspect

        @traced("generation")
        async def produce() -> AsyncIterator[int]:
            yield 1

        assert inspect.isasyncgenfunction(produce)


# -- named helpers -----------------------------------------------------------------------------


class TestNamedHelpers:
    def test_step_span_sets_an_int_rl_step_attribute(self, capture: Capture) -> None:
        with step_span(7):
            pass
        attrs = _attrs(_one(capture, "rl.step"))
        assert attrs["rl.step"] == 7 and type(attrs["rl.step"]) is int
        assert "rl.bucket" not in attrs

    def test_step_span_sets_the_runtime_current_step(self, capture: Capture) -> None:
        with step_span(4):
            assert capture.runtime.current_step == 4

    def test_step_span_sets_the_current_step_even_when_step_is_off(self) -> None:
        with capture_telemetry(span_groups=["generation"]) as cap:
            step_span(9)
            assert cap.runtime.current_step == 9

    @pytest.mark.parametrize("enabled", [True, False], ids=["telemetry_on", "telemetry_off"])
    @pytest.mark.parametrize("step", [None, "first", [1], 2.5, "2.5", float("inf"), float("nan")])
    def test_a_step_that_is_no_whole_number_warns_once_and_the_run_goes_on(
        self, step: object, enabled: bool
    ) -> None:
        """A loop whose step is ``samples_seen / batch`` is whole until an epoch's partial
        batch: a refusal (TypeError, or OverflowError for inf) killed the run mid-way, with
        telemetry off too. One warning naming the value and the fix; the block runs."""
        reset_warn_once()
        context = capture_telemetry() if enabled else contextlib.nullcontext()
        ran = []
        expected = r"step_span\(.*\): .*not a whole number.*global_step"
        with context, pytest.warns(RlsightWarning, match=expected):
            for _ in range(3):  # once: the same warning every step would drown the log
                with step_span(step):  # type: ignore[arg-type]
                    ran.append(1)
        assert ran == [1, 1, 1]

    def test_a_fractional_step_is_recorded_without_rl_step_and_with_its_value(self, capture: Capture) -> None:
        """Truncated, steps 1, 1.5, 2, 2.5 were recorded as 1, 1, 2, 2: the report read two
        restarts and counted half the run as wasted. A step with no whole number keeps its
        rl.step span (its spans, the watchdog) but has no rl.step, which no restart is read from."""
        with pytest.warns(RlsightWarning, match=r"step_span\(1\.5\)"):
            for step in (1, 1.5, 2, 2.5):
                with step_span(step, **{"rl.step": 9}):  # type: ignore[arg-type]
                    assert capture.runtime.current_step == (step if step % 1 == 0 else None)
        steps = [_attrs(s) for s in capture.spans() if s.name == "rl.step"]
        assert [(a.get("rl.step"), a.get("rl.step.value")) for a in steps] == [
            (1, None), (None, 1.5), (2, None), (None, 2.5)]

    def test_a_step_that_is_no_number_has_no_step_value(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning):
            for step in (None, "first", float("inf"), float("nan")):
                with step_span(step):  # type: ignore[arg-type]
                    pass
        assert [_attrs(s).keys() & {"rl.step", "rl.step.value"} for s in capture.spans()] == [set()] * 4

    def test_step_span_takes_what_int_takes(self, capture: Capture) -> None:
        with step_span("5"), step_span(6.0):  # type: ignore[arg-type]
            pass
        assert sorted(_attrs(s)["rl.step"] for s in capture.spans() if s.name == "rl.step") == [5, 6]

    @pytest.mark.parametrize(("given", "recorded"), [(200, 200), ("200", 200), (200.0, 200)])
    def test_total_steps_is_recorded_as_an_int(self, capture: Capture, given: object, recorded: int) -> None:
        """A total read from a YAML or a command line as "200" was recorded as a string, which
        `rlsight watch` ignored: no 'step 42 of 200', no time to go."""
        with job_span(total_steps=given):
            pass
        assert _attrs(_one(capture, "rl.job"))["rl.total_steps"] == recorded

    def test_total_steps_under_its_attribute_name_is_converted_too(self, capture: Capture) -> None:
        with job_span(**{"rl.total_steps": "200"}):
            pass
        with pytest.warns(RlsightWarning, match="total_steps"), job_span(**{"rl.total_steps": 2.5}):
            pass
        totals = [_attrs(s).get("rl.total_steps") for s in capture.spans() if s.name == "rl.job"]
        assert totals == [200, None]

    @pytest.mark.parametrize("given", [-5, 0, 2.5, "many", True])
    def test_a_total_steps_that_is_no_step_count_is_left_out_with_a_warning(
            self, capture: Capture, given: object) -> None:
        with pytest.warns(RlsightWarning, match="total_steps"), job_span(total_steps=given):
            pass
        assert "rl.total_steps" not in _attrs(_one(capture, "rl.job"))

    def test_job_and_startup_spans_are_umbrellas(self, capture: Capture) -> None:
        with job_span(), startup_span():
            pass
        job, startup = _one(capture, "rl.job"), _one(capture, "rl.startup")
        assert _is_child(startup, job)
        assert "rl.bucket" not in _attrs(job) and "rl.bucket" not in _attrs(startup)

    def test_setup_span_is_a_child_of_startup(self, capture: Capture) -> None:
        with startup_span(), setup_span("ray"):
            pass
        setup = _one(capture, "rl.setup.ray")
        assert _is_child(setup, _one(capture, "rl.startup"))
        assert _attrs(setup)["rl.span_group"] == "setup" and "rl.bucket" not in _attrs(setup)

    def test_setup_span_records_its_duration_per_phase(self, capture: Capture) -> None:
        with setup_span("workers"):
            pass
        points = [p for p in capture.metrics() if p.name == "rl.setup.duration"]
        assert len(points) == 1
        assert points[0].attributes == {"phase": "workers"}
        assert points[0].count == 1 and points[0].unit == "s"
        assert points[0].sum is not None and points[0].sum >= 0

    def test_setup_span_with_setup_off_is_the_shared_noop_and_records_nothing(self) -> None:
        """Issue #18: a disabled group costs one set-membership test, setup_span included."""
        with capture_telemetry(span_groups=["generation"]) as cap:
            assert setup_span("ray") is NOOP
            with setup_span("ray"):
                pass
            assert cap.spans() == ()
            assert [p for p in cap.metrics() if p.name == "rl.setup.duration"] == []

    def test_setup_span_works_async(self, capture: Capture) -> None:
        async def scenario() -> None:
            async with setup_span("fill"):
                await asyncio.sleep(0)
            assert capture.span_names() == ["rl.setup.fill"]

        asyncio.run(scenario())

    def test_load_model_span_records_the_backend(self, capture: Capture) -> None:
        with load_model_span("vllm"):
            pass
        assert _attrs(_one(capture, "rl.worker.load_model"))["rl.backend"] == "vllm"


# -- efficiency spans --------------------------------------------------------------------------


class TestEfficiency:
    @pytest.mark.parametrize(
        ("category", "bucket"),
        [("idle/buffer_starvation", "idle"), ("wasted/stale_discard", "wasted"), ("idle/barrier", "idle")],
    )
    def test_bucket_comes_from_the_category_prefix(
        self, capture: Capture, category: str, bucket: str
    ) -> None:
        with efficiency_span(category):
            pass
        name = "rl.efficiency." + category.replace("/", ".")
        attrs = _attrs(_one(capture, name))
        assert attrs["rl.bucket"] == bucket
        assert attrs["rl.efficiency.category"] == category
        assert attrs["rl.span_group"] == "efficiency"

    def test_builtin_categories_are_declared(self) -> None:
        assert {
            "idle/buffer_starvation", "idle/refit_bubble", "idle/generation_wait", "idle/barrier",
            "wasted/stale_discard", "wasted/aborted_rollout", "wasted/recompute",
        } <= set(declared_efficiency_categories())

    def test_undeclared_category_warns_once_and_emits_nothing(self, capture: Capture) -> None:
        category = f"idle/undeclared_{uuid.uuid4().hex[:6]}"
        with pytest.warns(RlsightWarning, match="never declared"):
            helper = efficiency_span(category)
        assert helper is NOOP
        assert efficiency_span(category) is NOOP  # no second warning
        assert capture.spans() == ()

    def test_declared_category_is_emitted(self, capture: Capture) -> None:
        category = f"overhead/custom_{uuid.uuid4().hex[:6]}"
        declare_efficiency_categories(category)
        with efficiency_span(category):
            pass
        assert _attrs(_one(capture, "rl.efficiency." + category.replace("/", ".")))["rl.bucket"] == "overhead"

    @pytest.mark.parametrize("category", ["idle", "idle/", "bogus/wait", "idle/a/b", "/wait"])
    def test_malformed_category_is_an_error(self, category: str) -> None:
        with pytest.raises(ValueError, match="<bucket>/<reason>"):
            declare_efficiency_categories(category)

    def test_time_accumulates_into_take_efficiency_seconds(self, capture: Capture) -> None:
        for _ in range(2):
            with efficiency_span("idle/barrier"):
                pass
        with efficiency_span("wasted/recompute"):
            pass
        ended = {s.name: 0.0 for s in capture.spans()}
        for s in capture.spans():
            assert s.end_time is not None and s.start_time is not None
            ended[s.name] += (s.end_time - s.start_time) / 1e9
        taken = capture.runtime.take_efficiency_seconds()
        assert taken == {
            "idle/barrier": pytest.approx(ended["rl.efficiency.idle.barrier"]),
            "wasted/recompute": pytest.approx(ended["rl.efficiency.wasted.recompute"]),
        }
        assert capture.runtime.take_efficiency_seconds() == {}

    def test_bucket_scope_does_not_reclassify_an_efficiency_span(self, capture: Capture) -> None:
        with bucket_scope("overhead"), efficiency_span("idle/generation_wait"):
            pass
        assert _attrs(_one(capture, "rl.efficiency.idle.generation_wait"))["rl.bucket"] == "idle"


# -- per-prompt scope --------------------------------------------------------------------------


class TestPerPromptScope:
    def test_span_inside_per_prompt_scope_is_suppressed_under_per_step(self) -> None:
        with capture_telemetry(span_groups=["per_step"]) as cap:
            with per_prompt_scope(), span("data_plane", "rl.test.put") as s:
                assert not s.is_recording()
            with span("data_plane", "rl.test.batch_put"):
                pass
            assert cap.span_names() == ["rl.test.batch_put"]

    def test_span_inside_per_prompt_scope_is_labelled_per_prompt_under_all(self, capture: Capture) -> None:
        with per_prompt_scope(), span("data_plane", "rl.test.put"):
            pass
        attrs = _attrs(_one(capture, "rl.test.put"))
        assert attrs["rl.span_group"] == "per_prompt"
        assert attrs["rl.bucket"] == "overhead"  # the work keeps its own group's bucket

    def test_traced_call_inside_per_prompt_scope_is_suppressed_under_per_step(self) -> None:
        @traced("data_plane", "rl.test.get")
        def get() -> int:
            return 1

        with capture_telemetry(span_groups=["per_step"]) as cap:
            with per_prompt_scope():
                assert get() == 1
            assert cap.spans() == ()


def test_traced_accepts_the_span_name_as_a_keyword(capture) -> None:  # type: ignore[no-untyped-def]
    """``@traced(group, name=...)`` names the span; it must not become an ``rl.name`` attribute."""
    from rlsight import RL, traced

    @traced(RL.TRAINING, name="rl.train.keyword_named")
    def step() -> None:
        return None

    step()
    (span,) = capture.spans()
    assert span.name == "rl.train.keyword_named"
    assert "rl.name" not in (span.attributes or {})


class TestReviewRegressions:
    """Behaviours a review found broken; each test fails on the code before the fix."""

    def test_counts_under_content_key_names_are_kept(self, capture) -> None:  # type: ignore[no-untyped-def]
        """``prompts=8`` is a count the volume analysis reads; only text is redacted."""
        from rlsight import step_span

        with step_span(1, prompts=8, tokens=100, prompt="the prompt text", completions=["a", "b"]):
            pass
        (s,) = capture.spans()
        attrs = dict(s.attributes or {})
        assert attrs["rl.prompts"] == 8 and attrs["rl.tokens"] == 100
        assert attrs["rl.prompt"] == "<redacted>" and attrs["rl.completions"] == "<redacted>"

    def test_an_exception_whose_str_raises_still_reaches_the_caller(self, capture) -> None:  # type: ignore[no-untyped-def]
        class Hostile(Exception):
            def __str__(self) -> str:
                raise RuntimeError("str() failed")

        with pytest.raises(Hostile), span("training", "rl.test.hostile"):
            raise Hostile()
        (s,) = capture.spans()
        assert s.status.description == "Hostile"

    def test_an_array_attribute_is_dropped_not_the_span(self, capture) -> None:  # type: ignore[no-untyped-def]
        class Array:
            def item(self) -> float:
                raise ValueError("can only convert an array of size 1 to a Python scalar")

        class Scalar:
            def item(self) -> int:
                return 4

        with pytest.warns(RlsightWarning, match="rl.lengths"):
            with span("training", "rl.test.array", lengths=Array(), n=Scalar()):
                pass
        (s,) = capture.spans()
        assert dict(s.attributes or {})["rl.n"] == 4
        assert "rl.lengths" not in (s.attributes or {})


def test_a_span_object_entered_inside_itself_stays_one_span_and_restores_context(capture) -> None:  # type: ignore[no-untyped-def]
    s = span("training", "rl.test.reentered")
    with s as outer:
        with s as inner:
            assert inner is outer
        assert trace.get_current_span() is outer
    assert not trace.get_current_span().is_recording()
    assert capture.span_names() == ["rl.test.reentered"]


def test_a_span_object_reused_after_its_block_starts_a_new_span(capture) -> None:  # type: ignore[no-untyped-def]
    s = span("training", "rl.test.reused")
    for _ in range(2):
        with s:
            pass
    first, second = capture.spans()
    assert first.context.span_id != second.context.span_id


# -- trust traps (issue #9) ---------------------------------------------------------------------

class TestExplicitBucket:
    """span(..., bucket=...) wins over the group's bucket and over bucket_scope (#9.4)."""

    def test_explicit_bucket_wins_over_the_groups(self, capture: Capture) -> None:
        with span("generation", "rl.test.explicit", bucket="wasted"):
            pass
        assert _one(capture, "rl.test.explicit").attributes["rl.bucket"] == "wasted"

    def test_explicit_bucket_wins_over_a_bucket_scope(self, capture: Capture) -> None:
        from rlsight.buckets import Bucket

        with bucket_scope("overhead"), span("generation", "rl.test.explicit", bucket=Bucket.IDLE):
            pass
        assert _one(capture, "rl.test.explicit").attributes["rl.bucket"] == "idle"

    def test_a_dotted_rl_bucket_attribute_is_honoured_too(self, capture: Capture) -> None:
        with span("training", "rl.test.explicit", **{"rl.bucket": "overhead"}):
            pass
        assert _one(capture, "rl.test.explicit").attributes["rl.bucket"] == "overhead"

    def test_an_invalid_bucket_warns_once_and_keeps_the_groups(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match="not a bucket"):
            with span("training", "rl.test.explicit", bucket="goodput"):
                pass
        assert _one(capture, "rl.test.explicit").attributes["rl.bucket"] == "productive"

    def test_an_invalid_bucket_on_an_unbucketed_group_leaves_no_bucket(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match="not a bucket"):
            with span("per_prompt", "rl.test.explicit", bucket="goodput"):
                pass
        assert "rl.bucket" not in _one(capture, "rl.test.explicit").attributes

    def test_an_umbrella_given_a_bucket_warns_and_stays_unbucketed(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match="umbrella"):
            with umbrella_span("rollout", "rl.test.umbrella", bucket="productive"):
                pass
        assert "rl.bucket" not in _one(capture, "rl.test.umbrella").attributes


class TestUnknownGroups:
    """A typo in a group name, or an empty spec, is said once, not silently ignored (#9.5)."""

    def test_a_misspelt_group_warns_once_naming_the_registered_ones(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match="'trainig' is not registered.*training"):
            with span("trainig", "rl.test.typo"):
                pass
        with warnings_as_errors():
            with span("trainig", "rl.test.typo"):
                pass
        assert "rl.test.typo" not in capture.span_names()

    def test_a_misspelt_umbrella_group_warns(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match="'stpe' is not registered"):
            with umbrella_span("stpe", "rl.test.typo"):
                pass

    def test_decorating_with_a_misspelt_group_warns(self) -> None:
        with pytest.warns(RlsightWarning, match="'rolout' is not registered"):
            @traced("rolout")
            def f() -> None:
                return None

    def test_a_registered_but_disabled_group_does_not_warn(self, run_dir: Any) -> None:
        with capture_telemetry(run_dir=run_dir, span_groups=("minimal",)), warnings_as_errors():
            assert span("training", "rl.test.off") is NOOP

    def test_an_empty_span_groups_list_warns_at_setup(self, run_dir: Any) -> None:
        from rlsight import TelemetryConfig, setup_telemetry, shutdown_telemetry

        with pytest.warns(RlsightWarning, match="span_groups is empty"):
            setup_telemetry(TelemetryConfig(run_id="r", run_dir=str(run_dir), span_groups=()))
        shutdown_telemetry()


class TestConcurrentEfficiency:
    """efficiency_span(..., concurrent=True) keeps its bucket and never partitions (#9.8)."""

    def test_a_concurrent_wait_keeps_its_bucket_and_is_tagged(self, capture: Capture) -> None:
        with efficiency_span("idle/refit_bubble", concurrent=True):
            pass
        attrs = _one(capture, "rl.efficiency.idle.refit_bubble").attributes
        assert attrs["rl.bucket"] == "idle" and attrs["rl.concurrent"] is True
        assert attrs["rl.efficiency.category"] == "idle/refit_bubble"

    def test_a_concurrent_wait_still_feeds_the_efficiency_seconds(self, capture: Capture) -> None:
        with efficiency_span("idle/refit_bubble", concurrent=True):
            pass
        assert capture.runtime.take_efficiency_seconds().get("idle/refit_bubble", 0) > 0

    def test_span_of_the_efficiency_group_warns_that_it_records_no_bucket(self, capture: Capture) -> None:
        with pytest.warns(RlsightWarning, match="efficiency_span"):
            with span("efficiency", "rl.test.wait", concurrent=True):
                pass


class warnings_as_errors:
    """Fail the block on any warning (the 'once' in warn-once)."""

    def __enter__(self) -> None:
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)
