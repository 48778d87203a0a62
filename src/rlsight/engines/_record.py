"""Recording one step's engine deltas as OpenTelemetry metrics on the active runtime."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from rlsight._semconv import STEP
from rlsight.engines._deltas import EngineHistogram, EngineSeries, EngineValue
from rlsight.engines._vocabulary import ENGINE_SERIES, SPECS
from rlsight.errors import warn_once
from rlsight.runtime import active_runtime

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter
    from opentelemetry.util.types import AttributeValue

    from rlsight._instruments import InstrumentCache

__all__ = ["record_engine_deltas"]


_HISTOGRAM_PARTS: Final = {
    spec.name: (spec.name + ".count", spec.name + ".sum", spec.name + ".bucket")
    for spec in ENGINE_SERIES
    if spec.kind == "histogram"
}


def record_engine_deltas(
    step: int, deltas: Mapping[EngineSeries, EngineValue], *, engine: str
) -> None:
    """Record one step's engine deltas as OTel metrics; a no-op without telemetry.

    A counter delta is added to the counter of its vocabulary name; a gauge's level is set
    on the gauge of its vocabulary name. A histogram delta is
    recorded as three counters, ``<name>.count``, ``<name>.sum`` and ``<name>.bucket`` (one
    point per bucket, cumulative, with the upper bound in ``rl.engine.le`` as Prometheus
    writes it), because the OTel API records single observations, not pre-counted buckets.
    Every point carries ``rl.step`` and ``rl.engine.name``.

    Args:
        step: The training step the deltas belong to.
        deltas: From :meth:`EngineMetricsReader.delta` or :meth:`~EngineMetricsReader.read_delta`.
        engine: Names the engine or engine group (``generation/0``), as ``rl.engine.name``.
    """
    runtime = active_runtime()
    if not deltas or runtime is None:
        return
    try:
        instruments = runtime.run_state.instruments
        series = instruments.series
        with series.lock:  # the pruning of finished steps never races a point (_step_series)
            series.saw(step)
            _record_engine_deltas(instruments, runtime.meter, step, deltas, engine)
    except Exception as exc:  # a metrics failure must not end the training step
        runtime.report_internal_error("record_engine_deltas", exc)


def _record_engine_deltas(
    instruments: InstrumentCache,
    meter: Meter, step: int, deltas: Mapping[EngineSeries, EngineValue], engine: str
) -> None:
    base: dict[str, AttributeValue] = {STEP: step, "rl.engine.name": engine}
    for series, value in deltas.items():
        spec = SPECS.get(series.name)
        if spec is None:
            warn_once(
                f"engine-series-unknown:{series.name}",
                f"rlsight: engine series {series.name!r} is not in the rl.engine vocabulary "
                f"({', '.join(sorted(SPECS))}); it is not recorded",
                stacklevel=4,
            )
            continue
        attributes = {**base, **dict(series.attributes)}
        if spec.kind == "gauge" and not isinstance(value, EngineHistogram):
            instruments.gauge(meter, spec.name, spec.unit, spec.description).set(value, attributes)
            continue
        if not isinstance(value, EngineHistogram):
            counter = instruments.counter(meter, spec.name, spec.unit, spec.description)
            counter.add(value, attributes)
            continue
        count_name, sum_name, bucket_name = _HISTOGRAM_PARTS[spec.name]
        instruments.counter(meter, count_name, "1", f"Observations of {spec.name}.").add(
            value.count, attributes
        )
        if not math.isnan(value.sum):
            instruments.counter(meter, sum_name, spec.unit, f"Sum of {spec.name}.").add(
                value.sum, attributes
            )
        buckets = instruments.counter(
            meter, bucket_name, "1", f"Observations of {spec.name} at most rl.engine.le."
        )
        running = 0.0
        for bound, count in zip((*value.bounds, math.inf), value.counts, strict=True):
            running += count
            buckets.add(running, {**attributes, "rl.engine.le": _format_le(bound)})


def _format_le(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(float(bound))
