"""rlsight: OpenTelemetry tracing, metrics and goodput accounting for RL post-training on Ray.

The public API is re-exported here; ``import rlsight`` stays light (no Ray, aiohttp, numpy or
duckdb), so instrumented code can import it anywhere.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from rlsight.buckets import Bucket, BucketName, bucket_scope, per_prompt_scope
from rlsight.config import SETTINGS, Setting, TelemetryConfig
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
from rlsight.runtime import (
    ShutdownReport,
    Telemetry,
    init_worker,
    setup_telemetry,
    shutdown_telemetry,
)
from rlsight.spans import (
    declare_efficiency_categories,
    declared_efficiency_categories,
    efficiency_span,
    job_span,
    load_model_span,
    setup_span,
    span,
    startup_span,
    step_span,
    traced,
    umbrella_span,
    umbrella_traced,
)

try:
    __version__ = _metadata.version("rlsight")
except _metadata.PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0"

__all__ = [
    "RL",
    "SETTINGS",
    "Bucket",
    "BucketName",
    "ConfigError",
    "MetricSpecError",
    "RlsightError",
    "RlsightWarning",
    "Setting",
    "ShutdownReport",
    "SpanGroup",
    "SpanGroupError",
    "SpanGroupResolution",
    "StoreError",
    "Telemetry",
    "TelemetryConfig",
    "TelemetryStateError",
    "__version__",
    "bucket_scope",
    "declare_efficiency_categories",
    "declared_efficiency_categories",
    "efficiency_span",
    "init_worker",
    "is_span_group_enabled",
    "job_span",
    "load_model_span",
    "per_prompt_scope",
    "register_span_groups",
    "registered_groups",
    "registered_presets",
    "resolve_span_group_spec",
    "set_span_group_spec",
    "setup_span",
    "setup_telemetry",
    "shutdown_telemetry",
    "span",
    "startup_span",
    "step_span",
    "traced",
    "umbrella_span",
    "umbrella_traced",
]
