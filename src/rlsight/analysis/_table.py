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
from rlsight.analysis._sorting import lexsort
from rlsight.analysis.columns import SpanColumns
from rlsight.analysis.model import Timeline
from rlsight.store._schema import AttributeValue

__all__ = ["Rank", "SpanTable", "build_table", "int_attribute"]

I64 = NDArray[np.int64]
_D = TypeVar("_D")

#: Pointer-jumping rounds: enough for trees 2**48 deep; more means a parent cycle.
_MAX_JUMPS: Final = 48


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


def _reorder(cols: SpanColumns, order: I64) -> SpanColumns:
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


def _renumber(values: I64, keys: list[str]) -> tuple[I64, list[str], list[int] | None]:
    """Renumber interned ids so that id order is the sorted order of their keys; the old id
    of each new one (``None``: the ids were in order already, ``values`` is returned as is)."""
    if len(keys) < 2:  # one process, one trace: nothing to renumber
        return values, keys, None
    order = sorted(range(len(keys)), key=keys.__getitem__)
    if order == list(range(len(keys))):  # already in sorted order
        return values, keys, None
    mapping = np.empty(len(keys), dtype=np.int64)
    mapping[np.asarray(order, dtype=np.int64)] = np.arange(len(keys))
    return (mapping[values] if len(values) else values), [keys[i] for i in order], order


def _find_parents(
    trace: I64, span_id: NDArray[np.uint64], parent_id: NDArray[np.uint64], by_id: I64 | None,
) -> I64:
    """Index of each span's parent (same trace, matching span id), -1 where there is none.

    ``by_id`` is the order of ``span_id`` when no id repeats, ``None`` when ids repeat.
    """
    n = len(span_id)
    parent = np.full(n, -1, dtype=np.int64)
    has = np.flatnonzero(parent_id != 0)
    if n == 0 or len(has) == 0:
        return parent
    target = parent_id[has]
    if by_id is not None:
        # Span ids are random 64-bit numbers, so they are unique in practice: one search on
        # the id, then check that the span found is in the same trace.
        cand = by_id[np.minimum(np.searchsorted(span_id[by_id], target), n - 1)]
        found = (span_id[cand] == target) & (trace[cand] == trace[has])
        parent[has[found]] = cand[found]
        return parent
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
    return parent


def _depths(
    parent: I64, has_parent_id: NDArray[np.bool_], marked: NDArray[np.bool_] | None = None,
) -> tuple[I64, I64, int, I64 | None]:
    """Depth of every span by pointer jumping; spans on a parent cycle become roots.

    With ``marked``, the same jumps also give :func:`nearest_marked` over the returned parents
    (one pass over the tree instead of two).
    """
    n = len(parent)
    # Whole-array jumps over the spans plus one sentinel (index n: its own parent, depth 0,
    # nothing marked) that every root points at; a jump from the sentinel changes nothing,
    # so no round needs to pick out the spans still climbing.
    depth = np.zeros(n + 1, np.int64)
    depth[:n] = has_parent_id
    nearest = None
    if marked is not None:
        nearest = np.full(n + 1, -1, np.int64)
        nearest[:n][marked] = np.flatnonzero(marked)
    nxt = np.empty(n + 1, np.int64)
    nxt[:n] = parent
    nxt[n] = n
    nxt[nxt < 0] = n
    for _ in range(_MAX_JUMPS):
        if (nxt == n).all():
            return depth[:n], parent, 0, None if nearest is None else nearest[:n]
        depth += depth[nxt]
        if nearest is not None:
            mine = nearest
            nearest = nearest[nxt]
            np.copyto(nearest, mine, where=mine >= 0)
        nxt = nxt[nxt]
    cyclic = nxt[:n] != n
    parent = np.where(cyclic, -1, parent)
    depth, parent, _, found = _depths(parent, has_parent_id & ~cyclic, marked)
    return depth, parent, int(cyclic.sum()), found


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


def _timelines(process: I64, thread: I64, processes: int) -> tuple[I64, I64, I64]:
    """Number the unique (process, thread) pairs in sorted order: per-span id, and the pairs."""
    if len(process) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    if processes == 1 and thread.min() == thread.max():  # one thread of one process
        return np.zeros(len(process), np.int64), process[:1].copy(), thread[:1].copy()
    order = lexsort((thread, process))
    p, t = process[order], thread[order]
    new = np.empty(len(order), dtype=bool)
    new[0] = True
    new[1:] = (p[1:] != p[:-1]) | (t[1:] != t[:-1])
    timeline = np.empty(len(order), dtype=np.int64)
    timeline[order] = np.cumsum(new) - 1
    return timeline, p[new], t[new]


def build_table(cols: SpanColumns) -> SpanTable:
    """Canonicalise ``cols`` and derive parents, depths, step anchors, timelines and ranks."""
    process, process_keys, key_order = _renumber(cols.process, cols.process_keys)
    trace, traces, trace_order = _renumber(cols.trace, cols.traces)
    if key_order is not None or trace_order is not None:
        resources = cols.resources if key_order is None else [cols.resources[i] for i in key_order]
        cols = dataclasses.replace(cols, process=process, process_keys=process_keys, trace=trace,
                                   traces=traces, resources=resources)
    timeline, tl_process, tl_thread = _timelines(cols.process, cols.thread, len(process_keys))
    order = lexsort((cols.span_id, cols.trace, -cols.end, cols.start, timeline))
    cols = _reorder(cols, order)
    timeline = timeline[order]
    # Deduplicate (trace, span id): keep the first in canonical order.
    # Span ids are random 64-bit numbers: when none repeats, no (trace, id) pair can, and
    # the parent search reuses the id order (unique ids: any sort gives the same one).
    by_id: I64 | None = np.argsort(cols.span_id)
    duplicates = 0
    if len(order) > 1:
        ids = cols.span_id[by_id]
        if (ids[1:] == ids[:-1]).any():
            by_id = None
            dup = np.zeros(len(order), dtype=bool)
            by_pair = lexsort((np.arange(len(order)), cols.span_id, cols.trace))
            same = (cols.span_id[by_pair[1:]] == cols.span_id[by_pair[:-1]]) & (
                cols.trace[by_pair[1:]] == cols.trace[by_pair[:-1]])
            dup[by_pair[1:][same]] = True
            duplicates = int(dup.sum())
            if duplicates:
                keep = np.flatnonzero(~dup)
                cols = _reorder(cols, keep)
                timeline = timeline[keep]
    parent = _find_parents(cols.trace, cols.span_id, cols.parent_id, by_id)
    has_parent_id = cols.parent_id != 0
    orphans = int((has_parent_id & (parent < 0)).sum())
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
        timelines=[Timeline(process_keys[int(p)], int(t))
                   for p, t in zip(tl_process, tl_thread, strict=True)],
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
