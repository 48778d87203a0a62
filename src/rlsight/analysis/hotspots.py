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

__all__ = ["MAX_NAMES", "self_time", "top_spans"]

#: Most span names a report lists (names carry no ids, so this is rarely reached).
MAX_NAMES: Final = 200


def self_time(table: SpanTable) -> np.ndarray:
    """Per span: duration minus the union of its same-timeline children within it."""
    cols = table.cols
    child = np.flatnonzero(table.parent >= 0)
    parent = table.parent[child]
    child = child[table.timeline[parent] == table.timeline[child]]
    parent = table.parent[child]
    covered = covered_length(
        parent, np.maximum(cols.start[child], cols.start[parent]),
        np.minimum(cols.end[child], cols.end[parent]), len(table),
    )
    return table.duration - covered


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
