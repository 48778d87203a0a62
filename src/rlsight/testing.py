"""Test helpers for code instrumented with rlsight: capture what it emits, in memory.

``capture_telemetry`` installs a fresh runtime with an in-memory span exporter and metric
reader (plus the local store in a folder you choose), and on exit shuts it down and restores
the previous one, so tests run in any order without touching private globals. It sets
``strict=True``: an internal telemetry error raises instead of being logged once, so a test
cannot pass over a broken instrumentation.

It is not thread-safe to nest captures from several threads at once; one capture per test.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlsight import groups as _groups
from rlsight import runtime as _runtime
from rlsight._identity import Identity
from rlsight.config import TelemetryConfig
from rlsight.errors import _reset_warn_once

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["Capture", "CapturedPoint", "capture_telemetry", "isolated_metric_groups"]


@dataclass(frozen=True, slots=True)
class CapturedPoint:
    """One metric data point, flattened: histograms carry ``count``/``sum``, others ``value``."""

    name: str
    attributes: dict[str, Any]
    value: float | int | None = None
    count: int | None = None
    sum: float | None = None
    unit: str = ""


@dataclass
class Capture:
    """What a :func:`capture_telemetry` block emitted."""

    runtime: _runtime.Telemetry
    _spans: InMemorySpanExporter
    _metrics: InMemoryMetricReader
    _points: list[CapturedPoint] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        """The local store folder of this capture."""
        return self.runtime.config.run_path

    def spans(self) -> Sequence[ReadableSpan]:
        """Every span that has ended so far, in end order."""
        return self._spans.get_finished_spans()

    def span_names(self) -> list[str]:
        """Names of the ended spans, in end order."""
        return [s.name for s in self.spans()]

    def metrics(self) -> list[CapturedPoint]:
        """Metric points collected so far (collecting drains delta instruments)."""
        from opentelemetry.sdk.metrics.export import HistogramDataPoint, NumberDataPoint

        data = self._metrics.get_metrics_data()
        if data is not None:
            for rm in data.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        for p in metric.data.data_points:
                            attrs = dict(p.attributes or {})
                            if isinstance(p, HistogramDataPoint):
                                self._points.append(CapturedPoint(
                                    metric.name, attrs, count=p.count, sum=p.sum, unit=metric.unit or ""
                                ))
                            elif isinstance(p, NumberDataPoint):
                                self._points.append(
                                    CapturedPoint(metric.name, attrs, value=p.value, unit=metric.unit or "")
                                )
        return list(self._points)

    def clear(self) -> None:
        """Forget the spans and metric points captured so far."""
        self._spans.clear()
        self.metrics()
        self._points.clear()


@contextmanager
def capture_telemetry(
    *,
    span_groups: Sequence[str] = ("all",),
    run_dir: str | Path | None = None,
    worker_group: str = "driver",
    rank: int = 0,
    world_size: int = 1,
    **config_overrides: Any,
) -> Iterator[Capture]:
    """Set up telemetry that records into memory for the duration of the block.

    Args:
        span_groups: The spec to enable (default: everything).
        run_dir: Local store folder; a temporary folder when omitted (removed afterwards).
        worker_group: ``rl.worker_group`` of the captured process. As ``driver`` (the
            default) it rolls each ended step up, so :func:`rlsight.last_step_summary` works
            inside the block.
        rank: ``rl.rank``.
        world_size: ``rl.world_size``.
        **config_overrides: Other :class:`~rlsight.TelemetryConfig` fields.

    Yields:
        The :class:`Capture`.
    """
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rlsight.store._exporters import delta_temporality

    previous = _runtime._ACTIVE
    previous_spec = _groups._REGISTRY.spec
    if previous is not None:
        _runtime._ACTIVE = None
    tmp = tempfile.TemporaryDirectory(prefix="rlsight-capture-") if run_dir is None else None
    config_overrides.setdefault("strict", True)
    config = TelemetryConfig(
        span_groups=tuple(span_groups),
        run_dir=str(run_dir if run_dir is not None else tmp.name),  # type: ignore[union-attr]
        **config_overrides,
    )
    spans = InMemorySpanExporter()
    metrics = InMemoryMetricReader(preferred_temporality=delta_temporality())
    _reset_warn_once()
    telemetry = _runtime.Telemetry(
        config,
        Identity(worker_group, rank, world_size),
        span_processors=[SimpleSpanProcessor(spans)],
        metric_readers=[metrics],
        driver=worker_group == "driver",
    )
    try:
        _runtime.install(telemetry)
        yield Capture(telemetry, spans, metrics)
    finally:
        telemetry.shutdown(timeout_ms=5000)
        _groups.set_span_group_spec(previous_spec)
        if previous is not None:
            _runtime._ACTIVE = previous
            _groups._activate(previous.config.span_groups)
        if tmp is not None:
            tmp.cleanup()


@contextmanager
def isolated_metric_groups() -> Iterator[None]:
    """Forget, at the end of the block, every metric group registered inside it.

    Registration is process-wide and once per group (a second one is an error, by design), and
    the step tee records every registered group; a test that declares groups, or imports a
    module that does, uses this so later tests see the registry as it was.
    """
    from rlsight import metrics

    with metrics._GROUPS_LOCK:
        saved = dict(metrics._GROUPS)
    try:
        yield
    finally:
        with metrics._GROUPS_LOCK:
            metrics._GROUPS.clear()
            metrics._GROUPS.update(saved)
