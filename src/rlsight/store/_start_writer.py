"""Writing start records: a span processor that queues live spans when they start.

The format and the reader are in :mod:`rlsight.store._live`; this module needs the SDK, the
reader must not (``rlsight report`` and ``rlsight watch`` import no SDK).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.sdk.trace import SpanProcessor

from rlsight._readable import span_attributes
from rlsight._semconv import LIVE, SPAN_GROUP, STEP, THREAD_ID
from rlsight.groups import GATE
from rlsight.store._live import LIVE_GROUPS, NEVER_LIVE

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, Span

    from rlsight._batching import BatchingSpanProcessor
    from rlsight.store._sink import Sink

__all__ = ["StartRecordProcessor", "start_writer"]


def _is_live(span: Span) -> bool:
    attrs = span_attributes(span)  # every span starts here: no read-only proxy per span
    group = attrs.get(SPAN_GROUP)
    if group in LIVE_GROUPS:
        return True
    if group in NEVER_LIVE:
        return False
    if attrs.get(LIVE) is True:
        return True
    meta = GATE.groups.get(group) if isinstance(group, str) else None
    return meta is not None and meta.umbrella


class StartRecordProcessor(SpanProcessor):
    """Hands each live span to the store's batching processor when it *starts*.

    The batching processor queues whatever it is given and writes it on its own thread, so
    the caller pays one attribute check and one queue append; encoding happens off the path.
    """

    #: It may be handed the span itself (rlsight._lean): it only reads it and queues it.
    reads_span_in_place: Final = True

    def __init__(self, batcher: BatchingSpanProcessor) -> None:
        self._batcher = batcher

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if _is_live(span):
            self._batcher.on_end(span)  # queued now, encoded by the batcher's thread

    def shutdown(self) -> None:
        return None  # the runtime shuts the batcher down on its own deadline

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _start(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.context
    assert ctx is not None
    attrs = span.attributes or {}
    out: dict[str, Any] = {
        "record": "start",
        "traceId": format(ctx.trace_id, "032x"),
        "spanId": format(ctx.span_id, "016x"),
        "name": span.name,
        "group": attrs.get(SPAN_GROUP),
        "startTimeUnixNano": str(span.start_time or 0),
        "threadId": attrs.get(THREAD_ID),
    }
    if span.parent is not None:
        out["parentSpanId"] = format(span.parent.span_id, "016x")
    step = attrs.get(STEP)
    if isinstance(step, int):
        out["step"] = step
    return out


def start_writer(sink: Sink) -> Callable[[Sequence[ReadableSpan]], bool]:
    """An export function for the batching processor: start records of spans still open."""

    def export(batch: Sequence[ReadableSpan]) -> bool:
        lines = [json.dumps(_start(s), separators=(",", ":")) for s in batch if s.end_time is None]
        if lines:
            sink.write(("\n".join(lines) + "\n").encode())
        return True

    return export
