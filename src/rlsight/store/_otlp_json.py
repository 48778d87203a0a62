"""Encode SDK spans and metrics as OTLP/JSON requests (the protobuf JSON mapping of OTLP).

OTLP/JSON differs from protobuf's generic JSON mapping in ways a collector's file receiver
insists on: trace and span ids are lowercase hex, not base64; enums are integers; 64-bit
integers are decimal strings. Non-finite doubles are written as ``"NaN"`` / ``"Infinity"``,
as the mapping allows, because a NaN gauge point is how rlsight draws a gap.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricsData
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

_DELTA, _CUMULATIVE = 1, 2
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _double(v: float) -> float | str:
    if math.isfinite(v):
        return v
    if math.isnan(v):
        return "NaN"
    return "Infinity" if v > 0 else "-Infinity"


def any_value(v: object) -> dict[str, Any]:
    """One attribute value as an OTLP ``AnyValue``."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        # OTLP's intValue is int64; a larger Python int (``step_span(2**63)``) would make the
        # whole line unreadable, so it is kept as its decimal text instead.
        return {"intValue": str(v)} if _INT64_MIN <= v <= _INT64_MAX else {"stringValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": _double(v)}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, Sequence) and not isinstance(v, (bytes, bytearray)):
        return {"arrayValue": {"values": [any_value(x) for x in v]}}
    return {"stringValue": str(v)}


def key_values(attrs: Mapping[str, object] | None) -> list[dict[str, Any]]:
    """Attributes as a list of OTLP ``KeyValue``."""
    if not attrs:
        return []
    return [{"key": k, "value": any_value(v)} for k, v in attrs.items()]


def _resource(resource: Resource) -> dict[str, Any]:
    return {"attributes": key_values(resource.attributes)}


def _span(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.context
    assert ctx is not None
    out: dict[str, Any] = {
        "traceId": format(ctx.trace_id, "032x"),
        "spanId": format(ctx.span_id, "016x"),
        "name": span.name,
        "kind": span.kind.value + 1,  # SDK INTERNAL=0; OTLP SPAN_KIND_INTERNAL=1
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or span.start_time or 0),
        "attributes": key_values(span.attributes),
    }
    if span.parent is not None:
        out["parentSpanId"] = format(span.parent.span_id, "016x")
    if ctx.trace_state:
        out["traceState"] = ctx.trace_state.to_header()
    if span.events:
        out["events"] = [
            {"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": key_values(e.attributes)}
            for e in span.events
        ]
    if span.links:
        out["links"] = [
            {
                "traceId": format(link.context.trace_id, "032x"),
                "spanId": format(link.context.span_id, "016x"),
                "attributes": key_values(link.attributes),
            }
            for link in span.links
        ]
    status = span.status
    if status.status_code.value:
        out["status"] = {"code": status.status_code.value, "message": status.description or ""}
    dropped = span.dropped_attributes
    if dropped:
        out["droppedAttributesCount"] = dropped
    return out


def encode_spans(spans: Iterable[ReadableSpan]) -> bytes:
    """One ``ExportTraceServiceRequest`` as a JSON line (with the trailing newline)."""
    by_resource: dict[int, tuple[Resource, dict[tuple[str, str], list[dict[str, Any]]]]] = {}
    for span in spans:
        entry = by_resource.setdefault(id(span.resource), (span.resource, {}))
        scope = span.instrumentation_scope
        key = (scope.name, scope.version or "") if scope is not None else ("", "")
        entry[1].setdefault(key, []).append(_span(span))
    request = {
        "resourceSpans": [
            {
                "resource": _resource(resource),
                "scopeSpans": [
                    {"scope": {"name": name, "version": version}, "spans": items}
                    for (name, version), items in scopes.items()
                ],
            }
            for resource, scopes in by_resource.values()
        ]
    }
    return (json.dumps(request, separators=(",", ":"), allow_nan=False) + "\n").encode()


def _number_point(p: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "attributes": key_values(p.attributes),
        "startTimeUnixNano": str(p.start_time_unix_nano or 0),
        "timeUnixNano": str(p.time_unix_nano),
    }
    if isinstance(p.value, int) and not isinstance(p.value, bool):
        out["asInt"] = str(p.value)
    else:
        out["asDouble"] = _double(float(p.value))
    return out


def _histogram_point(p: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "attributes": key_values(p.attributes),
        "startTimeUnixNano": str(p.start_time_unix_nano or 0),
        "timeUnixNano": str(p.time_unix_nano),
        "count": str(p.count),
        "sum": _double(float(p.sum)),
        "bucketCounts": [str(c) for c in p.bucket_counts],
        "explicitBounds": [_double(float(b)) for b in p.explicit_bounds],
    }
    if p.count:
        out["min"] = _double(float(p.min))
        out["max"] = _double(float(p.max))
    return out


def _metric(metric: Any) -> dict[str, Any] | None:
    from opentelemetry.sdk.metrics.export import AggregationTemporality, Gauge, Histogram, Sum

    data = metric.data
    out: dict[str, Any] = {
        "name": metric.name,
        "description": metric.description or "",
        "unit": metric.unit or "",
    }
    temporality = (
        _DELTA if getattr(data, "aggregation_temporality", None) == AggregationTemporality.DELTA
        else _CUMULATIVE
    )
    if isinstance(data, Gauge):
        out["gauge"] = {"dataPoints": [_number_point(p) for p in data.data_points]}
    elif isinstance(data, Sum):
        out["sum"] = {
            "dataPoints": [_number_point(p) for p in data.data_points],
            "aggregationTemporality": temporality,
            "isMonotonic": bool(data.is_monotonic),
        }
    elif isinstance(data, Histogram):
        out["histogram"] = {
            "dataPoints": [_histogram_point(p) for p in data.data_points],
            "aggregationTemporality": temporality,
        }
    else:  # exponential histograms are not configured by rlsight
        return None
    return out


def encode_metrics(data: MetricsData) -> bytes | None:
    """One ``ExportMetricsServiceRequest`` as a JSON line, or ``None`` when it holds no point."""
    resource_metrics = []
    points = 0
    for rm in data.resource_metrics:
        scope_metrics = []
        for sm in rm.scope_metrics:
            metrics = [m for m in (_metric(x) for x in sm.metrics) if m is not None]
            for m in metrics:
                kind = next(k for k in ("gauge", "sum", "histogram") if k in m)
                points += len(m[kind]["dataPoints"])
            if metrics:
                scope = sm.scope
                scope_metrics.append(
                    {"scope": {"name": scope.name, "version": scope.version or ""}, "metrics": metrics}
                )
        if scope_metrics:
            resource_metrics.append({"resource": _resource(rm.resource), "scopeMetrics": scope_metrics})
    if not points:
        return None
    request = {"resourceMetrics": resource_metrics}
    return (json.dumps(request, separators=(",", ":"), allow_nan=False) + "\n").encode()
