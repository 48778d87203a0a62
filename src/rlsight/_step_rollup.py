"""The span processor that rolls goodput up while the run goes: per step (driver) and per
window of wall time (every process).

Per span it only files the SDK's span object: ``on_start`` puts it in a dict of open spans,
``on_end`` pops it and appends it to the window's list and, while a step is open, to the
step's (no lock: each is one atomic operation under the GIL). Everything else waits:

- **When an ``rl.step`` ends** (the driver only), the processor hands that list, plus the
  spans still open (the ancestors that give a step's spans their depth in the trace tree, and
  async tasks that outlive the step), to :func:`rlsight.analysis.online.step_goodput` as plain
  per-field lists read in a few C-level passes: the report's own rollup, on the same spans the
  report reads for that step. The result is ``last_step_summary()`` and ``rl.goodput.*``.
- **Every** :data:`WINDOW_S` **seconds** (sooner after :data:`WINDOW_SPANS` spans; and at
  ``flush_telemetry``/shutdown), in every process, a background thread partitions this
  process's own timelines over the window that just closed by the report's fleet rule
  (:func:`rlsight.analysis.online.window_buckets`) and adds the seconds of each bucket to
  ``rl.goodput.process.seconds`` with the process's ``rl.worker_group`` and ``rl.rank``:
  summed over processes by Prometheus (through a collector) or read back from the local
  store, that is live fleet utilisation.

What it keeps is bounded: after each roll-up only spans that end after both the earliest
step still open and the last window's end stay. Spans still open are handed over as ending
now: inside the step's window (or the time window) that is exactly what they cover. Known
difference from the report: an ancestor that ended before the step (or window) began, such
as the parent of an async task that outlives it, is not kept, so its descendants count it as
one missing level of depth, where the report sees the whole chain.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Mapping
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from rlsight._readable import span_attributes
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
    import numpy as np
    from numpy.typing import NDArray
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span

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
#: The fields the rollup reads, as the SDK's ``ReadableSpan`` stores them: one C-level pass
#: per field over the spans (the public properties cost a Python call per field per span, and
#: one getter of all six fields costs more than six passes once its tuples are transposed).
_FIELD_NAMES: Final = ("_context", "_parent", "_name", "_start_time", "_end_time", "_attributes")
_FIELDS: Final = tuple(attrgetter(name) for name in _FIELD_NAMES)
#: A LeanSpan keeps its attributes as exactly a ``dict`` (until one is set on it).
_DICT: Final = frozenset({dict})
_PUBLIC_FIELDS: Final = attrgetter("context", "parent", "name", "start_time", "end_time")


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


def live_spans(spans: list[ReadableSpan], now: int, resource: Any) -> LiveSpans:
    """The per-field lists of ``spans`` the online rollup reads (no per-span conversion)."""
    from rlsight.analysis.online import LiveSpans

    if not spans:
        return LiveSpans((), (), (), (), (), (), now, resource)
    attributes: list[Any]
    try:
        contexts, parents, names, starts, ends, attributes = (list(map(f, spans)) for f in _FIELDS)
    except AttributeError:  # an SDK that stores spans differently: the public properties
        contexts, parents, names, starts, ends = (
            list(column) for column in zip(*map(_PUBLIC_FIELDS, spans), strict=True))
        attributes = [_attributes_dict(s) for s in spans]
    else:
        if not _DICT.issuperset(map(type, attributes)):  # an SDK span's storage, or none
            attributes = [a if type(a) is dict else _attributes_dict(s)
                          for s, a in zip(spans, attributes, strict=True)]
    return LiveSpans(contexts, parents, names, starts, ends, attributes, now, resource)


def _attributes_dict(span: ReadableSpan) -> dict[str, Any]:
    """``span``'s attributes as a ``dict``, which the columns read with ``dict.get`` in C-level
    passes: the SDK's own storage where it is one, else a copy (never mutated)."""
    attrs = span_attributes(span)
    return attrs if isinstance(attrs, dict) else dict(attrs)


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
        self._open_steps: dict[int, int] = {}
        self._ended: list[ReadableSpan] = []
        """Spans ended while a step was open: the next step's roll-up reads them."""
        self._window: list[ReadableSpan] = []
        """Spans ended since the last window's end: the next window reads them."""
        self._window_start = time.time_ns()
        self._stop = False
        self._wake = threading.Event()
        self._windows: threading.Thread | None = None
        if window_s > 0:
            self._windows = threading.Thread(
                target=self._cut_windows, args=(window_s,), name="rlsight-busy-time", daemon=True)
            self._windows.start()
        if steps:
            # The roll-up needs numpy and the analysis (a few hundred ms to import on a busy
            # machine). Imported here, at setup, that cost lands in the run's startup; imported
            # on the first step's end it would sit between steps 1 and 2 (and trip a stall
            # watchdog). A worker imports it in the window thread, when its first window ends.
            import rlsight.analysis.online  # noqa: F401

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:  # the SDK's own fields: a property read costs as much as the rest of this call
            sid, name = span._context[1], span._name  # type: ignore[index]  # SpanContext: a tuple
        except AttributeError:
            sid, name = span.context[1], span.name
        self._open[sid] = span
        if name == STEP_SPAN and self._steps:
            with self._lock:
                self._open_steps[sid] = span.start_time or 0

    def on_end(self, span: ReadableSpan) -> None:
        try:
            sid = span._context[1]  # type: ignore[index]
        except AttributeError:
            sid = span.context[1]
        self._open.pop(sid, None)
        if self._windows is not None:
            window = self._window
            window.append(span)
            # ``>=``, not ``==``: app threads append concurrently and a cut leaves the spans
            # appended meanwhile, so the length can step over the mark without landing on it;
            # missed, the window would hold every span until the 10 s timer.
            if len(window) >= WINDOW_SPANS:
                self._window_full(len(window))
        open_steps = self._open_steps
        if open_steps:
            self._ended.append(span)
            if sid in open_steps:
                self._step_ended(sid, span)

    def _window_full(self, size: int) -> None:
        """Wake the window thread, or cut on this thread once it falls behind (:meth:`_help_cut`);
        out of ``on_end`` so the common span pays for none of it."""
        if size >= 2 * WINDOW_SPANS:
            self._help_cut(wait_s=0.1 if size >= 4 * WINDOW_SPANS else 0.0)
        elif not self._wake.is_set():
            self._wake.set()

    def shutdown(self) -> None:
        self._stop = True
        self._wake.set()

    # -- roll-ups ---------------------------------------------------------------------------
    def _take(self, kept: list[ReadableSpan], now: int) -> tuple[int, list[ReadableSpan], LiveSpans]:
        """The spans of ``kept`` so far (how many), and those plus the open ones as field lists."""
        count = len(kept)
        batch = kept[:count]
        return count, batch, live_spans([*batch, *self._open.copy().values()], now,
                                        self._runtime.resource_attributes)

    @staticmethod
    def _keep(kept: list[ReadableSpan], count: int, batch: list[ReadableSpan],
              ends: NDArray[np.int64] | None, floor: int | None) -> None:
        """Drop the first ``count`` spans of ``kept`` but those ending after ``floor``
        (``ends``: the end column of the roll-up that read them, if it got that far)."""
        # Spans other threads appended meanwhile lie past ``count`` and stay.
        if floor is None:
            del kept[:count]
        elif ends is None:
            kept[:count] = [s for s in batch if (s.end_time or 0) > floor]
        else:
            kept[:count] = [batch[i] for i in (ends[:count] > floor).nonzero()[0].tolist()]

    def _step_ended(self, sid: int, step: ReadableSpan) -> None:
        with self._lock:
            if self._open_steps.pop(sid, None) is None:
                return
            count, ends = 0, None
            batch: list[ReadableSpan] = []
            try:
                count, batch, spans = self._take(self._ended, step.end_time or 0)
                from rlsight.analysis.online import live_columns

                cols = live_columns(spans)
                ends = cols.end
                self._roll_up(sid, cols)
            except Exception as exc:  # the runtime's guard: log once (raise when strict), run goes on
                self._runtime.report_internal_error("step-goodput", exc)
            finally:
                self._keep(self._ended, count, batch, ends,
                           min(self._open_steps.values(), default=None))

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
        count, ends = 0, None
        batch: list[ReadableSpan] = []
        try:
            count, batch, spans = self._take(self._window, now)
            from rlsight.analysis.online import live_columns, window_buckets

            cols = live_columns(spans)
            ends = cols.end
            seconds = window_buckets(cols, lo, now)
            self._window_start = now
            _record_window(self._runtime, seconds)
        except Exception as exc:  # the runtime's guard: log once (raise when strict), run goes on
            self._window_start = now
            self._runtime.report_internal_error("busy-time", exc)
        finally:
            self._keep(self._window, count, batch, ends, now)

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
