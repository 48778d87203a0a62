"""Flushing and shutting down a process's telemetry within a time budget.

:class:`Closer` is the part of :class:`~rlsight.runtime.Telemetry` that delivers what was
recorded: the local store first (local disk, fast), then the collector with whatever time is
left. A hung collector costs at most the budget; what it did not take is counted in the
:class:`ShutdownReport`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from rlsight._providers import ProviderBuilder

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import SpanProcessor

    from rlsight.store._ray_sink import SinkStarter
    from rlsight.watchdog import Watchdog

__all__ = ["Closer", "ShutdownReport"]

_log = logging.getLogger("rlsight")

#: Drop reasons that mean an exporter did not deliver (``queue_full`` and ``after_shutdown``
#: are spans that never reached an exporter, counted but not a delivery failure).
_UNDELIVERED: Final = ("/export_failed", "/shutdown_timeout", "/run_dir_deleted")


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


class Closer(ProviderBuilder):
    """The flush-and-shutdown part of :class:`~rlsight.runtime.Telemetry` (a mixin).

    It closes what :class:`~rlsight._providers.ProviderBuilder` built, plus the fields below.
    """

    watchdog: Watchdog | None
    _shut_down: bool
    _sink_starter: SinkStarter | None
    _release: Callable[[], None]
    _internal_error_counts: Callable[[], dict[str, int]]

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
        budget_s = (timeout_ms if timeout_ms is not None else self.config.shutdown_timeout_ms) / 1000
        t0 = time.monotonic()
        deadline = t0 + budget_s

        def left_ms() -> int:
            return max(0, int((deadline - time.monotonic()) * 1000))

        with self._lock:
            self._release()  # no new spans from here on
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
        from rlsight._batching import bounded
        from rlsight.store._live import shutdown_line

        done = bounded(self._starts.close, timeout_ms / 1000)
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

