"""The telemetry lifecycle of one process: set up, identify, shut down within a budget.

One :class:`Telemetry` object per process holds the providers, the store writers and the
run-scoped state the helpers need (current step, efficiency seconds). Module functions
delegate to it; there is no OpenTelemetry global to set or to poke, so tests build a fresh
one each time (see :mod:`rlsight.testing`).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rlsight import _host
from rlsight import groups as _groups
from rlsight._semconv import (
    ALGORITHM,
    DEVICES,
    HOST_NAME,
    PROCESS_PID,
    RANK,
    RUN_ID,
    SERVICE_INSTANCE_ID,
    SERVICE_NAME,
    STAGE,
    WORKER_GROUP,
    WORLD_SIZE,
)
from rlsight.config import TelemetryConfig
from rlsight.errors import ConfigError, TelemetryStateError, warn_once

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, Meter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Span, Tracer

    from rlsight._batching import BatchingSpanProcessor
    from rlsight._lean import LeanStarter
    from rlsight._prometheus import PrometheusEndpoint
    from rlsight._step_rollup import StepRollupProcessor
    from rlsight.store._ray_sink import ShippingSink, SinkStarter, StoreShipper
    from rlsight.store._sink import FileSink
    from rlsight.watchdog import StallHook, Watchdog

__all__ = [
    "ShutdownReport",
    "Telemetry",
    "active_runtime",
    "flush_telemetry",
    "init_worker",
    "setup_telemetry",
    "shutdown_telemetry",
]

_log = logging.getLogger("rlsight")

#: Env vars that carry a worker's identity (set by ``rlsight.ray`` or a launcher).
ENV_WORKER_GROUP: Final = "RLSIGHT_WORKER_GROUP"
ENV_RANK: Final = "RLSIGHT_RANK"
ENV_WORLD_SIZE: Final = "RLSIGHT_WORLD_SIZE"
ENV_DEVICES: Final = "RLSIGHT_DEVICES"

#: (env var, resource attribute, default, meaning) of each identity variable; per process,
#: so not part of the run-wide config. docs/configuration.md's identity table comes from here.
IDENTITY_ENV: Final = (
    (ENV_WORKER_GROUP, WORKER_GROUP, "`worker` (`driver` in `setup_telemetry`)",
     "Which fleet the process belongs to; Ray actors default to their class name."),
    (ENV_RANK, RANK, "`0`", "The process's rank within its worker group."),
    (ENV_WORLD_SIZE, WORLD_SIZE, "`1`", "How many ranks the worker group has."),
    (ENV_DEVICES, DEVICES,
     "the GPUs Ray assigned the process, else the ids in `CUDA_VISIBLE_DEVICES`; unset when none "
     "(the analysis counts 1)",
     "Accelerators the process drives; weights its fleet in utilisation."),
)

_SCOPE: Final = "rlsight"
#: How often ended spans and recorded metric points are written to the local store (ms).
_STORE_INTERVAL_MS: Final = 50
#: How often the OTLP exporters send spans and metric points to the collector (ms).
_OTLP_SPAN_INTERVAL_MS: Final = 1000
_OTLP_METRIC_INTERVAL_MS: Final = 5000
#: Drop reasons that mean an exporter did not deliver (``queue_full`` and ``after_shutdown``
#: are spans that never reached an exporter, counted but not a delivery failure).
_UNDELIVERED: Final = ("/export_failed", "/shutdown_timeout", "/run_dir_deleted")
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


@dataclass(frozen=True, slots=True)
class ShutdownReport:
    """What :func:`shutdown_telemetry` did.

    ``dropped`` counts spans that never reached a sink, keyed ``"<sink>/<reason>"``
    (``otlp/shutdown_timeout``, ``store/queue_full``...); a batch an exporter was still
    holding when the budget ran out counts as dropped even if it lands later. ``timed_out``
    is true when shutdown could not deliver everything: a step did not complete within the
    budget or failed, or an exporter gave up on spans (``*/export_failed``, a collector that
    is down or refused them, possibly long before shutdown), or spans written into a run
    folder that was then deleted were lost (``store/run_dir_deleted``). Spans the local store
    wrote are on disk whatever happened to the collector. ``internal_errors`` counts rlsight's
    own failures per site (``span-start``, ``record_metrics``...) since setup: the run went on
    with less telemetry, and only the first at each site was logged.
    """

    elapsed_ms: float
    timed_out: bool
    exported: Mapping[str, int] = field(default_factory=dict)
    dropped: Mapping[str, int] = field(default_factory=dict)
    internal_errors: Mapping[str, int] = field(default_factory=dict)

    @property
    def dropped_total(self) -> int:
        """Spans lost across every sink and reason."""
        return sum(self.dropped.values())


@dataclass(slots=True)
class _Identity:
    worker_group: str
    rank: int
    world_size: int
    devices: int | None = None
    resource_attributes: dict[str, Any] = field(default_factory=dict)


class Telemetry:
    """The telemetry of one process. Returned by :func:`setup_telemetry` and :func:`init_worker`.

    Use it as a context manager to shut down at the end of a block. Its providers are built
    when it is created, except for a worker set up with ``deferred=True``: those wait until
    the first span or metric, so a Ray actor can still name its worker group
    (:meth:`bind_identity`) after its process started.
    """

    def __init__(
        self,
        config: TelemetryConfig,
        identity: _Identity,
        *,
        deferred: bool = False,
        span_processors: Sequence[SpanProcessor] = (),
        metric_readers: Sequence[MetricReader] = (),
        driver: bool = False,
        ship_store: bool = True,
    ) -> None:
        self.config = config
        self._driver = driver
        # The driver writes the run folder the Ray sink appends to: it ships nothing.
        self._ship_store = ship_store and config.store_transport == "ray"
        self._identity = identity
        self._extra_processors = tuple(span_processors)
        self._extra_readers = tuple(metric_readers)
        self._lock = threading.RLock()
        self._materialized = False
        self._shut_down = False
        self.started_ns = time.time_ns()
        # Set by step_span (even with the step group off); the logging bridge stamps it on
        # every log record as rl_step.
        self.current_step: int | None = None
        self._efficiency: dict[tuple[str, str], float] = {}
        self._efficiency_lock = threading.Lock()
        self._internal_errors: collections.Counter[str] = collections.Counter()
        self._tracer_provider: TracerProvider | None = None
        self._meter_provider: MeterProvider | None = None
        self._tracer: Tracer | None = None
        self._lean: LeanStarter | None = None
        self._meter: Meter | None = None
        self._setup_histogram: Histogram | None = None
        self._processors: list[BatchingSpanProcessor] = []
        self._local_metric_reader: MetricReader | None = None
        self._otlp_metric_reader: MetricReader | None = None
        self._metric_writer_stop = threading.Event()
        self._metric_errors: list[Exception] = []
        self._drops_warned: set[str] = set()
        self._sinks: list[FileSink] = []
        self._starts: BatchingSpanProcessor | None = None
        self._starts_sink: FileSink | ShippingSink | None = None
        #: The stall watchdog (driver, when ``stall_after_s``/``stall_after_steps`` is set).
        self.watchdog: Watchdog | None = None
        self._prometheus: PrometheusEndpoint | None = None
        self._shipper: StoreShipper | None = None
        self._sink_starter: SinkStarter | None = None
        self._span_sink: FileSink | None = None
        self.resource_attributes: dict[str, Any] = {}
        #: The last step's goodput (driver only); see :func:`rlsight.last_step_summary`.
        self.last_step_summary: dict[str, float] = {}
        #: The span processor that rolls steps and busy-time windows up (once materialised).
        self._rollup: StepRollupProcessor | None = None
        if not deferred:
            self._materialize()

    # -- identity ---------------------------------------------------------------------------
    @property
    def run_dir(self) -> Path | None:
        """The local store's folder, or ``None`` when the local store is off."""
        return self.config.run_path if self.config.local_store else None

    @property
    def worker_group(self) -> str:
        """``rl.worker_group`` of this process."""
        return self._identity.worker_group

    @property
    def rank(self) -> int:
        """``rl.rank`` of this process."""
        return self._identity.rank

    def bind_identity(
        self,
        *,
        worker_group: str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        resource_attributes: Mapping[str, Any] | None = None,
    ) -> bool:
        """Name this process before its first span; returns False (and warns) if too late.

        OpenTelemetry fixes a process's resource when its provider is built, so identity can
        change only while the runtime is still deferred.
        """
        with self._lock:
            if self._materialized:
                warn_once(
                    f"bind-identity-late:{os.getpid()}",
                    "rlsight: bind_identity() called after this process emitted telemetry; "
                    f"it stays {self._identity.worker_group}/{self._identity.rank}. Pass "
                    "worker_group/rank to init_worker or rlsight.ray.worker_options instead",
                )
                return False
            if worker_group is not None:
                self._identity.worker_group = worker_group
            if rank is not None:
                self._identity.rank = rank
            if world_size is not None:
                self._identity.world_size = world_size
            if resource_attributes:
                self._identity.resource_attributes.update(resource_attributes)
            return True

    @property
    def prometheus_address(self) -> tuple[str, int] | None:
        """``(host, port)`` the Prometheus endpoint listens on (the port actually bound when
        ``prometheus_port=0``), or ``None`` when this process serves none."""
        endpoint = self._prometheus
        return None if endpoint is None else (endpoint.host, endpoint.port)

    @property
    def materialized(self) -> bool:
        """Whether the providers exist (identity is then fixed)."""
        return self._materialized

    # -- providers --------------------------------------------------------------------------
    @property
    def tracer(self) -> Tracer:
        """The tracer every rlsight helper uses (built on first use for a deferred worker)."""
        tracer = self._tracer
        if tracer is None:
            self._materialize()
            tracer = self._tracer
            assert tracer is not None
        return tracer

    def _start_span(self, name: str, attributes: dict[str, Any], start_time: int | None) -> Span:
        """Start one of rlsight's own spans (cleaned attributes) in the current context.

        The same SDK span the tracer would start, through :mod:`rlsight._lean` when it can
        (about half the cost); foreign spans never come here.
        """
        lean = self._lean  # set once the tracer exists
        if lean is not None:
            span = lean.start(name, attributes, start_time)
            if span is not None:
                return span
        return self.tracer.start_span(name, attributes=attributes, start_time=start_time)

    @property
    def meter(self) -> Meter:
        """The meter for rlsight's instruments."""
        meter = self._meter
        if meter is None:
            self._materialize()
            meter = self._meter
            assert meter is not None
        return meter

    def _resource_attributes(self) -> dict[str, Any]:
        ident = self._identity
        pid = os.getpid()
        attrs: dict[str, Any] = {
            SERVICE_NAME: self.config.service_name,
            SERVICE_INSTANCE_ID: f"{self.config.run_id}/{ident.worker_group}/{ident.rank}/{pid}",
            RUN_ID: self.config.run_id,
            RANK: ident.rank,
            WORLD_SIZE: ident.world_size,
            WORKER_GROUP: ident.worker_group,
            STAGE: "rl",
            PROCESS_PID: pid,
            HOST_NAME: socket.gethostname(),
        }
        if self.config.algorithm:
            attrs[ALGORITHM] = self.config.algorithm
        attrs.update(_host.host_attributes(os.environ))
        accelerators = _host.accelerator_ids(os.environ)
        if accelerators:
            attrs["hw.type"] = "gpu"
            attrs["hw.id"] = list(accelerators)
        devices = ident.devices if ident.devices is not None else (len(accelerators) or None)
        if devices is not None:
            attrs[DEVICES] = devices
        attrs.update(self.config.resource_attributes)
        attrs.update(ident.resource_attributes)
        return attrs

    def _materialize(self) -> None:
        with self._lock:
            if self._materialized:
                return
            if self._shut_down:
                raise TelemetryStateError("rlsight telemetry was shut down in this process")
            try:
                hook = _before_materialize
                if hook is not None:
                    hook()  # last chance to name the process (rlsight.ray: the actor's class)
                self._build_providers()
            except Exception as exc:
                # A worker whose telemetry cannot start (unwritable run_dir, missing exporter)
                # keeps running without it: close the gate so later spans cost nothing.
                self._shut_down = True
                if _ACTIVE is self:
                    _groups._deactivate()
                warn_once(
                    f"materialize-failed:{os.getpid()}",
                    f"rlsight: telemetry could not start in this process ({type(exc).__name__}: "
                    f"{exc}); the run continues without it",
                )
                raise

    def preload(self) -> None:
        """Import what building the providers needs, without fixing the identity.

        A deferred worker pays for the OpenTelemetry SDK imports on its first span, which
        lands in step 1 (~50-150 ms per process, issue #9). The Ray setup hook calls this, so
        that first span only builds the providers and opens the store files.
        """
        import opentelemetry.sdk.metrics
        import opentelemetry.sdk.metrics.export
        import opentelemetry.sdk.resources
        import opentelemetry.sdk.trace

        import rlsight._ids
        import rlsight.store._exporters
        import rlsight.store._sink  # noqa: F401

        if self.config.otlp_signal_endpoint("traces") or self.config.otlp_signal_endpoint("metrics"):
            import opentelemetry.sdk.trace.export  # noqa: F401

    def _build_providers(self) -> None:
        with self._lock:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider

            from rlsight import __version__
            from rlsight._ids import SeedIndependentIdGenerator

            self.resource_attributes = self._resource_attributes()
            resource = Resource.create(self.resource_attributes)
            tp = TracerProvider(resource=resource, shutdown_on_exit=False,
                                id_generator=SeedIndependentIdGenerator(), span_limits=_span_limits())
            readers: list[MetricReader] = []
            stem = _SAFE.sub("_", f"{self._identity.worker_group}-{self._identity.rank}-{os.getpid()}")
            if self._driver and self.config.prometheus_port is not None:
                readers.append(self._build_prometheus())
            try:
                if self.config.local_store:
                    readers.append(self._build_local_store(tp, stem))
                otlp_reader = self._build_otlp(tp)
                if otlp_reader is not None:
                    self._otlp_metric_reader = otlp_reader
                    readers.append(otlp_reader)
            except BaseException:
                if self._prometheus is not None:
                    self._prometheus.close()
                    self._prometheus = None
                raise
            for processor in self._extra_processors:
                tp.add_span_processor(processor)
            from rlsight._step_rollup import StepRollupProcessor, rollup_available

            # Every process: its busy time per window; the driver: each step's goodput too.
            if rollup_available(self._driver):
                self._rollup = StepRollupProcessor(self, steps=self._driver)
                tp.add_span_processor(self._rollup)
            readers.extend(self._extra_readers)
            mp = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
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
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        from rlsight._batching import BatchingSpanProcessor
        from rlsight.store._exporters import LocalMetricExporter, span_writer
        from rlsight.store._otlp_json import prepare_span
        from rlsight.store._sink import FileSink

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
        store = BatchingSpanProcessor(
            span_writer(span_sink, ship_spans), name="store", interval_s=_STORE_INTERVAL_MS / 1000,
            on_error=lambda exc: self.report_internal_error("store-write", exc),
            max_lag_s=STORE_MAX_LAG_S, on_drops=self._on_drops, prepare=prepare_span,
        )
        self._processors.append(store)
        tp.add_span_processor(store)
        self._build_start_records(tp, run_dir / "live" / f"{stem}.jsonl")
        # Metric points keep the same promise as spans: written every 50 ms, so a SIGKILL or
        # a ray.shutdown() loses at most the last 200 ms of them (it was 1 s; issue #18). The
        # reader gets no thread of its own (interval inf): its SDK thread could tick before
        # the MeterProvider registers it, which the SDK logs as a warning. _start_metric_writer
        # drives it once the provider exists.
        reader = PeriodicExportingMetricReader(
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
        from rlsight._batching import BatchingSpanProcessor
        from rlsight.store._live import process_line
        from rlsight.store._sink import FileSink
        from rlsight.store._start_writer import StartRecordProcessor, start_writer

        local = FileSink(path)
        self._sinks.append(local)
        sink: FileSink | ShippingSink = local
        if self._shipper is not None:  # the Ray transport ships start records too
            from rlsight.store._ray_sink import ShippingSink

            sink = ShippingSink(local, self._shipper, "live")
        sink.write(process_line(self.resource_attributes))
        self._starts_sink = sink
        self._starts = BatchingSpanProcessor(
            start_writer(sink), name="live", interval_s=_STORE_INTERVAL_MS / 1000,
            on_error=lambda exc: self.report_internal_error("store-live", exc),
        )
        tp.add_span_processor(StartRecordProcessor(self._starts))

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
            raise ConfigError(
                f"TelemetryConfig.prometheus_port={port}: cannot listen on {host}:{port} "
                f"({exc.strerror or exc}); choose a free port (0 picks one) or unset it"
            ) from exc
        return self._prometheus.reader

    def _build_otlp(self, tp: TracerProvider) -> MetricReader | None:
        """Exporters for each signal that has an endpoint; the metric reader, if any."""
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import SpanExportResult

        from rlsight._batching import BatchingSpanProcessor, span_size
        from rlsight.store._exporters import delta_temporality

        timeout_s = max(1.0, min(10.0, self.config.shutdown_timeout_ms / 1000))
        traces = self.config.otlp_signal_endpoint("traces")
        if traces is not None:
            span_exporter = _otlp_exporter("traces", self.config.otlp_signal_protocol("traces"),
                                           traces, timeout_s)

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
        metrics = self.config.otlp_signal_endpoint("metrics")
        if metrics is None:
            return None
        metric_exporter = _otlp_exporter("metrics", self.config.otlp_signal_protocol("metrics"),
                                         metrics, timeout_s, preferred_temporality=delta_temporality())
        return PeriodicExportingMetricReader(metric_exporter, export_interval_millis=_OTLP_METRIC_INTERVAL_MS)

    # -- run-scoped state the helpers share ---------------------------------------------------
    def add_efficiency_seconds(self, category: str, seconds: float, measurement: str = "span") -> None:
        """Accumulate time spent in an efficiency category.

        ``measurement`` says how it was measured: ``span`` (``efficiency_span``) or
        ``reported`` (``record_efficiency_seconds``).
        """
        key = (category, measurement)
        with self._efficiency_lock:
            self._efficiency[key] = self._efficiency.get(key, 0.0) + seconds

    def take_efficiency_seconds(self) -> dict[str, float]:
        """Efficiency seconds per category since the last call, all measurements summed."""
        out: dict[str, float] = {}
        for (category, _), seconds in self.take_efficiency_measurements().items():
            out[category] = out.get(category, 0.0) + seconds
        return out

    def take_efficiency_measurements(self) -> dict[tuple[str, str], float]:
        """Efficiency seconds per ``(category, measurement)`` since the last call (the tee)."""
        with self._efficiency_lock:
            out = dict(self._efficiency)
            self._efficiency.clear()
        return out

    def record_setup_duration(self, phase: str, seconds: float) -> None:
        """Record one startup phase on the ``rl.setup.duration`` histogram."""
        if self._setup_histogram is None:
            self._materialize()
        assert self._setup_histogram is not None
        self._setup_histogram.record(seconds, {"phase": phase})

    def report_internal_error(self, site: str, exc: BaseException) -> None:
        """Log an internal telemetry failure once per site and count it; raise when strict.

        The run is fine; only telemetry is reduced. Under ``strict=True`` (the test
        fixture) the error is raised so rlsight's own suite cannot hide it.
        """
        with self._efficiency_lock:
            self._internal_errors[site] += 1
            first = self._internal_errors[site] == 1
        if self.config.strict:
            raise exc
        if first:
            _log.warning(
                "rlsight: internal telemetry error at %s; the run continues with less "
                "telemetry (further errors here are counted, not logged)", site, exc_info=exc,
            )

    def _internal_error_counts(self) -> dict[str, int]:
        with self._efficiency_lock:
            return dict(self._internal_errors)

    # -- flush ------------------------------------------------------------------------------
    def flush(self, timeout_ms: int | None = None) -> bool:
        """Write every span ended and metric point recorded so far, within ``timeout_ms``.

        The local store gets them first (it is local disk), then the collector gets what is
        left of the budget (default ``config.shutdown_timeout_ms``). Telemetry stays set up.
        Call it in an actor before ``ray.kill`` (which runs no exit hook) to keep even the
        last 200 ms the periodic writes could lose. Returns whether everything was written
        in time; a runtime that never emitted anything has nothing to write and returns True.
        """
        budget_s = (timeout_ms if timeout_ms is not None else self.config.shutdown_timeout_ms) / 1000
        deadline = time.monotonic() + budget_s

        def left_ms() -> int:
            return max(0, int((deadline - time.monotonic()) * 1000))

        with self._lock:
            if not self._materialized or self._shut_down:
                return True
            from rlsight._batching import bounded

            ok = True
            if self._rollup is not None:
                self._rollup.cut()  # the busy time up to now, before the metrics are written
            for proc in sorted(self._processors, key=lambda p: p.name != "store"):
                ok = proc.force_flush(left_ms()) and ok
            # rlsight's own readers only: flushing a caller's reader (the in-memory one of
            # rlsight.testing) would hand its points to a collection nobody reads.
            for reader in (self._local_metric_reader, self._otlp_metric_reader):
                if reader is not None:
                    flush = functools.partial(_flush_reader, reader, left_ms())
                    ok = bounded(flush, left_ms() / 1000) and ok
            return ok

    # -- shutdown ---------------------------------------------------------------------------
    def shutdown(self, timeout_ms: int | None = None) -> ShutdownReport:
        """Flush and close within ``timeout_ms`` (default ``config.shutdown_timeout_ms``).

        Order: stop new spans, flush the local store (local disk, fast), flush metrics to
        the store, then give collectors whatever time is left. A hung collector costs at most
        the budget; what it did not take is counted in the report.
        """
        global _ACTIVE
        budget_s = (timeout_ms if timeout_ms is not None else self.config.shutdown_timeout_ms) / 1000
        t0 = time.monotonic()
        deadline = t0 + budget_s

        def left_ms() -> int:
            return max(0, int((deadline - time.monotonic()) * 1000))

        with self._lock:
            if _ACTIVE is self:
                _ACTIVE = None
                _groups._deactivate()
            if self._shut_down:  # again, or after a failed start: nothing left but the errors
                return ShutdownReport(0.0, False, internal_errors=self._internal_error_counts())
            self._shut_down = True
            ok = True
            if self.watchdog is not None:
                self.watchdog.stop(min(1.0, left_ms() / 1000))
            if self._materialized:
                from rlsight._batching import bounded

                # Everything bound for local disk first: a collector that hangs may take the
                # rest of the budget, and must not leave the store's last metric points unwritten.
                local = [p for p in self._processors if p.name == "store"]
                for proc in local:
                    ok = proc.shutdown(left_ms()) and ok
                ok = self._close_start_records(left_ms()) and ok
                if self._rollup is not None:
                    self._rollup.shutdown()
                    self._rollup.cut()  # the last window, before the metrics are written
                self._metric_writer_stop.set()
                if self._local_metric_reader is not None:
                    reader = self._local_metric_reader
                    ok = bounded(lambda: bool(reader.force_flush(left_ms())), left_ms() / 1000) and ok
                for proc in self._processors:
                    if proc not in local:
                        ok = proc.shutdown(left_ms()) and ok
                mp, tp = self._meter_provider, self._tracer_provider
                assert mp is not None and tp is not None
                ok = bounded(lambda: _shutdown_meters(mp, left_ms()), left_ms() / 1000) and ok
                endpoint = self._prometheus
                if endpoint is not None:
                    ok = bounded(lambda: _quiet(endpoint.close), left_ms() / 1000) and ok
                for extra in self._extra_processors:
                    bounded(functools.partial(_flush, extra, left_ms()), left_ms() / 1000)
                ok = bounded(lambda: _quiet(tp.shutdown), left_ms() / 1000) and ok
                for sink in self._sinks:
                    sink.close()
            exported = {p.name: p.exported for p in self._processors}
            dropped = {
                f"{p.name}/{reason}": n for p in self._processors for reason, n in p.dropped.items() if n
            }
            ok = self._stop_ray_transport(left_ms() / 1000, exported, dropped) and ok
            if self._span_sink is not None and self._span_sink.lost:
                # Written, then deleted with the run folder: lost all the same.
                dropped["store/run_dir_deleted"] = self._span_sink.lost
            undelivered = any(key.endswith(_UNDELIVERED) for key in dropped)
            report = ShutdownReport((time.monotonic() - t0) * 1000, not ok or undelivered,
                                    exported, dropped, self._internal_error_counts())
        if report.dropped_total:
            _log.warning("rlsight: shutdown dropped %d spans (%s); the local store keeps what it "
                         "wrote", report.dropped_total, dict(report.dropped))
        elif report.timed_out:
            _log.warning("rlsight: shutdown did not deliver everything to the collector within "
                         "%.0f ms; the local store keeps what it wrote", budget_s * 1000)
        store_errors = [e for p in self._processors if p.name == "store" for e in p.errors]
        store_errors += self._metric_errors
        if self.config.strict and store_errors:
            # Writing the local store failed on its thread: an rlsight bug a strict run
            # (rlsight's own tests) must see. A collector being down is not one.
            raise store_errors[0]
        return report

    def _close_start_records(self, timeout_ms: int) -> bool:
        """Flush start records, then mark this process's clean shutdown in its live file."""
        if self._starts is None or self._starts_sink is None:
            return True
        from rlsight.store._live import shutdown_line

        done = self._starts.shutdown(timeout_ms)
        try:
            self._starts_sink.write(shutdown_line())
        except OSError as exc:
            self.report_internal_error("store-live", exc)
            return False
        return done

    def _stop_ray_transport(self, budget_s: float, exported: dict[str, int],
                            dropped: dict[str, int]) -> bool:
        """Ship what is left to the Ray sink (a worker) or stop the sink (the driver)."""
        shipper, starter = self._shipper, self._sink_starter
        if shipper is not None:
            shipper.close(budget_s)
            exported["ray"] = shipper.shipped
            dropped.update({f"ray/{reason}": n for reason, n in shipper.dropped.items() if n})
            return not shipper.dropped.get("shutdown_timeout")
        if starter is not None:
            starter.stop(budget_s)
        return True

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _otlp_exporter(
    signal: str, protocol: str, endpoint: str, timeout_s: float, **options: Any
) -> Any:
    """One OTLP exporter of ``signal`` (``traces`` or ``metrics``) for ``protocol``.

    OpenTelemetry's Python SDK has no http/json exporter: ``http/json`` is sent as
    http/protobuf to the same URL (OTLP/HTTP receivers such as the Collector take both on
    one path), after one warning, rather than failing a run over an encoding.
    """
    if protocol == "grpc":
        try:
            grpc_exporter: Any
            if signal == "traces":
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                    OTLPSpanExporter as GrpcSpanExporter,
                )

                grpc_exporter = GrpcSpanExporter
            else:
                from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                    OTLPMetricExporter as GrpcMetricExporter,
                )

                grpc_exporter = GrpcMetricExporter
        except ImportError as exc:
            raise ConfigError(
                "TelemetryConfig.otlp_protocol='grpc' needs the gRPC exporter: "
                "pip install 'rlsight[grpc]' (or use 'http/protobuf')"
            ) from exc
        target = endpoint.split("://", 1)[-1]
        return grpc_exporter(endpoint=target, insecure=not endpoint.startswith("https://"),
                            timeout=timeout_s, **options)
    if protocol == "http/json":
        warn_once(
            f"otlp-http-json:{signal}",
            f"rlsight: OTLP protocol 'http/json' for {signal}: the Python OpenTelemetry SDK has "
            f"no JSON exporter, so {signal} go to {endpoint} as http/protobuf (OTLP/HTTP "
            "receivers such as the Collector accept both); set 'http/protobuf' to silence this",
        )
    if signal == "traces":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s, **options)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=endpoint, timeout=timeout_s, **options)


def _flush(processor: SpanProcessor, timeout_ms: int) -> bool:
    return bool(processor.force_flush(timeout_ms))


def _flush_reader(reader: MetricReader, timeout_ms: int) -> bool:
    return bool(reader.force_flush(timeout_ms))


def _shutdown_meters(mp: Any, timeout_ms: int) -> bool:
    """Shut the meter provider down; a reader that fails is an undelivered export, not a warning.

    The SDK raises when a metric reader (the OTLP one, against a collector that is down) cannot
    finish within what is left of the budget. The report already says ``timed_out`` and
    shutdown logs one line for it; a second line quoting the SDK would only repeat it.
    """
    try:
        mp.shutdown(timeout_millis=timeout_ms)
    except Exception:  # the SDK aggregates every reader's failure into one plain Exception
        _log.debug("rlsight: a metric reader failed to shut down", exc_info=True)
        return False
    return True


def _quiet(fn: Any) -> bool:
    result = fn()
    return result is None or bool(result)


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


_ACTIVE: Telemetry | None = None
_ACTIVE_LOCK = threading.Lock()
#: Called (under the runtime's lock) just before a deferred runtime builds its providers, when
#: its identity is about to be fixed. rlsight.ray sets it in Ray workers to name an actor after
#: its class even when an undecorated method emits first. It must not raise.
_before_materialize: Callable[[], None] | None = None
_ATEXIT_REGISTERED = False


def active_runtime() -> Telemetry | None:
    """The process's telemetry while it is set up, else ``None``."""
    return _ACTIVE


def _install(telemetry: Telemetry) -> Telemetry:
    global _ACTIVE, _ATEXIT_REGISTERED
    with _ACTIVE_LOCK:
        if _ACTIVE is not None:
            raise TelemetryStateError(
                "rlsight telemetry is already set up in this process (worker group "
                f"{_ACTIVE.worker_group!r}, run {_ACTIVE.config.run_id!r}); call "
                "shutdown_telemetry() first, or use the handle the first call returned"
            )
        _ACTIVE = telemetry
        if not _ATEXIT_REGISTERED:
            atexit.register(_shutdown_at_exit)
            os.register_at_fork(after_in_child=_restart_after_fork)
            _ATEXIT_REGISTERED = True
    _groups._activate(telemetry.config.span_groups)
    return telemetry


def _restart_after_fork() -> None:
    """Give a forked child telemetry of its own instead of the parent's dead one.

    A fork copies the parent's runtime without its export threads, so every span the child
    ended would sit in a queue nobody drains, in a file named after the parent's pid. The
    child gets a fresh, deferred runtime with the same config and identity: its own
    ``process.pid``, ``service.instance.id`` and store files, built on its first span. Locks
    another parent thread held at fork time are replaced, not waited on.
    """
    global _ACTIVE, _ACTIVE_LOCK
    from rlsight.errors import after_fork as _errors_after_fork

    _ACTIVE_LOCK = threading.Lock()
    _groups.after_fork()
    _errors_after_fork()
    parent = _ACTIVE
    _ACTIVE = None
    if parent is None or parent._shut_down:
        _groups._deactivate()
        return
    ident = parent._identity
    child = Telemetry(
        parent.config,
        _Identity(ident.worker_group, ident.rank, ident.world_size, ident.devices,
                  dict(ident.resource_attributes)),
        deferred=True,
    )
    _install(child)


def _shutdown_at_exit() -> None:
    if _ACTIVE is not None:
        _ACTIVE.shutdown()


def setup_telemetry(
    config: TelemetryConfig | None = None,
    *,
    worker_group: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    on_stall: StallHook | None = None,
) -> Telemetry:
    """Set up telemetry in the driver (or any process that owns the run) and return it.

    Builds the tracer and meter providers, writes ``<run_dir>/manifest.json`` and turns on
    the span groups of ``config.span_groups``. Every field ``config`` was not given is read
    from ``RLSIGHT_<FIELD>``, then from its standard ``OTEL_*`` variable, then defaulted
    (explicit > ``RLSIGHT_*`` > ``OTEL_*`` > default); the handle's ``config`` is the result.

    The identity arguments name this process. Left out, each comes from its ``RLSIGHT_*``
    variable (``RLSIGHT_WORKER_GROUP``, ``RLSIGHT_RANK``, ``RLSIGHT_WORLD_SIZE``), so every
    process a torchrun-style launcher starts can call ``setup_telemetry()`` as it is and
    still be told apart; without the variable the default applies. An argument wins over
    its variable.

    Args:
        config: The run's config; ``None`` reads it from the environment.
        worker_group: ``rl.worker_group`` of this process (default ``"driver"``).
        rank: ``rl.rank`` (default 0).
        world_size: ``rl.world_size`` (default 1).
        resource_attributes: Extra resource attributes; they win over detected ones.
        on_stall: Called with a :class:`~rlsight.StallRecord` when the stall watchdog fires
            (``config.stall_after_s`` / ``stall_after_steps``), on the watchdog's thread: dump
            stacks, page someone, or abort the job. What it raises is logged, not propagated.

    Raises:
        TelemetryStateError: telemetry is already set up in this process.
        ConfigError: the config cannot be used (bad endpoint protocol extra, unwritable dir).
    """
    config = config.with_env_fallbacks() if config is not None else TelemetryConfig.from_env()
    env = os.environ
    identity = _Identity(
        worker_group or env.get(ENV_WORKER_GROUP) or "driver",
        rank if rank is not None else _env_int(env, ENV_RANK, 0),
        world_size if world_size is not None else _env_int(env, ENV_WORLD_SIZE, 1),
        _env_devices(),
        dict(resource_attributes or {}),
    )
    telemetry = Telemetry(config, identity, deferred=True, driver=True, ship_store=False)
    if not config.enabled:
        return telemetry
    if not config.span_groups:
        warn_once(
            "span-groups-empty",
            "rlsight: span_groups is empty, so no span is emitted (only metrics are recorded); "
            "name groups or a preset ('per_step', 'minimal'), or set enabled=False to turn "
            "telemetry off",
            stacklevel=2,
        )
    if _ACTIVE is not None:
        _install(telemetry)  # raises the clear error
    if config.store_transport == "ray" and not config.local_store:
        raise ConfigError(
            "TelemetryConfig.store_transport='ray' ships what each process's local store "
            "writes; set local_store=True, or store_transport='file'"
        )
    if config.local_store:
        from rlsight._catalog import run_catalog
        from rlsight.store._manifest import write_manifest

        try:
            write_manifest(config, started_ns=telemetry.started_ns,
                           catalog=run_catalog(_groups.resolve_span_group_spec(config.span_groups)))
        except OSError as exc:
            raise ConfigError(
                f"TelemetryConfig.run_dir={config.run_dir!r} is not writable ({exc.strerror}); "
                "choose another folder or set local_store=False"
            ) from exc
    try:
        # Not _materialize(): in the driver a store that cannot be opened is a setup error to
        # raise now, not a warning to run on without telemetry.
        telemetry._build_providers()
    except OSError as exc:
        raise ConfigError(
            f"TelemetryConfig.run_dir={config.run_dir!r}: cannot open the local store "
            f"({exc.strerror}: {exc.filename}); choose another folder or set local_store=False"
        ) from exc
    if config.stall_after_s is not None or config.stall_after_steps is not None:
        from rlsight.watchdog import Watchdog

        telemetry.watchdog = Watchdog(config, on_stall)
    elif on_stall is not None:
        warn_once("on-stall-without-threshold",
                  "rlsight: setup_telemetry(on_stall=...) has no effect: set "
                  "TelemetryConfig.stall_after_s or stall_after_steps to turn the watchdog on",
                  stacklevel=2)
    if config.store_transport == "ray":
        from rlsight.store._ray_sink import SinkStarter

        telemetry._sink_starter = SinkStarter(
            str(config.run_id), config.run_path,
            on_error=lambda exc: telemetry.report_internal_error("ray-sink-start", exc),
        )
    return _install(telemetry)


def init_worker(
    *,
    worker_group: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    deferred: bool = False,
) -> Telemetry | None:
    """Set up telemetry in a worker process from the driver's ``RLSIGHT_*`` projection.

    Returns ``None`` (and does nothing) when the environment carries no rlsight config or
    says telemetry is off. Calling it again in a process that is already set up returns the
    existing runtime, so a setup hook and an explicit call do not fight.

    Args:
        worker_group: ``rl.worker_group``; default ``$RLSIGHT_WORKER_GROUP`` or ``"worker"``.
        rank: ``rl.rank``; default ``$RLSIGHT_RANK`` or 0.
        world_size: ``rl.world_size``; default ``$RLSIGHT_WORLD_SIZE`` or 1.
        resource_attributes: Extra resource attributes for this process.
        environ: Where to read the projection (default ``os.environ``).
        deferred: Build providers on first use, so :meth:`Telemetry.bind_identity` can
            still name the process (Ray's process setup hook runs before the actor exists).
    """
    env = os.environ if environ is None else environ
    if not any(k.startswith("RLSIGHT_") for k in env):
        return None
    config = TelemetryConfig.from_env(env)
    if not config.enabled:
        return None
    existing = _ACTIVE
    if existing is not None:
        if worker_group is not None or rank is not None:
            existing.bind_identity(worker_group=worker_group, rank=rank, world_size=world_size,
                                   resource_attributes=resource_attributes)
        return existing
    identity = _Identity(
        worker_group or env.get(ENV_WORKER_GROUP) or "worker",
        rank if rank is not None else _env_int(env, ENV_RANK, 0),
        world_size if world_size is not None else _env_int(env, ENV_WORLD_SIZE, 1),
        _env_devices(env),
        dict(resource_attributes or {}),
    )
    return _install(Telemetry(config, identity, deferred=deferred))


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected an integer") from None


def _env_devices(env: Mapping[str, str] | None = None) -> int | None:
    env = os.environ if env is None else env
    if not env.get(ENV_DEVICES):
        return None
    devices = _env_int(env, ENV_DEVICES, 1)
    if devices < 1:
        raise ConfigError(
            f"{ENV_DEVICES}={env[ENV_DEVICES]!r}: expected a positive integer (the accelerators "
            "this process drives); unset it for a process without any"
        )
    return devices


def flush_telemetry(timeout_ms: int | None = None) -> bool:
    """Write what this process recorded so far to the store (and collector); see :meth:`Telemetry.flush`.

    True when everything was written within ``timeout_ms``; True (nothing to do) when
    telemetry is not set up in this process.
    """
    telemetry = _ACTIVE
    return True if telemetry is None else telemetry.flush(timeout_ms)


def shutdown_telemetry(timeout_ms: int | None = None) -> ShutdownReport:
    """Shut down the process's telemetry within ``timeout_ms``; a no-op report if none is set up."""
    telemetry = _ACTIVE
    if telemetry is None:
        return ShutdownReport(0.0, False)
    return telemetry.shutdown(timeout_ms)
