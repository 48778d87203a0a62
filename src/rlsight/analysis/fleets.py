"""Fleets: how busy each worker group and rank was over the run.

A rank (``rl.worker_group``, ``rl.rank``) may run several timelines: threads, or a new
process after a restart. Each timeline is partitioned as in the goodput rollup; the rank's
label at an instant is the best bucket any of its timelines shows (productive > wasted >
overhead > idle), so a rank computing on one thread while another thread waits counts as
computing. Busy means productive, overhead or wasted: the rank was doing work, useful or not.
Utilisation is busy time over the run wall, i.e. the union of its busy intervals over wall.
A group's figures are means over its ranks weighted by ``rl.devices`` (default 1), because a
rank driving eight GPUs idles eight GPUs.
"""

from __future__ import annotations

import numpy as np

from rlsight.analysis._table import SpanTable
from rlsight.analysis.columns import BUCKET_CODES
from rlsight.analysis.goodput import (
    RunPartition,
    TimelinePartition,
    buckets_from_sums,
    combine_labels,
    label_sums,
)
from rlsight.analysis.model import FleetGroup, Fleets, RankUsage

__all__ = ["fleets"]


def fleets(table: SpanTable, part: TimelinePartition, run: RunPartition) -> Fleets:
    """Per-rank partitions of the run window and device-weighted group means."""
    wall = run.end - run.start
    keys = sorted({(r.worker_group, r.rank) for r in table.ranks})
    index = {k: i for i, k in enumerate(keys)}
    process_rank = np.asarray([index[(r.worker_group, r.rank)] for r in table.ranks], dtype=np.int64)
    devices = np.zeros(len(keys), dtype=np.int64)
    for r in table.ranks:
        i = index[(r.worker_group, r.rank)]
        devices[i] = max(devices[i], r.devices)
    if not keys:
        return Fleets(wall, [], [])
    timeline_rank = process_rank[table.timeline_process]
    timelines = np.bincount(timeline_rank, minlength=len(keys))
    seg = part.cover
    labelled = part.label >= 0
    seg_rank = timeline_rank[seg.group]
    # A rank whose labelled segments all lie on one timeline needs no overlay: its segments
    # are already disjoint. Only ranks busy on several timelines go through combine_labels.
    busy_timelines = np.zeros(len(table.timelines), dtype=bool)
    busy_timelines[seg.group[labelled]] = True
    multi = np.bincount(timeline_rank[busy_timelines], minlength=len(keys)) > 1
    direct = labelled & ~multi[seg_rank]
    codes = len(BUCKET_CODES)
    flat = np.zeros(len(keys) * codes, dtype=np.int64)
    # One flat index: ``add.at`` with a tuple of index arrays is ~4x slower (numpy 2.4).
    np.add.at(flat, seg_rank[direct] * codes + part.label[direct], seg.length[direct])
    sums = flat.reshape(len(keys), codes)
    overlay = labelled & multi[seg_rank]
    if overlay.any():
        ranks = np.flatnonzero(multi)
        cover, label = combine_labels(
            seg_rank[overlay], seg.start[overlay], seg.end[overlay], part.label[overlay], None,
            np.concatenate((ranks, ranks)),
            np.concatenate((np.full(len(ranks), run.start), np.full(len(ranks), run.end))),
        )
        sums += label_sums(cover, label, len(keys))
    usage = []
    for i, (group, rank) in enumerate(keys):
        buckets = buckets_from_sums(sums[i], wall)
        busy = buckets.productive_ns + buckets.overhead_ns + buckets.wasted_ns
        usage.append(RankUsage(group, rank, int(devices[i]), int(timelines[i]), buckets,
                               busy / wall if wall else 0.0))
    return Fleets(wall, _groups(usage), usage)


def _groups(usage: list[RankUsage]) -> list[FleetGroup]:
    out = []
    for name in sorted({u.worker_group for u in usage}):
        members = [u for u in usage if u.worker_group == name]
        weights = np.asarray([u.devices for u in members], dtype=np.float64)
        if weights.sum() == 0:  # every rank declared rl.devices=0: fall back to equal weights
            weights = np.ones(len(members))

        def mean(values: list[float], w: np.ndarray = weights) -> float:
            return float(np.dot(w, np.asarray(values)) / w.sum())

        out.append(FleetGroup(
            worker_group=name,
            ranks=len(members),
            devices=sum(u.devices for u in members),
            utilisation=mean([u.utilisation for u in members]),
            productive=mean([u.buckets.fraction("productive") for u in members]),
            overhead=mean([u.buckets.fraction("overhead") for u in members]),
            wasted=mean([u.buckets.fraction("wasted") for u in members]),
            idle=mean([u.buckets.fraction("idle") for u in members]),
            unattributed=mean([u.buckets.fraction("unattributed") for u in members]),
        ))
    return out
