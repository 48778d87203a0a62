"""Seconds per step of each span name: how long some span of that name was open in a step.

For each step and span name, the *union* of that name's spans attributed to the step, over
every timeline: eight ranks training in parallel for 4 s count 4 s, not 32 s, and a phase
that runs twice in a step counts both times. The distribution over the steps where the name
occurs (median, p90) is what ``rlsight diff`` compares between two runs, so a delay added to
one phase shows as that phase's change.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from rlsight._semconv import STEP_SPAN
from rlsight.analysis._intervals import covered_length
from rlsight.analysis._steps import Steps
from rlsight.analysis._table import SpanTable
from rlsight.analysis.model import SpanStepStat

__all__ = ["MAX_SPAN_STEP_NAMES", "span_steps"]

#: Most span names listed (largest total first); names carry no ids, so rarely reached.
MAX_SPAN_STEP_NAMES: Final = 200


def span_steps(table: SpanTable, steps: Steps) -> list[SpanStepStat]:
    """Per span name: steps it occurs in and the median / p90 of its seconds per step."""
    n_steps = len(steps)
    cols = table.cols
    step_name = table.name_id(STEP_SPAN)
    if not n_steps:
        return []
    sel = np.flatnonzero((steps.of_span >= 0) & (cols.name != step_name))
    if not len(sel):
        return []
    key = cols.name[sel] * n_steps + steps.of_span[sel]
    keys, cell = _unique_inverse(key, len(cols.names) * n_steps)
    covered = covered_length(cell, cols.start[sel], cols.end[sel], len(keys))
    cell_name = keys // n_steps
    # Each name's group: the rl.span_group of its first span that carries one.
    grouped = sel[cols.group[sel] != 0]
    named, first = _first_of_each(cols.name[grouped], len(cols.names))
    first_group = {int(n): cols.groups[int(g)]
                   for n, g in zip(named, cols.group[grouped[first]], strict=True)}
    order = np.argsort(cell_name, kind="stable")
    names, starts = np.unique(cell_name[order], return_index=True)
    out = []
    for name, values in zip(names.tolist(), np.split(covered[order], starts[1:]), strict=True):
        out.append(SpanStepStat(
            name=cols.names[name], group=first_group.get(name), steps_present=len(values),
            median_ns=float(np.median(values)), p90_ns=float(np.percentile(values, 90)),
            total_ns=int(values.sum()),
        ))
    out.sort(key=lambda s: (-s.total_ns, s.name))
    return out[:MAX_SPAN_STEP_NAMES]


def _unique_inverse(values: NDArray[np.int64], bound: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``np.unique(values, return_inverse=True)`` for values in ``[0, bound)``: by counting
    where the range is small (span names times steps: thousands of keys for a million spans),
    instead of sorting."""
    if bound > 4 * len(values) + 1024:
        keys, inverse = np.unique(values, return_inverse=True)
        return keys, inverse.astype(np.int64, copy=False)
    present = np.bincount(values, minlength=bound) > 0
    index = np.cumsum(present) - 1
    return np.flatnonzero(present), index[values]


def _first_of_each(values: NDArray[np.int64], bound: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``np.unique(values, return_index=True)`` for values in ``[0, bound)``: each distinct
    value and the index of its first occurrence, without sorting where the range is small."""
    if bound > 4 * len(values) + 1024:
        distinct, first = np.unique(values, return_index=True)
        return distinct, first
    first = np.full(bound, len(values), dtype=np.int64)
    np.minimum.at(first, values, np.arange(len(values)))
    distinct = np.flatnonzero(first < len(values))
    return distinct, first[distinct]
