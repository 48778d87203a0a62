"""Read a run's store back: spans and metric points as flat records.

Bad input loses nothing: a line that is not JSON (a process killed mid-write), JSON that is
not an OTLP request, a line over :data:`~rlsight.store._lines.MAX_LINE_BYTES`, nesting too deep
to parse or an integer outside OTLP's int64 range is skipped and reported with ``file:line``;
every other record of that file and of the run is still returned.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsight.errors import StoreError
from rlsight.store._lines import PARSE_ERRORS, int64, json_lines
from rlsight.store._manifest import SUPPORTED_STORE_FORMATS, read_manifest
from rlsight.store._schema import AttributeValue, SkippedRecord, SpanRecord

__all__ = ["MetricPoint", "MetricReadResult", "SpanReadResult", "read_metrics", "read_spans"]


@dataclass(frozen=True, slots=True)
class SpanReadResult:
    """Every span of a run, plus the lines that could not be read."""

    spans: list[SpanRecord]
    skipped: list[SkippedRecord] = field(default_factory=list)
    files: int = 0


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One metric data point. ``value`` for gauges and sums; the histogram fields otherwise."""

    name: str
    kind: str  # "gauge" | "sum" | "histogram"
    unit: str
    time_ns: int
    start_time_ns: int
    attributes: Mapping[str, AttributeValue]
    resource: Mapping[str, AttributeValue]
    value: float | int | None = None
    count: int = 0
    sum: float = 0.0
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()
    is_monotonic: bool = False
    temporality: int = 0


@dataclass(frozen=True, slots=True)
class MetricReadResult:
    """Every metric point of a run, plus the lines that could not be read."""

    points: list[MetricPoint]
    skipped: list[SkippedRecord] = field(default_factory=list)
    files: int = 0


def _number(raw: object) -> float:
    if isinstance(raw, str):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(raw) or float(raw)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    raise ValueError(f"not a number: {raw!r}")


def _value(v: Mapping[str, Any]) -> AttributeValue | None:
    """An OTLP ``AnyValue`` as a Python value; ``None`` for an empty value.

    Every kind OTLP defines is accepted: a map (``kvlistValue``) becomes its JSON text and
    bytes stay base64 text, since rlsight's own attributes are never either and a reader that
    dropped the whole request for one such attribute would lose the spans around it.
    """
    if "stringValue" in v:
        return str(v["stringValue"])
    if "intValue" in v:
        return int64(v["intValue"])
    if "doubleValue" in v:
        return _number(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        items = (_value(x) for x in (v["arrayValue"] or {}).get("values", []))
        return tuple(x for x in items if x is not None)  # type: ignore[misc]
    if "kvlistValue" in v:
        pairs = (v["kvlistValue"] or {}).get("values", [])
        return json.dumps({kv["key"]: _value(kv.get("value") or {}) for kv in pairs}, default=str)
    if "bytesValue" in v:
        return str(v["bytesValue"])
    if not v:
        return None
    raise ValueError(f"unsupported attribute value {v!r}")


def _attributes(kvs: list[Mapping[str, Any]] | None) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = {}
    for kv in kvs or []:
        value = _value(kv.get("value") or {})
        if value is not None:
            out[kv["key"]] = value
    return out


def _store_files(run_dir: Path, kind: str) -> list[Path]:
    if not run_dir.is_dir():
        raise StoreError(f"run folder {run_dir} does not exist; pass the folder a run wrote "
                         "(default ./rlsight-runs/<run_id>)")
    manifest = read_manifest(run_dir)
    version = manifest.get("store_format") if manifest else None
    if version is not None and version not in SUPPORTED_STORE_FORMATS:
        raise StoreError(
            f"run folder {run_dir} uses store format {version!r}; this rlsight reads formats "
            f"{sorted(SUPPORTED_STORE_FORMATS)}: read it with the rlsight version that wrote it"
        )
    folder = run_dir / kind
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def _read(
    run_dir: Path | str, kind: str, parse: Callable[[Any, list[Any]], None]
) -> tuple[list[Any], list[SkippedRecord], int]:
    files = _store_files(Path(run_dir), kind)
    out: list[Any] = []
    skipped: list[SkippedRecord] = []
    for path in files:
        for lineno, request in json_lines(path, skipped):
            batch: list[Any] = []
            try:
                parse(request, batch)
            except PARSE_ERRORS as exc:
                skipped.append(SkippedRecord(str(path), lineno, f"not an OTLP {kind} request ({exc!r})"))
                continue
            out.extend(batch)
    return out, skipped, len(files)


def _parse_spans(request: Any, out: list[SpanRecord]) -> None:
    for rs in request["resourceSpans"]:
        resource = _attributes(rs.get("resource", {}).get("attributes"))
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                status = s.get("status") or {}
                out.append(SpanRecord(
                    trace_id=s["traceId"],
                    span_id=s["spanId"],
                    parent_span_id=s.get("parentSpanId") or None,
                    name=s["name"],
                    start_ns=int64(s["startTimeUnixNano"]),
                    end_ns=int64(s["endTimeUnixNano"]),
                    attributes=_attributes(s.get("attributes")),
                    resource=resource,
                    status_code=int64(status.get("code", 0)),
                    status_message=str(status.get("message", "")),
                    kind=int64(s.get("kind", 1)),
                ))


def read_spans(run_dir: Path | str) -> SpanReadResult:
    """Every span in ``<run_dir>/traces/*.jsonl``, in file order.

    Raises:
        StoreError: ``run_dir`` does not exist.
    """
    spans, skipped, files = _read(run_dir, "traces", _parse_spans)
    return SpanReadResult(spans, skipped, files)


def _parse_metrics(request: Any, out: list[MetricPoint]) -> None:
    for rm in request["resourceMetrics"]:
        resource = _attributes(rm.get("resource", {}).get("attributes"))
        for sm in rm.get("scopeMetrics", []):
            for m in sm.get("metrics", []):
                for kind in ("gauge", "sum", "histogram"):
                    if kind in m:
                        break
                else:
                    continue
                data = m[kind]
                for p in data.get("dataPoints", []):
                    common: dict[str, Any] = {
                        "name": m["name"], "kind": kind, "unit": m.get("unit", ""),
                        "time_ns": int64(p["timeUnixNano"]),
                        "start_time_ns": int64(p.get("startTimeUnixNano", 0)),
                        "attributes": _attributes(p.get("attributes")), "resource": resource,
                        "temporality": int64(data.get("aggregationTemporality", 0)),
                        "is_monotonic": bool(data.get("isMonotonic", False)),
                    }
                    if kind == "histogram":
                        out.append(MetricPoint(
                            **common, count=int64(p.get("count", 0)), sum=_number(p.get("sum", 0)),
                            bucket_counts=tuple(int64(c) for c in p.get("bucketCounts", [])),
                            explicit_bounds=tuple(_number(b) for b in p.get("explicitBounds", [])),
                        ))
                    elif "asInt" in p:
                        out.append(MetricPoint(**common, value=int64(p["asInt"])))
                    else:
                        out.append(MetricPoint(**common, value=_number(p["asDouble"])))


def read_metrics(run_dir: Path | str) -> MetricReadResult:
    """Every metric point in ``<run_dir>/metrics/*.jsonl``, in file order.

    Raises:
        StoreError: ``run_dir`` does not exist.
    """
    points, skipped, files = _read(run_dir, "metrics", _parse_metrics)
    return MetricReadResult(points, skipped, files)
