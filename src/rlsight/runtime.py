"""The telemetry of one process: the :class:`Telemetry` object and the process's slot for it.

One :class:`Telemetry` object per process holds the providers, the store writers and the
run-scoped state the helpers need (efficiency seconds, propagation caches, the step rollup's
instruments). Module functions delegate to it; there is no OpenTelemetry global to set or to
poke, so tests build a fresh one each time (see :mod:`rlsight.testing`).

The rest of the lifecycle lives next door, one concern per module: :mod:`rlsight._setup`
(``setup_telemetry``, ``init_worker``), :mod:`rlsight._identity` (who the process is),
:mod:`rlsight._providers` (building the providers and exporters) and :mod:`rlsight._shutdown`
(flush and shutdown within a budget).
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlsight import groups as _groups
from rlsight._identity import Identity
from rlsight._run_state import RunState
from rlsight._shutdown import Closer, ShutdownReport
from rlsight.config import TelemetryConfig
from rlsight.errors import TelemetryStateError, warn_once

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
    from rlsight._step_rollup import StepRollupProcessor
    from rlsight.store._ray_sink import ShippingSink, SinkStarter, StoreShipper
    from rlsight.store._sink import FileSink
    from rlsight.store._start_writer import StartRecordProcessor
    from rlsight.watchdog import Watchdog

__all__ = [
    "ShutdownReport",
    "Telemetry",
    "active_runtime",
    "flush_telemetry",
    "shutdown_telemetry",
]

_log = logging.getLogger("rlsight")


class Telemetry(Closer):
    """The telemetry of one process. Returned by :func:`setup_telemetry` and :func:`init_worker`.

    Use it as a context manager to shut down at the end of a block. Its providers are built
    when it is created, except for a worker set up with ``deferred=True``: those wait until
    the first span or metric, so a Ray actor can still name its worker group
    (:meth:`bind_identity`) after its process started.
    """

    def __init__(
        self,
        config: TelemetryConfig,
        identity: Identity,
        *,
        deferred: bool = False,
        span_processors: Sequence[SpanProcessor] = (),
        metric_readers: Sequence[MetricReader] = (),
        driver: bool = False,
        ship_store: bool = True,
        clock: Callable[[], int] | None = None,
        id_generator: IdGenerator | None = None,
    ) -> None:
        self.config = config
        #: Where rlsight's own spans take their start and end times (ns since the epoch), and
        #: the run window its wall time: ``None`` is the SDK's wall clock. ``rlsight.testing``
        #: passes a :class:`~rlsight.testing.FakeClock` so tests need not sleep.
        self.clock = clock
        self._id_generator = id_generator
        self._driver = driver
        # The driver writes the run folder the Ray sink appends to: it ships nothing.
        self._ship_store = ship_store and config.store_transport == "ray"
        self._identity = identity
        self._extra_processors = tuple(span_processors)
        self._extra_readers = tuple(metric_readers)
        self._lock = threading.RLock()
        self._materialized = False
        self._shut_down = False
        self.started_ns = self.now_ns()
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
        self._starts: StartRecordProcessor | None = None
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
        #: What the instrumentation helpers keep between calls during this run (internal:
        #: propagation caches, run-window efficiency, instruments, rlsight.ray's hooks).
        self.run_state = RunState()
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

    @property
    def meter(self) -> Meter:
        """The meter for rlsight's instruments."""
        meter = self._meter
        if meter is None:
            self._materialize()
            meter = self._meter
            assert meter is not None
        return meter

    def _materialize(self) -> None:
        with self._lock:
            if self._materialized:
                return
            if self._shut_down:
                raise TelemetryStateError("rlsight telemetry was shut down in this process")
            try:
                hook = self.run_state.before_materialize
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

    def now_ns(self) -> int:
        """Now on this runtime's clock (ns since the epoch): see :attr:`clock`."""
        clock = self.clock
        return time.time_ns() if clock is None else clock()

    def _release(self) -> None:
        """Stop being the process's telemetry: shutdown's first step (no new spans)."""
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None
            _groups._deactivate()

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


#: The process's slot: at most one runtime per process, because OpenTelemetry's resource (and
#: so a process's identity in the run) is per process. Process-scoped on purpose, and a plain
#: module global because every emit helper reads it first (``runtime._ACTIVE``): one lookup.
#: Everything that belongs to a run lives on the Telemetry in it (``run_state``).
_ACTIVE: Telemetry | None = None
_ACTIVE_LOCK = threading.Lock()
#: Whether the exit and fork hooks are installed: they are process-wide and installed once.
_ATEXIT_REGISTERED = False


def active_runtime() -> Telemetry | None:
    """The process's telemetry while it is set up, else ``None``."""
    return _ACTIVE


def install(telemetry: Telemetry) -> Telemetry:
    """Make ``telemetry`` the process's telemetry and turn its span groups on.

    Setup (:mod:`rlsight._setup`), the fork hook and :mod:`rlsight.testing` come through here;
    the first call also installs the process's exit and fork hooks.

    Raises:
        TelemetryStateError: the process already has telemetry set up.
    """
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


def set_aside_active() -> Telemetry | None:
    """Empty the process's slot and return what it held (:mod:`rlsight.testing` nests a capture
    inside a set-up process with it, then hands the runtime back with :func:`restore_active`)."""
    global _ACTIVE
    with _ACTIVE_LOCK:
        previous, _ACTIVE = _ACTIVE, None
    return previous


def restore_active(telemetry: Telemetry) -> None:
    """Make ``telemetry`` the process's telemetry again, its span groups on again."""
    global _ACTIVE
    with _ACTIVE_LOCK:
        _ACTIVE = telemetry
    _groups._activate(telemetry.config.span_groups)


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
        Identity(ident.worker_group, ident.rank, ident.world_size, ident.devices,
                 dict(ident.resource_attributes)),
        deferred=True,
        clock=parent.clock,
    )
    # rlsight.ray's naming hooks still apply: the child hosts the same actor (or none).
    child.run_state.first_call_hook = parent.run_state.first_call_hook
    child.run_state.before_materialize = parent.run_state.before_materialize
    install(child)


def _shutdown_at_exit() -> None:
    if _ACTIVE is not None:
        _ACTIVE.shutdown()


def flush_telemetry(timeout_ms: int | None = None) -> bool:
    """Write what this process recorded so far to the store (and collector); see :meth:`Telemetry.flush`.

    True when everything was handed over within ``timeout_ms`` (a batch the collector refused
    is counted as dropped, not reported here); True (nothing to do) when telemetry is not set
    up in this process.
    """
    telemetry = _ACTIVE
    return True if telemetry is None else telemetry.flush(timeout_ms)


def shutdown_telemetry(timeout_ms: int | None = None) -> ShutdownReport:
    """Shut down the process's telemetry within ``timeout_ms``; a no-op report if none is set up."""
    telemetry = _ACTIVE
    if telemetry is None:
        return ShutdownReport(0.0, False)
    return telemetry.shutdown(timeout_ms)
