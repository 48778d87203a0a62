"""Steps: the ``rl.step`` spans, restarts, and which step every other span belongs to.

A span belongs to the step of its nearest ``rl.step`` ancestor (the trace says so). A span
with no step ancestor (another trace: a collector thread, an engine request, a worker's own
root span) belongs to the step whose window contains its start, else to the next step if it
ends inside (it started a little early: clock skew between hosts), else to none (startup,
gaps between steps, after the last step, or an enclosing span such as ``rl.job``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from rlsight._semconv import STEP_SPAN
from rlsight.analysis._table import SpanTable
from rlsight.analysis.columns import NO_STEP

__all__ = ["Steps", "find_steps"]

I64 = NDArray[np.int64]

#: The lowest later step number of the last step: above every step number.
_NO_LATER: Final = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class Steps:
    """The step spans in start order (a *row* is a position in this order)."""

    span: I64
    """Table index of each step span."""
    number: I64
    """The ``rl.step`` attribute; -1 where a step span lacks it (``step_span(2.5)``: no whole
    number), which is never superseded nor counted as a restart."""
    start: I64
    end: I64
    timeline: I64
    superseded: NDArray[np.bool_]
    """A later step has the same or a lower number: this attempt was redone after a restart."""
    restarts: int
    """Consecutive numbered steps whose number did not increase."""
    of_span: I64
    """Step row of every table span, or -1."""
    missing_numbers: int

    def __len__(self) -> int:
        return len(self.span)

    @property
    def wall(self) -> I64:
        """Wall time of each step, in nanoseconds."""
        out: I64 = np.maximum(self.end - self.start, 0)
        return out


def _superseded(number: I64) -> NDArray[np.bool_]:
    """Whether any later step (in start order) has a number <= this step's."""
    n = len(number)
    if n < 2:  # no later step
        return np.zeros(n, dtype=np.bool_)
    later_min = np.empty(n, dtype=np.int64)
    later_min[-1] = _NO_LATER
    later_min[:-1] = np.minimum.accumulate(number[::-1])[::-1][1:]
    return later_min <= number


def _by_time(start: I64, end: I64, span_start: I64, span_end: I64) -> I64:
    """Step row by time: the window containing the span's start, else the next one it ends in."""
    n = len(start)
    if n == 1:  # (the driver's online rollup) the one window holds the start, or the end
        first, last = start[0], end[0]
        before = span_start < first
        hit = np.where(before, (span_end > first) & (span_end <= last), span_start < last)
        return np.where(hit, 0, -1)
    row = np.searchsorted(start, span_start, side="right") - 1
    inside = (row >= 0) & (span_start < end[np.maximum(row, 0)])
    nxt = row + 1
    following = np.minimum(nxt, n - 1)
    ends_in = (nxt < n) & (span_end > start[following]) & (span_end <= end[following])
    return np.where(inside, row, np.where(ends_in, nxt, -1)).astype(np.int64)


def find_steps(table: SpanTable) -> Steps:
    """Find the step spans, detect restarts, and attribute every span to a step."""
    cols = table.cols
    step_name = table.name_id(STEP_SPAN)
    idx = (cols.name == step_name).nonzero()[0] if step_name >= 0 else np.zeros(0, np.int64)
    raw = cols.step_no[idx]
    missing = raw == NO_STEP
    number = np.where(missing, -1, raw)
    if len(idx) > 1:
        order = np.lexsort((idx, number, cols.start[idx]))
        idx, number, missing = idx[order], number[order], missing[order]
    start = cols.start[idx]
    end = np.maximum(cols.end[idx], start)
    if len(idx) == 1:  # every anchored span is in the one step
        of_span = np.where(table.step_anchor >= 0, 0, -1)
    elif len(idx):
        # Row of each step span, -1 elsewhere and in the last place, which an anchor of -1
        # (no step ancestor) reads: one gather gives every anchored span its step.
        row_of = np.full(len(table) + 1, -1, dtype=np.int64)
        row_of[idx] = np.arange(len(idx))
        of_span = row_of[table.step_anchor]
    else:
        of_span = np.full(len(table), -1, dtype=np.int64)
    if len(idx):
        free = (of_span < 0).nonzero()[0]
        if len(free):
            of_span[free] = _by_time(start, end, cols.start[free], cols.end[free])
    # A step without a number (``step_span(2.5)``, recorded without ``rl.step``) says nothing
    # about restarts: only the numbered steps are compared, among themselves.
    numbered = number[~missing]
    restarts = int(np.count_nonzero(numbered[1:] <= numbered[:-1])) if len(numbered) > 1 else 0
    superseded = np.zeros(len(number), dtype=np.bool_)
    superseded[~missing] = _superseded(numbered)
    return Steps(
        span=idx,
        number=number,
        start=start,
        end=end,
        timeline=table.timeline[idx],
        superseded=superseded,
        restarts=restarts,
        of_span=of_span,
        missing_numbers=int(np.count_nonzero(missing)),
    )
