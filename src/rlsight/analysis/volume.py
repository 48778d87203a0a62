"""Span volume: spans per span group per step, and groups whose count scales with prompts.

The ``per_step`` preset promises a cost that grows with steps, never with dataset size, so
a group in it whose per-step span count follows prompts per step is a bug in the
instrumentation (it belongs under ``per_prompt_scope``). The prompts-per-step signal is the
``rl.prompts`` attribute on ``rl.step`` spans when the run records it, else the number of
``per_prompt`` spans in each step (emitted once per prompt, so proportional to prompts).

A group *scales with prompts* when, over at least three steps where the signal varies, its
count is not constant and its Pearson correlation with the signal is at least 0.9. With a
constant signal nothing can be told apart, and the verdict is ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np
from numpy.typing import NDArray

from rlsight._semconv import PROMPTS
from rlsight.analysis._steps import Steps
from rlsight.analysis._sums import group_counts
from rlsight.analysis._table import SpanTable
from rlsight.analysis.model import GroupVolume, Volume

__all__ = ["MIN_CORRELATION", "PER_PROMPT_GROUP", "volume"]

#: Correlation with prompts per step at or above which a group "scales with prompts".
MIN_CORRELATION: Final = 0.9
#: The span group whose spans are emitted once per prompt.
PER_PROMPT_GROUP: Final = "per_prompt"
_MIN_STEPS: Final = 3


def _correlations(counts: NDArray[np.float64], signal: NDArray[np.float64]) -> NDArray[np.float64]:
    """Pearson correlation of each row of ``counts`` with ``signal`` (0 for a constant row)."""
    c = counts - counts.mean(axis=1, keepdims=True)
    s = signal - signal.mean()
    denom = np.sqrt((c * c).sum(axis=1) * (s * s).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (c @ s) / denom
    return np.where(denom > 0, r, 0.0)


def volume(table: SpanTable, steps: Steps, per_step: Mapping[str, bool] | None,
           read: NDArray[np.bool_] | None = None) -> Volume:
    """Count spans per group per step and flag ``per_step`` groups that scale with prompts.

    Args:
        table: The run's spans.
        steps: Its steps (for the attribution of spans to steps).
        per_step: Registered group name -> whether it is in the ``per_step`` preset; groups
            missing from it (registered by a library this process did not import) get
            ``in_per_step=None`` and are never flagged.
        read: Per span of ``table``, whether a file held it (``None``: all did); the spans the
            report added (lost work) are not counted.
    """
    cols = table.cols
    n_steps, n_groups = len(steps), len(cols.groups)
    row = steps.of_span
    inside = row >= 0
    outside_mask = ~inside
    if read is not None:
        inside, outside_mask = inside & read, outside_mask & read
    counts = group_counts(cols.group[inside], row[inside], (n_groups, max(n_steps, 1)))[:, :n_steps]
    outside = np.bincount(cols.group[outside_mask], minlength=n_groups)
    prompts = cols.prompts[steps.span] if n_steps else np.zeros(0)
    signal_name = "none"
    signal = np.full(n_steps, np.nan)
    if n_steps and not np.isnan(prompts).all():
        signal_name, signal = PROMPTS, prompts.astype(np.float64)
    elif PER_PROMPT_GROUP in cols.groups and counts[cols.groups.index(PER_PROMPT_GROUP)].any():
        signal_name = "per_prompt spans"
        signal = counts[cols.groups.index(PER_PROMPT_GROUP)].astype(np.float64)
    usable = ~np.isnan(signal)
    informative = int(usable.sum()) >= _MIN_STEPS and np.ptp(signal[usable]) > 0 if usable.any() else False
    corr = (_correlations(counts[:, usable].astype(np.float64), signal[usable])
            if informative else np.zeros(n_groups))
    groups = []
    for g in sorted(range(n_groups), key=lambda i: cols.groups[i]):
        total = int(counts[g].sum()) + int(outside[g])
        if total == 0:
            continue
        name = cols.groups[g]
        per_step_counts = [int(v) for v in counts[g]]
        flat = n_steps == 0 or int(counts[g].min()) == int(counts[g].max())
        scales = (bool(not flat and corr[g] >= MIN_CORRELATION) if informative else None)
        in_per_step = None if per_step is None else per_step.get(name)
        groups.append(GroupVolume(
            group=name,
            in_per_step=in_per_step,
            spans=total,
            outside_steps=int(outside[g]),
            per_step=per_step_counts,
            flat=flat,
            scales_with_prompts=scales,
            correlation=float(corr[g]) if informative else None,
            flagged=bool(scales and in_per_step),
        ))
    return Volume(
        prompt_signal=signal_name,
        prompts_per_step=[None if np.isnan(v) else float(v) for v in signal],
        groups=groups,
    )
