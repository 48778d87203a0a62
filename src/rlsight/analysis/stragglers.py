"""Stragglers: a rank whose span took far longer than its peers' in the same step.

For each step, span name and worker group, each rank's time is the sum of its spans of that
name in that step. A rank is a straggler when its time exceeds the group's median by more
than ``k`` median absolute deviations (MAD, robust to the straggler itself). The MAD is
floored at 5% of the median and at 1 microsecond: with near-identical peers the MAD is
scheduling jitter (3.9 ms on a 54 ms HTTP call flagged +7.3 MAD under a 1% floor, issue #9),
so with the default k = 3 a rank must be more than 15% slower than the median to be flagged.
Its extra time over the median must also reach 1% of the step's wall: a 0.1 ms allreduce that
took 0.8 ms on one rank in a 3 s step is jitter, not a straggler worth naming (a healthy run
read four such findings, which drowned the real one and filled `rlsight diff`'s rank rows).
A comparison needs at least three ranks and equal workloads (every rank's summed
``rl.batch_size`` equal, or none recorded); otherwise it reports *insufficient evidence*
instead of guessing. Two ranks give no verdict, but the report still says which one is slower
and by how much (:class:`RankPair`). Groups with a single rank over the whole run (the
driver) are not fleets and are not compared.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from rlsight.analysis._sorting import lexsort
from rlsight.analysis._steps import Steps
from rlsight.analysis._table import SpanTable
from rlsight.analysis.model import InsufficientEvidence, RankPair, Straggler, Stragglers

__all__ = ["DEFAULT_K", "MIN_RANKS", "stragglers"]

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]

#: Default threshold in MADs.
DEFAULT_K: Final = 3.0
#: Fewest ranks a comparison needs.
MIN_RANKS: Final = 3
#: The MAD floor, as a fraction of the median, and in nanoseconds.
_MAD_FLOOR: Final = 0.05
_MAD_FLOOR_NS: Final = 1000.0
#: Least extra time a straggler takes over the median, as a share of its step's wall.
_STEP_SHARE: Final = 0.01
_FEW_RANKS: Final = f"fewer than {MIN_RANKS} ranks"
_WORKLOADS_DIFFER: Final = "workloads differ (rl.batch_size)"


def _group_starts(*keys: I64) -> NDArray[np.bool_]:
    """True where a run of equal key tuples starts (keys already sorted)."""
    n = len(keys[0])
    new = np.zeros(n, dtype=bool)
    new[:1] = True
    for key in keys:
        new[1:] |= key[1:] != key[:-1]
    return new


def _medians(values: F64, starts: I64, sizes: I64) -> F64:
    """Median of each block ``values[starts[c]:starts[c]+sizes[c]]`` (blocks sorted)."""
    return np.asarray((values[starts + (sizes - 1) // 2] + values[starts + sizes // 2]) / 2.0,
                      dtype=np.float64)


def stragglers(table: SpanTable, steps: Steps, *, k: float = DEFAULT_K) -> Stragglers:
    """Find straggler ranks per (step, span name, worker group).

    Raises:
        ValueError: ``k`` is not positive.
    """
    if not k > 0:
        raise ValueError(f"straggler threshold k must be > 0 MADs, got {k!r}; the default is {DEFAULT_K}")
    cols = table.cols
    group_names = sorted({r.worker_group for r in table.ranks})
    gid = {g: i for i, g in enumerate(group_names)}
    proc_group = np.asarray([gid[r.worker_group] for r in table.ranks], dtype=np.int64)
    proc_rank = np.asarray([r.rank for r in table.ranks], dtype=np.int64)
    fleet = np.zeros(len(group_names), dtype=bool)
    for g in group_names:
        fleet[gid[g]] = len({r.rank for r in table.ranks if r.worker_group == g}) > 1
    if len(cols.start) == 0 or not fleet.any():
        return Stragglers(k, 0, [], [])
    group = proc_group[cols.process]
    sel = np.flatnonzero((steps.of_span >= 0) & fleet[group])
    row, name, grp = steps.of_span[sel], cols.name[sel], group[sel]
    rank = proc_rank[cols.process[sel]]
    dur = table.duration[sel]
    batch = cols.batch_size[sel]
    # Per (row, name, group, rank): summed duration and batch size (NaN if any is missing).
    order = lexsort((rank, grp, name, row))
    row, name, grp, rank = row[order], name[order], grp[order], rank[order]
    first = np.flatnonzero(_group_starts(row, name, grp, rank))
    dur = np.add.reduceat(dur[order], first)
    batch = np.add.reduceat(batch[order], first)
    row, name, grp, rank = row[first], name[first], grp[first], rank[first]
    # Per comparison (row, name, group): rank count and workload agreement.
    comp_first = np.flatnonzero(_group_starts(row, name, grp))
    sizes = np.diff(np.append(comp_first, len(row)))
    missing = np.add.reduceat(np.isnan(batch).astype(np.int64), comp_first)
    low = np.fmin.reduceat(batch, comp_first)
    high = np.fmax.reduceat(batch, comp_first)
    differ = ((missing > 0) & (missing < sizes)) | ((missing == 0) & (low != high))
    few = sizes < MIN_RANKS
    insufficient: dict[tuple[str, str, str], int] = {}
    for c in np.flatnonzero(few | differ):
        i = comp_first[c]
        key = (group_names[grp[i]], cols.names[name[i]], _FEW_RANKS if few[c] else _WORKLOADS_DIFFER)
        insufficient[key] = insufficient.get(key, 0) + 1
    pairs = _pairs(np.flatnonzero((sizes == 2) & ~differ), comp_first, name, grp, rank, dur,
                   [cols.names[i] for i in range(len(cols.names))], group_names)
    ok = np.flatnonzero(~(few | differ))
    findings: list[Straggler] = []
    if len(ok):
        comp_of = np.repeat(np.arange(len(comp_first)), sizes)
        take = np.flatnonzero(np.isin(comp_of, ok))
        comp_of, x = comp_of[take], dur[take].astype(np.float64)
        r_row, r_name, r_grp, r_rank, r_dur = row[take], name[take], grp[take], rank[take], dur[take]
        by_value = np.lexsort((x, comp_of))
        starts = np.searchsorted(comp_of[by_value], ok)
        med = _medians(x[by_value], starts, sizes[ok])
        med_of = np.empty(len(comp_first))
        med_of[ok] = med
        dev = np.abs(x - med_of[comp_of])
        by_dev = np.lexsort((dev, comp_of))
        mad = np.maximum(np.maximum(_medians(dev[by_dev], starts, sizes[ok]), _MAD_FLOOR * med),
                         _MAD_FLOOR_NS)
        mad_of = np.empty(len(comp_first))
        mad_of[ok] = mad
        excess = (x - med_of[comp_of]) / mad_of[comp_of]
        # A rank whose extra time is under 1% of its step's wall costs the step nothing worth
        # naming: a healthy demo run named four policy ranks for 0.7 ms allreduces in 3 s steps.
        material = (x - med_of[comp_of]) >= _STEP_SHARE * steps.wall[r_row]
        hit = np.flatnonzero((excess > k) & material)
        for i in hit:
            r = int(r_row[i])
            c = comp_of[i]
            findings.append(Straggler(
                step_index=r, step=int(steps.number[r]), worker_group=group_names[r_grp[i]],
                rank=int(r_rank[i]), name=cols.names[r_name[i]], duration_ns=int(r_dur[i]),
                median_ns=float(med_of[c]), mad_ns=float(mad_of[c]), excess_mads=float(excess[i]),
            ))
    findings.sort(key=lambda s: (s.step_index, s.worker_group, s.name, s.rank))
    return Stragglers(
        k=k,
        checks=len(ok),
        findings=findings,
        insufficient=[InsufficientEvidence(g, n, reason, steps_count)
                      for (g, n, reason), steps_count in sorted(insufficient.items())],
        pairs=pairs,
    )


def _pairs(
    comps: I64, comp_first: I64, name: I64, grp: I64, rank: I64, dur: I64,
    names: list[str], group_names: list[str],
) -> list[RankPair]:
    """Per (group, span name) compared by exactly two ranks: the slower rank and the gap."""
    by_key: dict[tuple[int, int, int, int], list[tuple[int, int]]] = {}
    for c in comps:
        i = int(comp_first[c])
        # Rows are sorted by rank within a comparison: (i, i + 1) is (lower, higher) rank.
        key = (int(grp[i]), int(name[i]), int(rank[i]), int(rank[i + 1]))
        by_key.setdefault(key, []).append((int(dur[i]), int(dur[i + 1])))
    out = []
    for (g, n, low, high), times in sorted(by_key.items()):
        a = np.asarray([t[0] for t in times], dtype=np.float64)
        b = np.asarray([t[1] for t in times], dtype=np.float64)
        # The slower rank is the one the paired (same-step) differences favour, so the gap
        # reported with it is never negative.
        if np.median(b - a) > 0:
            slow, fast, slower, faster = b, a, high, low
        else:
            slow, fast, slower, faster = a, b, low, high
        gap = float(np.median(slow - fast))
        base = float(np.median(fast))
        out.append(RankPair(
            worker_group=group_names[g], name=names[n], steps=len(times), slower_rank=slower,
            faster_rank=faster, slower_steps=int((slow > fast).sum()), median_gap_ns=gap,
            median_gap_pct=100.0 * gap / base if base > 0 else 0.0,
        ))
    return out
