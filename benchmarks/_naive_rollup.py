"""The rollup as a per-span Python loop: a heap sweep per timeline (the benchmark's baseline).

It answers the same question as :func:`rlsight.analysis.goodput.partition_timelines` plus
:func:`~rlsight.analysis.goodput.step_buckets` (deepest active bucketed span wins, equal depth
by bucket priority, concurrent spans ignored) and is checked against it before timing.
"""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict

from rlsight.analysis._steps import Steps
from rlsight.analysis._table import SpanTable


def naive_rollup(table: SpanTable, steps: Steps) -> tuple[list[list[int]], dict[int, list[int]]]:
    """Per-step bucket sums ([idle, overhead, wasted, productive] per step) and per-timeline totals."""
    cols = table.cols
    start, end = cols.start.tolist(), cols.end.tolist()
    bucket, concurrent = cols.bucket.tolist(), cols.concurrent.tolist()
    depth, timeline = table.depth.tolist(), table.timeline.tolist()
    events: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for i in range(len(start)):
        if bucket[i] < 0 or concurrent[i] or end[i] <= start[i]:
            continue
        events[timeline[i]].append((start[i], 1, i))
        events[timeline[i]].append((end[i], 0, i))
    segments: dict[int, list[tuple[int, int, int]]] = {}
    totals: dict[int, list[int]] = {}
    for tl, evs in events.items():
        evs.sort()
        heap: list[tuple[int, int]] = []
        alive: set[int] = set()
        out: list[tuple[int, int, int]] = []
        sums = [0, 0, 0, 0]
        prev = evs[0][0]
        for t, kind, i in evs:
            if t > prev:
                while heap and heap[0][1] not in alive:
                    heapq.heappop(heap)
                if heap:
                    b = bucket[heap[0][1]]
                    out.append((prev, t, b))
                    sums[b] += t - prev
            if kind:
                heapq.heappush(heap, (-(depth[i] * 4 + bucket[i]), i))
                alive.add(i)
            else:
                alive.discard(i)
            prev = t
        segments[tl] = out
        totals[tl] = sums
    per_step = []
    for row in range(len(steps)):
        sums = [0, 0, 0, 0]
        segs = segments.get(int(steps.timeline[row]), [])
        lo, hi = int(steps.start[row]), int(steps.end[row])
        k = bisect.bisect_left(segs, (lo, lo, -1))
        k = max(0, k - 1)
        while k < len(segs) and segs[k][0] < hi:
            a, b, bk = segs[k]
            overlap = min(b, hi) - max(a, lo)
            if overlap > 0:
                sums[bk] += overlap
            k += 1
        per_step.append(sums)
    return per_step, totals
