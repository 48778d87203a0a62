"""Stragglers: a rank whose span took far longer than its peers' in the same step.

For each step, span name and worker group, each rank's time is the sum of its spans of that
name in that step. A rank is a straggler when its time exceeds the group's median by more
than ``k`` median absolute deviations (MAD, robust to the straggler itself). The MAD is
floored at 1% of the median and at 1 microsecond: with identical peers the MAD is zero, and
a rank a hair slower is not a straggler. A comparison needs at least three ranks and equal workloads
(every rank's summed ``rl.batch_size`` equal, or none recorded); otherwise it reports
*insufficient evidence* instead of guessing. Groups with a single rank over the whole run
(the driver) are not fleets and are not compared.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from rlsight.analysis._steps import Steps
from rlsight.analysis._table import SpanTable
from rlsight.analysis.model import InsufficientEvidence, Straggler, Stragglers

__all__ = ["DEFAULT_K", "MIN_RANKS", "stragglers"]

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]

#: Default threshold in MADs.
DEFAULT_K: Final = 3.0
#: Fewest ranks a comparison needs.
MIN_RANKS: Final = 3
#: The MAD floor, as a fraction of the median, and in nanoseconds.
_MAD_FLOOR: Final = 0.01
_MAD_FLOOR_NS: Final = 1000.0
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
    order = np.lexsort((rank, grp, name, row))
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
        hit = np.flatnonzero(excess > k)
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
    )
