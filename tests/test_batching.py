"""The batching span processor: failures are counted and never end its export thread."""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace import TracerProvider

from rlsight._batching import BatchingSpanProcessor


def test_a_raising_error_handler_neither_kills_the_thread_nor_loses_the_count() -> None:
    calls = {"export": 0}
    delivered = threading.Event()

    def export(batch: object) -> bool:
        calls["export"] += 1
        if calls["export"] == 1:
            raise OSError("disk full")
        delivered.set()
        return True

    def strict_handler(exc: BaseException) -> None:
        raise exc  # what the runtime's strict mode does

    proc = BatchingSpanProcessor(export, name="t", interval_s=0.01, on_error=strict_handler)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("first"):
        pass
    assert proc.force_flush(5000)
    with tracer.start_as_current_span("second"):
        pass
    assert delivered.wait(5), "the export thread died after the failing batch"
    assert proc.shutdown(5000)
    assert proc.dropped["export_failed"] == 1
    assert proc.exported == 1
    assert [type(e) for e in proc.errors] == [OSError, OSError]


def test_shutdown_releases_the_exporter() -> None:
    closed = threading.Event()
    proc = BatchingSpanProcessor(lambda batch: True, name="t", close=closed.set)
    assert proc.shutdown(5000)
    assert closed.is_set()


def test_the_wake_mark_hands_a_batch_over_before_the_interval() -> None:
    """A writer asleep for its whole interval leaves one flat-out thread encoding its own
    spans (issue #16): ``wake_at`` ended spans wake it at once."""
    batches: list[int] = []
    exported = threading.Event()

    def export(batch: list[object]) -> bool:
        batches.append(len(batch))
        exported.set()
        return True

    proc = BatchingSpanProcessor(export, name="t", interval_s=60, wake_at=8)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("t")
    for _ in range(7):
        with tracer.start_as_current_span("early"):
            pass
    assert not exported.wait(0.3), "the writer woke before the mark"
    with tracer.start_as_current_span("eighth"):
        pass
    assert exported.wait(5), "the eighth ended span did not wake the writer"
    assert batches == [8]
    assert proc.shutdown(5000)


def test_a_span_ended_in_the_past_behind_a_batch_taken_whole_is_no_lag() -> None:
    """A batch that takes the whole queue moves the lower bound of when later spans were
    queued, as finding the queue empty does: a span ended seconds ago (``record_span``)
    queued after it is not read as a writer seconds behind, and the spans ending after it
    are kept. The writer's own drain never found the queue empty here (a producer flat out
    keeps it non-empty between batches), so the bound was still the processor's start."""
    import time

    proc = BatchingSpanProcessor(lambda batch: True, name="t", interval_s=60, max_lag_s=1.0)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("t")
    time.sleep(1.2)  # longer than max_lag_s since the queue was last found empty
    with tracer.start_as_current_span("first"):
        pass
    with proc._export_lock:
        proc._drain_locked(None, batches=1)  # one batch, as a writer between producers takes it
    now = time.time_ns()
    tracer.start_span("recorded", start_time=now - 10**10).end(end_time=now - 5 * 10**9)
    with tracer.start_as_current_span("after"):
        pass
    assert dict(proc.dropped) == {}
    assert proc.shutdown(5000)
