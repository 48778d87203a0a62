"""The driver's Prometheus endpoint: OpenTelemetry's Prometheus exporter on a loopback port.

rlsight records per-step points with an ``rl.step`` attribute (the store and the report
need it). As a Prometheus label that would make a new series every step, so the reader folds
it away before the exporter sees the points: counters and histograms add up over steps (a
run total, which ``rate()`` turns back into per-second values), a gauge keeps the value of
its latest step. Everything else is the exporter's own translation.

The reader collects with delta temporality and keeps the folded run totals itself, so a
scrape costs what changed since the last one plus one point per series, never a point per
step the run has made (a cumulative reader would hand over every step's series on every
scrape: seconds per scrape after ten thousand steps).

Imported only when ``prometheus_port`` is set: it needs the ``rlsight[prometheus]`` extra.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Final

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from prometheus_client import CollectorRegistry, start_http_server

from rlsight._semconv import STEP
from rlsight._step_series import PrunesAfterCollect
from rlsight.store._exporters import delta_temporality

__all__ = ["PrometheusEndpoint", "StepFoldingReader"]

_CUMULATIVE: Final = AggregationTemporality.CUMULATIVE
_AttrKey = tuple[tuple[str, Any], ...]


def _key(attributes: Any) -> _AttrKey:
    return tuple(sorted(
        (k, tuple(v) if isinstance(v, (list, tuple)) else v)
        for k, v in (attributes or {}).items() if k != STEP
    ))


def _step_of(point: NumberDataPoint) -> int:
    step = (point.attributes or {}).get(STEP, -1)
    return step if isinstance(step, int) else -1


def _without_step(point: Any) -> Any:
    return dataclasses.replace(
        point, attributes={k: v for k, v in (point.attributes or {}).items() if k != STEP})


def _add_histograms(total: HistogramDataPoint, more: HistogramDataPoint) -> HistogramDataPoint:
    if more.explicit_bounds != total.explicit_bounds or more.count == 0:
        return total
    return dataclasses.replace(
        total, count=total.count + more.count, sum=total.sum + more.sum,
        bucket_counts=[a + b for a, b in zip(total.bucket_counts, more.bucket_counts, strict=True)],
        min=min(total.min, more.min), max=max(total.max, more.max),
        time_unix_nano=more.time_unix_nano,
    )


@dataclasses.dataclass(slots=True)
class _Series:
    """One metric's folded points (attributes without ``rl.step``) and its latest shape."""

    metric: Metric
    points: dict[_AttrKey, Any] = dataclasses.field(default_factory=dict)
    steps: dict[_AttrKey, tuple[int, int]] = dataclasses.field(default_factory=dict)

    def add(self, point: Any) -> None:
        key = _key(point.attributes)
        prev = self.points.get(key)
        data = self.metric.data
        if isinstance(data, Gauge):
            rank = (_step_of(point), point.time_unix_nano)
            if prev is None or rank >= self.steps[key]:
                self.points[key], self.steps[key] = _without_step(point), rank
        elif prev is None:
            self.points[key] = _without_step(point)
        elif isinstance(data, Histogram):
            self.points[key] = _add_histograms(prev, point)
        else:
            self.points[key] = dataclasses.replace(
                prev, value=prev.value + point.value, time_unix_nano=point.time_unix_nano)

    def snapshot(self) -> Metric:
        data = self.metric.data
        points = list(self.points.values())
        folded: Any
        if isinstance(data, Sum):
            folded = Sum(points, _CUMULATIVE, data.is_monotonic)
        elif isinstance(data, Histogram):
            folded = Histogram(points, _CUMULATIVE)
        else:
            folded = Gauge(points)
        return dataclasses.replace(self.metric, data=folded)


class StepFoldingReader(PrunesAfterCollect, PrometheusMetricReader):
    """OpenTelemetry's Prometheus reader, fed run totals without the ``rl.step`` label.

    After folding a collection it drops finished steps' aggregations
    (:mod:`rlsight._step_series`): the folded totals are what it keeps of them.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry=registry)
        # Delta collections: each scrape brings only what was recorded since the last one.
        # The exporter's constructor fixes cumulative; the SDK keeps the choice in this map,
        # which a reader built with the delta preference fills in the SDK's own terms.
        self._instrument_class_temporality = dict(
            InMemoryMetricReader(preferred_temporality=delta_temporality())._instrument_class_temporality)
        # The exporter's collector calls this on each scrape before it translates.
        self._collector._callback = self._collect_for_scrape  # type: ignore[assignment]
        self._fold_lock = threading.Lock()
        self._series: dict[tuple[Any, str], _Series] = {}
        self._scopes: dict[Any, ScopeMetrics] = {}
        self._resource: ResourceMetrics | None = None

    def _receive_metrics(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any,
    ) -> None:
        """Fold a delta collection into the run totals (the scrape hands them over)."""
        if metrics_data is None:
            return
        with self._fold_lock:
            for rm in metrics_data.resource_metrics:
                self._resource = rm
                for sm in rm.scope_metrics:
                    self._scopes[sm.scope] = sm
                    for metric in sm.metrics:
                        series = self._series.get((sm.scope, metric.name))
                        if series is None:
                            series = self._series[(sm.scope, metric.name)] = _Series(metric)
                        for point in metric.data.data_points:
                            series.add(point)
        self._collected()

    def _collect_for_scrape(self) -> None:
        """Collect what changed, then give the exporter every series' run total.

        A delta collection in which nothing changed reaches no ``_receive_metrics`` at all,
        yet the scrape must still serve every series, or Prometheus would mark them stale.
        """
        self.collect()
        with self._fold_lock:
            folded = self._snapshot()
        if folded is not None:
            super()._receive_metrics(folded)

    def _snapshot(self) -> MetricsData | None:
        if self._resource is None:
            return None
        scopes = [
            dataclasses.replace(sm, metrics=[
                series.snapshot() for (scope, _), series in self._series.items() if scope == sm.scope])
            for sm in self._scopes.values()
        ]
        return MetricsData([dataclasses.replace(self._resource, scope_metrics=scopes)])


class PrometheusEndpoint:
    """A metric reader and the HTTP server that serves what it reads at ``/metrics``.

    Raises:
        OSError: the address cannot be bound (the port is taken, the host is not local).
    """

    def __init__(self, host: str, port: int) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self.reader = StepFoldingReader(self._registry)
        server, thread = start_http_server(port, addr=host, registry=self._registry)
        self._server = server
        self._thread: threading.Thread = thread
        self.host = host
        self.port = int(server.server_port)

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
