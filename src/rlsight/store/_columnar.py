"""A columnar read path for large runs: the span fields the analysis needs, as numpy arrays.

:func:`rlsight.store.read_spans` builds one :class:`SpanRecord` (with its attribute dict) per
span, which is the right shape for tools that look at a few spans, and too heavy for a
million: about a kilobyte and several microseconds each. The rollup needs a dozen fields per
span, so this module extracts exactly those, straight from the parsed OTLP/JSON, into flat
columns with interned strings.

Skipped-record accounting matches :func:`rlsight.store.read_spans` line for line: a line that
is not JSON (a truncated last line), or a request that is not OTLP, is skipped as a whole and
reported with ``file:line``; everything else is kept. ``span_columns_from_records`` builds the
same columns from :class:`SpanRecord` objects, so both paths feed one analysis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson
from numpy.typing import NDArray

from rlsight.store._reader import _attributes, _store_files
from rlsight.store._schema import AttributeValue, SkippedRecord, SpanRecord

__all__ = [
    "BUCKET_CODES",
    "NO_STEP",
    "SpanColumns",
    "read_span_columns",
    "span_columns_from_records",
]

#: ``rl.bucket`` wire value -> code; the code is the equal-depth priority (higher wins).
BUCKET_CODES: Final = {"idle": 0, "overhead": 1, "wasted": 2, "productive": 3}
#: Step-number column value of a span that is not an ``rl.step`` span.
NO_STEP: Final = np.iinfo(np.int64).min
#: Spans whose full attribute dict is kept (few per run, needed for the startup view).
_KEEP_ATTRIBUTES: Final = frozenset({"rl.worker.load_model"})
_STEP_SPAN: Final = "rl.step"


@dataclass(slots=True)
class SpanColumns:
    """The analysis-relevant fields of every span, one numpy array per field.

    Strings are interned: ``name[i]`` indexes :attr:`names`, ``process[i]`` indexes
    :attr:`resources`. Missing values have sentinels: parent id 0 (OTel's invalid id),
    bucket -1, step :data:`NO_STEP`, NaN for the numeric attributes.
    """

    start: NDArray[np.int64]
    end: NDArray[np.int64]
    trace: NDArray[np.int64]
    span_id: NDArray[np.uint64]
    parent_id: NDArray[np.uint64]
    name: NDArray[np.int64]
    group: NDArray[np.int64]
    bucket: NDArray[np.int8]
    concurrent: NDArray[np.bool_]
    process: NDArray[np.int64]
    thread: NDArray[np.int64]
    step_no: NDArray[np.int64]
    batch_size: NDArray[np.float64]
    prompts: NDArray[np.float64]
    status: NDArray[np.int8]
    names: list[str]
    groups: list[str]
    traces: list[str]
    resources: list[Mapping[str, AttributeValue]]
    process_keys: list[str]
    """``service.instance.id`` of each process (or a host/service/pid stand-in)."""
    kept_attributes: dict[int, Mapping[str, AttributeValue]]
    invalid_buckets: int = 0

    def __len__(self) -> int:
        return len(self.start)


def _process_key(resource: Mapping[str, AttributeValue]) -> str:
    key = resource.get("service.instance.id")
    if key is not None:
        return str(key)
    return "/".join(str(resource.get(k, "?")) for k in ("host.name", "service.name", "process.pid"))


def _number(value: object) -> float:
    if isinstance(value, bool):
        return math.nan
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return math.nan
    return math.nan


@dataclass(slots=True)
class _Builder:
    """Accumulates columns as Python lists; :meth:`finish` turns them into arrays."""

    start: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)
    trace: list[int] = field(default_factory=list)
    span_id: list[str] = field(default_factory=list)
    parent_id: list[str] = field(default_factory=list)
    name: list[int] = field(default_factory=list)
    group: list[int] = field(default_factory=list)
    bucket: list[int] = field(default_factory=list)
    concurrent: list[bool] = field(default_factory=list)
    process: list[int] = field(default_factory=list)
    thread: list[int] = field(default_factory=list)
    step_no: list[int] = field(default_factory=list)
    batch_size: list[float] = field(default_factory=list)
    prompts: list[float] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    names: dict[str, int] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=lambda: {"": 0})
    traces: dict[str, int] = field(default_factory=dict)
    processes: dict[str, int] = field(default_factory=dict)
    resources: list[Mapping[str, AttributeValue]] = field(default_factory=list)
    kept: dict[int, Mapping[str, AttributeValue]] = field(default_factory=dict)
    invalid_buckets: int = 0

    def add_process(self, resource: Mapping[str, AttributeValue]) -> int:
        key = _process_key(resource)
        index = self.processes.get(key)
        if index is None:
            index = self.processes[key] = len(self.resources)
            self.resources.append(resource)
        return index

    def mark(self) -> int:
        return len(self.start)

    def rollback(self, mark: int) -> None:
        """Drop every span added after ``mark`` (a request that failed half way)."""
        for column in (self.start, self.end, self.trace, self.span_id, self.parent_id,
                       self.name, self.group, self.bucket, self.concurrent, self.process,
                       self.thread, self.step_no, self.batch_size, self.prompts, self.status):
            del column[mark:]
        for index in [i for i in self.kept if i >= mark]:
            del self.kept[index]

    def add(
        self,
        process: int,
        trace_id: str,
        span_id: str,
        parent_id: str | None,
        name: str,
        start: int,
        end: int,
        attrs: Mapping[str, AttributeValue],
        status: int,
    ) -> None:
        """Add one span whose attributes are already decoded (the SpanRecord path)."""
        bucket = attrs.get("rl.bucket")
        step = attrs.get("rl.step") if name == _STEP_SPAN else None
        self._append(
            process, trace_id, span_id, parent_id, name, start, end, status,
            thread=attrs.get("thread.id", 0),
            bucket=None if bucket is None else str(bucket),
            group=str(attrs.get("rl.span_group", "")),
            concurrent=attrs.get("rl.concurrent") is True,
            step=step,
            batch_size=attrs.get("rl.batch_size"),
            prompts=attrs.get("rl.prompts"),
        )
        if name in _KEEP_ATTRIBUTES:
            self.kept[len(self.start) - 1] = dict(attrs)

    def add_otlp(self, process: int, span: Mapping[str, Any]) -> None:
        """Add one OTLP/JSON span mapping, decoding only the attributes the analysis reads."""
        raw = {kv["key"]: kv.get("value") or {} for kv in span.get("attributes") or ()}
        name = span["name"]
        bucket = raw.get("rl.bucket")
        group = raw.get("rl.span_group")
        thread = raw.get("thread.id")
        step = raw.get("rl.step") if name == _STEP_SPAN else None
        conc = raw.get("rl.concurrent")
        bsz = raw.get("rl.batch_size")
        prm = raw.get("rl.prompts")
        status = span.get("status")
        self._append(
            process, span["traceId"], span["spanId"], span.get("parentSpanId") or None, name,
            int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"]),
            int(status.get("code", 0)) if status else 0,
            thread=0 if thread is None else thread.get("intValue", 0),
            bucket=None if bucket is None else bucket.get("stringValue"),
            group="" if group is None else str(group.get("stringValue", "")),
            concurrent=conc is not None and conc.get("boolValue") is True,
            step=None if step is None else step.get("intValue"),
            batch_size=None if bsz is None else _otlp_number(bsz),
            prompts=None if prm is None else _otlp_number(prm),
        )
        if name in _KEEP_ATTRIBUTES:
            self.kept[len(self.start) - 1] = _attributes(span.get("attributes"))

    def _append(
        self,
        process: int,
        trace_id: str,
        span_id: str,
        parent_id: str | None,
        name: str,
        start: int,
        end: int,
        status: int,
        *,
        thread: object,
        bucket: str | None,
        group: str,
        concurrent: bool,
        step: object,
        batch_size: object,
        prompts: object,
    ) -> None:
        names, groups, traces = self.names, self.groups, self.traces
        n = names.get(name)
        if n is None:
            n = names[name] = len(names)
        g = groups.get(group)
        if g is None:
            g = groups[group] = len(groups)
        t = traces.get(trace_id)
        if t is None:
            t = traces[trace_id] = len(traces)
        if bucket is None:
            code = -1
        else:
            code = BUCKET_CODES.get(bucket, -1)
            if code < 0:
                self.invalid_buckets += 1
        self.start.append(start)
        self.end.append(end)
        self.trace.append(t)
        self.span_id.append(span_id)
        self.parent_id.append(parent_id or "")
        self.name.append(n)
        self.group.append(g)
        self.bucket.append(code)
        self.concurrent.append(concurrent)
        self.process.append(process)
        self.thread.append(_integer(thread, 0))
        self.step_no.append(NO_STEP if step is None else _integer(step, NO_STEP))
        self.batch_size.append(math.nan if batch_size is None else _number(batch_size))
        self.prompts.append(math.nan if prompts is None else _number(prompts))
        self.status.append(status)

    def finish(self) -> SpanColumns:
        return SpanColumns(
            start=np.asarray(self.start, dtype=np.int64),
            end=np.asarray(self.end, dtype=np.int64),
            trace=np.asarray(self.trace, dtype=np.int64),
            span_id=_hex_ids(self.span_id),
            parent_id=_hex_ids(self.parent_id),
            name=np.asarray(self.name, dtype=np.int64),
            group=np.asarray(self.group, dtype=np.int64),
            bucket=np.asarray(self.bucket, dtype=np.int8),
            concurrent=np.asarray(self.concurrent, dtype=np.bool_),
            process=np.asarray(self.process, dtype=np.int64),
            thread=np.asarray(self.thread, dtype=np.int64),
            step_no=np.asarray(self.step_no, dtype=np.int64),
            batch_size=np.asarray(self.batch_size, dtype=np.float64),
            prompts=np.asarray(self.prompts, dtype=np.float64),
            status=np.asarray(self.status, dtype=np.int8),
            names=list(self.names),
            groups=list(self.groups),
            traces=list(self.traces),
            resources=self.resources,
            process_keys=list(self.processes),
            kept_attributes=self.kept,
            invalid_buckets=self.invalid_buckets,
        )


def _integer(value: object, default: int) -> int:
    """An int attribute (OTLP writes int64 as a decimal string); ``default`` if it is not one."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


def _otlp_number(value: Mapping[str, Any]) -> float:
    for key in ("intValue", "doubleValue"):
        if key in value:
            return _number(value[key])
    return math.nan


def _hex_ids(ids: list[str]) -> NDArray[np.uint64]:
    """16-hex-digit span ids as uint64 (empty string -> 0), in one C-level conversion.

    An id of another length is not what OTel writes; it still gets a stable number (its
    value modulo 2**64) so a hand-written run with short ids reads the same way.
    """
    if not ids:
        return np.zeros(0, dtype=np.uint64)
    joined = "".join(ids)
    if len(joined) == 16 * len(ids):
        try:
            return np.frombuffer(bytes.fromhex(joined), dtype=">u8").astype(np.uint64)
        except ValueError:
            pass
    return np.asarray([_hex_id(i) for i in ids], dtype=np.uint64)


def _hex_id(raw: str) -> int:
    try:
        return int(raw or "0", 16) & 0xFFFF_FFFF_FFFF_FFFF
    except ValueError:
        return hash(raw) & 0x7FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000


def span_columns_from_records(records: Iterable[SpanRecord]) -> SpanColumns:
    """The same columns :func:`read_span_columns` reads, built from in-memory records."""
    builder = _Builder()
    by_resource: dict[int, int] = {}
    for r in records:
        process = by_resource.get(id(r.resource))
        if process is None:
            process = by_resource[id(r.resource)] = builder.add_process(r.resource)
        builder.add(process, r.trace_id, r.span_id, r.parent_span_id, r.name, r.start_ns,
                    r.end_ns, r.attributes, r.status_code)
    return builder.finish()


def _add_request(builder: _Builder, request: Any) -> None:
    for rs in request["resourceSpans"]:
        resource = _attributes(rs.get("resource", {}).get("attributes"))
        process = builder.add_process(resource)
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                builder.add_otlp(process, span)


def read_span_columns(
    run_dir: Path | str,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[SpanColumns, list[SkippedRecord], int]:
    """Every span in ``<run_dir>/traces/*.jsonl`` as columns, the skipped lines, the file count.

    Args:
        run_dir: The run folder.
        progress: Called with (bytes done, bytes total) after each file, for a progress bar.

    Raises:
        StoreError: ``run_dir`` does not exist.
    """
    files = _store_files(Path(run_dir), "traces")
    total = sum(p.stat().st_size for p in files if p.is_file())
    builder = _Builder()
    skipped: list[SkippedRecord] = []
    done = 0
    for path in files:
        try:
            data = path.read_bytes()
        except OSError as exc:
            skipped.append(SkippedRecord(str(path), 0, f"cannot open: {exc.strerror}"))
            continue
        lines = data.split(b"\n")
        last = len(lines) - 1
        for lineno, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                request = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                what = "truncated line" if lineno - 1 == last else "not JSON"
                skipped.append(SkippedRecord(str(path), lineno, f"{what} ({exc})"))
                continue
            mark = builder.mark()
            try:
                _add_request(builder, request)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                builder.rollback(mark)
                skipped.append(SkippedRecord(str(path), lineno, f"not an OTLP traces request ({exc!r})"))
        done += len(data)
        if progress is not None:
            progress(done, total)
    return builder.finish(), skipped, len(files)
