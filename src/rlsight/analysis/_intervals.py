"""Vectorised interval arithmetic: "which interval wins at each instant" and "how much is covered".

The rollup asks one question a million times: on this timeline, at this instant, which of the
active spans decides the bucket? A per-span Python sweep with a heap answers it at a few
microseconds per span; these numpy formulations answer it for every timeline at once.

:func:`max_cover` cuts each group's time axis at every interval end point (plus any extra
*marks*, such as step boundaries) into elementary segments, and finds for each segment the
covering interval with the highest priority. Each interval covers a contiguous run of segment
indexes ``[a, b)``; the maximum over covering intervals is an offline "range chmax, point query"
that a sparse table solves in ``O((n + m) log m)``: write every interval into the two
power-of-two blocks that tile its range, then push each level's block maxima down to the level
below. Ties between equal priorities go to the interval with the lowest index, so a caller
that orders intervals canonically gets results independent of input order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from rlsight.analysis._sorting import lexsort
from rlsight.analysis._sums import group_sums

__all__ = ["Cover", "covered_length", "max_cover"]

I64 = NDArray[np.int64]

_INDEX_BITS: Final = 40
_INDEX_MASK: Final = (1 << _INDEX_BITS) - 1
_MAX_PRIORITY: Final = (1 << (62 - _INDEX_BITS)) - 1


@dataclass(frozen=True, slots=True)
class Cover:
    """Elementary segments of every group and the interval that wins each of them.

    Segment ``k`` spans ``[start[k], end[k])`` of group ``group[k]``; ``winner[k]`` is the
    index of the winning interval, or -1 where no interval covers it. Segments of one group
    are contiguous and in time order; the last point of each group opens an empty segment
    (``start == end``), which keeps every mark addressable.
    """

    group: I64
    start: I64
    end: I64
    winner: I64
    marks: I64
    """Segment index of each mark point: the segment that starts at that mark."""

    def pick(self, values: I64, default: int = -1) -> I64:
        """``values[winner]`` for each segment, ``default`` where no interval covers it."""
        # One gather from the values with ``default`` after them, which a winner of -1 reads
        # (half the passes of a gather and a ``where``).
        ext = np.empty(len(values) + 1, np.int64)
        ext[:-1] = values
        ext[-1] = default
        out: I64 = ext[self.winner]
        return out

    @property
    def length(self) -> I64:
        """Length of each segment (0 for the empty closing segment of a group)."""
        return self.end - self.start


def _sort_points(groups: I64 | None, times: I64) -> tuple[I64, I64, I64]:
    """Unique (group, time) points in order, and each input point's index among them
    (``groups`` ``None``: every point is in group 0)."""
    if groups is None:
        first = last = 0
    else:
        first, last = int(groups.min()), int(groups.max())
    one = first == last
    if one:  # the time is the key (the driver's online rollup: one timeline)
        key = times
    else:
        assert groups is not None
        lo = int(times.min())
        width = int(times.max()) - lo + 1
        if (last + 1) * width >= 1 << 62:
            return _lexsort_points(groups, times)
        # One int64 key, group-major then time.
        key = groups * width + (times - lo)
    # Callers pass points in long sorted runs (spans in canonical order), which a stable sort
    # (timsort) merges far faster than lexsort.
    order = key.argsort(kind="stable")
    sorted_key = key[order]
    # The number of distinct points before each sorted point: its point's index.
    rank = np.empty(len(order), dtype=np.int64)
    rank[0] = 0
    np.not_equal(sorted_key[1:], sorted_key[:-1], out=rank[1:])
    rank = np.add.accumulate(rank)
    points = np.empty(int(rank[-1]) + 1, dtype=np.int64)
    points[rank] = sorted_key
    uid = np.empty(len(order), dtype=np.int64)
    uid[order] = rank
    if one:
        seg_group = np.zeros(len(points), np.int64) if first == 0 else np.full(
            len(points), first, np.int64)
        return seg_group, points, uid
    group_of, offset = np.divmod(points, width)
    return group_of, offset + lo, uid


def _lexsort_points(groups: I64, times: I64) -> tuple[I64, I64, I64]:
    """:func:`_sort_points` for times too far apart to pack with the group into an int64."""
    order = lexsort((times, groups))
    gs, ts = groups[order], times[order]
    new = np.empty(len(order), dtype=bool)
    new[:1] = True
    np.not_equal(gs[1:], gs[:-1], out=new[1:])
    new[1:] |= ts[1:] != ts[:-1]
    uid = np.empty(len(order), dtype=np.int64)
    uid[order] = np.cumsum(new) - 1
    return gs[new], ts[new], uid


#: Ranges covering at most this many positions in all are written position by position
#: (:func:`_range_max`): a few numpy calls instead of one pass per level of the sparse table.
_DIRECT_WRITES: Final = 1 << 16


def _range_max(size: int, lo: I64, hi: I64, values: I64) -> I64:
    """For each position in ``[0, size)``, the max of ``values[i]`` over ``lo[i] <= p < hi[i]``.

    Positions no range covers get -1. Requires ``hi > lo`` and ``values >= 0``. Where the
    ranges cover few positions in all (spans of one step: each position lies in a few nested
    spans), every covered position is written directly; else :func:`_sparse_range_max`.
    """
    if len(lo) == 0:
        return np.full(size, -1, dtype=np.int64)
    length = hi - lo
    ends = np.add.accumulate(length)
    writes = int(ends[-1])
    if writes > min(_DIRECT_WRITES, 2 * (len(lo) + size)):
        return _sparse_range_max(size, lo, hi, values, length)
    # Write k of range i (its position lo[i] + k) is write number ends[i] - length[i] + k.
    at = np.arange(writes) + (lo - (ends - length)).repeat(length)
    table = np.full(size, -1, dtype=np.int64)
    np.maximum.at(table, at, values.repeat(length))
    return table


def _sparse_range_max(size: int, lo: I64, hi: I64, values: I64, length: I64) -> I64:
    """:func:`_range_max` by a sparse table: each range written into the two power-of-two
    blocks that tile it, each level's blocks pushed down into the level below."""
    level = (np.frexp(length.astype(np.float64))[1] - 1).astype(np.int8)  # floor(log2(len))
    # The writes of every range, grouped by level: the blocks at lo and at hi - 2**level,
    # one block where the range's length is a power of two (most ranges: one segment).
    block = 1 << level.astype(np.int64)
    second = np.flatnonzero(length != block)
    level2 = np.concatenate((level, level[second]))
    order = np.argsort(level2, kind="stable")
    level_sorted = level2[order]
    at = np.concatenate((lo, hi[second] - block[second]))[order]
    vals = np.concatenate((values, values[second]))[order]
    top = int(level_sorted[-1])
    cuts = np.searchsorted(level_sorted, np.arange(top + 2)).tolist()
    table = np.full(size, -1, dtype=np.int64)
    for lvl in range(top, -1, -1):
        if lvl < top:  # the blocks of the level above, each pushed down into its two halves
            half = 1 << lvl
            above = table
            table = above.copy()
            np.maximum(table[half:], above[:-half], out=table[half:])
        a, b = cuts[lvl], cuts[lvl + 1]
        if b > a:
            np.maximum.at(table, at[a:b], vals[a:b])
    return table


def max_cover(
    group: I64 | None,
    start: I64,
    end: I64,
    priority: I64,
    mark_group: I64 | None = None,
    mark_time: I64 | None = None,
) -> Cover:
    """Split each group's time axis into segments and find the winning interval of each.

    Args:
        group: Group of each interval (a timeline, a rank); groups never interact.
            ``None``: one group, 0, for the intervals and the marks (``mark_group`` unused).
        start: Interval starts, integer nanoseconds.
        end: Interval ends; intervals with ``end <= start`` cover nothing.
        priority: Higher wins; equal priorities go to the lower interval index.
        mark_group: Group of each extra cut point (optional).
        mark_time: Time of each extra cut point; every mark becomes a segment boundary and
            :attr:`Cover.marks` gives its segment index, so sums over a window between two
            marks are differences of prefix sums.

    Raises:
        ValueError: a priority is negative or too large to pack with the interval index.
    """
    mt = np.zeros(0, np.int64) if mark_time is None else np.asarray(mark_time, np.int64)
    if len(priority) and (priority.min() < 0 or priority.max() > _MAX_PRIORITY):
        raise ValueError(
            f"interval priorities must lie in [0, {_MAX_PRIORITY}], got "
            f"[{priority.min()}, {priority.max()}]"
        )
    n = len(start)
    if n > _INDEX_MASK:
        raise ValueError(f"max_cover handles at most {_INDEX_MASK} intervals, got {n}")
    groups = None
    if group is not None:
        mg = np.zeros(0, np.int64) if mark_group is None else np.asarray(mark_group, np.int64)
        groups = np.concatenate((group, group, mg)).astype(np.int64, copy=False)
    times = np.concatenate((start, end, mt)).astype(np.int64, copy=False)
    if len(times) == 0:
        empty = np.zeros(0, np.int64)
        return Cover(empty, empty, empty, empty, empty)
    seg_group, seg_start, uid = _sort_points(groups, times)
    seg_end = np.empty_like(seg_start)  # a segment ends where the next of its group starts
    seg_end[:-1] = seg_start[1:]
    seg_end[-1] = seg_start[-1]
    if seg_group[0] != seg_group[-1]:  # the last point of each group closes it
        np.copyto(seg_end[:-1], seg_start[:-1], where=seg_group[1:] != seg_group[:-1])
    lo, hi = uid[:n], uid[n:2 * n]
    live = hi > lo
    # Each interval's priority above its index, complemented: the lower index wins a tie.
    packed = (priority.astype(np.int64) << _INDEX_BITS) | np.arange(_INDEX_MASK, _INDEX_MASK - n, -1)
    if not live.all():  # the caller usually kept only intervals that cover something
        lo, hi, packed = lo[live], hi[live], packed[live]
    best = _range_max(len(seg_start), lo, hi, packed)
    winner = np.where(best >= 0, _INDEX_MASK - (best & _INDEX_MASK), -1)
    return Cover(seg_group, seg_start, seg_end, winner, uid[2 * n:])


def covered_length(group: I64, start: I64, end: I64, groups: int) -> I64:
    """Length of the union of each group's intervals, for groups ``0 .. groups-1``.

    With each group's times shifted into a range of its own (one int64 key per start,
    group-major), the intervals in start order and a running maximum of their ends, each
    interval adds what it reaches past every earlier end; the sum per group is its union.
    That sorts the n starts only (a sweep over end points sorts 2n and sums with ``add.at``;
    half the time on a run's million spans). Keys too wide for an int64 take that sweep, in
    (group, time) order: +1 at a start, -1 at an end, every gap with intervals open counted.
    """
    out = np.zeros(groups, dtype=np.int64)
    keep = end > start
    if not keep.any():
        return out
    g, s, e = group[keep], start[keep], end[keep]
    lo, width = int(s.min()), int(e.max()) - int(s.min()) + 1
    if (int(g.max()) + 1) * width <= 1 << 62:
        base = g * width - lo
        first = base + s
        order = np.argsort(first)
        first, last, g = first[order], (base + e)[order], g[order]
        reach = np.empty_like(last)  # the furthest end before each interval; its start for the first
        reach[0] = first[0]
        np.maximum.accumulate(last[:-1], out=reach[1:])
        added = last - np.maximum(first, reach)
        np.maximum(added, 0, out=added)
        return group_sums(g, added, groups)
    n = len(g)
    gg = np.concatenate((g, g))
    tt = np.concatenate((s, e))
    delta = np.concatenate((np.ones(n, np.int64), -np.ones(n, np.int64)))
    order = lexsort((tt, gg))
    gg, tt, delta = gg[order], tt[order], delta[order]
    open_count = np.cumsum(delta)
    gap = tt[1:] - tt[:-1]
    counted = (open_count[:-1] > 0) & (gg[1:] == gg[:-1])
    np.add.at(out, gg[:-1][counted], gap[counted])
    return out
