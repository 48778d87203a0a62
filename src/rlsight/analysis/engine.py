"""Engine throughput per step, from the ``rl.engine.generation_tokens`` metric.

The engine readers record each step's generation-token delta as a counter point carrying
``rl.step`` and ``rl.engine.name``. With cumulative temporality (the OTel SDK default) every
export repeats a point's running total, and since each (step, engine) attribute set is added
to once, its last value is that step's delta; with delta temporality the points are summed.
Tokens per second divide by the wall time of the step with that number (the last attempt,
when a restart repeated it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from rlsight._semconv import SERVICE_INSTANCE_ID, STEP
from rlsight.analysis._steps import Steps
from rlsight.analysis._table import int_attribute
from rlsight.analysis.model import Engine, EngineStep
from rlsight.store import MetricPoint

__all__ = ["GENERATION_TOKENS", "engine_throughput"]

GENERATION_TOKENS: Final = "rl.engine.generation_tokens"
PREEMPTIONS: Final = "rl.engine.preemptions"
REQUEST_SUCCESS: Final = "rl.engine.request.success"
FINISH_REASON: Final = "rl.engine.finish_reason"
_DELTA: Final = 1


def _step_totals(
    points: Sequence[MetricPoint], name: str, label: str | None = None
) -> dict[tuple[int, str], float]:
    """``name``'s value per (step, ``label`` attribute value), over engines and processes.

    Delta points are summed; for cumulative ones the last point of each attribute set is that
    step's delta, since the readers add to a (step, engine) set once.
    """
    latest: dict[tuple[str, tuple[tuple[str, object], ...]], tuple[int, float]] = {}
    summed: dict[tuple[int, str], float] = {}
    for p in points:
        if p.name != name or p.value is None:
            continue
        step = int_attribute(p.attributes.get(STEP), None)
        if step is None:
            continue
        key_label = str(p.attributes.get(label, "")) if label else ""
        if p.temporality == _DELTA:
            summed[(step, key_label)] = summed.get((step, key_label), 0.0) + float(p.value)
            continue
        key = (str(p.resource.get(SERVICE_INSTANCE_ID, "")), tuple(sorted(p.attributes.items())))
        if key not in latest or p.time_ns >= latest[key][0]:
            latest[key] = (p.time_ns, float(p.value))
    for (_, attrs), (_, value) in latest.items():
        named = dict(attrs)
        step = int_attribute(named[STEP], None)
        assert step is not None
        key_label = str(named.get(label, "")) if label else ""
        summed[(step, key_label)] = summed.get((step, key_label), 0.0) + value
    return summed


def engine_throughput(points: Iterable[MetricPoint], steps: Steps) -> Engine | None:
    """Generation tokens and tokens/s per step, and request outcomes over the run; ``None``
    when the run recorded no generation tokens."""
    points = list(points)
    summed = {step: v for (step, _), v in _step_totals(points, GENERATION_TOKENS).items()}
    if not summed:
        return None
    row_of = {int(n): r for r, n in enumerate(steps.number)}  # last attempt wins
    wall = steps.wall
    out = []
    for step in sorted(summed):
        row = row_of.get(step)
        if row is None:
            continue
        seconds = int(wall[row]) / 1e9
        out.append(EngineStep(row, step, summed[step], summed[step] / seconds if seconds else 0.0))
    preempted = _step_totals(points, PREEMPTIONS)
    finished: dict[str, float] = {}
    for (_, reason), value in _step_totals(points, REQUEST_SUCCESS, FINISH_REASON).items():
        finished[reason or "unknown"] = finished.get(reason or "unknown", 0.0) + value
    return Engine(
        GENERATION_TOKENS, out,
        preemptions=sum(preempted.values()) if preempted else None,
        finished=dict(sorted(finished.items(), key=lambda kv: (-kv[1], kv[0]))),
    )
