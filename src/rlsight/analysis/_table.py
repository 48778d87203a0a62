"""The span table every analysis reads: canonical order, parents, depths, steps, timelines.

:class:`SpanTable` wraps the store's columns with what the trace tree implies. Spans are put
in one canonical order (timeline, start, longest first, trace id, span id) and deduplicated
by (trace id, span id), so every result is independent of the order spans had in the files.
Processes and traces are numbered in sorted order of their ids for the same reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

import numpy as np
from numpy.typing import NDArray

from rlsight._semconv import DEVICES, RANK, SERVICE_NAME, STEP_SPAN, WORKER_GROUP
from rlsight.analysis._order import canonical_order, renumber, reorder, timelines
from rlsight.analysis._sorting import lexsort
from rlsight.analysis.columns import SpanColumns
from rlsight.analysis.model import Timeline
from rlsight.store._schema import AttributeValue

__all__ = ["Rank", "SpanTable", "build_table", "int_attribute"]

I64 = NDArray[np.int64]
_D = TypeVar("_D")

#: Pointer-jumping rounds: enough for trees 2**48 deep; more means a parent cycle.
_MAX_JUMPS: Final = 48
#: 2**64 / golden ratio, odd: the multiplier of :class:`_IdIndex`'s hash.
_FIBONACCI: Final = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True, slots=True)
class Rank:
    """Who a process is: worker group and rank (``driver``/0 for the controller)."""

    worker_group: str
    rank: int
    devices: int


@dataclass(slots=True)
class SpanTable:
    """Columns in canonical order plus the derived per-span arrays.

    ``parent[i]`` is the index of span ``i``'s parent in this table, or -1 (a root, or a
    parent that is not in the store: an *orphan*). ``depth[i]`` counts ancestors in span
    ``i``'s own process: a parent in another process ends the count, so where a remote caller
    hangs a span in the trace (under the step, or under the job) never changes how its
    process's time is partitioned (issue #9); a missing parent counts as one, so an orphan is
    never mistaken for a root. ``step_anchor[i]`` is the nearest ``rl.step`` span among ``i``
    and all its ancestors (any process), or -1.
    """

    cols: SpanColumns
    timeline: I64
    timelines: list[Timeline]
    timeline_process: I64
    parent: I64
    depth: I64
    step_anchor: I64
    ranks: list[Rank]
    """One per process (index = process number)."""
    orphans: int
    cycles: int
    duplicates: int
    duration: I64
    """Span durations, clamped at zero for a span whose clock stepped backwards."""

    def __len__(self) -> int:
        return len(self.cols.start)


    def name_id(self, name: str) -> int:
        """Interned id of span name ``name``, or -1 if no span has it."""
        try:
            return self.cols.names.index(name)
        except ValueError:
            return -1

    def resource(self, process: int) -> Mapping[str, AttributeValue]:
        """Resource attributes of process ``process``."""
        return self.cols.resources[process]


def _rank_of(resource: Mapping[str, AttributeValue]) -> Rank:
    group = resource.get(WORKER_GROUP, resource.get(SERVICE_NAME, "unknown"))
    rank = int_attribute(resource.get(RANK), 0)
    return Rank(str(group), rank, max(0, int_attribute(resource.get(DEVICES), 1)))


def int_attribute(value: object, default: _D) -> int | _D:
    """An attribute read as an int (OTLP writes int64 as a decimal string); ``default`` when
    it is missing or not a number (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return default
    try:
        return int(value)
    except ValueError:
        return default


class _IdIndex:
    """Where each span id sits: a hash table of span indexes, and the few spans it cannot
    hold (two ids in one slot) sorted by id.

    Span ids are random 64-bit numbers (or counted up from 1 by a test's id generator):
    Fibonacci hashing (multiply by 2**64 / golden ratio, keep the top bits) spreads both over
    at least ``4 n`` slots, so about one span in eight shares its slot and goes to the sorted
    spill. A lookup is then one gather for most ids instead of a binary search each, whose
    mispredicted branches cost ~50 ns per id at any size.
    """

    __slots__ = ("_shift", "_slots", "_span_id", "repeats", "spill", "spill_ids")

    def __init__(self, span_id: NDArray[np.uint64]) -> None:
        n = len(span_id)
        bits = max(4 * n - 1, 1).bit_length()
        self._shift = np.uint64(64 - bits)
        self._span_id = span_id
        slot = self._slot(span_id)
        self._slots = np.full(1 << bits, -1, np.int64)
        every = np.arange(n)
        self._slots[slot] = every  # where ids share a slot, one of them keeps it
        holder = self._slots[slot]
        spill = (holder != every).nonzero()[0]
        self.spill = spill[span_id[spill].argsort(kind="stable")]
        self.spill_ids = span_id[self.spill]
        # Copies of one id share a slot: all but one are spilled and equal to the holder, or
        # all are spilled (another id holds the slot) and sit side by side in the spill.
        self.repeats = bool((span_id[holder[self.spill]] == self.spill_ids).any()
                            or (self.spill_ids[1:] == self.spill_ids[:-1]).any())

    def _slot(self, ids: NDArray[np.uint64]) -> I64:
        # uint64 products wrap (no overflow check on arrays): the hash is the low 64 bits;
        # shifted, it fits in int64 as it is.
        out: I64 = ((ids * _FIBONACCI) >> self._shift).view(np.int64)
        return out

    def find(self, ids: NDArray[np.uint64]) -> I64:
        """The index of the span with each of ``ids`` (unique span ids only), or -1."""
        if not len(self._span_id):
            return np.full(len(ids), -1, np.int64)
        cand = self._slots[self._slot(ids)]
        # An empty slot (-1) reads the last span's id, which cannot be the id looked up:
        # that id's slot would not be empty.
        found = self._span_id[cand] == ids
        if len(self.spill):
            miss = (~found).nonzero()[0]
            missed = ids[miss]
            at = np.minimum(np.searchsorted(self.spill_ids, missed), len(self.spill) - 1)
            hit = self.spill_ids[at] == missed
            cand[miss] = np.where(hit, self.spill[at], -1)
            return cand
        out: I64 = np.where(found, cand, -1)
        return out


def _find_parents(
    trace: I64, span_id: NDArray[np.uint64], parent_id: NDArray[np.uint64],
    has_parent_id: NDArray[np.bool_], by_id: _IdIndex | None, traces: int,
) -> tuple[I64, int]:
    """Index of each span's parent (same trace, matching span id), -1 where there is none;
    and the number of orphans (a parent id, no such parent).

    ``by_id`` indexes ``span_id`` when no id repeats, ``None`` when ids repeat; ``traces``
    is the number of traces (one: no trace check).
    """
    n = len(span_id)
    parent = np.full(n, -1, dtype=np.int64)
    has = has_parent_id.nonzero()[0]
    if n == 0 or len(has) == 0:
        return parent, 0
    target = parent_id[has]
    if by_id is not None:
        cand = by_id.find(target)
        if traces > 1:
            cand[trace[cand] != trace[has]] = -1
        parent[has] = cand
        return parent, len(has) - int(np.count_nonzero(cand >= 0))
    # Ids repeat across traces: a branchless binary search for the id inside each query's
    # trace block [lo, hi) of the (trace, id)-sorted order.
    order = lexsort((span_id, trace))
    sorted_trace, sorted_id = trace[order], span_id[order]
    lo = np.searchsorted(sorted_trace, trace[has], side="left")
    hi = np.searchsorted(sorted_trace, trace[has], side="right")
    pos = lo.copy()
    step = 1 << int(int((hi - lo).max()).bit_length())
    while step:
        probe = pos + step - 1
        ok = probe < hi
        ok[ok] = sorted_id[probe[ok]] < target[ok]
        pos[ok] += step
        step >>= 1
    found = pos < hi
    found[found] = sorted_id[pos[found]] == target[found]
    parent[has[found]] = order[pos[found]]
    return parent, len(has) - int(np.count_nonzero(found))


def _depths(
    parent: I64, has_parent_id: NDArray[np.bool_], marked: NDArray[np.bool_] | None = None,
) -> tuple[I64, I64, int, I64 | None]:
    """Depth of every span by pointer jumping; spans on a parent cycle become roots.

    With ``marked``, the same jumps also give :func:`nearest_marked` over the returned parents
    (one pass over the tree instead of two).
    """
    n = len(parent)
    # Whole-array jumps over the spans plus one sentinel (the last index, n, which -1 also
    # addresses: its own parent, depth 0, nothing marked) that every root points at; a jump
    # from the sentinel changes nothing, so no round needs to pick out the spans still
    # climbing, and the parents need no rewriting.
    depth = np.zeros(n + 1, np.int64)
    depth[:n] = has_parent_id
    nearest = None
    if marked is not None:
        nearest = np.full(n + 1, -1, np.int64)
        at = marked.nonzero()[0]
        nearest[at] = at
    nxt = np.empty(n + 1, np.int64)
    nxt[:n] = parent
    nxt[n] = -1
    for _ in range(_MAX_JUMPS):
        if nxt.max() < 0:
            return depth[:n], parent, 0, None if nearest is None else nearest[:n]
        depth += depth[nxt]
        if nearest is not None:
            mine = nearest
            nearest = nearest[nxt]
            np.copyto(nearest, mine, where=mine >= 0)
        nxt = nxt[nxt]
    cyclic = nxt[:n] >= 0
    parent = np.where(cyclic, -1, parent)
    depth, parent, _, found = _depths(parent, has_parent_id & ~cyclic, marked)
    return depth, parent, int(np.count_nonzero(cyclic)), found


def nearest_marked(parent: I64, marked: NDArray[np.bool_]) -> I64:
    """For each span, the nearest span among itself and its ancestors with ``marked``, or -1."""
    val = np.where(marked, np.arange(len(parent)), -1)
    nxt = parent.copy()
    for _ in range(_MAX_JUMPS):
        idx = np.flatnonzero((val < 0) & (nxt >= 0))
        if len(idx) == 0:
            break
        hop = nxt[idx]
        val[idx] = val[hop]
        nxt[idx] = nxt[hop]
    return val


def build_table(cols: SpanColumns) -> SpanTable:
    """Canonicalise ``cols`` and derive parents, depths, step anchors, timelines and ranks."""
    process, process_keys, key_order = renumber(cols.process, cols.process_keys)
    trace, traces, trace_order = renumber(cols.trace, cols.traces)
    if key_order is not None or trace_order is not None:
        resources = cols.resources if key_order is None else [cols.resources[i] for i in key_order]
        cols = dataclasses.replace(cols, process=process, process_keys=process_keys, trace=trace,
                                   traces=traces, resources=resources)
    timeline, tl_process, tl_thread = timelines(cols.process, cols.thread, len(process_keys))
    order = canonical_order(cols.start, cols.end, cols.trace, cols.span_id, timeline, len(tl_process),
                            len(traces))
    if order is not None:
        cols = reorder(cols, order)
        if len(tl_process) > 1:  # (one timeline: every span's is 0, in any order)
            timeline = timeline[order]
    # Deduplicate (trace, span id): keep the first in canonical order.
    # Span ids are random 64-bit numbers: when none repeats, no (trace, id) pair can, and
    # the parent search reuses the index of the ids.
    index = _IdIndex(cols.span_id)
    by_id: _IdIndex | None = index
    duplicates = 0
    if index.repeats:
        by_id = None
        dup = np.zeros(len(cols.start), dtype=bool)
        by_pair = lexsort((np.arange(len(cols.start)), cols.span_id, cols.trace))
        same = (cols.span_id[by_pair[1:]] == cols.span_id[by_pair[:-1]]) & (
            cols.trace[by_pair[1:]] == cols.trace[by_pair[:-1]])
        dup[by_pair[1:][same]] = True
        duplicates = int(dup.sum())
        if duplicates:
            keep = np.flatnonzero(~dup)
            cols = reorder(cols, keep)
            timeline = timeline[keep]
    has_parent_id = cols.parent_id != 0
    parent, orphans = _find_parents(cols.trace, cols.span_id, cols.parent_id, has_parent_id,
                                    by_id, len(traces))
    step_name = cols.names.index(STEP_SPAN) if STEP_SPAN in cols.names else -1
    depth, parent, cycles, anchor = _depths(parent, has_parent_id, cols.name == step_name)
    assert anchor is not None
    step_anchor = anchor
    # Depth stops at a process boundary: a remote parent makes the span a local root.
    remote = None
    if len(process_keys) > 1:  # one process has no remote parents
        remote = (parent >= 0) & (cols.process[np.maximum(parent, 0)] != cols.process)
        if not remote.any():
            remote = None
    if remote is not None:
        depth, _, _, _ = _depths(np.where(remote, -1, parent), has_parent_id & ~remote)
    elif cycles:  # the depths over the cycle-free tree
        depth, _, _, _ = _depths(parent, has_parent_id)
    return SpanTable(
        cols=cols,
        timeline=timeline,
        timelines=[Timeline(process_keys[p], t)
                   for p, t in zip(tl_process.tolist(), tl_thread.tolist(), strict=True)],
        timeline_process=tl_process,
        parent=parent,
        depth=depth,
        step_anchor=step_anchor,
        ranks=[_rank_of(r) for r in cols.resources],
        orphans=orphans,
        cycles=cycles,
        duplicates=duplicates,
        duration=np.maximum(cols.end - cols.start, 0),
    )
