"""One step's goodput from the driver's live spans, by the offline rollup's own functions.

The driver hands over the spans of the step that just ended (its own timeline, plus the
ancestors that give them their depth) as :class:`~rlsight.analysis.columns.SpanColumns`; this
module runs the same table, step and partition code as ``rlsight report`` on them. There is
no second rollup: a step's buckets online are the report's buckets for that step whenever
the spans handed over are the ones the report sees inside the step's window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlsight.analysis._steps import find_steps
from rlsight.analysis._table import build_table
from rlsight.analysis.columns import SpanColumns
from rlsight.analysis.goodput import contributors, partition_timelines, step_buckets
from rlsight.analysis.model import Buckets, Contributor

__all__ = ["StepGoodput", "step_goodput"]


@dataclass(frozen=True, slots=True)
class StepGoodput:
    """One step's wall time partitioned on its timeline, and every name that decided it."""

    step: int
    buckets: Buckets
    contributors: list[Contributor]
    """Per bucket, every span name that decided time in the step, biggest first."""


def step_goodput(cols: SpanColumns, step_span_id: int) -> StepGoodput | None:
    """The rollup of the ``rl.step`` span with id ``step_span_id`` among ``cols``.

    Returns ``None`` when that span is not among the columns' step spans.
    """
    table = build_table(cols)
    steps = find_steps(table)
    rows = np.flatnonzero(table.cols.span_id[steps.span] == np.uint64(step_span_id))
    if not len(rows):
        return None
    row = int(rows[0])
    part = partition_timelines(table, steps)
    return StepGoodput(
        step=int(steps.number[row]),
        buckets=step_buckets(part, steps)[row],
        contributors=contributors(table, part, steps, top=None, rows=rows[:1]),
    )
