"""The goodput rollup: every second of every timeline assigned to at most one bucketed span.

Per timeline (one process, one thread), at every instant, the deepest active bucketed span
decides the bucket; depth is the span's depth in the trace tree, so an overhead span nested
in a productive one wins while it runs, and umbrella ancestors (no bucket) count towards
depth. Equal-depth overlap (concurrent tasks on one event loop) goes to productive, then
wasted, then overhead, then idle. Spans tagged ``rl.concurrent`` never take part. Time no
bucketed span covers is *unattributed*, so buckets plus unattributed equal wall time exactly.

The *controller* timelines are those holding ``rl.step`` spans. A step's buckets come from
its own timeline within its window. The run's buckets come from all controller timelines
over the run window (several when a restarted driver is a new process): at each instant the
best bucket any of them shows, with the window of a superseded step (re-run after a restart)
counted as wasted as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from rlsight.analysis._intervals import Cover, max_cover
from rlsight.analysis._steps import Steps
from rlsight.analysis._table import SpanTable
from rlsight.analysis.columns import BUCKET_CODES
from rlsight.analysis.model import (
    BUCKET_NAMES,
    Buckets,
    Contributor,
    Stat,
    StepSummary,
)

__all__ = [
    "RunPartition",
    "TimelinePartition",
    "buckets_from_sums",
    "combine_labels",
    "contributors",
    "label_sums",
    "partition_timelines",
    "run_partition",
    "step_buckets",
    "step_goodput_pct",
    "step_summary",
]

I64 = NDArray[np.int64]

#: Depth weighs more than any bucket priority, so a deeper span always wins.
_DEPTH_WEIGHT: Final = 4
_WASTED: Final = BUCKET_CODES["wasted"]
_PRODUCTIVE: Final = BUCKET_CODES["productive"]
_OVERHEAD: Final = BUCKET_CODES["overhead"]
_IDLE: Final = BUCKET_CODES["idle"]
#: Priority of a superseded step window in the run partition: above every bucket.
_SUPERSEDED: Final = len(BUCKET_CODES)
#: Each bucket code's name, and its place in BUCKET_NAMES (the order contributors are listed in).
_CODE_NAMES: Final = {code: name for name, code in BUCKET_CODES.items()}
_NAME_ORDER: Final = {BUCKET_CODES[name]: i for i, name in enumerate(BUCKET_NAMES)}


@dataclass(frozen=True, slots=True)
class TimelinePartition:
    """Every timeline cut into segments, each owned by one bucketed span or by none."""

    cover: Cover
    owner: I64
    """Table index of the span that decides each segment, or -1 (unattributed)."""
    label: I64
    """Bucket code of each segment (see ``BUCKET_CODES``), or -1."""
    step_lo: I64
    step_hi: I64
    """Segment range ``[step_lo[r], step_hi[r])`` of step row ``r`` on its own timeline."""


@dataclass(frozen=True, slots=True)
class RunPartition:
    """The run window on the controller timelines, as bucket sums."""

    buckets: Buckets
    start: int
    end: int


def partition_timelines(table: SpanTable, steps: Steps) -> TimelinePartition:
    """Partition every timeline; step windows become segment boundaries."""
    cols = table.cols
    take = (cols.bucket >= 0) & (cols.end > cols.start)
    if cols.concurrent.any():
        take &= ~cols.concurrent
    cand = take.nonzero()[0]
    bucket = cols.bucket[cand].astype(np.int64)
    one = len(table.timelines) <= 1  # one timeline (a driver's online rollup): no groups to sort
    cover = max_cover(
        None if one else table.timeline[cand], cols.start[cand], cols.end[cand],
        table.depth[cand] * _DEPTH_WEIGHT + bucket,
        None if one else np.concatenate((steps.timeline, steps.timeline)),
        np.concatenate((steps.start, steps.end)),
    )
    owner = cover.pick(cand)
    label = cover.pick(bucket)
    n = len(steps)
    return TimelinePartition(cover, owner, label, cover.marks[:n], cover.marks[n:])


def _prefix(values: I64) -> I64:
    out = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=out[1:])
    return out


def buckets_from_sums(sums: I64 | list[int], wall: int) -> Buckets:
    """:class:`Buckets` from per-code sums (idle, overhead, wasted, productive) and the wall."""
    by_code = [int(v) for v in sums]
    return Buckets(
        productive_ns=by_code[_PRODUCTIVE], overhead_ns=by_code[_OVERHEAD],
        idle_ns=by_code[_IDLE], wasted_ns=by_code[_WASTED],
        unattributed_ns=wall - sum(by_code), wall_ns=wall,
    )


def _window_segments(part: TimelinePartition, chosen: I64) -> tuple[I64 | slice, I64 | None]:
    """The segments inside the windows of step rows ``chosen`` on their own timelines, and
    the position in ``chosen`` of the step each belongs to; one step (the driver's online
    rollup) gives a slice of them and ``None``."""
    lo, hi = part.step_lo[chosen], part.step_hi[chosen]
    if len(chosen) == 1:
        return slice(int(lo[0]), int(hi[0])), None
    counts = hi - lo
    at = np.repeat(np.arange(len(chosen)), counts)
    return np.repeat(lo - _prefix(counts)[:-1], counts) + np.arange(len(at)), at


def step_buckets(part: TimelinePartition, steps: Steps, rows: I64 | None = None) -> list[Buckets]:
    """Each step's window partitioned on its own timeline (``rows``: those step rows only)."""
    chosen = np.arange(len(steps)) if rows is None else np.asarray(rows, dtype=np.int64)
    seg, at = _window_segments(part, chosen)
    label = part.label[seg]
    length = part.cover.end[seg] - part.cover.start[seg]
    # One slot per bucket code and a last one per step for unattributed segments (label -1:
    # step r's -1 lands in the last slot of step r - 1, the first step's in the very last).
    width = len(BUCKET_CODES) + 1
    sums = np.zeros(len(chosen) * width, dtype=np.int64)
    np.add.at(sums, label if at is None else at * width + label, length)
    wall = steps.wall[chosen].tolist()
    by_row = sums.tolist()
    return [buckets_from_sums(by_row[i * width:(i + 1) * width - 1], wall[i])
            for i in range(len(chosen))]


def combine_labels(
    group: I64, start: I64, end: I64, label: I64, windows: tuple[I64, I64, I64] | None,
    mark_group: I64, mark_time: I64,
) -> tuple[Cover, I64]:
    """Overlay labelled segments of several timelines: the best bucket at each instant wins.

    ``windows`` (group, start, end) are extra intervals that override every bucket and count
    as wasted (superseded steps). Returns the cover and each of its segments' label.
    """
    keep = label >= 0
    g, s, e, lab = group[keep], start[keep], end[keep], label[keep]
    if windows is not None:
        wg, ws, we = windows
        g = np.concatenate((g, wg))
        s = np.concatenate((s, ws))
        e = np.concatenate((e, we))
        lab = np.concatenate((lab, np.full(len(wg), _SUPERSEDED, dtype=np.int64)))
    cover = max_cover(g, s, e, lab, mark_group, mark_time)
    out = cover.pick(lab)
    return cover, np.where(out == _SUPERSEDED, _WASTED, out)


def label_sums(cover: Cover, label: I64, groups: int) -> NDArray[np.int64]:
    """Nanoseconds per (group, bucket code), shape ``(groups, 4)``."""
    codes = len(BUCKET_CODES)
    out = np.zeros(groups * codes, dtype=np.int64)
    keep = label >= 0
    # One flat index: ``add.at`` with a tuple of index arrays is ~4x slower (numpy 2.4).
    np.add.at(out, cover.group[keep] * codes + label[keep], cover.length[keep])
    return out.reshape(groups, codes)


def run_partition(
    table: SpanTable, part: TimelinePartition, steps: Steps, controllers: I64,
) -> RunPartition:
    """The run window on the controller timelines (superseded steps count as wasted)."""
    cols = table.cols
    start = int(cols.start.min()) if len(cols.start) else 0
    end = int(max(cols.end.max(), start)) if len(cols.end) else 0
    seg = part.cover
    on_ctl = np.isin(seg.group, controllers)
    sup = steps.superseded
    zeros = np.zeros(int(sup.sum()), dtype=np.int64)
    cover, label = combine_labels(
        np.zeros(int(on_ctl.sum()), np.int64), seg.start[on_ctl], seg.end[on_ctl],
        part.label[on_ctl], (zeros, steps.start[sup], steps.end[sup]),
        np.zeros(2, np.int64), np.asarray([start, end], np.int64),
    )
    sums = label_sums(cover, label, 1)[0]
    return RunPartition(buckets_from_sums(sums, end - start), start, end)


def contributors(
    table: SpanTable, part: TimelinePartition, steps: Steps, *, top: int | None = 5,
    rows: I64 | None = None,
) -> list[Contributor]:
    """Per bucket, the span names that decided the most controller time inside steps.

    ``top`` keeps that many names per bucket (``None``: all); ``rows`` restricts the count to
    those step rows (the driver's online rollup asks for the step that just ended).
    """
    chosen = np.arange(len(steps)) if rows is None else np.asarray(rows, dtype=np.int64)
    seg, at = _window_segments(part, chosen)
    owner = part.owner[seg]
    if not len(owner):
        return []
    names = table.cols.names
    n_names = len(names)
    codes = len(BUCKET_CODES)
    # A segment nobody owns has label -1 (and reads the last span's name): its key is
    # negative and lands in the last block of ``attributed``, which is never read.
    key = part.label[seg] * n_names + table.cols.name[owner]
    attributed = np.zeros((codes + 1) * n_names, dtype=np.int64)
    np.add.at(attributed, key, part.cover.end[seg] - part.cover.start[seg])
    totals = attributed[:codes * n_names].tolist()
    nonzero = [k for k, total in enumerate(totals) if total]
    if at is None:  # one step: each name that decided time decided it in that step
        steps_present = dict.fromkeys(nonzero, 1)
    else:  # the number of distinct steps of each (bucket, name)
        keep = owner >= 0
        pairs = np.sort(key[keep] * max(len(steps), 1) + chosen[at[keep]])
        first = np.ones(len(pairs), dtype=bool)  # the first of each run of equal pairs
        np.not_equal(pairs[1:], pairs[:-1], out=first[1:])
        present = np.bincount(pairs[first] // max(len(steps), 1), minlength=len(attributed))
        steps_present = dict(enumerate(present.tolist()))
    # Buckets in BUCKET_NAMES order; in each, the most time first, ties by name (one sort).
    ranked = sorted(nonzero, key=lambda k: (_NAME_ORDER[k // n_names], -totals[k],
                                            names[k % n_names]))
    out: list[Contributor] = []
    kept = dict.fromkeys(BUCKET_NAMES, 0)
    for k in ranked:
        bucket = _CODE_NAMES[k // n_names]
        if top is None or kept[bucket] < top:
            kept[bucket] += 1
            out.append(Contributor(names[k % n_names], bucket, totals[k], steps_present[k]))
    return out


def _stat(values: NDArray[np.int64]) -> Stat:
    return Stat(float(np.median(values)), float(np.percentile(values, 90)))


def step_summary(buckets: list[Buckets]) -> StepSummary | None:
    """Median and p90 over steps of each bucket, unattributed time and wall time."""
    if not buckets:
        return None

    def col(field: str) -> NDArray[np.int64]:
        return np.asarray([getattr(b, field) for b in buckets], dtype=np.int64)

    return StepSummary(
        productive=_stat(col("productive_ns")), overhead=_stat(col("overhead_ns")),
        idle=_stat(col("idle_ns")), wasted=_stat(col("wasted_ns")),
        unattributed=_stat(col("unattributed_ns")), wall=_stat(col("wall_ns")),
    )


def step_goodput_pct(buckets: list[Buckets], superseded: NDArray[np.bool_]) -> float:
    """100 * productive time of steps that were kept / wall time of all steps."""
    wall = sum(b.wall_ns for b in buckets)
    productive = sum(b.productive_ns for b, s in zip(buckets, superseded, strict=True) if not s)
    return 100.0 * productive / wall if wall else 0.0

