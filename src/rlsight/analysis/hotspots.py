"""Span names by total and self time: where the instrumented code spent its time.

*Total* sums the durations of every span of a name (nested spans of the same name count
each time, as in any profiler's "total"). *Self* is a span's duration minus the union of its
children on the same timeline, clipped to the span: the time that thread spent in this span
and in no nested span. A child on another process (a remote call) does not reduce its
caller's self time, because the caller's thread was still inside the caller.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from rlsight.analysis._intervals import covered_length
from rlsight.analysis._sums import group_sums
from rlsight.analysis._table import SpanTable
from rlsight.analysis.model import SpanStat
from rlsight.store._schema import STATUS_ERROR

__all__ = ["MAX_NAMES", "children_cover", "self_time", "top_spans"]

#: Most span names a report lists (names carry no ids, so this is rarely reached).
MAX_NAMES: Final = 200


def self_time(table: SpanTable) -> np.ndarray:
    """Per span: duration minus the union of its same-timeline children within it."""
    cols = table.cols
    child = np.flatnonzero(table.parent >= 0)
    parent = table.parent[child]
    child = child[table.timeline[parent] == table.timeline[child]]
    parent = table.parent[child]
    covered = children_cover(
        parent, np.maximum(cols.start[child], cols.start[parent]),
        np.minimum(cols.end[child], cols.end[parent]), len(table),
    )
    return table.duration - covered


def children_cover(group: np.ndarray, start: np.ndarray, end: np.ndarray, groups: int) -> np.ndarray:
    """:func:`~rlsight.analysis._intervals.covered_length`, by sorting the starts only.

    With each group's times shifted into its own range (group-major keys), the intervals in
    start order and a running maximum of their ends, each interval adds what it reaches past
    every earlier end: the union. One ``argsort`` of n starts, where the end-point sweep sorts
    2n points; on a run's million children it halves :func:`self_time`. Keys that do not fit
    an int64 take the sweep.
    """
    keep = end > start
    if not keep.any():
        return np.zeros(groups, dtype=np.int64)
    g, s, e = group[keep], start[keep], end[keep]
    lo = int(s.min())
    width = int(e.max()) - lo + 1
    if (int(g.max()) + 1) * width > 1 << 62:
        return covered_length(group, start, end, groups)
    base = g * width - lo
    first = base + s
    order = np.argsort(first)
    first, last, g = first[order], (base + e)[order], g[order]
    reach = np.empty_like(last)  # the furthest end before each interval (its own start for the first)
    reach[0] = first[0]
    np.maximum.accumulate(last[:-1], out=reach[1:])
    added = last - np.maximum(first, reach)
    np.maximum(added, 0, out=added)
    return group_sums(g, added, groups)


def top_spans(table: SpanTable) -> list[SpanStat]:
    """Every span name with count, total, self time and errors, largest total first."""
    cols = table.cols
    n = len(cols.names)
    counts = np.bincount(cols.name, minlength=n)
    total = group_sums(cols.name, table.duration, n)
    own = group_sums(cols.name, self_time(table), n)
    errors = np.bincount(cols.name[cols.status == STATUS_ERROR], minlength=n)
    stats = [SpanStat(cols.names[i], int(counts[i]), int(total[i]), int(own[i]), int(errors[i]))
             for i in np.flatnonzero(counts)]
    stats.sort(key=lambda s: (-s.total_ns, s.name))
    return stats[:MAX_NAMES]
