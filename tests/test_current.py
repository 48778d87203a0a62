"""rlsight._current: its short ways to make a span current and read the thread id give what
OpenTelemetry's API and ``threading`` give."""

from __future__ import annotations

import os
import threading

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import TracerProvider

from rlsight._current import attach_span, current_span, detach, thread_id

_TRACER = TracerProvider(shutdown_on_exit=False).get_tracer("t")


@given(st.lists(st.sampled_from(["baggage", "value", "span"]), max_size=4))
def test_attach_span_makes_the_context_the_api_makes(before: list[str]) -> None:
    """Whatever the current context holds (nothing, a span, baggage, other values, in any
    order), the context made current is the API's, item for item and in the same order."""
    ctx = context.Context()
    for i, kind in enumerate(before):
        if kind == "baggage":
            ctx = baggage.set_baggage(f"k{i}", "v", ctx)
        elif kind == "value":
            ctx = context.set_value(f"key{i}", i, ctx)
        else:
            ctx = trace.set_span_in_context(_TRACER.start_span(f"s{i}"), ctx)
    outer = context.attach(ctx)
    try:
        span = _TRACER.start_span("new")
        expected = trace.set_span_in_context(span, context.get_current())
        token = attach_span(span)
        got = context.get_current()
        assert type(got) is context.Context
        assert list(got.items()) == list(expected.items())
        assert current_span() is span is trace.get_current_span()
        detach(token)
        assert context.get_current() is ctx
    finally:
        context.detach(outer)


def test_thread_id_is_the_native_id_of_each_thread_and_of_a_forked_child() -> None:
    assert thread_id() == threading.get_native_id()
    seen: list[tuple[int, int]] = []
    worker = threading.Thread(target=lambda: seen.append((thread_id(), threading.get_native_id())))
    worker.start()
    worker.join()
    assert seen[0][0] == seen[0][1] != thread_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its main thread has a new native id, and must report it
        os.write(write, b"1" if thread_id() == threading.get_native_id() else b"0")
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    os.close(read)
