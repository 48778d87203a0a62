"""The periodic metric reader of the local store and OTLP: the SDK's, pruning after collecting.

Imported only when a provider is built (it imports the OpenTelemetry SDK).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics.export import MetricsData, PeriodicExportingMetricReader

from rlsight._step_series import PrunesAfterCollect

__all__ = ["PrunedPeriodicReader"]


class PrunedPeriodicReader(PrunesAfterCollect, PeriodicExportingMetricReader):
    """A ``PeriodicExportingMetricReader`` whose collections drop finished steps' series.

    Its own thread, ``force_flush`` and rlsight's store writer all collect through
    ``collect``, which hands each collection's points here; once exported, :meth:`StepSeries.
    after_collect <rlsight._step_series.StepSeries.after_collect>` prunes (the provider sets
    the hook).
    """

    def _receive_metrics(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any,
    ) -> None:
        try:
            super()._receive_metrics(metrics_data, timeout_millis, **kwargs)
        finally:  # the deltas are taken whether or not the export worked
            self._collected()
