"""The span fields the analysis reads, as numpy columns: what :func:`analyze_columns` takes.

:func:`rlsight.store.read_spans` builds one :class:`~rlsight.store.SpanRecord` (with its
attribute dict) per span, which is the right shape for tools that look at a few spans, and too
heavy for a million: about a kilobyte and several microseconds each. The rollup needs a dozen
fields per span, so this module projects the store's walked requests
(:class:`~rlsight.store._reader.SpanBatch`) onto flat columns with interned strings, decoding
only the attributes the analysis reads. The analysis rules live here, not in the store: which
attributes are read, the bucket codes, which spans keep their whole attribute dict.

:func:`read_span_columns` reads a run folder this way (:mod:`rlsight.analysis._read`);
:func:`span_columns_from_records` builds the same columns from records, so both paths feed
one analysis.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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
    JOB_SPAN,
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
from rlsight.store._lines import int64
from rlsight.store._reader import SpanBatch, attribute_values, decode_attributes
from rlsight.store._schema import AttributeValue, SpanRecord

__all__ = [
    "BUCKET_CODES",
    "NO_STEP",
    "ColumnBuilder",
    "SpanColumns",
    "concat_columns",
    "span_columns_from_records",
    "span_columns_from_rows",
]

#: Bucket name -> code; a higher code wins an equal-depth overlap (``BUCKET_PRIORITY``).
BUCKET_CODES: Final = {b.value: code for code, b in enumerate(reversed(BUCKET_PRIORITY))}
#: Step-number column value of a span that is not an ``rl.step`` span.
NO_STEP: Final = np.iinfo(np.int64).min
#: Spans whose full attribute dict is kept (few per run): model loads for the startup view,
#: ``rl.discard`` records for the wasted view, ``rl.job`` for its ``rl.total_steps`` (watch
#: reads it from the finished job where no start record exists: Collector files); spans
#: carrying ``rl.group_id`` keep theirs too (work a later ``discard`` may charge).
_KEEP_ATTRIBUTES: Final = frozenset({LOAD_MODEL_SPAN, DISCARD_SPAN, JOB_SPAN})


@dataclass(slots=True)
class SpanColumns:
    """The analysis-relevant fields of every span of a run, one numpy array per field.

    Build it with :func:`read_span_columns` (a run folder) or
    :func:`span_columns_from_records`, and hand it to :func:`analyze_columns`. Strings are
    interned: ``name[i]`` indexes :attr:`names`, ``process[i]`` indexes :attr:`resources`.
    Missing values have sentinels: parent id 0 (OTel's invalid id), bucket -1, step
    :data:`NO_STEP`, NaN for the numeric attributes.
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
    source_file: NDArray[np.int32]
    """Where each span was read: index into :attr:`source_files` (-1: not read from a file)..."""
    source_line: NDArray[np.int32]
    """...the line number in that file, and the span's position among the line's spans."""
    source_slot: NDArray[np.int32]
    source_files: list[str]
    invalid_buckets: int = 0

    def __len__(self) -> int:
        return len(self.start)


def _process_key(resource: Mapping[str, AttributeValue]) -> str:
    key = resource.get(SERVICE_INSTANCE_ID)
    if key is not None:
        return str(key)
    return "/".join(str(resource.get(k, "?")) for k in (HOST_NAME, SERVICE_NAME, PROCESS_PID))


def _number(value: object) -> float:
    """A decoded attribute as a float for a numeric column; NaN when it is not a number."""
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


def _integer(value: object, default: int) -> int:
    """A decoded attribute as an int for an integer column; ``default`` if it is not one."""
    if isinstance(value, bool):
        return default
    if isinstance(value, (int, str)):
        try:
            return int64(value)
        except ValueError:
            return default
    return default


def _strings(values: list[Any]) -> list[str | None]:
    """Values as strings (None stays None), so a malformed value is an unknown name, not a crash."""
    return [v if v is None or type(v) is str else str(v) for v in values]


@dataclass(slots=True)
class _MapRows:
    """The analysis' reading of attribute maps, one row per map: what :func:`_project_maps`
    makes of each, before the strings are interned."""

    thread: list[int]
    bucket: list[str | None]
    group: list[str | None]
    concurrent: list[bool]
    step: list[int]
    batch_size: list[float]
    prompts: list[float]
    grouped: list[bool]
    """Whether the map carries ``rl.group_id`` (its spans keep their whole attribute dict)."""


def _project_maps(maps: Sequence[Mapping[str, Any]], *, raw: bool) -> _MapRows:
    """The attribute columns the analysis reads, for each map; ``raw``: values are OTLP
    ``AnyValue`` mappings, decoded here by the store's decoder (else decoded Python values).

    Raises:
        ValueError: an attribute the analysis reads is not OTLP.
    """

    def values(key: str) -> list[Any]:
        column = [a.get(key) for a in maps]
        return attribute_values(column) if raw else column

    threads = values(THREAD_ID)
    return _MapRows(
        # Decoded OTLP integers are within int64 already: the common column passes as is.
        thread=(threads if raw and set(map(type, threads)) == {int}
                else [0 if t is None else _integer(t, 0) for t in threads]),
        bucket=_strings(values(BUCKET)),
        group=_strings(values(SPAN_GROUP)),
        concurrent=[v is True for v in values(CONCURRENT)],
        step=[_integer(v, NO_STEP) for v in values(STEP)],  # the step column reads it on step spans
        batch_size=_numbers(values(BATCH_SIZE)),
        prompts=_numbers(values(PROMPTS)),
        grouped=[GROUP_ID in a for a in maps],
    )


@dataclass(slots=True)
class _Batch:
    """One batch of spans projected, not yet added to the builder.

    Projection may raise (an attribute the analysis reads is not OTLP); adding a projected
    batch cannot, so a request is either read whole or skipped whole.
    """

    trace: list[str]
    name: list[str]
    names: dict[str, Any] | None
    """``dict.fromkeys(name)`` when the projection made it (all names strings), else None."""
    start: Sequence[int]
    end: Sequence[int]
    status: Sequence[int]
    resource: Sequence[int]
    span_id: NDArray[np.uint64]
    parent_id: NDArray[np.uint64]
    row: list[int]
    """Each span's attribute row in the builder (rows from ``new_maps`` on are new)."""
    new_maps: list[Mapping[str, Any]]
    new_rows: _MapRows
    kept: list[tuple[int, Mapping[str, AttributeValue]]]
    decoded: dict[int, Mapping[str, AttributeValue]]
    """Attribute rows decoded whole in this batch (for the kept spans)."""


def _numbers(values: list[Any]) -> list[float]:
    if values.count(None) == len(values):
        return [math.nan] * len(values)
    return [math.nan if v is None else _number(v) for v in values]


def _as_strs(values: Sequence[Any]) -> list[str]:
    """``values`` as strings (a list of strings as it is: one C-level check)."""
    if set(map(type, values)) <= {str}:
        return values if isinstance(values, list) else list(values)
    return [str(v) for v in values]


def _append(column: array[Any], values: Sequence[Any]) -> None:
    """Append ``values`` to ``column`` (a list in one step, twice as fast as item by item)."""
    if type(values) is list:
        column.fromlist(values)
    else:
        column.extend(values)


def _codes(keys: list[str], table: dict[str, int], local: dict[str, Any] | None = None) -> array[int]:
    """The codes of ``keys`` in ``table``, new keys numbered in the order first seen;
    ``local``: ``dict.fromkeys(keys)`` when the caller has it (its values are overwritten)."""
    if local is None:
        local = dict.fromkeys(keys)
    for key in local:
        local[key] = table.setdefault(key, len(table))
    if len(local) == 1:
        return array("q", [local[keys[0]]]) * len(keys)  # one copy, no list of ints
    out = array("q")
    out.fromlist(list(map(local.__getitem__, keys)))
    return out


#: Attribute maps the builder remembers by identity; past this many it forgets them (a run
#: whose every span has its own attributes must not keep every map alive).
_MAPS_REMEMBERED: Final = 65_536


@dataclass(slots=True)
class ColumnBuilder:
    """Accumulates projected batches in typed arrays; :meth:`finish` makes the numpy columns.

    The attribute columns are kept once per distinct attribute map (*row*), and each span
    holds its map's row: the store hands spans that repeat an attribute list one shared map,
    so each list is read by the analysis rules once, however many spans carry it.

    Columns are ``array.array`` rather than lists: the garbage collector walks every item of a
    list on each full collection, which at a million spans per column costs more than the read.
    """

    start: array[int] = field(default_factory=lambda: array("q"))
    end: array[int] = field(default_factory=lambda: array("q"))
    trace: array[int] = field(default_factory=lambda: array("q"))
    span_id: list[NDArray[np.uint64]] = field(default_factory=list)
    parent_id: list[NDArray[np.uint64]] = field(default_factory=list)
    name: array[int] = field(default_factory=lambda: array("q"))
    process: array[int] = field(default_factory=lambda: array("q"))
    status: array[int] = field(default_factory=lambda: array("q"))
    row: array[int] = field(default_factory=lambda: array("q"))
    row_thread: array[int] = field(default_factory=lambda: array("q"))
    row_bucket: array[int] = field(default_factory=lambda: array("b"))
    row_group: array[int] = field(default_factory=lambda: array("q"))
    row_concurrent: array[int] = field(default_factory=lambda: array("b"))
    row_step: array[int] = field(default_factory=lambda: array("q"))
    row_batch_size: array[float] = field(default_factory=lambda: array("d"))
    row_prompts: array[float] = field(default_factory=lambda: array("d"))
    row_grouped: list[bool] = field(default_factory=list)
    row_decoded: dict[int, Mapping[str, AttributeValue]] = field(default_factory=dict)
    rows_of: dict[int, int] = field(default_factory=dict)
    """id() of a remembered map -> its row; ``held`` keeps those maps alive (ids stay theirs)."""
    held: list[Mapping[str, Any]] = field(default_factory=list)
    names: dict[str, int] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=lambda: {"": 0})
    traces: dict[str, int] = field(default_factory=dict)
    processes: dict[str, int] = field(default_factory=dict)
    resources: list[Mapping[str, AttributeValue]] = field(default_factory=list)
    kept: dict[int, Mapping[str, AttributeValue]] = field(default_factory=dict)
    sources: list[tuple[int, int, int]] = field(default_factory=list)
    """(file, line, spans) of each batch read from a file, in order."""
    files: dict[str, int] = field(default_factory=dict)

    def add_process(self, resource: Mapping[str, AttributeValue]) -> int:
        key = _process_key(resource)
        index = self.processes.get(key)
        if index is None:
            index = self.processes[key] = len(self.resources)
            self.resources.append(resource)
        return index

    def add_batch(self, batch: SpanBatch, requests: Sequence[tuple[int, int]] | None = None) -> None:
        """Project one walked request (or several: ``requests`` gives each one's line and span
        count, as a :class:`~rlsight.store._reader.SpanBlock` does, whose ids and names are
        strings by its types) and append it.

        Raises:
            ValueError: an attribute the analysis reads is not OTLP (nothing is appended).
        """
        projected = self._project(
            batch.trace_id, batch.span_id, batch.parent_span_id, batch.name, batch.start_ns,
            batch.end_ns, batch.status_code, batch.resource, batch.attribute_sets,
            batch.attribute_set, raw=True, strings=requests is not None)
        self._add(projected, [self.add_process(r) for r in batch.resources])
        file = self.files.setdefault(batch.path, len(self.files))
        if requests is None:
            self.sources.append((file, batch.line, len(batch)))
        else:
            self.sources += [(file, line, count) for line, count in requests]

    def _project(
        self, trace: Sequence[Any], sid: Sequence[Any], pid: Sequence[Any], name: Sequence[Any],
        start: Sequence[int], end: Sequence[int], status: Sequence[int], resource: Sequence[int],
        maps: Sequence[Mapping[str, Any]], map_of: Sequence[int] | None, *, raw: bool,
        strings: bool = False,
    ) -> _Batch:
        """The batch's columns; span ``i``'s attributes are ``maps[map_of[i]]`` (``maps[i]``
        when ``map_of`` is None). Maps this builder has read before keep their rows; the
        others are read now (and may raise: then nothing of the batch is added). ``strings``:
        the ids and names are lists of str (not checked again)."""
        rows: list[int] = []
        new_maps: list[Mapping[str, Any]] = []
        rows_of, first_new = self.rows_of, len(self.row_grouped)
        for m in maps:
            known = rows_of.get(id(m))
            if known is None:
                known = first_new + len(new_maps)
                new_maps.append(m)
            rows.append(known)
        new_rows = _project_maps(new_maps, raw=raw)
        row = rows if map_of is None else list(map(rows.__getitem__, map_of))
        # Spans named for keeping and spans of a map with rl.group_id keep their whole dict.
        distinct = dict.fromkeys(name)  # raises for a name that is not a string or number
        grouped = self.row_grouped
        group_of = [grouped[r] if r < first_new else new_rows.grouped[r - first_new] for r in rows]
        kept: list[tuple[int, Mapping[str, AttributeValue]]] = []
        decoded: dict[int, Mapping[str, AttributeValue]] = {}
        if not distinct.keys().isdisjoint(_KEEP_ATTRIBUTES) or any(group_of):
            for i, n in enumerate(name):
                j = i if map_of is None else map_of[i]
                if n in _KEEP_ATTRIBUTES or group_of[j]:
                    r = rows[j]
                    whole = self.row_decoded.get(r, decoded.get(r))
                    if whole is None:
                        whole = decoded[r] = decode_attributes(maps[j]) if raw else dict(maps[j])
                    kept.append((i, whole))
        return _Batch(
            trace=trace if strings else _as_strs(trace),  # type: ignore[arg-type]
            name=name if strings else _as_strs(name),  # type: ignore[arg-type]
            start=start, end=end, status=status,
            names=distinct if strings or set(map(type, distinct)) <= {str} else None,
            resource=resource, span_id=_hex_ids(sid, strings), parent_id=_hex_ids(pid, strings), row=row,
            new_maps=new_maps, new_rows=new_rows, kept=kept, decoded=decoded,
        )

    def _add(self, batch: _Batch, processes: list[int]) -> None:
        """Append a projected batch; ``processes`` maps its resource numbers to processes."""
        first = len(self.start)
        _append(self.trace, _codes(batch.trace, self.traces))
        _append(self.name, _codes(batch.name, self.names, batch.names))
        _append(self.start, batch.start)
        _append(self.end, batch.end)
        _append(self.status, batch.status)
        _append(self.process, array("q", processes[:1]) * len(batch.resource) if len(set(processes)) == 1
                else [processes[r] for r in batch.resource])
        self.span_id.append(batch.span_id)
        self.parent_id.append(batch.parent_id)
        _append(self.row, batch.row)
        if len(self.rows_of) + len(batch.new_maps) > _MAPS_REMEMBERED:
            self.rows_of.clear()
            self.held.clear()
        new = batch.new_rows
        for number, m in enumerate(batch.new_maps, len(self.row_grouped)):
            self.rows_of[id(m)] = number
            self.held.append(m)
        self.row_grouped += new.grouped
        _append(self.row_thread, new.thread)
        groups = self.groups
        _append(self.row_group, [0 if g is None else groups.setdefault(g, len(groups)) for g in new.group])
        # -2 marks a bucket value that is not one of the four; finish() counts and clears it.
        _append(self.row_bucket, [-1 if b is None else BUCKET_CODES.get(b, -2) for b in new.bucket])
        _append(self.row_concurrent, new.concurrent)
        _append(self.row_step, new.step)
        _append(self.row_batch_size, new.batch_size)
        _append(self.row_prompts, new.prompts)
        self.row_decoded.update(batch.decoded)
        for i, attrs in batch.kept:
            self.kept[first + i] = attrs

    def _located(self) -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.int32]]:
        """Each span's (file, line, slot among the line's spans); -1s for the spans added
        without a source (from rows, which come after every located span)."""
        located = sum(n for _, _, n in self.sources)
        table = np.asarray(self.sources or [(0, 0, 0)], dtype=np.int64).reshape(-1, 3)
        sizes = table[:, 2]
        starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
        missing = np.full(len(self.start) - located, -1, dtype=np.int32)
        return (np.concatenate([np.repeat(table[:, 0], sizes).astype(np.int32), missing]),
                np.concatenate([np.repeat(table[:, 1], sizes).astype(np.int32), missing]),
                np.concatenate([(np.arange(located) - starts).astype(np.int32), missing]))

    def finish(self) -> SpanColumns:
        def ids(parts: list[NDArray[np.uint64]]) -> NDArray[np.uint64]:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

        def rows(column: array[Any], dtype: Any) -> NDArray[Any]:
            return np.frombuffer(column, dtype=dtype)[row] if len(column) else np.zeros(len(row), dtype)

        source_file, source_line, source_slot = self._located()
        row = np.frombuffer(self.row, dtype=np.int64)
        bucket = rows(self.row_bucket, np.int8)
        invalid = bucket == -2
        bucket[invalid] = -1
        name = np.frombuffer(self.name, dtype=np.int64).copy()
        step_no = np.full(len(name), NO_STEP, dtype=np.int64)
        if STEP_SPAN in self.names:
            is_step = name == self.names[STEP_SPAN]
            step_no[is_step] = rows(self.row_step, np.int64)[is_step]
        return SpanColumns(
            start=np.frombuffer(self.start, dtype=np.int64).copy(),
            end=np.frombuffer(self.end, dtype=np.int64).copy(),
            trace=np.frombuffer(self.trace, dtype=np.int64).copy(),
            span_id=ids(self.span_id),
            parent_id=ids(self.parent_id),
            name=name,
            group=rows(self.row_group, np.int64),
            bucket=bucket,
            concurrent=rows(self.row_concurrent, np.int8).astype(np.bool_),
            process=np.frombuffer(self.process, dtype=np.int64).copy(),
            thread=rows(self.row_thread, np.int64),
            step_no=step_no,
            batch_size=rows(self.row_batch_size, np.float64),
            prompts=rows(self.row_prompts, np.float64),
            status=np.clip(np.frombuffer(self.status, dtype=np.int64), -128, 127).astype(np.int8),
            names=list(self.names),
            groups=list(self.groups),
            traces=list(self.traces),
            resources=self.resources,
            process_keys=list(self.processes),
            kept_attributes=self.kept,
            source_file=source_file, source_line=source_line, source_slot=source_slot,
            source_files=list(self.files),
            invalid_buckets=int(invalid.sum()),
        )


def _hex_ids(ids: Sequence[Any], strings: bool = False) -> NDArray[np.uint64]:
    """16-hex-digit span ids as uint64 (empty string -> 0), in one C-level conversion.

    An id of another length is not what OTel writes; it still gets a stable number (its
    value modulo 2**64) so a hand-written run with short ids reads the same way. ``strings``:
    every id is known to be a str.
    """
    if not ids:
        return np.zeros(0, dtype=np.uint64)
    if strings or set(map(type, ids)) <= {str}:
        # Roots' empty parent ids are 0: the others are converted together, then spread.
        given = ids.count("")
        present = [i for i in ids if i] if given else ids
        joined = "".join(present)
        if len(joined) == 16 * len(present):
            try:
                values = np.frombuffer(bytes.fromhex(joined), dtype=">u8").astype(np.uint64)
            except ValueError:
                pass
            else:
                if not given:
                    return values
                out = np.zeros(len(ids), dtype=np.uint64)
                out[np.fromiter(map(bool, ids), dtype=bool, count=len(ids))] = values
                return out
    return np.asarray([_hex_id(i) for i in ids], dtype=np.uint64)


def _hex_id(raw: object) -> int:
    import hashlib

    text = str(raw)
    try:
        return int(text or "0", 16) & 0xFFFF_FFFF_FFFF_FFFF
    except ValueError:
        # Not hex: a digest (never hash(), which is salted per process, and the worker
        # process that reads half the files must number an id the same way).
        digest = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
        return digest | 0x8000_0000_0000_0000


#: One span as :func:`span_columns_from_rows` takes it: trace id, span id, parent id ("" for
#: a root), name, start, end, status code, resource number, decoded attributes.
Row = tuple[str, str, str, str, int, int, int, int, Mapping[str, Any]]


def span_columns_from_records(records: Iterable[SpanRecord]) -> SpanColumns:
    """The same columns :func:`read_span_columns` reads, built from in-memory records."""
    resources: list[Mapping[str, AttributeValue]] = []
    by_resource: dict[int, int] = {}
    rows: list[Row] = []
    for r in records:
        index = by_resource.get(id(r.resource))
        if index is None:
            index = by_resource[id(r.resource)] = len(resources)
            resources.append(r.resource)
        rows.append((r.trace_id, r.span_id, r.parent_span_id or "", r.name, r.start_ns, r.end_ns,
                     r.status_code, index, r.attributes))
    return span_columns_from_rows(rows, resources)


def span_columns_from_rows(rows: list[Row], resources: Sequence[Mapping[str, AttributeValue]]) -> SpanColumns:
    """Columns from :data:`Row` tuples with decoded attribute values, as the driver's online
    step rollup hands them over straight from the SDK's spans (no record per span)."""
    builder = ColumnBuilder()
    processes = [builder.add_process(r) for r in resources]
    if rows:
        trace, sid, pid, name, start, end, status, resource, attrs = zip(*rows, strict=True)
        builder._add(builder._project(trace, sid, pid, name, start, end, status, resource, attrs,
                                      None, raw=False), processes)
    return builder.finish()


def _renumbered(values: NDArray[np.int64], keys: list[str], into: dict[str, int]) -> NDArray[np.int64]:
    """Re-intern ``keys`` into ``into`` (extending it) and renumber ``values`` to match."""
    mapping = np.asarray([into.setdefault(k, len(into)) for k in keys] or [0], dtype=np.int64)
    return mapping[values] if len(values) else values


def concat_columns(parts: Sequence[SpanColumns]) -> SpanColumns:
    """The spans of ``parts`` one after the other, names, groups, traces and processes
    re-interned (a process keeps the resource of its first part)."""
    if len(parts) <= 1:
        return parts[0] if parts else ColumnBuilder().finish()
    names: dict[str, int] = {}
    groups: dict[str, int] = {"": 0}
    traces: dict[str, int] = {}
    processes: dict[str, int] = {}
    resources: list[Mapping[str, AttributeValue]] = []
    kept: dict[int, Mapping[str, AttributeValue]] = {}
    files: dict[str, int] = {}
    trace, name, group, process, source = [], [], [], [], []
    offset = 0
    for p in parts:
        for key, resource in zip(p.process_keys, p.resources, strict=True):
            if key not in processes:
                processes[key] = len(resources)
                resources.append(resource)
        trace.append(_renumbered(p.trace, p.traces, traces))
        name.append(_renumbered(p.name, p.names, names))
        group.append(_renumbered(p.group, p.groups, groups))
        process.append(_renumbered(p.process, p.process_keys, processes))
        mapping = np.asarray([files.setdefault(f, len(files)) for f in p.source_files] + [-1], dtype=np.int32)
        source.append(mapping[p.source_file])  # -1 picks the last entry: -1
        kept.update({offset + i: v for i, v in p.kept_attributes.items()})
        offset += len(p)

    def cat(column: str) -> Any:
        return np.concatenate([getattr(p, column) for p in parts])

    return SpanColumns(
        start=cat("start"), end=cat("end"), trace=np.concatenate(trace),
        span_id=cat("span_id"), parent_id=cat("parent_id"), name=np.concatenate(name),
        group=np.concatenate(group), bucket=cat("bucket"), concurrent=cat("concurrent"),
        process=np.concatenate(process), thread=cat("thread"), step_no=cat("step_no"),
        batch_size=cat("batch_size"), prompts=cat("prompts"), status=cat("status"),
        names=list(names), groups=list(groups), traces=list(traces), resources=resources,
        process_keys=list(processes), kept_attributes=kept,
        source_file=np.concatenate(source), source_line=cat("source_line"),
        source_slot=cat("source_slot"), source_files=list(files),
        invalid_buckets=sum(p.invalid_buckets for p in parts),
    )
