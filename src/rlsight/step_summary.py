"""The driver's per-step goodput, as a flat dict for the trainer's logger and as metrics.

As each ``rl.step`` span ends in the process that called :func:`rlsight.setup_telemetry`,
rlsight partitions that step's wall time by the rule ``rlsight report`` uses (the same
functions, run on the step's own spans; see ``docs/goodput.md``) and keeps the result.
:func:`last_step_summary` hands it over as ``{"rlsight/goodput_pct": 61.4, ...}``, ready for
``wandb.log``, a TensorBoard writer or ``mlflow.log_metrics`` beside the trainer's scalars,
and the same numbers are recorded on the ``rl.goodput.*`` metrics (local store, OTLP and the
Prometheus endpoint).

This module stays light (no numpy): the rollup itself is imported when the first step ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

from rlsight.runtime import active_runtime

if TYPE_CHECKING:
    from rlsight.analysis.model import Contributor

__all__ = [
    "CONTRIBUTOR_BUCKETS",
    "GOODPUT_CONTRIBUTOR_SECONDS",
    "GOODPUT_PCT",
    "GOODPUT_SECONDS",
    "PROCESS_SECONDS",
    "SUMMARY_BUCKETS",
    "SUMMARY_PREFIX",
    "contributor_key",
    "last_step_summary",
    "summary_dict",
]

#: Every key of the summary starts with this, so it sits in one section of a W&B workspace.
SUMMARY_PREFIX: Final = "rlsight/"
#: The parts of a step's wall time, each a ``rlsight/<part>_s`` key.
SUMMARY_BUCKETS: Final = ("productive", "overhead", "idle", "wasted", "unattributed")
#: Buckets whose contributors get keys of their own (``rlsight/idle/buffer_starvation_s``).
CONTRIBUTOR_BUCKETS: Final = ("idle", "overhead", "wasted")

#: Seconds of each step in each bucket (``rl.bucket``, ``unattributed`` included) (counter).
GOODPUT_SECONDS: Final = "rl.goodput.seconds"
#: The step's productive share of its wall time, in percent (gauge).
GOODPUT_PCT: Final = "rl.goodput.pct"
#: Seconds of each step a span name decided, by ``rl.bucket`` and ``rl.contributor`` (counter).
GOODPUT_CONTRIBUTOR_SECONDS: Final = "rl.goodput.contributor.seconds"
#: Seconds of each process's wall time in each bucket, by its own spans (counter), with
#: ``rl.bucket``, ``rl.worker_group`` and ``rl.rank``: live fleet utilisation.
PROCESS_SECONDS: Final = "rl.goodput.process.seconds"
#: Metric attribute of the goodput metrics (besides ``rl.step`` and ``rl.bucket``).
CONTRIBUTOR_ATTRIBUTE: Final = "rl.contributor"


def contributor_key(bucket: str, label: str) -> str:
    """The summary key of a contributor: ``rlsight/idle/buffer_starvation_s`` for an efficiency
    category, ``rlsight/overhead/rl.refit.push_weights_s`` for any other span name."""
    if label.startswith(bucket + "/"):
        return f"{SUMMARY_PREFIX}{label}_s"
    return f"{SUMMARY_PREFIX}{bucket}/{label}_s"


def summary_dict(
    step: int, nanoseconds: Mapping[str, int], contributors: Iterable[Contributor],
) -> dict[str, float]:
    """The flat summary of one step from its bucket nanoseconds (keys of
    :data:`SUMMARY_BUCKETS`); see :func:`last_step_summary` for the keys."""
    from rlsight.analysis.model import span_label

    wall = sum(nanoseconds[b] for b in SUMMARY_BUCKETS)
    out: dict[str, float] = {
        f"{SUMMARY_PREFIX}step": float(step),
        f"{SUMMARY_PREFIX}wall_s": wall / 1e9,
        f"{SUMMARY_PREFIX}goodput_pct": 100.0 * nanoseconds["productive"] / wall if wall else 0.0,
    }
    for bucket in SUMMARY_BUCKETS:
        out[f"{SUMMARY_PREFIX}{bucket}_s"] = nanoseconds[bucket] / 1e9
    for c in contributors:
        if c.bucket in CONTRIBUTOR_BUCKETS:
            out[contributor_key(c.bucket, span_label(c.name))] = c.attributed_ns / 1e9
    return out


def last_step_summary() -> dict[str, float]:
    """The goodput of the last ``rl.step`` that ended in this process, as a flat dict of floats.

    Call it after the step's ``with step_span(...)`` block and log it beside the trainer's
    own scalars (``wandb.log({**metrics, **rlsight.last_step_summary()}, step=step)``).

    Keys (stable; seconds end in ``_s``):

    - ``rlsight/step``: the step number the values belong to.
    - ``rlsight/wall_s`` and ``rlsight/goodput_pct`` (100 * productive / wall).
    - ``rlsight/productive_s``, ``rlsight/overhead_s``, ``rlsight/idle_s``,
      ``rlsight/wasted_s``, ``rlsight/unattributed_s``: they add up to ``rlsight/wall_s``.
    - ``rlsight/<bucket>/<contributor>_s`` for every span name that decided idle, overhead
      or wasted time in the step: ``rlsight/idle/buffer_starvation_s`` for an efficiency
      category, ``rlsight/overhead/rl.refit.push_weights_s`` for another span. A contributor
      absent from a step has no key in that step's dict (a gap, not a 0).

    Returns an empty dict before the first step ends, without telemetry, in a worker (only
    the process that called :func:`rlsight.setup_telemetry` rolls steps up), when the
    ``step`` span group is off, or without numpy (the ``analysis`` extra; setup warns).
    """
    runtime = active_runtime()
    if runtime is None:
        return {}
    return dict(runtime.last_step_summary)
