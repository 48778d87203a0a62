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

import gc
import hashlib
import math
import os
import pickle
import subprocess
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from rlsight._semconv import (
    BATCH_SIZE,
    BUCKET,
    CONCURRENT,
    DISCARD_SPAN,
    GROUP_ID,
    HOST_NAME,
    LOAD_MODEL_SPAN,
    PROCESS_PID,
    PROMPTS,
    SERVICE_INSTANCE_ID,
    SERVICE_NAME,
    SPAN_GROUP,
    STEP,
    STEP_SPAN,
    THREAD_ID,
)
from rlsight.buckets import BUCKET_PRIORITY
from rlsight.store._lines import PARSE_ERRORS, int64, json_lines
from rlsight.store._reader import _attributes, _store_files
from rlsight.store._schema import AttributeValue, SkippedRecord, SpanRecord

__all__ = [
    "BUCKET_CODES",
    "NO_STEP",
    "PARALLEL_MIN_BYTES",
    "SpanColumns",
    "read_span_columns",
    "span_columns_from_records",
    "span_columns_from_rows",
]

#: ``rl.bucket`` wire value -> code; the code is the equal-depth priority (higher wins).
#: Bucket name -> code; a higher code wins an equal-depth overlap (``BUCKET_PRIORITY``).
BUCKET_CODES: Final = {b.value: code for code, b in enumerate(reversed(BUCKET_PRIORITY))}
#: Step-number column value of a span that is not an ``rl.step`` span.
NO_STEP: Final = np.iinfo(np.int64).min
#: Spans whose full attribute dict is kept (few per run): model loads for the startup view,
#: ``rl.discard`` records for the wasted view; spans carrying ``rl.group_id`` keep theirs
#: too (work a later ``discard`` may charge).
_KEEP_ATTRIBUTES: Final = frozenset({LOAD_MODEL_SPAN, DISCARD_SPAN})


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
    key = resource.get(SERVICE_INSTANCE_ID)
    if key is not None:
        return str(key)
    return "/".join(str(resource.get(k, "?")) for k in (HOST_NAME, SERVICE_NAME, PROCESS_PID))


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


#: One span as the readers hand it over: trace id, span id, parent id ("" for a root), name,
#: start, end, status code, resource number, attributes (decoded values on the record path,
#: OTLP ``AnyValue`` mappings on the file path).
_Row = tuple[str, str, str, str, int, int, int, int, Mapping[str, Any]]


@dataclass(slots=True)
class _Batch:
    """One batch of spans converted to column lists, not yet added to the builder.

    Conversion may raise (a request that is not OTLP); adding a converted batch cannot, so a
    request is either read whole or skipped whole.
    """

    rows: int
    trace: tuple[str, ...]
    name: tuple[str, ...]
    start: tuple[int, ...]
    end: tuple[int, ...]
    status: tuple[int, ...]
    resource: tuple[int, ...]
    span_id: NDArray[np.uint64]
    parent_id: NDArray[np.uint64]
    thread: list[int]
    bucket: list[str | None]
    group: list[str | None]
    concurrent: list[bool]
    step_no: list[int]
    batch_size: list[float]
    prompts: list[float]
    kept: list[tuple[int, dict[str, AttributeValue]]]


def _values(attrs: tuple[Mapping[str, Any], ...], key: str, kind: str | None) -> list[Any]:
    """Attribute ``key`` of every span (None where absent); ``kind`` unwraps an OTLP AnyValue."""
    values = [a.get(key) for a in attrs]
    if kind is None or values.count(None) == len(values):
        return values
    return [v.get(kind) if type(v) is dict else None for v in values]


def _strings(values: list[Any]) -> list[str | None]:
    """Values as strings (None stays None), so a malformed value is an unknown name, not a crash."""
    return [v if v is None or type(v) is str else str(v) for v in values]


def _numbers(attrs: tuple[Mapping[str, Any], ...], key: str, otlp: bool) -> list[float]:
    values = [a.get(key) for a in attrs]
    if values.count(None) == len(values):
        return [math.nan] * len(values)
    return [math.nan if v is None else _number(_any_value(v) if otlp else v) for v in values]


def _convert(rows: list[_Row], *, otlp: bool) -> _Batch:
    """Turn rows into column lists, validating what the analysis reads."""
    trace, sid, pid, name, start, end, status, resource, attrs = zip(*rows, strict=True)
    int_kind = "intValue" if otlp else None
    str_kind = "stringValue" if otlp else None
    # OTLP writes int64 as a decimal string; a value that is not one makes the request not
    # OTLP (read_spans skips it too). Decoded records are taken leniently.
    thread = ([0 if t is None else int64(t) for t in _values(attrs, THREAD_ID, int_kind)] if otlp
              else [_integer(t, 0) for t in _values(attrs, THREAD_ID, None)])
    step_values = _values(attrs, STEP, int_kind)
    keep = [
        (i, _decode_all(a) if otlp else dict(a))
        for i, (n, a) in enumerate(zip(name, attrs, strict=True))
        if n in _KEEP_ATTRIBUTES or GROUP_ID in a
    ]
    return _Batch(
        rows=len(rows), trace=trace, name=name, start=start, end=end, status=status,
        resource=resource, span_id=_hex_ids(sid), parent_id=_hex_ids(pid), thread=thread,
        bucket=_strings(_values(attrs, BUCKET, str_kind)),
        group=_strings(_values(attrs, SPAN_GROUP, str_kind)),
        concurrent=[v is True for v in _values(attrs, CONCURRENT, "boolValue" if otlp else None)],
        step_no=[NO_STEP if n != STEP_SPAN else int64(v) if otlp and v is not None
                 else _integer(v, NO_STEP) for n, v in zip(name, step_values, strict=True)],
        batch_size=_numbers(attrs, BATCH_SIZE, otlp),
        prompts=_numbers(attrs, PROMPTS, otlp),
        kept=keep,
    )


@dataclass(slots=True)
class _Builder:
    """Accumulates converted batches in typed arrays; :meth:`finish` makes numpy columns.

    Columns are ``array.array`` rather than lists: the garbage collector walks every item of a
    list on each full collection, which at a million spans per column costs more than the read.
    """

    start: array[int] = field(default_factory=lambda: array("q"))
    end: array[int] = field(default_factory=lambda: array("q"))
    trace: array[int] = field(default_factory=lambda: array("q"))
    span_id: list[NDArray[np.uint64]] = field(default_factory=list)
    parent_id: list[NDArray[np.uint64]] = field(default_factory=list)
    name: array[int] = field(default_factory=lambda: array("q"))
    group: array[int] = field(default_factory=lambda: array("q"))
    bucket: array[int] = field(default_factory=lambda: array("b"))
    concurrent: array[int] = field(default_factory=lambda: array("b"))
    process: array[int] = field(default_factory=lambda: array("q"))
    thread: array[int] = field(default_factory=lambda: array("q"))
    step_no: array[int] = field(default_factory=lambda: array("q"))
    batch_size: array[float] = field(default_factory=lambda: array("d"))
    prompts: array[float] = field(default_factory=lambda: array("d"))
    status: array[int] = field(default_factory=lambda: array("q"))
    names: dict[str, int] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=lambda: {"": 0})
    traces: dict[str, int] = field(default_factory=dict)
    processes: dict[str, int] = field(default_factory=dict)
    resources: list[Mapping[str, AttributeValue]] = field(default_factory=list)
    kept: dict[int, Mapping[str, AttributeValue]] = field(default_factory=dict)

    def add_process(self, resource: Mapping[str, AttributeValue]) -> int:
        key = _process_key(resource)
        index = self.processes.get(key)
        if index is None:
            index = self.processes[key] = len(self.resources)
            self.resources.append(resource)
        return index

    def add(self, batch: _Batch, processes: list[int]) -> None:
        """Append a converted batch; ``processes`` maps its resource numbers to processes."""
        first = len(self.start)
        traces, names, groups = self.traces, self.names, self.groups
        self.trace.extend([traces.setdefault(str(t), len(traces)) for t in batch.trace])
        self.name.extend([names.setdefault(str(n), len(names)) for n in batch.name])
        self.group.extend([0 if g is None else groups.setdefault(g, len(groups)) for g in batch.group])
        # -2 marks a bucket value that is not one of the four; finish() counts and clears it.
        self.bucket.extend([-1 if b is None else BUCKET_CODES.get(b, -2) for b in batch.bucket])
        self.start.extend(batch.start)
        self.end.extend(batch.end)
        self.status.extend(batch.status)
        self.process.extend([processes[r] for r in batch.resource])
        self.span_id.append(batch.span_id)
        self.parent_id.append(batch.parent_id)
        self.thread.extend(batch.thread)
        self.concurrent.extend(batch.concurrent)
        self.step_no.extend(batch.step_no)
        self.batch_size.extend(batch.batch_size)
        self.prompts.extend(batch.prompts)
        for i, attrs in batch.kept:
            self.kept[first + i] = attrs

    def finish(self) -> SpanColumns:
        def ids(parts: list[NDArray[np.uint64]]) -> NDArray[np.uint64]:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

        bucket = np.frombuffer(self.bucket, dtype=np.int8).copy()
        invalid = bucket == -2
        bucket[invalid] = -1

        return SpanColumns(
            start=np.frombuffer(self.start, dtype=np.int64).copy(),
            end=np.frombuffer(self.end, dtype=np.int64).copy(),
            trace=np.frombuffer(self.trace, dtype=np.int64).copy(),
            span_id=ids(self.span_id),
            parent_id=ids(self.parent_id),
            name=np.frombuffer(self.name, dtype=np.int64).copy(),
            group=np.frombuffer(self.group, dtype=np.int64).copy(),
            bucket=bucket,
            concurrent=np.frombuffer(self.concurrent, dtype=np.int8).astype(np.bool_),
            process=np.frombuffer(self.process, dtype=np.int64).copy(),
            thread=np.frombuffer(self.thread, dtype=np.int64).copy(),
            step_no=np.frombuffer(self.step_no, dtype=np.int64).copy(),
            batch_size=np.frombuffer(self.batch_size, dtype=np.float64).copy(),
            prompts=np.frombuffer(self.prompts, dtype=np.float64).copy(),
            status=np.clip(np.frombuffer(self.status, dtype=np.int64), -128, 127).astype(np.int8),
            names=list(self.names),
            groups=list(self.groups),
            traces=list(self.traces),
            resources=self.resources,
            process_keys=list(self.processes),
            kept_attributes=self.kept,
            invalid_buckets=int(invalid.sum()),
        )


def _any_value(value: object) -> object:
    """The scalar inside an OTLP ``AnyValue`` mapping (None for anything else)."""
    if not isinstance(value, dict):
        return None
    for key in ("stringValue", "intValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    return None


def _decode_all(attrs: Mapping[str, Any]) -> dict[str, AttributeValue]:
    return _attributes([{"key": k, "value": v} for k, v in attrs.items()])


def _integer(value: object, default: int) -> int:
    """An int attribute (OTLP writes int64 as a decimal string); ``default`` if it is not one."""
    if isinstance(value, bool):
        return default
    if isinstance(value, (int, str)):
        try:
            return int64(value)
        except ValueError:
            return default
    return default


def _hex_ids(ids: Sequence[str]) -> NDArray[np.uint64]:
    """16-hex-digit span ids as uint64 (empty string -> 0), in one C-level conversion.

    An id of another length is not what OTel writes; it still gets a stable number (its
    value modulo 2**64) so a hand-written run with short ids reads the same way.
    """
    if not ids:
        return np.zeros(0, dtype=np.uint64)
    joined = "".join(ids) if all(type(i) is str for i in ids) else ""
    if len(joined) == 16 * len(ids):
        try:
            return np.frombuffer(bytes.fromhex(joined), dtype=">u8").astype(np.uint64)
        except ValueError:
            pass
    return np.asarray([_hex_id(i) for i in ids], dtype=np.uint64)


def _hex_id(raw: object) -> int:
    text = str(raw)
    try:
        return int(text or "0", 16) & 0xFFFF_FFFF_FFFF_FFFF
    except ValueError:
        # Not hex: a digest (never hash(), which is salted per process, and the worker
        # process that reads half the files must number an id the same way).
        digest = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
        return digest | 0x8000_0000_0000_0000


def span_columns_from_records(records: Iterable[SpanRecord]) -> SpanColumns:
    """The same columns :func:`read_span_columns` reads, built from in-memory records."""
    resources: list[Mapping[str, AttributeValue]] = []
    by_resource: dict[int, int] = {}
    rows: list[_Row] = []
    for r in records:
        index = by_resource.get(id(r.resource))
        if index is None:
            index = by_resource[id(r.resource)] = len(resources)
            resources.append(r.resource)
        rows.append((r.trace_id, r.span_id, r.parent_span_id or "", r.name, r.start_ns, r.end_ns,
                     r.status_code, index, r.attributes))
    return span_columns_from_rows(rows, resources)


def span_columns_from_rows(
    rows: list[_Row], resources: Sequence[Mapping[str, AttributeValue]],
) -> SpanColumns:
    """Columns from rows ``(trace id, span id, parent id or "", name, start, end, status,
    resource index, attributes)`` with decoded attribute values, as the driver's online step
    rollup hands them over straight from the SDK's spans (no :class:`SpanRecord` per span)."""
    builder = _Builder()
    processes = [builder.add_process(r) for r in resources]
    if rows:
        builder.add(_convert(rows, otlp=False), processes)
    return builder.finish()


def _read_request(request: Any) -> tuple[list[dict[str, AttributeValue]], _Batch | None]:
    """The resources and converted spans of one OTLP request; raises if it is not OTLP."""
    resources: list[dict[str, AttributeValue]] = []
    rows: list[_Row] = []
    for rs in request["resourceSpans"]:
        resource = len(resources)
        resources.append(_attributes(rs.get("resource", {}).get("attributes")))
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                status = s.get("status")
                rows.append((
                    s["traceId"], s["spanId"], s.get("parentSpanId") or "", s["name"],
                    int64(s["startTimeUnixNano"]), int64(s["endTimeUnixNano"]),
                    int64(status.get("code", 0)) if status else 0, resource,
                    {kv["key"]: kv["value"] for kv in s.get("attributes") or ()},
                ))
    return resources, (_convert(rows, otlp=True) if rows else None)


def read_span_columns(
    run_dir: Path | str,
    *,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
) -> tuple[SpanColumns, list[SkippedRecord], int]:
    """Every span in ``<run_dir>/traces/*.jsonl`` as columns, the skipped lines, the file count.

    Parsing JSON is most of the cost, so a large run is read by two processes: the files are
    cut into two contiguous shards of about equal size, a worker process reads the second
    while this one reads the first, and the columns are merged. Skipped records keep file
    order, so the result is the same as a serial read; a worker that cannot start or fails
    leaves its shard to this process.

    Args:
        run_dir: The run folder.
        progress: Called with (bytes done, bytes total) as files are read, for a progress bar.
        workers: 1 reads serially; 2 always uses a worker process; ``None`` (default) uses one
            when the run holds over :data:`PARALLEL_MIN_BYTES` and this process may use two
            CPUs.

    Raises:
        StoreError: ``run_dir`` does not exist.
    """
    files = _store_files(Path(run_dir), "traces")
    sizes = [p.stat().st_size if p.is_file() else 0 for p in files]
    total = sum(sizes)
    if workers is None:
        workers = 2 if total > PARALLEL_MIN_BYTES and _usable_cpus() > 1 else 1
    if workers > 1 and len(files) > 1:
        cut = _half_way(sizes)
        worker = _start_worker(files[cut:])
        if worker is not None:
            with _gc_paused():
                cols_a, skipped_a = _read_files(files[:cut], progress, total)
            second = _collect_worker(worker)
            if second is None:  # the worker failed: read its shard here
                with _gc_paused():
                    second = _read_files(files[cut:], None, total)
            if progress is not None:
                progress(total, total)
            return _merge(cols_a, second[0]), [*skipped_a, *second[1]], len(files)
    with _gc_paused():
        cols, skipped = _read_files(files, progress, total)
    return cols, skipped, len(files)


def _start_worker(paths: list[Path]) -> subprocess.Popen[bytes] | None:
    """Start a Python process that reads ``paths`` and pickles the columns to its stdout.

    A plain subprocess rather than ``multiprocessing``: spawning through multiprocessing
    re-imports the caller's ``__main__``, which breaks scripts without a main guard, and
    forking would copy whatever threads the caller runs (a progress bar) mid-operation.
    """
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
    try:
        return subprocess.Popen(
            [sys.executable, "-c", "from rlsight.store._columnar import _worker_main; _worker_main()",
             *map(str, paths)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )
    except OSError:
        return None  # no process to be had here (sandbox, limits): the caller reads serially


def _collect_worker(worker: subprocess.Popen[bytes]) -> tuple[SpanColumns, list[SkippedRecord]] | None:
    """The worker's result, or ``None`` if it failed."""
    assert worker.stdout is not None
    try:
        payload = worker.stdout.read()
    finally:
        worker.stdout.close()
        code = worker.wait()
    if code != 0:
        return None
    try:
        result = pickle.loads(payload)  # our own child process wrote it
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None
    return result if isinstance(result, tuple) else None


def _worker_main() -> None:
    """Entry point of the reader process: paths in ``argv``, pickled result on stdout."""
    result = _read_shard(sys.argv[1:])
    sys.stdout.buffer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


#: Runs larger than this are read by two processes when two CPUs are available.
PARALLEL_MIN_BYTES: Final = 32 * 2**20


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _half_way(sizes: list[int]) -> int:
    """Index that cuts ``sizes`` into two contiguous parts of about equal sum (both non-empty)."""
    total, running = sum(sizes), 0
    for i, size in enumerate(sizes):
        running += size
        if running * 2 >= total:
            return min(max(i + 1, 1), len(sizes) - 1)
    return len(sizes) - 1


def _read_shard(paths: list[str]) -> tuple[SpanColumns, list[SkippedRecord]]:
    """Worker-process entry point: read ``paths`` into columns."""
    with _gc_paused():
        return _read_files([Path(p) for p in paths], None, 0)


def _remap(values: NDArray[np.int64], keys: list[str], into: dict[str, int]) -> NDArray[np.int64]:
    """Re-intern ``keys`` into ``into`` (extending it) and renumber ``values`` to match."""
    mapping = np.asarray([into.setdefault(k, len(into)) for k in keys] or [0], dtype=np.int64)
    return mapping[values] if len(values) else values


def _merge(a: SpanColumns, b: SpanColumns) -> SpanColumns:
    """Append ``b``'s spans to ``a``'s, re-interning names, groups, traces and processes."""
    names = {n: i for i, n in enumerate(a.names)}
    groups = {g: i for i, g in enumerate(a.groups)}
    traces = {t: i for i, t in enumerate(a.traces)}
    processes = {k: i for i, k in enumerate(a.process_keys)}
    resources = list(a.resources)
    for key, resource in zip(b.process_keys, b.resources, strict=True):
        if key not in processes:
            processes[key] = len(resources)
            resources.append(resource)
    offset = len(a)

    def cat(x: NDArray[Any], y: NDArray[Any]) -> NDArray[Any]:
        return np.concatenate((x, y))

    return SpanColumns(
        start=cat(a.start, b.start), end=cat(a.end, b.end),
        trace=cat(a.trace, _remap(b.trace, b.traces, traces)),
        span_id=cat(a.span_id, b.span_id), parent_id=cat(a.parent_id, b.parent_id),
        name=cat(a.name, _remap(b.name, b.names, names)),
        group=cat(a.group, _remap(b.group, b.groups, groups)),
        bucket=cat(a.bucket, b.bucket), concurrent=cat(a.concurrent, b.concurrent),
        process=cat(a.process, _remap(b.process, b.process_keys, processes)),
        thread=cat(a.thread, b.thread), step_no=cat(a.step_no, b.step_no),
        batch_size=cat(a.batch_size, b.batch_size), prompts=cat(a.prompts, b.prompts),
        status=cat(a.status, b.status),
        names=list(names), groups=list(groups), traces=list(traces), resources=resources,
        process_keys=list(processes),
        kept_attributes={**a.kept_attributes, **{offset + i: v for i, v in b.kept_attributes.items()}},
        invalid_buckets=a.invalid_buckets + b.invalid_buckets,
    )


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk read.

    Parsing allocates millions of short-lived dicts that reference counting frees; the cyclic
    collector, triggered by the allocation count, walks them over and over and more than
    doubles the read time. Nothing the read allocates forms a cycle.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_files(
    files: list[Path], progress: Callable[[int, int], None] | None, total: int,
) -> tuple[SpanColumns, list[SkippedRecord]]:
    builder = _Builder()
    skipped: list[SkippedRecord] = []
    done = 0
    sizes = {p: _size(p) for p in files}
    for path in files:
        for lineno, request in json_lines(path, skipped):
            try:
                resources, batch = _read_request(request)
            except PARSE_ERRORS as exc:
                skipped.append(SkippedRecord(str(path), lineno, f"not an OTLP traces request ({exc!r})"))
                continue
            processes = [builder.add_process(r) for r in resources]
            if batch is not None:
                builder.add(batch, processes)
        done += sizes.get(path, 0)
        if progress is not None:
            progress(done, total)
    return builder.finish(), skipped
