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
