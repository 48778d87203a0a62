"""The environment an inference engine needs for its own (native) tracing to join the run."""

from __future__ import annotations

from rlsight._semconv import RUN_ID, STAGE, WORKER_GROUP
from rlsight.config import TelemetryConfig
from rlsight.groups import RL, is_span_group_enabled
from rlsight.runtime import active_runtime

__all__ = ["native_tracing_env"]


def native_tracing_env(
    config: TelemetryConfig | None = None,
    *,
    service_name: str = "vllm",
    worker_group: str = "generation",
) -> dict[str, str]:
    """Environment for an inference engine process so its own spans join the run.

    Empty unless the run asks for it: ``engine_native_tracing`` is on, the ``engine`` span
    group is enabled and an OTLP endpoint is configured. Native engine tracing is one span
    per request, a debugging tool for a few steps, so both switches must be on.

    The protocol is set through ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` explicitly: vLLM reads
    only that variable, never the generic ``OTEL_EXPORTER_OTLP_PROTOCOL``, and defaults to
    gRPC, so an http/protobuf run would otherwise have the engine speak gRPC at an HTTP port.
    Put the result in the engine's own environment only, never the job-wide one: vLLM workers
    start tracing whenever the endpoint variable is present.

    Args:
        config: The run's config (default: the active runtime's).
        service_name: ``service.name`` of the engine's spans.
        worker_group: ``rl.worker_group`` resource attribute for the engine's spans.
    """
    if config is None:
        rt = active_runtime()
        if rt is None:
            return {}
        config = rt.config
    endpoint = config.otlp_signal_endpoint("traces")
    if not (config.engine_native_tracing and endpoint and is_span_group_enabled(RL.ENGINE)):
        return {}
    attributes = {RUN_ID: config.run_id, WORKER_GROUP: worker_group, STAGE: "rl"}
    return {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": config.otlp_protocol,
        "OTEL_SERVICE_NAME": service_name,
        "OTEL_RESOURCE_ATTRIBUTES": ",".join(f"{k}={v}" for k, v in attributes.items()),
    }
