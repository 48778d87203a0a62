"""rlsight: OpenTelemetry tracing, metrics and goodput accounting for RL post-training on Ray.

The public API is re-exported here; ``import rlsight`` stays light (no Ray, aiohttp, numpy or
duckdb), so instrumented code can import it anywhere.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from rlsight._setup import init_worker, setup_telemetry
from rlsight.buckets import Bucket, BucketName, bucket_scope, per_prompt_scope
from rlsight.config import SETTINGS, Setting, TelemetryConfig
from rlsight.discards import discard
from rlsight.errors import (
    ConfigError,
    MetricSpecError,
    RlsightError,
    RlsightWarning,
    SpanGroupError,
    StoreError,
    TelemetryStateError,
)
from rlsight.groups import (
    RL,
    SpanGroup,
    SpanGroupResolution,
    is_span_group_enabled,
    register_span_groups,
    registered_groups,
    registered_presets,
    resolve_span_group_spec,
    set_span_group_spec,
)
from rlsight.logs import instrument_logging, uninstrument_logging
from rlsight.metrics import (
    MetricSpec,
    record_inference,
    record_metrics,
    register_metric_group,
    registered_metric_groups,
    tee_step_metrics,
)
from rlsight.propagation import (
    TRACE_CONTEXT_KWARG,
    accepts_trace_context,
    attach_trace_carrier,
    current_trace_carrier,
    dispatch_with_trace_context,
    trace_context_kwargs,
)
from rlsight.ray import ray_runtime_env
from rlsight.runtime import (
    ShutdownReport,
    Telemetry,
    flush_telemetry,
    shutdown_telemetry,
)
from rlsight.span_context import SpanContextManager
from rlsight.spans import (
    declare_efficiency_categories,
    declared_efficiency_categories,
    efficiency_span,
    job_span,
    load_model_span,
    record_efficiency_seconds,
    record_span,
    setup_span,
    span,
    startup_span,
    step_span,
    traced,
    umbrella_span,
    umbrella_traced,
)
from rlsight.step_summary import last_step_summary
from rlsight.timers import TimerBridge
from rlsight.watchdog import StallHook, StallRecord

try:
    __version__ = _metadata.version("rlsight")
except _metadata.PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0"

__all__ = [
    "RL",
    "SETTINGS",
    "TRACE_CONTEXT_KWARG",
    "Bucket",
    "BucketName",
    "ConfigError",
    "MetricSpec",
    "MetricSpecError",
    "RlsightError",
    "RlsightWarning",
    "Setting",
    "ShutdownReport",
    "SpanContextManager",
    "SpanGroup",
    "SpanGroupError",
    "SpanGroupResolution",
    "StallHook",
    "StallRecord",
    "StoreError",
    "Telemetry",
    "TelemetryConfig",
    "TelemetryStateError",
    "TimerBridge",
    "__version__",
    "accepts_trace_context",
    "attach_trace_carrier",
    "bucket_scope",
    "current_trace_carrier",
    "declare_efficiency_categories",
    "declared_efficiency_categories",
    "discard",
    "dispatch_with_trace_context",
    "efficiency_span",
    "flush_telemetry",
    "init_worker",
    "instrument_logging",
    "is_span_group_enabled",
    "job_span",
    "last_step_summary",
    "load_model_span",
    "per_prompt_scope",
    "ray_runtime_env",
    "record_efficiency_seconds",
    "record_inference",
    "record_metrics",
    "record_span",
    "register_metric_group",
    "register_span_groups",
    "registered_groups",
    "registered_metric_groups",
    "registered_presets",
    "resolve_span_group_spec",
    "set_span_group_spec",
    "setup_span",
    "setup_telemetry",
    "shutdown_telemetry",
    "span",
    "startup_span",
    "step_span",
    "tee_step_metrics",
    "trace_context_kwargs",
    "traced",
    "umbrella_span",
    "umbrella_traced",
    "uninstrument_logging",
]
