"""Writing start records: a span processor that keeps live spans while they are open.

The format and the reader are in :mod:`rlsight.store._live`; this module needs the SDK, the
reader must not (``rlsight report`` and ``rlsight watch`` import no SDK).

A start record matters only for a span still open when it is written (a span that ended has
its finished span in ``traces/``). So a live span is filed in a dict when it starts and taken
out when it ends; every ``interval_s`` a thread writes a record for each span filed since the
last write that is still open, in one ``write``, and forgets it. A span that ends within the
interval, as nearly all do, costs its thread one dict set and one dict pop, and is neither
queued, encoded nor kept alive for the writer. The same thread writes the process's heartbeat.

Where the step roll-up runs (``rlsight._step_rollup``, every process with numpy), it keeps
every open span in a dict of its own already; the writer reads that one instead
(``open_spans``), and a span costs its thread nothing for its start record.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.sdk.trace import SpanProcessor

from rlsight._readable import span_attributes
from rlsight._semconv import LIVE, SPAN_GROUP, STEP, THREAD_ID, TOTAL_STEPS
from rlsight.groups import GATE
from rlsight.store._live import LIVE_GROUPS, NEVER_LIVE, alive_line

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, Span

    from rlsight.store._sink import Sink

__all__ = ["StartRecordProcessor", "start_lines"]

#: Longest the writer waits between two looks at the roll-up's open spans (see
#: ``StartRecordProcessor._opened_since``): the most a start record can be late.
_MAX_SCAN_WAIT_NS: Final = 1_000_000_000


def _is_live(span: Any) -> bool:
    """Whether ``span`` gets a start record (see :mod:`rlsight.store._live`)."""
    attrs: Any = span._attributes  # rlsight's processors see SDK spans only
    if type(attrs) is not dict:  # a LeanSpan's plain dict, else the SDK's
        attrs = span_attributes(span)
    group = attrs.get(SPAN_GROUP)
    # The two group lists tested here (no call for nearly every span); the rest in a call.
    return group in LIVE_GROUPS or (group not in NEVER_LIVE and _marked_live(attrs, group))


def _marked_live(attrs: Any, group: object) -> bool:
    """Whether a span of a ``group`` in neither list of ``store._live`` gets a start record:
    marked ``live=True``, or an umbrella."""
    if attrs.get(LIVE) is True:
        return True
    meta = GATE.groups.get(group) if isinstance(group, str) else None
    return meta is not None and meta.umbrella


class StartRecordProcessor(SpanProcessor):
    """Writes a start record for each live span still open ``interval_s`` after it started,
    and a heartbeat every ``heartbeat_s``.

    Args:
        sink: Where the record lines go (the process's live file).
        interval_s: How often the writer thread looks at the live spans filed since.
        heartbeat_s: How often it says the process still runs (``alive`` lines).
        heartbeats: Where the ``alive`` lines go (the process's heartbeat file); none without.
        on_error: Called (on the writing thread) with what a failed write raised.
        open_spans: The open spans another processor keeps by span id (the step roll-up's):
            when given, each write looks there for the spans opened since the last one, and
            this processor files nothing (it need not be added to the provider).
    """

    #: It may be handed the span itself (rlsight._lean): it only reads it and files it.
    reads_span_in_place: Final = True

    def __init__(self, sink: Sink, *, interval_s: float, heartbeat_s: float,
                 heartbeats: Sink | None = None,
                 on_error: Callable[[BaseException], None] | None = None,
                 open_spans: Mapping[int, Span] | None = None) -> None:
        self._sink = sink
        self._beats = heartbeats
        self._interval = interval_s
        #: With ``open_spans``: no scan of them before this (see :meth:`_opened_since`).
        self._next_scan_ns = 0
        self._beat_every_ns = int(heartbeat_s * 1e9)
        self._next_beat_ns = time.monotonic_ns() + self._beat_every_ns
        self._on_error = on_error
        #: Live spans started since the last write and not ended yet, by span id, in start
        #: order. App threads set and pop single keys; the writer copies it and pops what it
        #: wrote (each one operation under the GIL: no lock on the span path).
        self._open: dict[int, Span] = {}
        self._watched = open_spans
        #: With ``open_spans``: the ids among them the writer has looked at (and written if
        #: live), kept while they stay open.
        self._seen: set[int] = set()
        self._closed = False
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlsight-live", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if _is_live(span) and not self._closed:
            self._open[span._context[1]] = span  # type: ignore[index]

    def on_end(self, span: ReadableSpan) -> None:
        if self._open:
            self._open.pop(span._context[1], None)  # type: ignore[index]

    def lean_on_row(self, starter: object) -> Callable[[tuple[Any, ...]], None]:
        """What a plain span of rlsight's ``LeanStarter`` ends through (``rlsight._lean``):
        :meth:`_row_ended`, with the row it makes once for every processor that takes one."""
        return self._row_ended

    def _row_ended(self, row: tuple[Any, ...]) -> None:
        """:meth:`on_end` for a plain span's row (its span id is its fourth field)."""
        if self._open:
            self._open.pop(row[3], None)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                now = time.monotonic_ns()
                beat = now >= self._next_beat_ns
                if beat:
                    self._next_beat_ns = now + self._beat_every_ns
                self.write_open(beat=beat)
            except Exception as exc:  # a dead thread would stop the heartbeat: the process
                if self._on_error is not None:  # would read as silent while it runs
                    self._on_error(exc)

    def write_open(self, *, beat: bool = False) -> bool:
        """Write the records of the spans filed since the last write that are still open, and
        a heartbeat after them when ``beat``.

        Returns whether the write went through (a failure goes to ``on_error``).
        """
        with self._write_lock:
            if self._watched is not None:
                spans = self._opened_since()
            else:
                filed = self._open
                spans = list(filed.values())
                for sp in spans:
                    filed.pop(sp.context.span_id, None)
            if not spans and not beat:
                return True
            try:
                data = start_lines(spans) if spans else b""
                if data:
                    self._sink.write(data)
                if beat and self._beats is not None:
                    self._beats.write(alive_line())
            except Exception as exc:  # the writing thread must outlive one failed write
                if self._on_error is not None:
                    self._on_error(exc)
                return False
            return True

    def _opened_since(self) -> list[Span]:
        """The live spans among ``open_spans`` opened since the last look, in start order.

        ``open_spans`` holds every open span (per-prompt ones too), so one look costs a pass
        over all of them: ~3 ms at 100k, holding the GIL. The next look waits 50 times the CPU
        this one took (this thread's own time, not time spent waiting for the GIL), at most
        :data:`_MAX_SCAN_WAIT_NS`, so the looks cost at most ~2% of a core and a start record is
        at most a second late.
        """
        watched = self._watched
        assert watched is not None
        if time.monotonic_ns() < self._next_scan_ns:
            return []
        began = time.thread_time_ns()
        # One C-level copy, atomic under the GIL while app threads add and remove spans;
        # the set operations work on it. Ids that closed since leave ``_seen``.
        snapshot = dict(watched)
        new = snapshot.keys() - self._seen
        self._seen &= snapshot.keys()
        if new:
            self._seen |= new
        found = [sp for sid, sp in snapshot.items() if sid in new and _is_live(sp)] if new else []
        wait = min(50 * (time.thread_time_ns() - began), _MAX_SCAN_WAIT_NS)
        self._next_scan_ns = time.monotonic_ns() + wait
        return found

    def close(self) -> bool:
        """Stop the thread and write what is still open (the runtime bounds how long)."""
        self._closed = True
        self._stop.set()
        # A look already past its wait would otherwise write after the shutdown line.
        self._thread.join(timeout=1.0)
        self._next_scan_ns = 0
        return self.write_open()

    def shutdown(self) -> None:
        return None  # the runtime closes it on its own deadline (close)

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
    total = attrs.get(TOTAL_STEPS)
    if isinstance(total, int) and not isinstance(total, bool):
        out["totalSteps"] = total
    return out


def start_lines(spans: Sequence[ReadableSpan]) -> bytes:
    """The start records of ``spans`` still open, as JSON lines (``b""`` when none is)."""
    lines = [json.dumps(_start(s), separators=(",", ":")) for s in spans if s.end_time is None]
    return ("\n".join(lines) + "\n").encode() if lines else b""
