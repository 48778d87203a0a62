"""Wasted work: time spent on results that were thrown away.

Two sources. Spans in the ``wasted`` bucket (``efficiency_span("wasted/stale_discard")``,
aborted rollouts): their partition time on every timeline (so nesting is never counted
twice) is summed per step, the step taken from each span's trace ancestry or time. And
restarts: when a step number repeats or goes backwards, the earlier attempts of those step
numbers were lost with the crashed process; those steps are *superseded*, and the run
partition counts their whole window as wasted.
"""

from __future__ import annotations

import numpy as np

from rlsight.analysis._steps import Steps
from rlsight.analysis._table import SpanTable
from rlsight.analysis.goodput import TimelinePartition
from rlsight.analysis.model import Wasted, WastedName
from rlsight.store._columnar import BUCKET_CODES

__all__ = ["wasted"]

_WASTED = BUCKET_CODES["wasted"]


def wasted(table: SpanTable, part: TimelinePartition, steps: Steps) -> Wasted:
    """Wasted partition time per step (all timelines), wasted spans by name, and restarts."""
    cols = table.cols
    seg = part.label == _WASTED
    row = steps.of_span[part.owner[seg]]
    length = part.cover.length[seg]
    by_step = np.zeros(len(steps), dtype=np.int64)
    np.add.at(by_step, row[row >= 0], length[row >= 0])
    spans = np.flatnonzero(cols.bucket == _WASTED)
    counts = np.bincount(cols.name[spans], minlength=len(cols.names))
    totals = np.zeros(len(cols.names), dtype=np.int64)
    np.add.at(totals, cols.name[spans], table.duration[spans])
    by_name = sorted(
        (WastedName(cols.names[i], int(counts[i]), int(totals[i])) for i in np.flatnonzero(counts)),
        key=lambda w: (-w.total_ns, w.name),
    )
    superseded = np.flatnonzero(steps.superseded)
    return Wasted(
        restarts=steps.restarts,
        superseded_steps=[int(i) for i in superseded],
        superseded_wall_ns=int(steps.wall[superseded].sum()),
        by_step_ns=[int(v) for v in by_step],
        by_name=by_name,
    )
