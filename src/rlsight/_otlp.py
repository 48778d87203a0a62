"""The OTLP exporters of a process: one per signal that has an endpoint, for its protocol.

Built before the local store opens its files, so a protocol whose extra is missing is a
``ConfigError`` at setup that leaves nothing behind; building one opens no file and starts no
thread.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from rlsight.errors import ConfigError, warn_once

if TYPE_CHECKING:
    from rlsight.config import TelemetryConfig

__all__ = ["otlp_exporters"]


def otlp_exporters(config: TelemetryConfig) -> tuple[Any, Any]:
    """The span and the metric exporter of ``config``, ``None`` for a signal without endpoint."""
    from rlsight.store._exporters import delta_temporality

    timeout_s = max(1.0, min(10.0, config.shutdown_timeout_ms / 1000))
    traces = config.otlp_signal_endpoint("traces")
    metrics = config.otlp_signal_endpoint("metrics")
    span_exporter = None if traces is None else _otlp_exporter(
        "traces", config.otlp_signal_protocol("traces"), traces, timeout_s)
    try:
        metric_exporter = None if metrics is None else _otlp_exporter(
            "metrics", config.otlp_signal_protocol("metrics"), metrics, timeout_s,
            preferred_temporality=delta_temporality())
    except BaseException:  # the protocol is per signal: grpc may be missing for metrics only
        if span_exporter is not None:
            with contextlib.suppress(Exception):
                span_exporter.shutdown()
        raise
    return span_exporter, metric_exporter


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
