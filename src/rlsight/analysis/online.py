"""One step's goodput from the driver's live spans, by the offline rollup's own functions.

The driver's span processor hands over the spans of the step that just ended (and what else
it still holds: the ancestors that give them their depth, spans of other threads) as the
rows it filed as each span ended (:class:`LiveSpans`: the span's own field values, no
per-span conversion). This module turns them into the same :class:`~rlsight.analysis.columns.SpanColumns`
the store reader builds (but for the trace texts, which only need to sort alike: see
:func:`live_columns`), with numpy in a few C-level passes, and runs the same table, step,
partition and discard code as ``rlsight report`` on them. There is no second rollup: a step's
buckets online are the report's buckets for that step whenever the spans handed over are the
ones the report sees inside the step's window. Spans the step's window does not contain
change nothing (the partition is cut at the window's edges), so none needs filtering out.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import repeat
from operator import is_, is_not, itemgetter
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from rlsight._readable import attributes_dict
from rlsight._semconv import (
    BUCKET,
    CONCURRENT,
    DISCARD_SPAN,
    GROUP_ID,
    SERVICE_INSTANCE_ID,
    STEP,
    STEP_SPAN,
    THREAD_ID,
)
from rlsight.analysis._steps import find_steps
from rlsight.analysis._table import build_table
from rlsight.analysis.columns import BUCKET_CODES, NO_STEP, SpanColumns
from rlsight.analysis.fleets import fleets
from rlsight.analysis.goodput import RunPartition, contributors, partition_timelines, step_buckets
from rlsight.analysis.model import Buckets, Contributor
from rlsight.analysis.wasted import charge_discards

__all__ = ["ROW_FIELDS", "LiveSpans", "StepGoodput", "live_columns", "step_goodput", "window_buckets"]

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
#: Each bucket name's code plus one, and 0 for no bucket (``None``), to go through ``bytes``.
_BUCKET_BYTES: Final[dict[str | None, int]] = {
    None: 0, **{name: code + 1 for name, code in BUCKET_CODES.items()}}
#: A span's thread id from its attribute dict (``KeyError`` without one).
_THREAD_OF: Final = itemgetter(THREAD_ID)
#: How many spans' trace ids tell :func:`_trace_numbers` whether runs of one trace are long.
_PROBE: Final = 256


@dataclass(frozen=True, slots=True)
class StepGoodput:
    """One step's wall time partitioned on its timeline, and every name that decided it."""

    step: int
    buckets: Buckets
    contributors: list[Contributor]
    """Per bucket, every span name that decided time in the step, biggest first."""


#: The fields of a span's row in :class:`LiveSpans`, in order.
ROW_FIELDS: Final = ("start", "end", "trace_id", "span_id", "parent_id", "name", "attributes")
_ROW: Final = len(ROW_FIELDS)


@dataclass(frozen=True, slots=True)
class LiveSpans:
    """Spans of one process as the driver's span processor files them as they end: one row
    of :data:`ROW_FIELDS` per span, the rows laid end to end in one flat list.

    A row holds the span's own objects (no conversion when it is filed): start and end
    (``None`` for a span still open, which then counts as ending at ``now``), the trace id,
    the span id, the parent's span id (0 for a root), the name, and the attributes as a
    ``dict`` (read with ``dict.get`` in C-level passes).
    """

    rows: list[Any]
    now: int
    resource: Mapping[str, Any]
    first: int = 0
    """Where the spans' rows begin in :attr:`rows`: the driver's roll-up hands over the
    processor's own list, not a copy of its part (a copy and its release touch every object
    of the step's spans twice)..."""
    stop: int | None = None
    """...and where they end (``None``: at its end), then :attr:`more`."""
    more: list[Any] = dataclasses.field(default_factory=list)
    """Rows after them (the spans still open)."""

    def __len__(self) -> int:
        stop = len(self.rows) if self.stop is None else self.stop
        return (stop - self.first + len(self.more)) // _ROW


def live_columns(spans: LiveSpans) -> SpanColumns:
    """The columns the store reader would build from these spans' lines (what the rollup
    reads; the group, status and numeric attribute columns stay empty, and the kept attribute
    dicts unless a discard is among the spans: no rollup reads them).

    Each field is one strided slice of the rows; every column is one C-level pass over a
    field (``map`` of a C function, ``np.fromiter``), not a Python expression per span.

    One difference from the store reader's columns, local to this module: ``traces`` holds
    an order key per trace, not its hex text. The rollup reads trace text only for its order
    (the table numbers traces in sorted order of their text, which for fixed-width hex is the
    order of the ids), so traces are numbered here in the order of their ids and the keys
    are shared strings that sort in that order: a window whose spans are roots has a trace
    each, and formatting each id cost more than the rest of its columns.
    """
    rows, begin, more = spans.rows, spans.first, spans.more
    stop = len(rows) if spans.stop is None else spans.stop
    n = len(spans)
    fields = [rows[begin + i:stop:_ROW] for i in range(_ROW)]
    if more:
        for i, field in enumerate(fields):
            field += more[i::_ROW]
        # The spans still open (the step's parent rl.job in every run) end now: their few
        # ends set here keep the end column one C-level pass, not a failed one and a redo.
        now, ends = spans.now, fields[1]
        for i in range((stop - begin) // _ROW, n):
            if ends[i] is None:
                ends[i] = now
    starts, ends, trace_ids, span_ids, parent_ids, span_names, attrs = fields
    # Small codes go through ``bytes``: its C loop takes them without numpy's per-value
    # conversion (~8 ns a value less than ``np.fromiter``).
    codes: Mapping[Any, int] = _BUCKET_BYTES
    get: Callable[[dict[str, Any], str], Any] = dict.get
    try:  # (``__getitem__`` of each value: a fifth less than ``get`` with a default)
        coded = bytes(map(codes.__getitem__, map(get, attrs, repeat(BUCKET, n))))
    except (KeyError, TypeError):
        # A value that is not a bucket name (0 as well: -1), or attributes kept in another
        # mapping than a dict (an SDK span's), which every pass below reads as a dict.
        attrs = [a if type(a) is dict else attributes_dict(a) for a in attrs]
        coded = bytes(map(codes.get, map(get, attrs, repeat(BUCKET, n)), repeat(0, n)))
    bucket = np.frombuffer(coded, np.int8) - np.int8(1)
    trace, traces = _trace_numbers(trace_ids, n)
    # Numbered in set order (a third of dict.fromkeys's cost): nothing reads the numbers'
    # order, only which name each one is.
    names = {x: i for i, x in enumerate(set(span_names))}
    if len(names) <= 256:
        name = np.frombuffer(bytes(map(names.__getitem__, span_names)), np.uint8).astype(np.int64)
    else:
        name = np.fromiter(map(names.__getitem__, span_names), np.int64, n)
    step_no = np.full(n, NO_STEP, np.int64)
    for i in (name == names.get(STEP_SPAN, -1)).nonzero()[0].tolist():
        number = attrs[i].get(STEP)
        # The store reads only an int64 (an OTLP intValue; a larger int is written as text).
        if type(number) is int and _INT64_MIN <= number <= _INT64_MAX:
            step_no[i] = number
    # The attribute dicts the discard charging reads, as the store reader keeps them; without
    # an ``rl.discard`` span among these spans it reads none.
    kept: dict[int, Mapping[str, Any]] = {}
    if DISCARD_SPAN in names:
        kept = {i: dict(attrs[i]) for i in np.flatnonzero(name == names[DISCARD_SPAN]).tolist()}
        kept.update((i, dict(a)) for i, a in enumerate(attrs) if GROUP_ID in a)
    concurrent = np.zeros(n, np.bool_)
    if any(map(dict.__contains__, attrs, repeat(CONCURRENT, n))):
        concurrent = np.frombuffer(  # a bytearray: writable, as the store reader's columns are
            bytearray(map(is_, map(get, attrs, repeat(CONCURRENT, n)), repeat(True, n))), np.bool_)
    try:  # every span has a thread id (rlsight's own do): a fifth less than ``get``
        threads: list[Any] = list(map(_THREAD_OF, attrs))
    except KeyError:
        threads = list(map(get, attrs, repeat(THREAD_ID, n)))
    first = threads[0] if n else None
    if (type(first) is int and first not in (0, 1) and threads.count(first) == n
            and type(sum(threads)) is int):
        # One thread (a driver's usual case). Every id equals an int other than 0 and 1, so
        # none is a bool; the sum would be a float if one were a float: all are ints.
        thread = np.full(n, first, np.int64)
    elif not n or list(map(type, threads)).count(int) != n:  # a missing or non-int id: timeline 0
        thread = np.fromiter([t if type(t) is int else 0 for t in threads], np.int64, n)
    else:
        thread = np.fromiter(threads, np.int64, n)
    try:
        end = np.fromiter(ends, np.int64, n)
    except TypeError:  # a span still open: it ends now
        end = np.array([spans.now if e is None else e for e in ends], np.int64)
    return SpanColumns(
        start=np.fromiter(starts, np.int64, n),
        end=end,
        trace=trace,
        span_id=np.fromiter(span_ids, np.uint64, n),
        parent_id=np.fromiter(parent_ids, np.uint64, n),
        name=name,
        group=np.zeros(n, np.int64),
        bucket=bucket,
        concurrent=concurrent,
        process=np.zeros(n, np.int64),
        thread=thread,
        step_no=step_no,
        batch_size=np.full(n, math.nan),
        prompts=np.full(n, math.nan),
        status=np.zeros(n, np.int8),
        names=list(names),
        groups=[""],
        traces=traces,
        resources=[spans.resource],
        process_keys=[str(spans.resource.get(SERVICE_INSTANCE_ID, "driver"))],
        kept_attributes=kept,
        source_file=np.full(n, -1, np.int32),
        source_line=np.full(n, -1, np.int32),
        source_slot=np.full(n, -1, np.int32),
        source_files=[],
    )


def _trace_numbers(trace_ids: list[int], n: int) -> tuple[NDArray[np.int64], list[str]]:
    """Each span's trace number, numbered in the order of the trace ids, and one order key
    per trace (see :func:`live_columns`)."""
    if not n:
        return np.zeros(0, np.int64), []
    first = trace_ids[0]
    if trace_ids.count(first) == n:
        return np.zeros(n, np.int64), _order_keys(1)
    # Spans of one trace that end one after another (a parent after its children) hold the
    # same id object, its parent's: each run of one object is numbered once, by its first
    # span (an equal id in another object only starts a run of its own). Where most runs
    # are one span long (spans that are roots, each its own trace), as the first spans
    # show or all of them, numbering every span costs less than finding the runs first.
    probe = min(n, _PROBE)
    if 2 * sum(map(is_not, trace_ids[1:probe], trace_ids[:probe - 1])) > probe:
        number, count = _id_numbers(trace_ids, n)
        return number, _order_keys(count)
    new = np.frombuffer(bytes(map(is_not, trace_ids[1:], trace_ids[:-1])), np.bool_)
    heads = np.flatnonzero(new) + 1
    if 2 * len(heads) > n:
        number, count = _id_numbers(trace_ids, n)
        return number, _order_keys(count)
    starts = [0, *heads.tolist()]
    number, count = _id_numbers(list(map(trace_ids.__getitem__, starts)), len(starts))
    lengths = np.diff(np.append(heads, n), prepend=0)
    return np.repeat(number, lengths), _order_keys(count)


def _id_numbers(trace_ids: list[int], n: int) -> tuple[NDArray[np.int64], int]:
    """Each id's number in the sorted order of the distinct ids (n >= 1), and how many
    there are."""
    try:
        raw = b"".join(map(int.to_bytes, trace_ids, repeat(16, n)))
    except OverflowError:  # not a 128-bit id (never from an SDK): numbered by its hex text
        text = [format(t, "032x") for t in trace_ids]
        numbers = {t: i for i, t in enumerate(sorted(set(text)))}
        return np.fromiter(map(numbers.__getitem__, text), np.int64, n), len(numbers)
    halves = np.frombuffer(raw, ">u8").reshape(n, 2).astype(np.uint64)
    high, low = halves[:, 0], halves[:, 1]
    # Random ids: the high halves of distinct traces differ, so one sort of them numbers the
    # traces (checked: every span of a high half must have the same low half).
    top, number = np.unique(high, return_inverse=True)
    bottom = np.empty(len(top), np.uint64)
    bottom[number] = low
    if np.array_equal(bottom[number], low):
        return number.astype(np.int64, copy=False), len(top)
    order = np.lexsort((low, high))
    new = np.empty(n, np.bool_)
    new[0] = True
    np.not_equal(high[order[1:]], high[order[:-1]], out=new[1:])
    new[1:] |= low[order[1:]] != low[order[:-1]]
    number = np.empty(n, np.int64)
    number[order] = np.cumsum(new) - 1
    return number, int(number.max()) + 1


#: ``_ORDER_KEYS[i]`` sorts i-th among them; made once, as far as the largest count asked.
_ORDER_KEYS: list[str] = []
_ORDER_KEYS_LOCK: Final = threading.Lock()


def _order_keys(count: int) -> list[str]:
    """``count`` strings that sort in the order of their positions."""
    if len(_ORDER_KEYS) < count:
        with _ORDER_KEYS_LOCK:
            _ORDER_KEYS.extend(f"{i:012d}" for i in range(len(_ORDER_KEYS), count))
    return _ORDER_KEYS[:count]


def step_goodput(cols: SpanColumns, step_span_id: int) -> StepGoodput | None:
    """The rollup of the ``rl.step`` span with id ``step_span_id`` among ``cols``.

    Discards recorded among ``cols`` are charged as the report charges them (so a
    ``discard()`` in the same step as the work it throws away agrees with the report).
    Returns ``None`` when that span is not among the columns' step spans.
    """
    table = build_table(cols)
    steps = find_steps(table)
    rows = (table.cols.span_id[steps.span] == np.uint64(step_span_id)).nonzero()[0]
    if not len(rows):
        return None
    row = int(rows[0])
    part, _ = charge_discards(table, partition_timelines(table, steps), steps)
    return StepGoodput(
        step=int(steps.number[row]),
        buckets=step_buckets(part, steps, rows[:1])[0],
        contributors=contributors(table, part, steps, top=None, rows=rows[:1]),
    )


def window_buckets(cols: SpanColumns, lo: int, hi: int) -> dict[str, int]:
    """One process's nanoseconds in each bucket (and unattributed) over ``[lo, hi)``.

    The report's fleet rule (:func:`rlsight.analysis.fleets.fleets`: at each instant the best
    bucket any of the process's timelines shows) on the spans clipped to the window. Clipping
    keeps, at every instant of the window, exactly the spans that cover it (and every span's
    depth), so consecutive windows add up to what the report's fleet view gives the process
    over the same time.
    """
    wall = hi - lo
    out = dict.fromkeys(("productive", "overhead", "idle", "wasted"), 0)
    if len(cols):
        # np.clip, by two ufunc calls (np.clip's dispatch costs ~3x their work here).
        clipped = dataclasses.replace(cols, start=np.minimum(np.maximum(cols.start, lo), hi),
                                      end=np.minimum(np.maximum(cols.end, lo), hi))
        table = build_table(clipped)
        steps = find_steps(table)
        part, _ = charge_discards(table, partition_timelines(table, steps), steps)
        empty = Buckets(0, 0, 0, 0, wall, wall)
        for usage in fleets(table, part, RunPartition(empty, lo, hi)).ranks:
            for bucket in out:
                out[bucket] += usage.buckets.get(bucket)
    out["unattributed"] = wall - sum(out.values())
    return out
