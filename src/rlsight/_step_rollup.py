"""The span processor that rolls goodput up while the run goes: per step (driver) and per
window of wall time (every process).

Per span it files what the rollup reads, as the span ends: ``on_start`` puts the span in a
dict of open spans; ``on_end`` pops it and appends one row of its field values (start, end,
trace id, span id, parent id, name, attributes: the span's own objects, read from its fields,
nothing converted) to one flat list that windows and steps share (no lock: one ``+=`` of a
tuple is one atomic operation under the GIL, so the list only ever holds whole rows).
rlsight's own spans do the same in place, with no call into the processor
(:meth:`StepRollupProcessor.lean_filing`); a step span starts through ``on_start``.
Everything else waits:

- **When an ``rl.step`` ends** (the driver only), the processor hands the rows filed since the
  step began, plus the spans still open (the ancestors that give a step's spans their depth
  in the trace tree, and async tasks that outlive the step), to
  :func:`rlsight.analysis.online.step_goodput`: the report's own rollup, on the same spans the
  report reads for that step. The result is ``last_step_summary()`` and ``rl.goodput.*``.
- **Every** :data:`WINDOW_S` **seconds** (sooner after :data:`WINDOW_SPANS` spans; and at
  ``flush_telemetry``/shutdown), in every process, a background thread partitions this
  process's own timelines over the window that just closed by the report's fleet rule
  (:func:`rlsight.analysis.online.window_buckets`) and adds the seconds of each bucket to
  ``rl.goodput.process.seconds`` with the process's ``rl.worker_group`` and ``rl.rank``:
  summed over processes by Prometheus (through a collector) or read back from the local
  store, that is live fleet utilisation.

Rows are numbered in the order they were filed; the window and each open step remember the
first row they read. What is kept is bounded: after each roll-up, rows before both the
current window and the earliest step still open are dropped (a row of the last window that
ends after its cut is carried into the next). Spans still open are handed over as ending
now: inside the step's window (or the time window) that is exactly what they cover. Known
difference from the report: an ancestor that ended before the step (or window) began, such
as the parent of an async task that outlives it, is not kept, so its descendants count it as
one missing level of depth, where the report sees the whole chain.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from rlsight._readable import attributes_dict
from rlsight._semconv import BUCKET, RANK, STEP, STEP_SPAN, WORKER_GROUP
from rlsight.errors import warn_once
from rlsight.step_summary import (
    CONTRIBUTOR_ATTRIBUTE,
    CONTRIBUTOR_BUCKETS,
    GOODPUT_CONTRIBUTOR_SECONDS,
    GOODPUT_PCT,
    GOODPUT_SECONDS,
    PROCESS_SECONDS,
    SUMMARY_BUCKETS,
    SUMMARY_PREFIX,
    summary_dict,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span

    from rlsight._lean import Filing
    from rlsight.analysis.columns import SpanColumns
    from rlsight.analysis.online import LiveSpans, StepGoodput
    from rlsight.runtime import Telemetry

__all__ = ["WINDOW_S", "WINDOW_SPANS", "StepRollupProcessor", "live_spans", "rollup_available"]

#: Seconds between two windows of ``rl.goodput.process.seconds`` (a window also closes at
#: ``flush_telemetry`` and at shutdown).
WINDOW_S: Final = 10.0
#: A window also closes early once this many spans ended in it, so a process that emits
#: thousands of spans a second never holds more than this many ended spans for it.
WINDOW_SPANS: Final = 10_000
#: Fields per row: ``len(rlsight.analysis.online.ROW_FIELDS)``, in that order (not imported:
#: a worker imports numpy and the analysis only when its first window ends).
_ROW: Final = 7
#: Where a row's span id sits.
_SPAN_ID: Final = 3


def rollup_available(driver: bool) -> bool:
    """Whether this process can roll goodput up: the rollup is the report's, which needs the
    ``analysis`` extra (numpy). Without it the run goes on without online goodput; the driver
    says so once, naming the fix (a worker, which would say it once per process, stays quiet)."""
    try:
        found = importlib.util.find_spec("numpy") is not None
    except (ImportError, ValueError):  # a stub in sys.modules, a broken install
        found = False
    if not found and driver:
        warn_once("online-goodput-numpy",
                  "rlsight: last_step_summary(), rl.goodput.* and the busy-time metrics need "
                  "numpy, which is not installed; install rlsight[analysis] to get them (the run "
                  "goes on without them)")
    return found


def _row(span: ReadableSpan) -> tuple[Any, ...]:
    """``span``'s row (see :data:`rlsight.analysis.online.ROW_FIELDS`)."""
    try:  # the SDK's own fields: a property read costs as much as the rest of the row
        context, parent, attrs = span._context, span._parent, span._attributes
        return (span._start_time, span._end_time, context[0], context[1],  # type: ignore[index]
                0 if parent is None else parent[1], span._name,
                attrs if type(attrs) is dict else attributes_dict(attrs))
    except AttributeError:  # an SDK that stores spans differently: the public properties
        context, parent = span.context, span.parent
        return (span.start_time, span.end_time, context.trace_id, context.span_id,
                0 if parent is None else parent.span_id, span.name,
                attributes_dict(span.attributes))


def _rows_of(spans: Iterable[ReadableSpan]) -> list[Any]:
    """The rows of ``spans`` laid end to end, read from the span objects."""
    rows: list[Any] = []
    for span in spans:
        rows += _row(span)
    return rows


def live_spans(spans: Iterable[ReadableSpan], now: int, resource: Any) -> LiveSpans:
    """The rows of ``spans``, read from the span objects (the spans still open at a roll-up)."""
    from rlsight.analysis.online import LiveSpans

    return LiveSpans(_rows_of(spans), now, resource)


class StepRollupProcessor(SpanProcessor):
    """Rolls steps up as they end (driver) and windows of wall time (see the module doc)."""

    #: It may be handed the span itself (rlsight._lean): it only reads what it keeps.
    reads_span_in_place: Final = True

    def __init__(self, runtime: Telemetry, *, steps: bool, window_s: float = WINDOW_S) -> None:
        self._runtime = runtime
        self._steps = steps
        #: Serialises roll-ups (and step starts) against each other; spans never take it.
        self._lock = threading.Lock()
        self._open: dict[int, Span] = {}
        self._rows: list[Any] = []
        """The rows filed since the earliest row a window or an open step still reads."""
        self._first = 0
        """The number of the row at ``_rows[0]``."""
        self._window_from = 0
        """The first row of the current window."""
        self._carried: list[Any] = []
        """Rows of the last window that end after its cut: the next window reads them too."""
        self._open_steps: dict[int, int] = {}
        """Each open step's span id, and the first row its roll-up reads."""
        self._full_at = WINDOW_SPANS * _ROW
        """The length of ``_rows`` at which the current window holds WINDOW_SPANS spans."""
        self._window_start = time.time_ns()
        self._stop = False
        self._wake = threading.Event()
        if window_s > 0:
            threading.Thread(target=self._cut_windows, args=(window_s,), name="rlsight-busy-time",
                             daemon=True).start()
        if steps:
            # The roll-up needs numpy and the analysis (a few hundred ms to import on a busy
            # machine). Imported here, at setup, that cost lands in the run's startup; imported
            # on the first step's end it would sit between steps 1 and 2 (and trip a stall
            # watchdog). A worker imports it in the window thread, when its first window ends.
            import rlsight.analysis.online  # noqa: F401

    @property
    def open_spans(self) -> Mapping[int, Span]:
        """The spans started and not yet ended, by span id (read only: app threads add and
        remove them; the start records are written from it, see ``store._start_writer``)."""
        return self._open

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:  # the SDK's own fields: a property read costs as much as the rest of this call
            sid, name = span._context[1], span._name  # type: ignore[index]  # SpanContext: a tuple
        except AttributeError:
            sid, name = span.context[1], span.name
        self._open[sid] = span
        if name == STEP_SPAN and self._steps:
            with self._lock:
                self._open_steps[sid] = self._first + len(self._rows) // _ROW

    def on_end(self, span: ReadableSpan) -> None:
        # _row(span), inlined: this runs once per span, and a call is one more per span.
        try:
            context, parent, attrs = span._context, span._parent, span._attributes
            if type(attrs) is not dict:  # the SDK's BoundedAttributes: its dict (see attributes_dict)
                attrs = attrs._dict  # type: ignore[union-attr]
            row = (span._start_time, span._end_time, context[0], context[1],  # type: ignore[index]
                   0 if parent is None else parent[1], span._name, attrs)
        except AttributeError:
            row = _row(span)
        self._file(row)

    def lean_filing(self, starter: object) -> Filing:
        """How rlsight's ``LeanStarter`` files its spans here with no call into this
        processor (``rlsight._lean.Filing``): a span sets itself in the open spans as it
        starts and, plain, files its row and leaves them as it ends, as :meth:`_file` does
        (calling :meth:`_window_full` as it does). A step span starts through
        :meth:`on_start` and ends through :meth:`on_end`, as does any span that is no longer
        plain: the span's own check for an open step is spared every other span. Without
        steps (a worker) the name is one no span has: the check passes every span by."""
        return self._open, self._rows, self, STEP_SPAN if self._steps else "\0"

    def _file(self, row: tuple[Any, ...]) -> None:
        """File an ended span's row (see the module doc; ``rlsight._lean`` does the same in
        place for a LeanSpan, see :meth:`lean_filing`)."""
        rows = self._rows
        rows += row
        sid = row[_SPAN_ID]
        # Filed before it leaves the open spans: a roll-up copies the open spans, then the
        # rows, so it sees a span ending meanwhile in one or both (see _take), never in neither.
        # ``del``, not ``pop(sid, None)``: no method call on every span (nor a ``with
        # suppress``, which costs more than the pop); a span is missing only if it started
        # before this processor was added.
        try:  # noqa: SIM105
            del self._open[sid]
        except KeyError:
            pass
        # ``>=``, not ``==``: app threads file concurrently and a cut leaves the rows filed
        # meanwhile, so the length can step over the mark without landing on it; missed, the
        # window would hold every span until the 10 s timer.
        if len(rows) >= self._full_at:
            self._window_full()
        if sid in self._open_steps:
            self._step_ended(sid, row[1] or 0)

    def _window_full(self) -> None:
        """Wake the window thread, or cut on this thread once it falls behind (:meth:`_help_cut`);
        out of ``on_end`` so the common span pays for none of it."""
        size = WINDOW_SPANS + (len(self._rows) - self._full_at) // _ROW
        if size >= 2 * WINDOW_SPANS:
            self._help_cut(wait_s=0.1 if size >= 4 * WINDOW_SPANS else 0.0)
        elif not self._wake.is_set():
            self._wake.set()

    def shutdown(self) -> None:
        self._stop = True
        self._wake.set()

    # -- roll-ups (under the lock) ------------------------------------------------------------
    def _take(self, first_row: int, now: int, carried: list[Any]) -> tuple[int, int, LiveSpans]:
        """The rows from row ``first_row`` on after ``carried``, then the spans still open:
        the number of the row after the last one taken, how many rows came before the open
        spans' rows, and all of them (the open spans' in ``more``)."""
        from rlsight.analysis.online import LiveSpans

        # The open spans first, then the rows (on_end files a span, then drops it from the
        # open ones): a span ending meanwhile is read among the rows, the open ones or both
        # (then as the same row twice, which the table keeps once), never neither; read while
        # still open, it ends now, and filed later the next window clips it to what follows.
        still_open = list(self._open.values())
        rows = self._rows
        filed = len(rows)
        taken = self._first + filed // _ROW
        out = rows[(first_row - self._first) * _ROW:filed]
        if carried:
            out[:0] = carried
        count = len(out) // _ROW
        # The open spans' rows after the filed ones, in ``more``: the columns set their ends
        # (None) to now before the end column's one pass (see live_columns).
        return taken, count, LiveSpans(out, now, self._runtime.resource_attributes,
                                       more=_rows_of(still_open))

    def _take_step(self, first_row: int, now: int) -> LiveSpans:
        """:meth:`_take` for a step's roll-up: its rows stay in place in the processor's list
        (read under the lock, which every trim of the list takes; rows filed meanwhile come
        after ``stop``), not copied: a copy and its release touch every object of the step."""
        from rlsight.analysis.online import LiveSpans

        still_open = list(self._open.values())  # first, as in _take
        filed = len(self._rows)
        return LiveSpans(self._rows, now, self._runtime.resource_attributes,
                         (first_row - self._first) * _ROW, filed, _rows_of(still_open))

    def _trim(self) -> None:
        """Drop the rows before the current window and every open step."""
        keep = min(self._open_steps.values(), default=self._window_from)
        keep = min(keep, self._window_from)
        if keep > self._first:
            del self._rows[:(keep - self._first) * _ROW]
            self._first = keep
        self._full_at = (self._window_from - self._first + WINDOW_SPANS) * _ROW

    def _step_ended(self, sid: int, end: int) -> None:
        """Roll up the step ``sid`` that ended at ``end`` (ns)."""
        with self._lock:
            first_row = self._open_steps.pop(sid, None)
            if first_row is None:
                return
            try:
                from rlsight.analysis.online import live_columns

                self._roll_up(sid, live_columns(self._take_step(first_row, end)))
            except Exception as exc:  # the runtime's guard: log once (raise when strict), run goes on
                self._runtime.report_internal_error("step-goodput", exc)
            finally:
                self._trim()

    def _roll_up(self, step_id: int, cols: SpanColumns) -> None:
        from rlsight.analysis.online import step_goodput

        result = step_goodput(cols, step_id)
        if result is None:
            return
        summary = summary_dict(
            result.step, {b: result.buckets.get(b) for b in SUMMARY_BUCKETS}, result.contributors)
        self._runtime.last_step_summary = summary
        _record(self._runtime, result, summary)

    def cut(self) -> None:
        """Close the current window: record this process's seconds in each bucket since the
        last cut (``rl.goodput.process.seconds``). Called by the window thread, by
        ``flush_telemetry`` and at shutdown, before the metrics are written."""
        self._cut_at(time.time_ns())

    def _help_cut(self, wait_s: float) -> None:
        """Cut the window on this app thread, waiting up to ``wait_s`` for a running cut.

        The window thread is one GIL share among every app thread: with several threads
        producing spans flat out it is woken but barely runs (a cut it started can take
        seconds of wall time for milliseconds of CPU), and the window would hold every span
        until it finishes. An app thread that finds the window twice its size cuts it itself
        if nothing else is cutting; four times its size, it waits (at most ``wait_s``) for the
        running cut, which then gets the GIL. The window stays bounded, and the producers pay
        for the accounting they cause.
        """
        lock = self._lock
        if lock.acquire(timeout=wait_s) if wait_s > 0 else lock.acquire(blocking=False):
            try:
                self._cut_locked(time.time_ns())
            finally:
                lock.release()

    def _cut_at(self, now: int) -> None:
        with self._lock:
            self._cut_locked(now)

    def _cut_locked(self, now: int) -> None:
        lo = self._window_start
        if now <= lo:
            return
        carried, self._carried = self._carried, []
        taken, count, spans = self._window_from, 0, None
        ends = None
        try:
            taken, count, spans = self._take(self._window_from, now, carried)
            from rlsight.analysis.online import live_columns, window_buckets

            cols = live_columns(spans)
            ends = cols.end[:count]
            seconds = window_buckets(cols, lo, now)
            self._window_start = now
            _record_window(self._runtime, seconds)
        except Exception as exc:  # the runtime's guard: log once (raise when strict), run goes on
            self._window_start = now
            self._runtime.report_internal_error("busy-time", exc)
        finally:
            if spans is not None and ends is not None:
                rows = spans.rows
                for i in (ends > now).nonzero()[0].tolist():
                    self._carried += rows[i * _ROW:(i + 1) * _ROW]
            self._window_from = taken
            self._trim()

    def _cut_windows(self, window_s: float) -> None:
        while True:
            self._wake.wait(window_s)
            self._wake.clear()
            if self._stop:
                return
            self.cut()


def _record(runtime: Telemetry, result: StepGoodput, summary: dict[str, float]) -> None:
    meter, instruments = runtime.meter, runtime.run_state.instruments
    step = result.step
    series = instruments.series
    with series.lock:  # the pruning of finished steps never races a point (_step_series)
        series.saw(step)
        counter = instruments.counter(
            meter, GOODPUT_SECONDS, "s", "Seconds of each step in each goodput bucket (driver timeline).")
        for bucket in SUMMARY_BUCKETS:
            counter.add(summary[f"{SUMMARY_PREFIX}{bucket}_s"], {STEP: step, BUCKET: bucket})
        instruments.gauge(meter, GOODPUT_PCT, "%", "Productive share of the step's wall time.").set(
            summary[f"{SUMMARY_PREFIX}goodput_pct"], {STEP: step})
        contributor = instruments.counter(
            meter, GOODPUT_CONTRIBUTOR_SECONDS, "s",
            "Seconds of each step a span name (or efficiency category) decided, by bucket.")
        from rlsight.analysis.model import span_label

        for c in result.contributors:
            if c.bucket in CONTRIBUTOR_BUCKETS:
                contributor.add(c.attributed_ns / 1e9, {
                    STEP: step, BUCKET: c.bucket, CONTRIBUTOR_ATTRIBUTE: span_label(c.name)})


def _record_window(runtime: Telemetry, nanoseconds: Mapping[str, int]) -> None:
    resource = runtime.resource_attributes
    identity = {WORKER_GROUP: resource.get(WORKER_GROUP, "unknown"), RANK: resource.get(RANK, 0)}
    counter = runtime.run_state.instruments.counter(
        runtime.meter, PROCESS_SECONDS, "s",
        "Seconds of this process's wall time in each goodput bucket (its own timelines).")
    for bucket in SUMMARY_BUCKETS:
        counter.add(nanoseconds[bucket] / 1e9, {BUCKET: bucket, **identity})
