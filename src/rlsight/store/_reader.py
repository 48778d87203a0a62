"""Read a run's store back: the one walk over OTLP/JSON records, and flat spans and points.

Every reader of trace files goes through :func:`span_batches`: each line is read and parsed by
:mod:`rlsight.store._lines` and walked once, here, into a :class:`SpanBatch` (one per OTLP
request, one entry per span in each column), or skipped as a whole. :func:`read_spans` turns
batches into :class:`SpanRecord` objects; the analysis projects the same batches onto numpy
columns (:mod:`rlsight.analysis.columns`), so both see the same spans and skip the same lines.
Attribute values are decoded by one function, :func:`attribute_value`.

Bad input loses nothing: a line that is not JSON (a process killed mid-write), JSON that is
not an OTLP request, a line over :data:`~rlsight.store._lines.MAX_LINE_BYTES`, nesting too deep
to parse or an integer outside OTLP's int64 range is skipped and reported with ``file:line``;
every other record of that file and of the run is still returned.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsight.errors import StoreError
from rlsight.store._lines import (
    PARSE_ERRORS,
    LineCursor,
    int64,
    int64_column,
    int64s,
    json_lines,
    loads,
    numbered_lines,
    parse_line,
)
from rlsight.store._manifest import SUPPORTED_STORE_FORMATS, read_manifest
from rlsight.store._schema import AttributeValue, SkippedRecord, SpanRecord

__all__ = [
    "MetricPoint",
    "MetricReadResult",
    "SpanBatch",
    "SpanBlock",
    "SpanReadResult",
    "attribute_value",
    "attribute_values",
    "decode_attributes",
    "file_span_batches",
    "file_span_blocks",
    "not_otlp",
    "read_metrics",
    "read_spans",
    "span_batches",
    "span_records",
    "trace_files",
]


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


def attribute_value(raw: Any) -> AttributeValue | None:
    """One raw OTLP ``AnyValue`` (as :class:`SpanBatch` holds it) decoded; ``None`` when
    absent or empty.

    Raises:
        ValueError: not an OTLP value (or an integer outside the int64 range).
    """
    return None if raw is None else _value(raw or {})


def attribute_values(raws: list[Any]) -> list[AttributeValue | None]:
    """:func:`attribute_value` of a column of raw values (one attribute key over many spans).

    The common columns (``thread.id`` on every span, ``rl.bucket`` on most) hold one kind of
    value throughout; those are decoded as a column, with the same answers and errors.
    """
    present = [r for r in raws if r is not None]
    if not present:
        return [None] * len(raws)
    try:
        strings = [r.get("stringValue") for r in present]
    except AttributeError:  # not a mapping: attribute_value says what is wrong
        return [attribute_value(r) for r in raws]
    if set(map(type, strings)) == {str}:  # _value reads stringValue first, whatever else is there
        return _spread(raws, strings)
    if set(map(len, present)) == {1}:
        ints = [r.get("intValue") for r in present]
        if None not in ints:
            return _spread(raws, int64s(ints))
    return [attribute_value(r) for r in raws]


def _spread(raws: list[Any], values: list[Any]) -> list[Any]:
    """``values`` (one per present raw value, in order) put back in place among ``raws``' Nones."""
    if len(values) == len(raws):
        return values
    it = iter(values)
    return [None if r is None else next(it) for r in raws]


def decode_attributes(raw: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """A span's attributes as :class:`SpanBatch` holds them (key -> raw AnyValue), decoded;
    empty values are dropped."""
    out: dict[str, AttributeValue] = {}
    for key, v in raw.items():
        value = attribute_value(v)
        if value is not None:
            out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class SpanBatch:
    """The spans of one OTLP traces request, walked once: one list entry per span.

    ``resource[i]`` indexes :attr:`resources` (the request's decoded resource attributes).
    Ids and names are as written (a root's parent id is ``""``); times, status codes and kinds
    are validated int64 (times and status codes as ``array('q')``, which a column takes in one
    copy). Span ``i``'s attributes are ``attribute_sets[attribute_set[i]]``, a
    map of each key to its raw OTLP ``AnyValue``, decoded on demand with
    :func:`attribute_values` / :func:`decode_attributes`, so a reader that needs three keys
    does not pay for thirty. Spans whose attribute lists were written byte for byte alike
    share one map (most spans of a run repeat a few lists), so a reader that decodes per map
    does it once per distinct list. The maps are shared: read them, never change them.
    """

    path: str
    line: int
    resources: list[dict[str, AttributeValue]]
    resource: list[int]
    trace_id: list[Any]
    span_id: list[Any]
    parent_span_id: list[Any]
    name: list[Any]
    start_ns: Sequence[int]
    end_ns: Sequence[int]
    status_code: Sequence[int]
    status_message: list[str]
    kind: list[int]
    attribute_sets: list[dict[str, Any]]
    attribute_set: list[int]

    def __len__(self) -> int:
        return len(self.name)

    @property
    def attributes(self) -> list[dict[str, Any]]:
        """Each span's raw attribute map, in span order."""
        sets = self.attribute_sets
        return [sets[i] for i in self.attribute_set]


def _attribute_map(kvs: Any) -> dict[str, Any]:
    """An OTLP attribute list (as parsed JSON) as key -> raw ``AnyValue``; raises one of
    PARSE_ERRORS if it is not a list of key/value objects."""
    return {kv["key"]: kv.get("value") for kv in kvs or ()}


def _walk_spans(request: Any, path: str, line: int) -> SpanBatch:
    """The one OTLP traces walk; raises one of PARSE_ERRORS if ``request`` is not OTLP."""
    resources: list[dict[str, AttributeValue]] = []
    owner: list[int] = []
    spans: list[Any] = []
    for rs in request["resourceSpans"]:
        index = len(resources)
        resources.append(_attributes(rs.get("resource", {}).get("attributes")))
        for ss in rs.get("scopeSpans", []):
            got = list(ss.get("spans", []))
            spans += got
            owner += [index] * len(got)
    statuses = [s.get("status") or {} for s in spans]
    return SpanBatch(
        path=path, line=line, resources=resources, resource=owner,
        trace_id=[s["traceId"] for s in spans],
        span_id=[s["spanId"] for s in spans],
        parent_span_id=[s.get("parentSpanId") or "" for s in spans],
        name=[s["name"] for s in spans],
        start_ns=int64_column([s["startTimeUnixNano"] for s in spans]),
        end_ns=int64_column([s["endTimeUnixNano"] for s in spans]),
        status_code=array("q", int64s([st.get("code", 0) for st in statuses])),
        status_message=[str(st.get("message", "")) for st in statuses],
        kind=int64s([s.get("kind", 1) for s in spans]),
        attribute_sets=[_attribute_map(s.get("attributes")) for s in spans],
        attribute_set=list(range(len(spans))),
    )


#: Attribute lists remembered per file read (raw bytes -> map); past this many, forgotten.
_MEMO_LISTS = 4096


class _TypedWalk:
    """:func:`_walk_spans` for lines decoded by msgspec into :mod:`rlsight.store._typed`
    types, for the lines of one read: the same spans, several times faster.

    Each distinct attribute list (as raw bytes) is parsed once per read and its map shared
    by every span that repeats it. A line the types refuse, or whose attribute lists or
    resources do not parse, raises; the caller then walks it the generic way, which gives
    the line's answer (the same batch, or the reason it is skipped).
    """

    def __init__(self) -> None:
        from rlsight.store import _typed

        self.decode = _typed.decoder().decode
        self.errors = (*PARSE_ERRORS, *_typed.DECODE_ERRORS)
        self.no_status = _typed.Status()
        self.parse = loads()
        self.lists: dict[bytes, dict[str, Any]] = {}

    def __call__(self, raw: bytes, path: str, line: int) -> SpanBatch:
        return self.walk(path, [(line, self.decode(raw))])[0]

    def walk(self, path: str, requests: list[tuple[int, Any]]) -> tuple[SpanBatch, list[int]]:
        """One batch of the spans of ``requests`` (line number, decoded request), in order,
        whose ``line`` is the first request's, and each request's span count. Per-span work
        is done once over all of them."""
        parse = self.parse
        resources: list[dict[str, AttributeValue]] = []
        owner: list[int] = []
        spans: list[Any] = []
        counts: list[int] = []
        for _, request in requests:
            first = len(spans)
            for rs in request.resource_spans:
                index = len(resources)
                resources.append(_attributes(parse(bytes(rs.resource)).get("attributes")))
                for ss in rs.scope_spans:
                    got = ss.spans
                    spans += got
                    owner += [index] * len(got)
            counts.append(len(spans) - first)
        # One copy of every span's attribute list, cut apart again: a NUL byte is in no valid
        # JSON text, so it separates them; bytes() of each would cost four times as much.
        raws = b"\0".join([s.attributes for s in spans]).split(b"\0") if spans else []
        if len(raws) != len(spans):
            raise ValueError("an attribute list holds a NUL byte")
        local: dict[bytes, Any] = dict.fromkeys(raws)
        sets: list[dict[str, Any]] = []
        known = self.lists
        for number, text in enumerate(local):
            local[text] = number
            found = known.get(text)
            if found is None:
                found = _attribute_map(parse(text) if text else None)
                if len(known) >= _MEMO_LISTS:
                    known.clear()
                known[text] = found
            sets.append(found)
        statuses = [s.status for s in spans]
        if statuses.count(None) == len(statuses):  # the usual case: no span has a status
            codes: Sequence[int] = array("q", bytes(8 * len(statuses)))
            messages: list[str] = [""] * len(statuses)
        else:
            no_status = self.no_status
            given = [st or no_status for st in statuses]
            codes = array("q", int64s([st.code for st in given]))
            messages = [st.message for st in given]
        return SpanBatch(
            path=path, line=requests[0][0], resources=resources, resource=owner,
            trace_id=[s.trace_id for s in spans],
            span_id=[s.span_id for s in spans],
            parent_span_id=[s.parent_span_id for s in spans],
            name=[s.name for s in spans],
            start_ns=int64_column([s.start_time_unix_nano for s in spans]),
            end_ns=int64_column([s.end_time_unix_nano for s in spans]),
            status_code=codes,
            status_message=messages,
            kind=[s.kind for s in spans],
            attribute_sets=sets,
            attribute_set=list(map(local.__getitem__, raws)),
        ), counts


def store_files(run_dir: Path, kind: str) -> list[Path]:
    """The ``kind`` (``traces``/``metrics``/``live``) files of a run folder, after refusing a
    store format this rlsight does not read: the one place every store reader learns the
    layout from."""
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


def trace_files(run_dir: Path | str) -> list[Path]:
    """The trace files of ``run_dir``, in the order every reader walks them.

    Raises:
        StoreError: ``run_dir`` does not exist, or was written in a store format this
            rlsight does not read.
    """
    return store_files(Path(run_dir), "traces")


def span_batches(paths: Iterable[Path]) -> Iterator[SpanBatch | SkippedRecord]:
    """Every traces request in ``paths`` walked once, or the record of why its line was
    skipped, in file and line order. A request is read whole or skipped whole."""
    for path in paths:
        yield from file_span_batches(path)


def file_span_batches(
    path: Path, start: int = 0, stop: int | None = None, cursor: LineCursor | None = None,
    only: Collection[int] | None = None,
) -> Iterator[SpanBatch | SkippedRecord]:
    """:func:`span_batches` of one file, optionally of its bytes [start, stop) or of some
    lines only (see :func:`rlsight.store._lines.numbered_json`).

    Where msgspec is installed, a line is first decoded into typed structs
    (:class:`_TypedWalk`); a line that does not decode that way, and every line without
    msgspec, is parsed and walked as plain JSON. Both give the same batch for a line.
    """
    name = str(path)
    typed = _typed_walk()
    parse = loads()
    for item in numbered_lines(path, start, stop, cursor, only):
        if isinstance(item, SkippedRecord):
            yield item
        else:
            yield _line_batch(typed, parse, name, *item)


def _line_batch(
    typed: _TypedWalk | None, parse: Callable[[bytes], Any], path: str, number: int, raw: bytes,
) -> SpanBatch | SkippedRecord:
    """Line ``number`` walked: typed where it decodes that way, else as plain JSON."""
    if typed is not None:
        try:
            return typed(raw, path, number)
        except typed.errors:
            pass  # not the usual shape: the generic walk judges the line
    parsed = parse_line(parse, Path(path), number, raw)
    if isinstance(parsed, SkippedRecord):
        return parsed
    try:
        return _walk_spans(parsed[1], path, number)
    except PARSE_ERRORS as exc:
        return not_otlp(path, number, exc)


#: Line bytes a :class:`SpanBlock` gathers at most (its structs and columns are a few times more).
_BLOCK_BYTES = 1048576


@dataclass(frozen=True, slots=True)
class SpanBlock:
    """Consecutive requests of a file walked as one :class:`SpanBatch` (``batch``, whose
    ``line`` is the first request's): per-span work costs less done once over many lines.

    ``requests`` holds each request's line number and span count, in order. A reader that
    refuses the block as a whole (a value it reads is not OTLP) takes it :meth:`apart`, to
    read or skip each request on its own, as :func:`file_span_batches` would have.
    """

    batch: SpanBatch
    requests: list[tuple[int, int]]
    lines: list[bytes]

    def apart(self) -> Iterator[SpanBatch | SkippedRecord]:
        """Each request walked on its own, as :func:`file_span_batches` yields them."""
        typed, parse, path = _typed_walk(), loads(), self.batch.path
        for (number, _), raw in zip(self.requests, self.lines, strict=True):
            yield _line_batch(typed, parse, path, number, raw)


def file_span_blocks(
    path: Path, start: int = 0, stop: int | None = None, cursor: LineCursor | None = None,
) -> Iterator[SpanBlock | SpanBatch | SkippedRecord]:
    """:func:`file_span_batches` with runs of consecutive lines that decode typed gathered
    into :class:`SpanBlock` s (up to :data:`_BLOCK_BYTES` of lines each): the same spans and
    skipped lines, in the same order, for readers that take many spans at a time."""
    name = str(path)
    typed = _typed_walk()
    if typed is None:
        yield from file_span_batches(path, start, stop, cursor)
        return
    parse = loads()
    gathered: list[tuple[int, Any]] = []
    lines: list[bytes] = []
    size = 0

    def flush() -> Iterator[SpanBlock | SpanBatch | SkippedRecord]:
        nonlocal size
        if not gathered:
            return
        try:
            batch, counts = typed.walk(name, gathered)
        except typed.errors:  # some line is not the usual shape: each is judged on its own
            for (number, _), raw in zip(gathered, lines, strict=True):
                yield _line_batch(typed, parse, name, number, raw)
        else:
            yield SpanBlock(batch, [(n, c) for (n, _), c in zip(gathered, counts, strict=True)],
                            list(lines))
        gathered.clear()
        lines.clear()
        size = 0

    for item in numbered_lines(path, start, stop, cursor):
        if isinstance(item, SkippedRecord):
            yield from flush()
            yield item
            continue
        number, raw = item
        try:
            request = typed.decode(raw)
        except typed.errors:
            yield from flush()
            yield _line_batch(None, parse, name, number, raw)
            continue
        gathered.append((number, request))
        lines.append(raw)
        size += len(raw)
        if size >= _BLOCK_BYTES:
            yield from flush()
    yield from flush()


def _typed_walk() -> _TypedWalk | None:
    """A typed walk for one read, or None where msgspec is not installed."""
    try:
        return _TypedWalk()
    except ImportError:  # the core install walks plain JSON
        return None


def not_otlp(path: str, line: int, exc: BaseException) -> SkippedRecord:
    """The record of a traces request skipped because part of it is not OTLP."""
    return SkippedRecord(path, line, f"not an OTLP traces request ({exc!r})")


def span_records(batch: SpanBatch) -> list[SpanRecord]:
    """One :class:`SpanRecord` per span of ``batch``; raises if an attribute is not OTLP.

    Each distinct attribute map is decoded once (:func:`decode_attributes`, which keeps the
    span's own key order) and each record gets its own copy.
    """
    decoded = [decode_attributes(a) for a in batch.attribute_sets]
    resources = batch.resources
    return [
        SpanRecord(trace_id=t, span_id=s, parent_span_id=p or None, name=n, start_ns=a, end_ns=b,
                   attributes=dict(decoded[i]), resource=resources[r], status_code=c,
                   status_message=m, kind=kind)
        for t, s, p, n, a, b, i, r, c, m, kind in zip(
            batch.trace_id, batch.span_id, batch.parent_span_id, batch.name, batch.start_ns,
            batch.end_ns, batch.attribute_set, batch.resource, batch.status_code,
            batch.status_message, batch.kind, strict=True)
    ]


def read_spans(run_dir: Path | str) -> SpanReadResult:
    """Every span in ``<run_dir>/traces/*.jsonl``, in file order.

    Raises:
        StoreError: ``run_dir`` does not exist.
    """
    files = trace_files(run_dir)
    spans: list[SpanRecord] = []
    skipped: list[SkippedRecord] = []
    for item in span_batches(files):
        if isinstance(item, SkippedRecord):
            skipped.append(item)
            continue
        try:
            spans += span_records(item)
        except PARSE_ERRORS as exc:
            skipped.append(not_otlp(item.path, item.line, exc))
    return SpanReadResult(spans, skipped, len(files))


def _read(
    run_dir: Path | str, kind: str, parse: Callable[[Any, list[Any]], None]
) -> tuple[list[Any], list[SkippedRecord], int]:
    files = store_files(Path(run_dir), kind)
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
