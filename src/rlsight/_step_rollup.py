"""The driver's span processor that rolls each ``rl.step`` up as it ends.

It keeps the spans that end while a step is open (and the spans still open, which are the
ancestors that give a step's spans their depth in the trace tree). When a step ends it hands
that step's timeline, inside the step's window, plus those ancestors to
:func:`rlsight.analysis.online.step_goodput`: the report's own rollup, on the same spans the
report will read for that step. What it keeps is bounded by one step's spans: whatever ended
before the earliest step still open is dropped after each roll-up.

Spans still open when the step ends (its ancestors, and async tasks on its thread that
outlive it) are handed over as ending now: inside the step's window that is exactly what they
cover. Known difference from the report: an ancestor that ended before the step began (an
async task whose parent finished earlier) is not kept, so its descendants count it as one
missing level of depth, where the report sees the whole chain.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import StatusCode

from rlsight._instruments import InstrumentCache
from rlsight._readable import span_attributes
from rlsight._semconv import BUCKET, STEP, STEP_SPAN, THREAD_ID
from rlsight.step_summary import (
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

    from rlsight.analysis.online import StepGoodput
    from rlsight.runtime import Telemetry

__all__ = ["StepRollupProcessor"]

_INSTRUMENTS: Final = InstrumentCache()
#: OTLP status code of each OTel status (a dict lookup; ``StatusCode.value`` is an enum
#: property, several times slower, and this runs for every span of the step).
_STATUS: Final = {code: code.value for code in StatusCode}


#: An ended span as the processor keeps it: span id, thread id, the span.
_Kept = tuple[int, Any, ReadableSpan]


class StepRollupProcessor(SpanProcessor):
    """Computes each ended step's goodput in the thread that ends it (see the module doc)."""

    def __init__(self, runtime: Telemetry) -> None:
        self._runtime = runtime
        self._lock = threading.Lock()
        self._open: dict[int, Span] = {}
        self._open_steps: dict[int, int] = {}
        self._ended: list[_Kept] = []
        # The roll-up needs numpy and the analysis (a few hundred ms to import on a busy
        # machine). Imported here, at setup, that cost lands in the run's startup; imported on
        # the first step's end it would sit between steps 1 and 2 (and trip a stall watchdog).
        # ``import rlsight`` itself stays light: only a driver's setup pays it.
        import rlsight.analysis.online  # noqa: F401  (imports the columns too)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        sid = span.context.span_id
        with self._lock:
            self._open[sid] = span
            if span.name == STEP_SPAN:
                self._open_steps[sid] = span.start_time or 0

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        assert context is not None
        sid = context.span_id
        with self._lock:
            self._open.pop(sid, None)
            is_step = self._open_steps.pop(sid, None) is not None
            if is_step or self._open_steps:
                self._ended.append((sid, span_attributes(span).get(THREAD_ID), span))
            if not is_step:
                return
            chosen = self._step_spans(sid, span)
            floor = min(self._open_steps.values(), default=None)
            self._ended = [] if floor is None else [k for k in self._ended if (k[2].end_time or 0) > floor]
        try:
            self._roll_up(sid, span, chosen)
        except Exception as exc:  # the runtime's guard: log once (raise when strict), run goes on
            self._runtime.report_internal_error("step-goodput", exc)

    def _step_spans(self, step_id: int, step: ReadableSpan) -> dict[int, ReadableSpan]:
        """The step's timeline inside its window, plus the ancestors of all of them, by id."""
        thread = span_attributes(step).get(THREAD_ID)
        lo, hi = step.start_time or 0, step.end_time or 0
        chosen: dict[int, ReadableSpan] = {}
        by_id: dict[int, ReadableSpan] = {}
        for sid, span_thread, s in self._ended:
            by_id[sid] = s
            if span_thread == thread and (s.end_time or 0) > lo and (s.start_time or 0) < hi:
                chosen[sid] = s
        chosen[step_id] = step
        # Spans still open on the step's thread that began inside its window (async tasks
        # that outlive the step) cover the rest of the window, as the report will see.
        for sid, s in self._open.items():
            if (s.start_time or 0) < hi and span_attributes(s).get(THREAD_ID) == thread:
                chosen[sid] = s
        stack = list(chosen.values())
        while stack:
            parent = stack.pop().parent
            if parent is None or parent.span_id in chosen:
                continue
            found = by_id.get(parent.span_id) or self._open.get(parent.span_id)
            if found is not None:
                chosen[parent.span_id] = found
                stack.append(found)
        return chosen

    def _roll_up(self, step_id: int, step: ReadableSpan, spans: Mapping[int, ReadableSpan]) -> None:
        from rlsight.analysis.columns import span_columns_from_rows
        from rlsight.analysis.online import step_goodput

        now = step.end_time or 0
        trace = format(step.context.trace_id, "032x")
        rows: list[tuple[str, str, str, str, int, int, int, int, Any]] = []
        for sid, s in spans.items():
            parent = s.parent
            start = s.start_time or 0
            # A span still open (an ancestor) covers at least up to now.
            end = s.end_time if s.end_time is not None else max(now, start)
            span_trace = s.context.trace_id
            rows.append((
                trace if span_trace == step.context.trace_id else format(span_trace, "032x"),
                format(sid, "016x"), format(parent.span_id, "016x") if parent is not None else "",
                s.name, start, end, _STATUS.get(s.status.status_code, 0), 0, span_attributes(s),
            ))
        runtime = self._runtime
        cols = span_columns_from_rows(rows, [runtime.resource_attributes])
        result = step_goodput(cols, step_id)
        if result is None:
            return
        summary = summary_dict(
            result.step, {b: result.buckets.get(b) for b in SUMMARY_BUCKETS}, result.contributors)
        runtime.last_step_summary = summary
        _record(runtime, result, summary)


def _record(runtime: Telemetry, result: StepGoodput, summary: dict[str, float]) -> None:
    meter = runtime.meter
    step = result.step
    counter = _INSTRUMENTS.counter(
        meter, GOODPUT_SECONDS, "s", "Seconds of each step in each goodput bucket (driver timeline).")
    for bucket in SUMMARY_BUCKETS:
        counter.add(summary[f"{SUMMARY_PREFIX}{bucket}_s"], {STEP: step, BUCKET: bucket})
    _INSTRUMENTS.gauge(meter, GOODPUT_PCT, "%", "Productive share of the step's wall time.").set(
        summary[f"{SUMMARY_PREFIX}goodput_pct"], {STEP: step})
    contributor = _INSTRUMENTS.counter(
        meter, GOODPUT_CONTRIBUTOR_SECONDS, "s",
        "Seconds of each step a span name (or efficiency category) decided, by bucket.")
    from rlsight.analysis.model import span_label

    for c in result.contributors:
        if c.bucket in CONTRIBUTOR_BUCKETS:
            contributor.add(c.attributed_ns / 1e9, {
                STEP: step, BUCKET: c.bucket, CONTRIBUTOR_ATTRIBUTE: span_label(c.name)})
