"""Building a process's OpenTelemetry providers: the store writers, OTLP exporters, Prometheus.

:class:`ProviderBuilder` is the part of :class:`~rlsight.runtime.Telemetry` that turns a config
and an identity into a tracer provider, a meter provider and the span processors and metric
readers behind them. It runs once per process, when the runtime materialises.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import math
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from rlsight._identity import Identity, resource_attributes
from rlsight._otlp import otlp_exporters
from rlsight.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, Meter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import Tracer

    from rlsight._batching import BatchingSpanProcessor
    from rlsight._lean import LeanStarter
    from rlsight._prometheus import PrometheusEndpoint
    from rlsight._run_state import RunState
    from rlsight._step_rollup import StepRollupProcessor
    from rlsight.config import TelemetryConfig
    from rlsight.runtime import Telemetry
    from rlsight.store._ray_sink import ShippingSink, StoreShipper
    from rlsight.store._sink import FileSink
    from rlsight.store._start_writer import StartRecordProcessor

__all__ = [
    "ATTRIBUTE_MAX_LENGTH",
    "DROPPED_SPANS",
    "OTLP_MAX_BATCH_BYTES",
    "OTLP_MAX_QUEUE_BYTES",
    "STORE_MAX_LAG_S",
    "ProviderBuilder",
]

_log = logging.getLogger("rlsight")

_SCOPE: Final = "rlsight"
#: How often ended spans and recorded metric points are written to the local store (ms).
_STORE_INTERVAL_MS: Final = 50
#: Ended spans that wake the store writer before its interval is up: one thread producing
#: flat out (~6 µs a span) fills 512 in ~3 ms, so the oldest waits a few ms, never the 50 ms
#: after which app threads start encoding their own spans (issue #16: that cost the caller
#: ~0.5 µs a span averaged); each batch's fixed cost (a stat, a write) stays < 0.1 µs a span.
_STORE_WAKE_AT: Final = 512
#: How often the OTLP exporters send spans and metric points to the collector (ms).
_OTLP_SPAN_INTERVAL_MS: Final = 1000
_OTLP_METRIC_INTERVAL_MS: Final = 5000
#: Spans an exporter dropped, by sink and reason (an observable counter, so it reaches the
#: store and the collector while the run goes, not only in the ShutdownReport).
DROPPED_SPANS: Final = "rl.telemetry.dropped_spans"
#: Longest attribute text a span keeps (characters); ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` or
#: ``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`` replace it.
ATTRIBUTE_MAX_LENGTH: Final = 32_768
#: The OTLP queue's bound in estimated bytes: a dead collector costs at most this much memory
#: (the local store keeps every span; ``rlsight export`` sends them later).
OTLP_MAX_QUEUE_BYTES: Final = 64 * 2**20
#: Largest OTLP request in estimated bytes, under gRPC's default 4 MiB message limit.
OTLP_MAX_BATCH_BYTES: Final = 2 * 2**20
#: Longest the store writer may fall behind before it drops (and counts) new spans. App
#: threads start converting their own spans for it at 50 ms behind, which keeps it within the
#: 200 ms promise unless the machine starves the process of CPU; this bounds that case.
STORE_MAX_LAG_S: Final = 1.0
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class ProviderBuilder:
    """The provider-building half of :class:`~rlsight.runtime.Telemetry` (a mixin).

    Its methods run under the runtime's lock, from ``Telemetry._materialize`` or
    ``setup_telemetry``, and fill the runtime's provider fields, declared here and set to
    their empty values by ``Telemetry.__init__``.
    """

    config: TelemetryConfig
    resource_attributes: dict[str, Any]
    report_internal_error: Callable[[str, BaseException], None]
    run_state: RunState
    _identity: Identity
    _id_generator: IdGenerator | None
    _driver: bool
    _ship_store: bool
    _extra_processors: tuple[SpanProcessor, ...]
    _extra_readers: tuple[MetricReader, ...]
    _lock: threading.RLock
    _materialized: bool
    _tracer_provider: TracerProvider | None
    _meter_provider: MeterProvider | None
    _tracer: Tracer | None
    _lean: LeanStarter | None
    _meter: Meter | None
    _setup_histogram: Histogram | None
    _processors: list[BatchingSpanProcessor]
    _local_metric_reader: MetricReader | None
    _otlp_metric_reader: MetricReader | None
    _metric_writer_stop: threading.Event
    _metric_errors: list[Exception]
    _drops_warned: set[str]
    _sinks: list[FileSink]
    _starts: StartRecordProcessor | None
    _starts_sink: FileSink | ShippingSink | None
    _prometheus: PrometheusEndpoint | None
    _shipper: StoreShipper | None
    _span_sink: FileSink | None
    _rollup: StepRollupProcessor | None

    def _build_providers(self) -> None:
        with self._lock:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider

            from rlsight import __version__
            from rlsight._ids import SeedIndependentIdGenerator

            self.resource_attributes = resource_attributes(self.config, self._identity)
            resource = Resource.create(self.resource_attributes)
            tp = TracerProvider(resource=resource, shutdown_on_exit=False,
                                id_generator=self._id_generator or SeedIndependentIdGenerator(),
                                span_limits=_span_limits())
            readers: list[MetricReader] = []
            stem = _SAFE.sub("_", f"{self._identity.worker_group}-{self._identity.rank}-{os.getpid()}")
            if self._driver and self.config.prometheus_port is not None:
                readers.append(self._build_prometheus())
            from rlsight._step_rollup import StepRollupProcessor, rollup_available

            # Every process: its busy time per window; the driver: each step's goodput too.
            # Made before the store, whose start records read the open spans it keeps; added
            # to the provider last, as before.
            if rollup_available(self._driver):
                # The mixin is only ever a Telemetry's base.
                self._rollup = StepRollupProcessor(cast("Telemetry", self), steps=self._driver)
            exporters: tuple[Any, Any] = (None, None)
            try:
                # The exporters first: one that cannot be built (the grpc extra missing) is a
                # ConfigError before the store opens its files and starts its threads.
                exporters = otlp_exporters(self.config)
                if self.config.local_store:
                    readers.append(self._build_local_store(tp, stem))
                otlp_reader = self._build_otlp(tp, *exporters)
            except BaseException:
                for exporter in exporters:
                    if exporter is not None:
                        with contextlib.suppress(Exception):  # the setup error is the one to see
                            exporter.shutdown()
                if self._prometheus is not None:
                    self._prometheus.close()
                    self._prometheus = None
                if self._rollup is not None:  # stops its window thread
                    self._rollup.shutdown()
                    self._rollup = None
                if self._starts is not None:  # stops its thread: no heartbeat of a setup that failed
                    with contextlib.suppress(Exception):
                        self._starts.close()
                    self._starts = None
                raise
            if otlp_reader is not None:
                self._otlp_metric_reader = otlp_reader
                readers.append(otlp_reader)
            for processor in self._extra_processors:
                tp.add_span_processor(processor)
            if self._rollup is not None:
                tp.add_span_processor(self._rollup)
            readers.extend(self._extra_readers)
            mp = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
            self._prune_step_series(mp, readers)
            if self._local_metric_reader is not None:
                self._start_metric_writer(self._local_metric_reader)
            self._tracer_provider, self._meter_provider = tp, mp
            self._tracer = tp.get_tracer(_SCOPE, __version__)
            from rlsight._lean import LeanStarter

            lean = LeanStarter(self._tracer)
            self._lean = lean if lean.usable else None
            self._meter = mp.get_meter(_SCOPE, __version__)
            self._setup_histogram = self._meter.create_histogram(
                "rl.setup.duration", unit="s", description="Wall time of each startup phase"
            )
            self._meter.create_observable_counter(
                DROPPED_SPANS, callbacks=[self._observe_drops], unit="{span}",
                description="Spans an exporter dropped, by sink and reason",
            )
            self._materialized = True

    def _prune_step_series(self, mp: MeterProvider, readers: list[MetricReader]) -> None:
        """After each collection of rlsight's own readers, drop finished steps' series.

        Without it the SDK would keep (and walk on every collection) each step's
        aggregations for the rest of the run: see :mod:`rlsight._step_series`. Readers a
        caller passed in (``_extra_readers``, e.g. a test's in-memory reader) are SDK readers,
        left as the SDK made them.
        """
        from rlsight._step_series import PrunesAfterCollect

        series = self.run_state.instruments.series
        for reader in readers:
            if isinstance(reader, PrunesAfterCollect):
                reader.prune_with(functools.partial(
                    series.after_collect, mp, report=self.report_internal_error))

    def _observe_drops(self, options: Any) -> Any:
        from opentelemetry.metrics import Observation

        return [
            Observation(n, {"rl.telemetry.sink": p.name, "rl.telemetry.reason": reason})
            for p in list(self._processors) for reason, n in list(p.dropped.items()) if n
        ]

    def _on_drops(self, processor: BatchingSpanProcessor) -> None:
        """Warn once per sink when it starts dropping (runs on the processor's export thread).

        The counts themselves reach the store with the next metric write (every 50 ms) and a
        collector with its next export, through the ``rl.telemetry.dropped_spans`` counter.
        """
        if processor.name not in self._drops_warned:
            self._drops_warned.add(processor.name)
            _log.warning(
                "rlsight: the %s exporter is dropping spans (%s); the run is unaffected. "
                "Counts go to the %s metric and the ShutdownReport (docs/reliability.md)",
                processor.name, dict(processor.dropped), DROPPED_SPANS,
            )

    def _build_local_store(self, tp: TracerProvider, stem: str) -> MetricReader:
        from rlsight._batching import BatchingSpanProcessor
        from rlsight._pruned_reader import PrunedPeriodicReader
        from rlsight.store._exporters import LocalMetricExporter, span_writer
        from rlsight.store._sink import FileSink
        from rlsight.store._span_codec import StoreRows

        run_dir = self.config.run_path
        span_sink = FileSink(run_dir / "traces" / f"{stem}.jsonl")
        metric_sink = FileSink(run_dir / "metrics" / f"{stem}.jsonl")
        self._sinks += [span_sink, metric_sink]
        ship_spans = ship_metrics = None
        if self._ship_store:
            from rlsight.store._ray_sink import StoreShipper

            shipper = self._shipper = StoreShipper(str(self.config.run_id), run_dir, stem)
            ship_spans = functools.partial(shipper.offer, "traces")
            ship_metrics = functools.partial(shipper.offer, "metrics")
        self._span_sink = span_sink
        # Every 50 ms: the store promises an ended span reaches the kernel within 200 ms (a
        # SIGKILLed Ray actor runs no exit hook), and a busy machine can delay this thread.
        # rlsight's own plain spans are queued as rows of their fields (see StoreRows).
        rows = StoreRows()
        store = BatchingSpanProcessor(
            span_writer(span_sink, ship_spans, rows), name="store",
            interval_s=_STORE_INTERVAL_MS / 1000,
            on_error=lambda exc: self.report_internal_error("store-write", exc),
            max_lag_s=STORE_MAX_LAG_S, on_drops=self._on_drops, prepare=rows.prepare,
            wake_at=_STORE_WAKE_AT, takes_rows=rows.adopt,
        )
        self._processors.append(store)
        tp.add_span_processor(store)
        self._build_start_records(tp, run_dir / "live" / f"{stem}.jsonl")
        # Metric points keep the same promise as spans: written every 50 ms, so a SIGKILL or
        # a ray.shutdown() loses at most the last 200 ms of them (it was 1 s; issue #18). The
        # reader gets no thread of its own (interval inf): its SDK thread could tick before
        # the MeterProvider registers it, which the SDK logs as a warning. _start_metric_writer
        # drives it once the provider exists.
        reader = PrunedPeriodicReader(
            LocalMetricExporter(metric_sink, ship_metrics), export_interval_millis=math.inf
        )
        self._local_metric_reader = reader
        return reader

    def _start_metric_writer(self, reader: MetricReader) -> None:
        """Write the store's metric points every ``_STORE_INTERVAL_MS`` until shutdown."""

        def run() -> None:
            while not self._metric_writer_stop.wait(_STORE_INTERVAL_MS / 1000):
                try:
                    reader.collect(timeout_millis=10_000)
                except Exception as exc:  # the writer thread must outlive one failed write
                    self._metric_errors.append(exc)
                    with contextlib.suppress(Exception):  # strict raises: kept for shutdown
                        self.report_internal_error("store-metrics", exc)

        threading.Thread(target=run, name="rlsight-store-metrics", daemon=True).start()

    def _build_start_records(self, tp: TracerProvider, path: Path) -> None:
        """Start records of long-lived spans (``rlsight watch``, the report's post-mortem)."""
        from rlsight.store import _live
        from rlsight.store._sink import FileSink
        from rlsight.store._start_writer import StartRecordProcessor

        local = FileSink(path)
        beats_local = FileSink(path.parent.parent / _live.HEARTBEAT_FOLDER / path.name)
        self._sinks += [local, beats_local]
        sink: FileSink | ShippingSink = local
        beats: FileSink | ShippingSink = beats_local
        if self._shipper is not None:  # the Ray transport ships start records too
            from rlsight.store._ray_sink import ShippingSink

            sink = ShippingSink(local, self._shipper, _live.LIVE_FOLDER)
            beats = ShippingSink(beats_local, self._shipper, _live.HEARTBEAT_FOLDER)
        heartbeat_s = _live.HEARTBEAT_S
        sink.write(_live.process_line(self.resource_attributes, heartbeat_s))
        self._starts_sink = sink
        # Where the roll-up runs, it keeps the open spans already: the start records are
        # written from those, and spans are not filed a second time.
        open_spans = None if self._rollup is None else self._rollup.open_spans
        self._starts = StartRecordProcessor(
            sink, interval_s=_STORE_INTERVAL_MS / 1000, heartbeat_s=heartbeat_s, heartbeats=beats,
            on_error=lambda exc: self.report_internal_error("store-live", exc),
            open_spans=open_spans,
        )
        if open_spans is None:
            tp.add_span_processor(self._starts)

    def _build_prometheus(self) -> MetricReader:
        host, port = self.config.prometheus_host, self.config.prometheus_port
        try:
            from rlsight._prometheus import PrometheusEndpoint
        except ImportError as exc:
            raise ConfigError(
                f"TelemetryConfig.prometheus_port={port} needs OpenTelemetry's Prometheus "
                "exporter: pip install 'rlsight[prometheus]' (or unset prometheus_port)"
            ) from exc
        assert port is not None
        try:
            self._prometheus = PrometheusEndpoint(host, port)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):  # the port is the fault
                raise ConfigError(
                    f"TelemetryConfig.prometheus_port={port}: cannot listen on {host}:{port} "
                    f"({exc.strerror or exc}); choose a free port (0 picks one) or unset it"
                ) from exc
            raise ConfigError(  # an address this machine does not have, or no address at all
                f"TelemetryConfig.prometheus_host={host!r}: cannot listen on {host}:{port} "
                f"({exc.strerror or exc}); use an address of this machine (127.0.0.1, the "
                "default, or 0.0.0.0 for every network)"
            ) from exc
        return self._prometheus.reader

    def _build_otlp(self, tp: TracerProvider, span_exporter: Any,
                    metric_exporter: Any) -> MetricReader | None:
        """The span processor and metric reader of the OTLP exporters; the reader, if any."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        from rlsight._batching import BatchingSpanProcessor, span_size
        from rlsight._pruned_reader import PrunedPeriodicReader

        if span_exporter is not None:

            def export(batch: Any) -> bool:
                return bool(span_exporter.export(batch) == SpanExportResult.SUCCESS)

            otlp = BatchingSpanProcessor(
                export, name="otlp", interval_s=_OTLP_SPAN_INTERVAL_MS / 1000, size_of=span_size,
                max_queue_bytes=OTLP_MAX_QUEUE_BYTES, max_batch_bytes=OTLP_MAX_BATCH_BYTES,
                on_error=lambda exc: self.report_internal_error("otlp-export", exc),
                close=span_exporter.shutdown, on_drops=self._on_drops,
            )
            self._processors.append(otlp)
            tp.add_span_processor(otlp)
        if metric_exporter is None:
            return None
        return PrunedPeriodicReader(metric_exporter, export_interval_millis=_OTLP_METRIC_INTERVAL_MS)


def _span_limits() -> Any:
    """The SDK's limits, with attribute text capped unless the standard variables say otherwise.

    One runaway attribute (a whole prompt, a 5 MB log) would otherwise ride every queue and
    request; the SDK truncates a longer value to the cap.
    """
    from opentelemetry.sdk.trace import SpanLimits

    if os.environ.get("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT") or os.environ.get(
            "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"):
        return SpanLimits()
    return SpanLimits(max_attribute_length=ATTRIBUTE_MAX_LENGTH)
