"""Carriers on the caller side and re-attached in threads: what they hold, when they are built."""

from __future__ import annotations

import queue
import threading
import warnings

import pytest
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from rlsight import RL, RlsightWarning, span, umbrella_span
from rlsight.propagation import (
    TRACE_CONTEXT_KWARG,
    attach_trace_carrier,
    current_trace_carrier,
    dispatch_with_trace_context,
    trace_context_kwargs,
)
from rlsight.testing import Capture, capture_telemetry


def _ids(s: trace.Span) -> tuple[int, int]:
    ctx = s.get_span_context()
    return ctx.trace_id, ctx.span_id


def test_trace_context_kwargs_is_empty_when_telemetry_is_off() -> None:
    assert trace_context_kwargs() == {}
    assert current_trace_carrier() is None


def test_trace_context_kwargs_is_empty_outside_any_span(capture: Capture) -> None:
    assert trace_context_kwargs() == {}


def test_carrier_names_the_current_span(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent") as parent:
        kwargs = trace_context_kwargs()
    trace_id, span_id = _ids(parent)
    flags = int(parent.get_span_context().trace_flags)
    assert kwargs == {TRACE_CONTEXT_KWARG: f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}".encode()}


def test_trace_context_kwargs_sends_the_packed_carrier_dispatch_sends(capture: Capture) -> None:
    """Bytes, which Ray passes through unserialised (#16): the dict's traceparent[,tracestate]."""
    sent: dict[str, object] = {}

    class Target:
        def remote(self, **kwargs: object) -> None:
            sent.update(kwargs)

    state = {"tracestate": "vendor=1,other=x"}
    with attach_trace_carrier({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                               **state}):
        with span(RL.TRAINING, "rl.test.parent"):
            kwargs = trace_context_kwargs()
            carrier = current_trace_carrier()
            dispatch_with_trace_context(Target())
    assert carrier is not None and carrier["tracestate"] == state["tracestate"]
    packed = f"{carrier['traceparent']},{carrier['tracestate']}".encode()
    assert kwargs == sent == {TRACE_CONTEXT_KWARG: packed}


def test_carrier_is_built_once_per_span_and_reused(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent"):
        first = current_trace_carrier()
        again = [current_trace_carrier() for _ in range(63)]
    assert all(c is first for c in again)


def test_a_child_span_gets_its_own_carrier(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent"):
        outer = current_trace_carrier()
        with span(RL.TRAINING, "rl.test.child") as child:
            inner = current_trace_carrier()
        after = current_trace_carrier()
    assert inner is not None and outer is not None
    assert inner != outer
    assert inner["traceparent"].split("-")[2] == f"{_ids(child)[1]:016x}"
    assert after is outer


def test_carrier_round_trips_through_the_w3c_propagator(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent") as parent:
        carrier = current_trace_carrier()
    extracted = trace.get_current_span(TraceContextTextMapPropagator().extract(carrier or {}))
    assert _ids(extracted) == _ids(parent)


def test_a_thread_joins_the_trace_of_the_carrier_it_was_handed(capture: Capture) -> None:
    with umbrella_span(RL.ROLLOUT, "rl.test.controller") as controller:
        carrier = current_trace_carrier()

    def work() -> None:
        with attach_trace_carrier(carrier), span(RL.GENERATION, "rl.test.in_thread"):
            pass

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    (child,) = [s for s in capture.spans() if s.name == "rl.test.in_thread"]
    assert child.parent is not None
    assert (child.context.trace_id, child.parent.span_id) == _ids(controller)


def test_a_long_lived_worker_reattaches_the_carrier_per_unit_of_work(capture: Capture) -> None:
    jobs: queue.Queue[tuple[int, dict[str, str] | None] | None] = queue.Queue()

    def collector() -> None:
        while (job := jobs.get()) is not None:
            _, carrier = job
            with attach_trace_carrier(carrier), span(RL.GENERATION, "rl.test.unit"):
                pass
        with span(RL.GENERATION, "rl.test.between_units"):
            pass

    thread = threading.Thread(target=collector)
    thread.start()
    parents = []
    for step in range(3):
        with umbrella_span(RL.STEP, "rl.test.step") as step_span:
            jobs.put((step, current_trace_carrier()))
            parents.append(_ids(step_span))
    jobs.put(None)
    thread.join()
    units = [s for s in capture.spans() if s.name == "rl.test.unit"]
    assert sorted((u.context.trace_id, u.parent.span_id) for u in units if u.parent) == sorted(parents)
    (between,) = [s for s in capture.spans() if s.name == "rl.test.between_units"]
    assert between.parent is None


def test_attaching_no_carrier_leaves_the_context_alone(capture: Capture) -> None:
    with span(RL.TRAINING, "rl.test.parent") as parent, attach_trace_carrier(None):
        assert _ids(trace.get_current_span()) == _ids(parent)
    with span(RL.TRAINING, "rl.test.parent") as parent, attach_trace_carrier({}):
        assert _ids(trace.get_current_span()) == _ids(parent)


def test_attaching_a_carrier_does_nothing_when_telemetry_is_off() -> None:
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with attach_trace_carrier(carrier):
        assert not trace.get_current_span().get_span_context().is_valid


_VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    "carrier",
    [
        {"traceparent": "not-a-traceparent"},
        {"traceparent": 42},
        {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
        {"traceparent": _VALID, "tracestate": "a=" + "x" * 4096},
        {"traceparent": _VALID, "tracestate": ["a=b"]},
        ["traceparent"],
    ],
    ids=["garbage", "int", "zero-trace", "huge-tracestate", "list-tracestate", "not-a-dict"],
)
def test_a_malformed_carrier_warns_and_runs_as_a_new_root(carrier: object) -> None:
    with capture_telemetry() as cap:
        with span(RL.TRAINING, "rl.test.local_parent"):
            with pytest.warns(RlsightWarning, match="malformed trace carrier"):
                with attach_trace_carrier(carrier):  # type: ignore[arg-type]
                    with span(RL.TRAINING, "rl.test.child"):
                        pass
        (child,) = [s for s in cap.spans() if s.name == "rl.test.child"]
        assert child.parent is None


def test_a_malformed_carrier_warns_only_once(capture: Capture) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(5):
            with attach_trace_carrier({"traceparent": "bad"}):
                pass
    assert len([w for w in seen if issubclass(w.category, RlsightWarning)]) == 1


def test_the_malformed_carrier_warning_points_at_the_callers_line(capture: Capture) -> None:
    with pytest.warns(RlsightWarning, match="malformed") as seen:
        with attach_trace_carrier({"traceparent": 7}):  # type: ignore[dict-item]
            pass
    assert seen[0].filename == __file__


def test_a_carrier_with_valid_tracestate_keeps_it(capture: Capture) -> None:
    carrier = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE",
    }
    with attach_trace_carrier(carrier):
        ctx = trace.get_current_span().get_span_context()
    assert ctx.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert dict(ctx.trace_state) == {"rojo": "00f067aa0ba902b7", "congo": "t61rcWkgMzE"}
