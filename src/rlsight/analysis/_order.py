"""The canonical order of span columns: timeline, start, longest first, trace id, span id.

:func:`rlsight.analysis._table.build_table` puts a run's spans in this order so that every
result is independent of the order the files held them in. Sorting and permuting a million
spans' columns costs the one process that analyses a noticeable share of a report, most of
it writing fresh memory; so each job of a read (:mod:`rlsight.analysis._read`, shared by two
processes) also puts its own file's spans in this order (:func:`sort_part`). The table then
finds the run in order already (:func:`canonical_order` returns ``None``) wherever no two
files hold the same timeline and the files are in the order of their processes' ids (the
store names files as it names processes), and sorts as ever otherwise: the order of the
parts changes how long the table takes, never what it holds.

Only numpy and the columns: the reading worker process imports this module.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from rlsight.analysis._sorting import lexsort, lexsort_ties
from rlsight.analysis.columns import SpanColumns
from rlsight.store._schema import AttributeValue

__all__ = ["canonical_order", "renumber", "reorder", "sort_part", "timelines"]

I64 = NDArray[np.int64]


def reorder(cols: SpanColumns, order: I64) -> SpanColumns:
    """``cols`` with its spans in ``order`` (a permutation, or the indexes of the spans to keep)."""
    kept: dict[int, Mapping[str, AttributeValue]] = {}
    if cols.kept_attributes:  # most runs keep no attributes: no inverse permutation to build
        inverse = np.full(len(cols.start), -1, dtype=np.int64)
        inverse[order] = np.arange(len(order))
        kept = {int(inverse[i]): a for i, a in cols.kept_attributes.items() if inverse[i] >= 0}
    return SpanColumns(
        start=cols.start[order], end=cols.end[order], trace=cols.trace[order],
        span_id=cols.span_id[order], parent_id=cols.parent_id[order], name=cols.name[order],
        group=cols.group[order], bucket=cols.bucket[order], concurrent=cols.concurrent[order],
        process=cols.process[order], thread=cols.thread[order], step_no=cols.step_no[order],
        batch_size=cols.batch_size[order], prompts=cols.prompts[order], status=cols.status[order],
        names=cols.names, groups=cols.groups, traces=cols.traces, resources=cols.resources,
        process_keys=cols.process_keys,
        kept_attributes=kept,
        source_file=cols.source_file[order], source_line=cols.source_line[order],
        source_slot=cols.source_slot[order], source_files=cols.source_files,
        invalid_buckets=cols.invalid_buckets,
    )


def _ranks(keys: list[str]) -> list[int] | None:
    """The old id of each new one when ids are renumbered in sorted order of ``keys``
    (``None``: they are in that order already)."""
    if len(keys) < 2 or all(map(operator.le, keys[:-1], keys[1:])):
        return None  # (checked first: about half the cost of sorting the positions)
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return None if order == list(range(len(keys))) else order


def renumber(values: I64, keys: list[str]) -> tuple[I64, list[str], list[int] | None]:
    """Renumber interned ids so that id order is the sorted order of their keys; the old id
    of each new one (``None``: the ids were in order already, ``values`` is returned as is)."""
    order = _ranks(keys)
    if order is None:
        return values, keys, None
    mapping = np.empty(len(keys), dtype=np.int64)
    mapping[np.asarray(order, dtype=np.int64)] = np.arange(len(keys))
    return (mapping[values] if len(values) else values), [keys[i] for i in order], order


def _non_decreasing(keys: Sequence[NDArray[np.integer]]) -> bool:
    """Whether the rows of ``keys`` (most significant first) are in lexicographic order."""
    primary = keys[0]
    if (primary[1:] < primary[:-1]).any():
        return False
    tied = np.flatnonzero(primary[1:] == primary[:-1])
    for key in keys[1:]:
        if not len(tied):
            return True
        a, b = key[tied], key[tied + 1]
        if (a > b).any():
            return False
        tied = tied[a == b]
    return True


def timelines(process: I64, thread: I64, processes: int) -> tuple[I64, I64, I64]:
    """Number the unique (process, thread) pairs in sorted order: per-span id, and the pairs."""
    if len(process) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    if processes == 1 and thread.min() == thread.max():  # one thread of one process
        return np.zeros(len(process), np.int64), process[:1].copy(), thread[:1].copy()
    if _non_decreasing((process, thread)):  # in order already (a sorted part, a sorted run)
        p, t = process, thread
        new = np.empty(len(p), dtype=bool)
        new[0] = True
        new[1:] = (p[1:] != p[:-1]) | (t[1:] != t[:-1])
        return np.cumsum(new) - 1, p[new], t[new]
    order = lexsort((thread, process))
    p, t = process[order], thread[order]
    new = np.empty(len(order), dtype=bool)
    new[0] = True
    new[1:] = (p[1:] != p[:-1]) | (t[1:] != t[:-1])
    timeline = np.empty(len(order), dtype=np.int64)
    timeline[order] = np.cumsum(new) - 1
    return timeline, p[new], t[new]


def canonical_order(
    start: I64, end: I64, trace: I64, span_id: NDArray[np.uint64], timeline: I64, timelines: int,
    traces: int,
) -> I64 | None:
    """The permutation into canonical order (timeline, start, longest first, trace, span id),
    or ``None`` where the spans are in it already (it is then the identity: the sort is stable).

    ``timeline`` and ``trace`` number timelines and traces in sorted order. Spans rarely start
    in the same nanosecond on one timeline, so (timeline, start) packed into one key decides
    the order; the other keys only break its ties, and a key that is the same for every span
    (one trace, one timeline) orders nothing.
    """
    ties = [span_id, *([trace] if traces > 1 else []), -end]
    if timelines <= 1:
        primary = start
    else:
        lo = int(start.min())
        width = int(start.max()) - lo + 1
        if timelines * width >= 1 << 62:  # times too far apart to pack with the timeline
            if _non_decreasing((timeline, start, *reversed(ties))):
                return None
            return lexsort((*ties, start, timeline))
        primary = timeline * width + (start - lo)
    if _non_decreasing((primary, *reversed(ties))):
        return None
    return lexsort_ties(primary, ties)  # (not in order: no second look at whether it is)


def sort_part(cols: SpanColumns) -> SpanColumns:
    """``cols`` (one file's spans, say) in canonical order; its ids stay as they are.

    Processes and traces are ranked by their ids as the table numbers them, so the spans of
    a part come in the order they take in the run's table.
    """
    n = len(cols.start)
    if n < 2:
        return cols
    process = renumber(cols.process, cols.process_keys)[0]
    trace = renumber(cols.trace, cols.traces)[0]
    timeline, tl_process, _ = timelines(process, cols.thread, len(cols.process_keys))
    permutation = canonical_order(cols.start, cols.end, trace, cols.span_id, timeline, len(tl_process),
                                  len(cols.traces))
    return cols if permutation is None else reorder(cols, permutation)
