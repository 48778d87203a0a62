"""The driver's Prometheus endpoint: OpenTelemetry's Prometheus exporter on a loopback port.

rlsight records per-step points with an ``rl.step`` attribute (the store and the report
need it). As a Prometheus label that would make a new series every step, so the reader folds
it away before the exporter sees the points: counters and histograms add up over steps (a
run total, which ``rate()`` turns back into per-second values), a gauge keeps the value of
its latest step. Everything else is the exporter's own translation.

Imported only when ``prometheus_port`` is set: it needs the ``rlsight[prometheus]`` extra.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any, Final

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
)
from prometheus_client import CollectorRegistry, start_http_server

__all__ = ["PrometheusEndpoint", "fold_steps"]

_STEP: Final = "rl.step"


def _key(attributes: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(
        (k, tuple(v) if isinstance(v, (list, tuple)) else v)
        for k, v in (attributes or {}).items() if k != _STEP
    ))


def _step_of(point: NumberDataPoint) -> int:
    step = (point.attributes or {}).get(_STEP, -1)
    return step if isinstance(step, int) else -1


def _merge_numbers(points: list[NumberDataPoint], data: Any) -> NumberDataPoint:
    if isinstance(data, Gauge):
        return max(points, key=lambda p: (_step_of(p), p.time_unix_nano))
    return dataclasses.replace(
        points[0], value=sum(p.value for p in points),
        start_time_unix_nano=min(p.start_time_unix_nano for p in points),
        time_unix_nano=max(p.time_unix_nano for p in points),
    )


def _merge_histograms(points: list[HistogramDataPoint]) -> HistogramDataPoint:
    bounds = points[0].explicit_bounds
    same = [p for p in points if p.explicit_bounds == bounds]
    return dataclasses.replace(
        points[0],
        count=sum(p.count for p in same), sum=sum(p.sum for p in same),
        bucket_counts=[sum(c) for c in zip(*(p.bucket_counts for p in same), strict=True)],
        min=min(p.min for p in same), max=max(p.max for p in same),
        start_time_unix_nano=min(p.start_time_unix_nano for p in same),
        time_unix_nano=max(p.time_unix_nano for p in same),
    )


def _fold_metric(metric: Metric) -> Metric:
    data: Any = metric.data
    points: Sequence[Any] = data.data_points
    if not any(_STEP in (p.attributes or {}) for p in points):
        return metric
    groups: dict[tuple[tuple[str, Any], ...], list[Any]] = {}
    for p in points:
        groups.setdefault(_key(p.attributes), []).append(p)
    merged = []
    for group in groups.values():
        point = (_merge_histograms(group) if isinstance(data, Histogram)
                 else _merge_numbers(group, data))
        attrs = {k: v for k, v in (point.attributes or {}).items() if k != _STEP}
        merged.append(dataclasses.replace(point, attributes=attrs))
    return dataclasses.replace(metric, data=dataclasses.replace(data, data_points=merged))


def fold_steps(data: MetricsData) -> MetricsData:
    """``data`` with the ``rl.step`` attribute folded out of every point (see the module doc)."""
    return dataclasses.replace(data, resource_metrics=[
        dataclasses.replace(rm, scope_metrics=[
            dataclasses.replace(sm, metrics=[_fold_metric(m) for m in sm.metrics])
            for sm in rm.scope_metrics
        ])
        for rm in data.resource_metrics
    ])


class _StepFoldingReader(PrometheusMetricReader):
    """OpenTelemetry's Prometheus reader, fed points without the ``rl.step`` label."""

    def _receive_metrics(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any,
    ) -> None:
        if metrics_data is None:
            return
        super()._receive_metrics(fold_steps(metrics_data), timeout_millis, **kwargs)


class PrometheusEndpoint:
    """A metric reader and the HTTP server that serves what it reads at ``/metrics``.

    Raises:
        OSError: the address cannot be bound (the port is taken, the host is not local).
    """

    def __init__(self, host: str, port: int) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self.reader = _StepFoldingReader(registry=self._registry)
        server, thread = start_http_server(port, addr=host, registry=self._registry)
        self._server = server
        self._thread: threading.Thread = thread
        self.host = host
        self.port = int(server.server_port)

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
