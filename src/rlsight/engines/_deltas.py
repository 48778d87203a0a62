"""Engine values and the delta maths: what happened between two cumulative snapshots.

A counter or histogram that went down was reset (its delta is the new value, with one
warning); a gauge is a level read at the step's end; series of several engines behind one
reader are summed (or maxed, per the spec), and histograms bucketed differently are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

from rlsight.engines._vocabulary import SPECS, EngineSeriesSpec
from rlsight.errors import warn_once

__all__ = [
    "EngineDeltas",
    "EngineHistogram",
    "EngineSeries",
    "EngineSnapshot",
    "EngineValue",
    "SourceSeries",
    "snapshot_delta",
]


class EngineSeries(NamedTuple):
    """Key of one delta: a vocabulary name plus its kept attributes (sorted pairs)."""

    name: str
    attributes: tuple[tuple[str, str], ...] = ()


class SourceSeries(NamedTuple):
    """Key of one snapshot value: the delta key, the engine series read, all its labels."""

    series: EngineSeries
    source: str
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class EngineHistogram:
    """A histogram's state: bucket counts (not cumulative), sum and count.

    ``counts`` has one entry per bound plus a last one for observations above every bound
    (OTel's explicit-bucket layout); ``counts[i]`` counts values ``<= bounds[i]`` and above
    the bound before it.
    """

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float
    count: float


EngineValue: TypeAlias = float | EngineHistogram
EngineDeltas: TypeAlias = dict[EngineSeries, EngineValue]


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """Cumulative values of one read, per engine series (labels kept, nothing summed yet)."""

    values: Mapping[SourceSeries, EngineValue]


def _warn_reset(key: SourceSeries, before: float, after: float) -> None:
    warn_once(
        f"rlsight.engines.reset:{key.source}",
        f"engine series {key.source!r} went down ({before:g} -> {after:g}): treated as a reset "
        "(the engine restarted), so this step's delta is the new value, never negative",
        stacklevel=5,
    )


def _value_delta(key: SourceSeries, before: EngineValue | None, after: EngineValue) -> EngineValue:
    if SPECS[key.series.name].kind == "gauge":
        return after  # a gauge is a level, read when the step ends; nothing to subtract
    if isinstance(after, EngineHistogram):
        if not isinstance(before, EngineHistogram) or before.bounds != after.bounds:
            return after  # new series or re-bucketed: it counted up from zero
        if after.count < before.count or any(
            a < b for a, b in zip(after.counts, before.counts, strict=True)
        ):
            _warn_reset(key, before.count, after.count)
            return after
        return EngineHistogram(
            after.bounds,
            tuple(a - b for a, b in zip(after.counts, before.counts, strict=True)),
            after.sum - before.sum,
            after.count - before.count,
        )
    if not isinstance(before, float):
        return after  # new series: it counted from zero
    if after < before:
        _warn_reset(key, before, after)
        return after
    return after - before


def _add(spec: EngineSeriesSpec, total: EngineValue, more: EngineValue) -> EngineValue | None:
    if isinstance(total, EngineHistogram):
        if not isinstance(more, EngineHistogram) or total.bounds != more.bounds:
            return None
        return EngineHistogram(
            total.bounds,
            tuple(a + b for a, b in zip(total.counts, more.counts, strict=True)),
            total.sum + more.sum,
            total.count + more.count,
        )
    if isinstance(more, EngineHistogram):
        return None
    if spec.kind == "gauge" and spec.aggregate == "max":
        return max(total, more)
    return total + more


def snapshot_delta(prev: EngineSnapshot | None, cur: EngineSnapshot | None) -> EngineDeltas:
    if prev is None or cur is None:
        return {}
    out: EngineDeltas = {}
    unmergeable: set[EngineSeries] = set()
    for key, value in cur.values.items():
        change = _value_delta(key, prev.values.get(key), value)
        total = out.get(key.series)
        merged = change if total is None else _add(SPECS[key.series.name], total, change)
        if merged is None:
            unmergeable.add(key.series)
        else:
            out[key.series] = merged
    for series in unmergeable:
        # Two engines behind one reader bucket the same histogram differently: no sum of
        # them is right, so leave the series out rather than invent one.
        del out[series]
        warn_once(
            f"rlsight.engines.unmergeable:{series.name}",
            f"engine series {series.name} has different histogram buckets on different "
            "engines behind one reader; it is left out of the deltas. Read each engine with "
            "its own EngineMetricsReader to keep it",
            stacklevel=3,
        )
    return out
