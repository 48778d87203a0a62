"""Encode SDK spans and metrics as OTLP/JSON requests (the protobuf JSON mapping of OTLP).

OTLP/JSON differs from protobuf's generic JSON mapping in ways a collector's file receiver
insists on: trace and span ids are lowercase hex, not base64; enums are integers; 64-bit
integers are decimal strings. Non-finite doubles are written as ``"NaN"`` / ``"Infinity"``,
as the mapping allows, because a NaN gauge point is how rlsight draws a gap.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricsData
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

_DELTA, _CUMULATIVE = 1, 2
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _dumps(request: dict[str, Any]) -> bytes:
    """``request`` as one JSON line; orjson where installed (several times faster)."""
    return serializer()(request) + b"\n"


@functools.cache
def serializer() -> Callable[[object], bytes]:
    """The one JSON serialiser of store lines, chosen once (a failed import on every write
    would cost more than the write). What it writes for a part of a request is what it writes
    for that part inside the whole request, so encoders may join pieces it made."""
    try:
        import orjson
    except ImportError:  # the core install writes with the standard library
        return lambda obj: json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    return orjson.dumps


def _double(v: float) -> float | str:
    if math.isfinite(v):
        return v
    if math.isnan(v):
        return "NaN"
    return "Infinity" if v > 0 else "-Infinity"


def any_value(v: object) -> dict[str, Any]:
    """One attribute value as an OTLP ``AnyValue``."""
    kind = type(v)  # exact types first: this runs once per attribute on the store's thread
    if kind is str:
        return {"stringValue": v}
    if kind is int:
        return _int_value(v)  # type: ignore[arg-type]
    if kind is bool:
        return {"boolValue": v}
    if kind is float:
        return {"doubleValue": _double(v)}  # type: ignore[arg-type]
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return _int_value(v)
    if isinstance(v, float):
        return {"doubleValue": _double(v)}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, Sequence) and not isinstance(v, (bytes, bytearray)):
        return {"arrayValue": {"values": [any_value(x) for x in v]}}
    # The SDK keeps a map or a None that ``span.set_attribute`` was given (OpenTelemetry's
    # AnyValue); they are written as its OTLP exporter sends them, so the store and a
    # collector hold the same value: a map as ``kvlistValue``, None as the empty value.
    if v is None:
        return {}
    if isinstance(v, Mapping):
        return {"kvlistValue": {"values": [{"key": str(k), "value": any_value(x)} for k, x in v.items()]}}
    return {"stringValue": str(v)}


def _int_value(v: int) -> dict[str, Any]:
    # OTLP's intValue is int64; a larger Python int (``step_span(2**63)``) would make the
    # whole line unreadable, so it is kept as its decimal text instead.
    return {"intValue": str(v)} if _INT64_MIN <= v <= _INT64_MAX else {"stringValue": str(v)}


#: (key, exact type, value) -> its ``KeyValue``, for scalar attributes: most repeat on every
#: span (group, bucket, thread id, model), and the serialiser writes a shared dict as it
#: would a fresh one. Cleared when full, so its size stays bounded whatever the values.
_KV_CACHE: dict[tuple[str, type, object], dict[str, Any]] = {}
_KV_CACHE_MAX = 4096
_CACHED_TYPES = frozenset({str, int, bool})


def key_values(attrs: Mapping[str, object] | None) -> list[dict[str, Any]]:
    """Attributes as a list of OTLP ``KeyValue``."""
    if not attrs:
        return []
    # The SDK's BoundedAttributes is a MutableMapping whose items() walks Python-level
    # __iter__/__getitem__; its plain dict, where present, is several times faster to walk.
    plain = getattr(attrs, "_dict", attrs)
    cache = _KV_CACHE
    out = []
    for k, v in plain.items():
        kind = type(v)
        if kind in _CACHED_TYPES:
            ck = (k, kind, v)
            kv = cache.get(ck)
            if kv is None:
                if len(cache) >= _KV_CACHE_MAX:
                    cache.clear()
                kv = cache[ck] = {"key": k, "value": any_value(v)}
            out.append(kv)
        else:
            out.append({"key": k, "value": any_value(v)})
    return out


def resource_mapping(resource: Resource) -> dict[str, Any]:
    return {"attributes": key_values(resource.attributes)}


def sdk_span_mapping(span: ReadableSpan) -> dict[str, Any]:
    """``span``'s OTLP/JSON mapping, read through its public properties.

    The store's :class:`~rlsight.store._span_codec.SpanCodec` writes what the serialiser
    writes for this mapping, from byte pieces; it encodes a span type that overrides one of
    ``ReadableSpan``'s properties through this.
    """
    ctx = span.context
    assert ctx is not None
    start = span.start_time or 0
    out: dict[str, Any] = {
        "traceId": format(ctx.trace_id, "032x"),
        "spanId": format(ctx.span_id, "016x"),
        "name": span.name,
        "kind": span.kind.value + 1,  # SDK INTERNAL=0; OTLP SPAN_KIND_INTERNAL=1
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(span.end_time or start),
        "attributes": key_values(span.attributes),
    }
    parent = span.parent
    if parent is not None:
        out["parentSpanId"] = format(parent.span_id, "016x")
    if ctx.trace_state:
        out["traceState"] = ctx.trace_state.to_header()
    add_events_and_links(out, span.events, span.links)
    status = span.status
    code = status.status_code.value
    if code:
        out["status"] = {"code": code, "message": status.description or ""}
    dropped = span.dropped_attributes
    if dropped:
        out["droppedAttributesCount"] = dropped
    return out


def row_mapping(row: tuple[Any, ...]) -> dict[str, Any]:
    """The OTLP/JSON mapping of the plain span a store row holds (``_span_codec.StoreRows``):
    what :func:`sdk_span_mapping` gives for that span."""
    start_time, end_time, trace_id, span_id, parent_id, name, attrs = row
    start = start_time or 0
    out: dict[str, Any] = {
        "traceId": format(trace_id, "032x"),
        "spanId": format(span_id, "016x"),
        "name": name,
        "kind": 1,  # SDK INTERNAL=0; OTLP SPAN_KIND_INTERNAL=1
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end_time or start),
        "attributes": key_values(attrs),
    }
    if parent_id:
        out["parentSpanId"] = format(parent_id, "016x")
    return out


def add_events_and_links(
    out: dict[str, Any], events: Sequence[Any] | None, links: Sequence[Any] | None
) -> None:
    """Put a span's events and links into its OTLP/JSON mapping ``out`` (none: no key).

    Shared by :func:`sdk_span_mapping` and the store's span codec, which writes the rare
    parts of a span (events, links, status) through the mapping.
    """
    if events:
        out["events"] = [
            {"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": key_values(e.attributes)}
            for e in events
        ]
    if links:
        out["links"] = [
            {
                "traceId": format(link.context.trace_id, "032x"),
                "spanId": format(link.context.span_id, "016x"),
                "attributes": key_values(link.attributes),
            }
            for link in links
        ]


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
            resource_metrics.append(
                {"resource": resource_mapping(rm.resource), "scopeMetrics": scope_metrics})
    if not points:
        return None
    request = {"resourceMetrics": resource_metrics}
    return _dumps(request)
