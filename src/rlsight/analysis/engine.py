"""Engine throughput per step, from the ``rl.engine.generation_tokens`` metric.

The engine readers record each step's generation-token delta as a counter point carrying
``rl.step`` and ``rl.engine.name``. With cumulative temporality (the OTel SDK default) every
export repeats a point's running total, and since each (step, engine) attribute set is added
to once, its last value is that step's delta; with delta temporality the points are summed.
Tokens per second divide by the wall time of the step with that number (the last attempt,
when a restart repeated it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from rlsight.analysis._steps import Steps
from rlsight.analysis.model import Engine, EngineStep
from rlsight.store import MetricPoint

__all__ = ["GENERATION_TOKENS", "engine_throughput"]

GENERATION_TOKENS: Final = "rl.engine.generation_tokens"
_DELTA: Final = 1


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def engine_throughput(points: Iterable[MetricPoint], steps: Steps) -> Engine | None:
    """Generation tokens and tokens/s per step, or ``None`` when the run recorded none."""
    latest: dict[tuple[str, tuple[tuple[str, object], ...]], tuple[int, float]] = {}
    summed: dict[int, float] = {}
    for p in points:
        if p.name != GENERATION_TOKENS or p.value is None:
            continue
        step = _int(p.attributes.get("rl.step"))
        if step is None:
            continue
        if p.temporality == _DELTA:
            summed[step] = summed.get(step, 0.0) + float(p.value)
            continue
        key = (str(p.resource.get("service.instance.id", "")), tuple(sorted(p.attributes.items())))
        if key not in latest or p.time_ns >= latest[key][0]:
            latest[key] = (p.time_ns, float(p.value))
    for (_, attrs), (_, value) in latest.items():
        step = _int(dict(attrs)["rl.step"])
        assert step is not None
        summed[step] = summed.get(step, 0.0) + value
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
    return Engine(GENERATION_TOKENS, out)
