"""The driver's span processor that rolls each ``rl.step`` up as it ends.

Per span it only files the SDK's span object: ``on_start`` puts it in a dict of open spans,
``on_end`` moves it to a list while a step is open (a dict set, a pop and an append, no lock:
each is one atomic operation under the GIL). Everything else waits for the step's end: the
processor then hands that list, plus the spans still open (the ancestors that give a step's
spans their depth in the trace tree, and async tasks that outlive the step), to
:func:`rlsight.analysis.online.step_goodput` as plain per-field lists read in a few C-level
passes: the report's own rollup, on the same spans the report reads for that step. What it
keeps is bounded by one step's spans: whatever ended before the earliest step still open is
dropped after each roll-up.

Spans still open when the step ends are handed over as ending now: inside the step's window
that is exactly what they cover. Known difference from the report: an ancestor that ended
before the step began (an async task whose parent finished earlier) is not kept, so its
descendants count it as one missing level of depth, where the report sees the whole chain.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from rlsight._instruments import InstrumentCache
from rlsight._readable import span_attributes
from rlsight.step_summary import (
    BUCKET_ATTRIBUTE,
    CONTRIBUTOR_ATTRIBUTE,
    CONTRIBUTOR_BUCKETS,
    GOODPUT_CONTRIBUTOR_SECONDS,
    GOODPUT_PCT,
    GOODPUT_SECONDS,
    SUMMARY_BUCKETS,
    SUMMARY_PREFIX,
    summary_dict,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span

    from rlsight.analysis.online import LiveSpans, StepGoodput
    from rlsight.runtime import Telemetry

__all__ = ["StepRollupProcessor", "live_spans"]

_STEP: Final = "rl.step"
_INSTRUMENTS: Final = InstrumentCache()
#: The fields the rollup reads, as the SDK's ``ReadableSpan`` stores them: one C-level call
#: per span (the public properties cost a Python call per field per span).
_FIELDS: Final = attrgetter("_context", "_parent", "_name", "_start_time", "_end_time", "_attributes")
_PUBLIC_FIELDS: Final = attrgetter("context", "parent", "name", "start_time", "end_time")


def live_spans(spans: list[ReadableSpan], now: int, resource: Any) -> LiveSpans:
    """The per-field lists of ``spans`` the online rollup reads (no per-span conversion)."""
    from rlsight.analysis.online import LiveSpans

    try:
        contexts, parents, names, starts, ends, raw = zip(*map(_FIELDS, spans), strict=True)
        attributes: list[Any] = [getattr(a, "_dict", None) for a in raw]
        if None in attributes:  # not the SDK's BoundedAttributes: read them the slow way
            attributes = [span_attributes(s) for s in spans]
    except AttributeError:  # an SDK that stores spans differently: the public properties
        contexts, parents, names, starts, ends = zip(*map(_PUBLIC_FIELDS, spans), strict=True)
        attributes = [span_attributes(s) for s in spans]
    return LiveSpans(contexts, parents, names, starts, ends, attributes, now, resource)


class StepRollupProcessor(SpanProcessor):
    """Computes each ended step's goodput in the thread that ends it (see the module doc)."""

    def __init__(self, runtime: Telemetry) -> None:
        self._runtime = runtime
        #: Serialises step ends (and step starts) against each other; spans never take it.
        self._lock = threading.Lock()
        self._open: dict[int, Span] = {}
        self._open_steps: dict[int, int] = {}
        self._ended: list[ReadableSpan] = []
        # The roll-up needs numpy and the analysis (a few hundred ms to import on a busy
        # machine). Imported here, at setup, that cost lands in the run's startup; imported on
        # the first step's end it would sit between steps 1 and 2 (and trip a stall watchdog).
        # ``import rlsight`` itself stays light: only a driver's setup pays it.
        import rlsight.analysis.online  # noqa: F401

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        sid = span.context[1]  # SpanContext is a tuple: (trace id, span id, ...)
        self._open[sid] = span
        if span.name == _STEP:
            with self._lock:
                self._open_steps[sid] = span.start_time or 0

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        assert context is not None
        sid = context[1]
        self._open.pop(sid, None)
        if not self._open_steps:
            return
        self._ended.append(span)
        if sid in self._open_steps:
            self._step_ended(sid, span)

    def _step_ended(self, sid: int, step: ReadableSpan) -> None:
        with self._lock:
            if self._open_steps.pop(sid, None) is None:
                return
            count = len(self._ended)
            batch = self._ended[:count]
            floor = min(self._open_steps.values(), default=None)
            ends: Sequence[int | None] | None = None
            try:
                spans = live_spans([*batch, *self._open.copy().values()], step.end_time or 0,
                                   self._runtime.resource_attributes)
                ends = spans.ends
                self._roll_up(sid, spans)
            except Exception as exc:  # the runtime's guard: log once (raise when strict), run goes on
                self._runtime.report_internal_error("step-goodput", exc)
            finally:
                if ends is None:
                    ends = [s.end_time for s in batch]
                # Spans other threads appended meanwhile lie past ``count`` and stay.
                self._ended[:count] = [] if floor is None else [
                    s for s, end in zip(batch, ends[:count], strict=True) if (end or 0) > floor]

    def _roll_up(self, step_id: int, spans: LiveSpans) -> None:
        from rlsight.analysis.online import live_columns, step_goodput

        result = step_goodput(live_columns(spans), step_id)
        if result is None:
            return
        summary = summary_dict(
            result.step, {b: result.buckets.get(b) for b in SUMMARY_BUCKETS}, result.contributors)
        self._runtime.last_step_summary = summary
        _record(self._runtime, result, summary)


def _record(runtime: Telemetry, result: StepGoodput, summary: dict[str, float]) -> None:
    meter = runtime.meter
    step = result.step
    counter = _INSTRUMENTS.counter(
        meter, GOODPUT_SECONDS, "s", "Seconds of each step in each goodput bucket (driver timeline).")
    for bucket in SUMMARY_BUCKETS:
        counter.add(summary[f"{SUMMARY_PREFIX}{bucket}_s"], {_STEP: step, BUCKET_ATTRIBUTE: bucket})
    _INSTRUMENTS.gauge(meter, GOODPUT_PCT, "%", "Productive share of the step's wall time.").set(
        summary[f"{SUMMARY_PREFIX}goodput_pct"], {_STEP: step})
    contributor = _INSTRUMENTS.counter(
        meter, GOODPUT_CONTRIBUTOR_SECONDS, "s",
        "Seconds of each step a span name (or efficiency category) decided, by bucket.")
    from rlsight.analysis.model import span_label

    for c in result.contributors:
        if c.bucket in CONTRIBUTOR_BUCKETS:
            contributor.add(c.attributed_ns / 1e9, {
                _STEP: step, BUCKET_ATTRIBUTE: c.bucket, CONTRIBUTOR_ATTRIBUTE: span_label(c.name)})
