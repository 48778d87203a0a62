"""Exporters that turn SDK batches into store lines on a :class:`~rlsight.store._sink.Sink`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)

from rlsight.store._otlp_json import encode_metrics
from rlsight.store._span_codec import StoreRows, encode_spans

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from rlsight.store._sink import Sink


def delta_temporality() -> dict[type, AggregationTemporality]:
    """Delta for every instrument kind.

    Per-step metrics carry ``rl.step``; with cumulative temporality every step's series would
    be re-exported on every collection for the rest of the run. Delta writes each point once.
    Collectors that need cumulative series convert with their ``deltatocumulative`` processor.
    """
    delta = AggregationTemporality.DELTA
    kinds: tuple[type, ...] = (
        Counter, UpDownCounter, Histogram, ObservableCounter, ObservableUpDownCounter, ObservableGauge,
    )
    try:
        from opentelemetry.sdk.metrics import _Gauge as SyncGauge

        kinds += (SyncGauge,)
    except ImportError:  # older SDKs have no synchronous gauge
        pass
    return dict.fromkeys(kinds, delta)


#: Takes a written store line and its span count onward (the Ray transport's shipper).
Ship = Callable[[bytes, int], None]


def span_writer(sink: Sink, ship: Ship | None = None,
                rows: StoreRows | None = None) -> Callable[[Sequence[ReadableSpan]], bool]:
    """An export function for :class:`~rlsight._batching.BatchingSpanProcessor`.

    ``ship``, when given, gets each line after the sink wrote it, so the local file is
    written first whatever happens to the transport. ``rows``: the processor's
    ``takes_rows`` (batches may hold rows of its starter's plain spans).
    """
    encode = encode_spans if rows is None else rows.encode

    def export(batch: Sequence[ReadableSpan]) -> bool:
        if batch:
            line = encode(batch)
            sink.write(line, len(batch))
            if ship is not None:
                ship(line, len(batch))
        return True

    return export


class LocalMetricExporter(MetricExporter):
    """Writes each collection as one ``ExportMetricsServiceRequest`` line (skips empty ones)."""

    def __init__(self, sink: Sink, ship: Ship | None = None) -> None:
        super().__init__(preferred_temporality=delta_temporality())
        self._sink = sink
        self._ship = ship

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        line = encode_metrics(metrics_data)
        if line is not None:
            try:
                self._sink.write(line)
            except OSError:
                return MetricExportResult.FAILURE
            if self._ship is not None:
                self._ship(line, 0)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None
