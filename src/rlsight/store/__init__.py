"""The local store: OTLP/JSON lines under ``<run_dir>/traces`` and ``<run_dir>/metrics``.

Layout (format version :data:`STORE_FORMAT`)::

    <run_dir>/manifest.json                      run id, config, versions, start time
    <run_dir>/traces/<group>-<rank>-<pid>.jsonl  one ExportTraceServiceRequest per line
    <run_dir>/metrics/<group>-<rank>-<pid>.jsonl one ExportMetricsServiceRequest per line

One file per process and kind, so processes never share a file and a new record kind gets a
folder of its own without changing the existing ones. The files are valid input for an
OpenTelemetry Collector's OTLP JSON file receiver; what a Collector's file exporter writes
is read back as runs with :func:`split_collector_files`.
"""

from __future__ import annotations

from rlsight.store._collector import CollectorRun, CollectorSplit, split_collector_files
from rlsight.store._manifest import STORE_FORMAT, SUPPORTED_STORE_FORMATS, read_manifest
from rlsight.store._reader import (
    MetricPoint,
    MetricReadResult,
    SpanReadResult,
    read_metrics,
    read_spans,
)
from rlsight.store._schema import SkippedRecord, SpanRecord

__all__ = [
    "STORE_FORMAT",
    "SUPPORTED_STORE_FORMATS",
    "CollectorRun",
    "CollectorSplit",
    "MetricPoint",
    "MetricReadResult",
    "SkippedRecord",
    "SpanReadResult",
    "SpanRecord",
    "read_manifest",
    "read_metrics",
    "read_spans",
    "split_collector_files",
]
