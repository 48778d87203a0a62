"""Test helpers for code instrumented with rlsight: capture what it emits, in memory.

``capture_telemetry`` installs a fresh runtime with an in-memory span exporter and metric
reader (plus the local store in a folder you choose), and on exit shuts it down and restores
the previous one, so tests run in any order. It sets ``strict=True``: an internal telemetry
error raises instead of being logged once, so a test cannot pass over a broken
instrumentation. With a :class:`FakeClock` rlsight's spans take their times from it, so a test
advances the clock instead of sleeping; with ``deterministic_ids=True`` trace and span ids
count up from 1.

``isolated_registries`` puts the process-wide registries (span groups and presets, metric
groups, efficiency categories) back as they were when a block ends.

It is not thread-safe to nest captures from several threads at once; one capture per test.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace.id_generator import IdGenerator

from rlsight import groups as _groups
from rlsight import metrics as _metrics
from rlsight import runtime as _runtime
from rlsight import spans as _spans
from rlsight._identity import Identity
from rlsight.config import TelemetryConfig
from rlsight.errors import reset_warn_once

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = [
    "Capture",
    "CapturedPoint",
    "CountingIdGenerator",
    "FakeClock",
    "capture_telemetry",
    "isolated_metric_groups",
    "isolated_registries",
]


class FakeClock:
    """A wall clock that moves only when told: a test advances it instead of sleeping.

    Call it for now in ns since the epoch (what OpenTelemetry records). Passed to
    :func:`capture_telemetry`, it times every span rlsight starts and ends (``span``,
    ``step_span``, ``efficiency_span``...), hence the efficiency seconds, the step goodput of
    :func:`rlsight.last_step_summary` and the run-window percentages. Spans of other tracers
    (the HTTP instrumentations), the ``rl.setup.duration`` histogram, the seconds
    :class:`rlsight.TimerBridge` writes into your dict and the stall watchdog keep real time.

    Args:
        start: The time it starts at, in seconds since the epoch.
    """

    __slots__ = ("_lock", "_ns")

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._ns = round(start * 1e9)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        return self._ns

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (never back: durations stay non-negative)."""
        if not seconds >= 0:
            raise ValueError(f"FakeClock.advance({seconds!r}): expected seconds >= 0")
        with self._lock:
            self._ns += round(seconds * 1e9)

    def time(self) -> float:
        """Now in seconds since the epoch, as :func:`time.time` gives it."""
        return self._ns / 1e9


class CountingIdGenerator(IdGenerator):
    """Trace and span ids that count up from 1, so a captured trace is the same every run."""

    __slots__ = ("_spans", "_traces")

    def __init__(self) -> None:
        self._spans = itertools.count(1)
        self._traces = itertools.count(1)

    def generate_span_id(self) -> int:
        return next(self._spans)

    def generate_trace_id(self) -> int:
        return next(self._traces)

    def is_trace_id_random(self) -> bool:
        return False


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
    #: The clock the capture was given, or ``None`` when it keeps real time.
    clock: FakeClock | None = None

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
    clock: FakeClock | None = None,
    deterministic_ids: bool = False,
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
        clock: Time rlsight's spans by this :class:`FakeClock` instead of the wall clock
            (also ``Capture.clock``).
        deterministic_ids: Trace and span ids count up from 1 (:class:`CountingIdGenerator`).
        **config_overrides: Other :class:`~rlsight.TelemetryConfig` fields.

    Yields:
        The :class:`Capture`.
    """
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rlsight.store._exporters import delta_temporality

    tmp = tempfile.TemporaryDirectory(prefix="rlsight-capture-") if run_dir is None else None
    config_overrides.setdefault("strict", True)
    config = TelemetryConfig(
        span_groups=tuple(span_groups),
        run_dir=str(run_dir if run_dir is not None else tmp.name),  # type: ignore[union-attr]
        **config_overrides,
    )
    spans = InMemorySpanExporter()
    metrics = InMemoryMetricReader(preferred_temporality=delta_temporality())
    reset_warn_once()
    telemetry = _runtime.Telemetry(
        config,
        Identity(worker_group, rank, world_size),
        span_processors=[SimpleSpanProcessor(spans)],
        metric_readers=[metrics],
        driver=worker_group == "driver",
        clock=clock,
        id_generator=CountingIdGenerator() if deterministic_ids else None,
    )
    # Only once the capture's runtime exists: a config it cannot use leaves the process as it was.
    previous = _runtime.set_aside_active()
    previous_spec = _groups.current_spec()
    try:
        _runtime.install(telemetry)
        yield Capture(telemetry, spans, metrics, clock=clock)
    finally:
        telemetry.shutdown(timeout_ms=5000)
        _groups.set_span_group_spec(previous_spec)
        if previous is not None:
            _runtime.restore_active(previous)
        if tmp is not None:
            tmp.cleanup()


@contextmanager
def isolated_metric_groups() -> Iterator[None]:
    """Forget, at the end of the block, every metric group registered inside it.

    Registration is process-wide and once per group (a second one is an error, by design), and
    the step tee records every registered group; a test that declares groups, or imports a
    module that does, uses this so later tests see the registry as it was.
    """
    restore = _metrics.snapshot_registry()
    try:
        yield
    finally:
        restore()


@contextmanager
def isolated_registries() -> Iterator[None]:
    """Put every process-wide registry back, at the end of the block, as it was at its start.

    That is the span groups, presets and namespaces with the current span-group spec, the
    metric groups and the efficiency categories. Declarations are process-wide on purpose (a
    library declares them once, at import); a test that declares its own wraps itself in this
    (an autouse fixture) so no declaration leaks into the next test.
    """
    restores = (_groups.snapshot_registry(), _metrics.snapshot_registry(),
                _spans.snapshot_efficiency())
    try:
        yield
    finally:
        for restore in restores:
            restore()
