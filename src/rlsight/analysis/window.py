"""Pick the spans of a run that a timeline shows, and read only those in full.

A Perfetto trace of a million spans does not open, so ``rlsight timeline`` writes a window:
the spans overlapping a range of steps, capped at the earliest ``max_spans``. Building a
full :class:`~rlsight.store.SpanRecord` (every attribute decoded) for every span only to drop
most of them is what made the command slow. So the choice is made on the run's columns
(:func:`~rlsight.analysis.read_span_columns`, which the column cache makes fast), and then
only the lines holding the chosen spans are parsed again, into records.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

import numpy as np

from rlsight._semconv import STEP_SPAN
from rlsight.analysis._order import reorder
from rlsight.analysis._read import (
    collect_worker,
    gc_paused,
    half_way,
    read_span_columns,
    start_worker,
    usable_cpus,
)
from rlsight.analysis._sorting import lexsort
from rlsight.analysis.columns import NO_STEP, SpanColumns
from rlsight.store._lines import PARSE_ERRORS
from rlsight.store._reader import file_span_batches, not_otlp, span_records
from rlsight.store._schema import SkippedRecord, SpanRecord

__all__ = ["NoStepInRange", "SpanWindow", "window_spans"]

_RECORD_FIELDS: Final = tuple(f.name for f in fields(SpanRecord))

#: Windows of more spans than this are read again by two processes when two CPUs are there.
_PARALLEL_MIN_SPANS: Final = 50_000


class NoStepInRange(LookupError):
    """No ``rl.step`` span is numbered within the range asked for; ``numbered`` is the
    (first, last) step number the run does have, or None when it numbers none, so the message
    can say which range would work."""

    def __init__(self, steps: tuple[int | None, int | None], numbered: tuple[int, int] | None) -> None:
        super().__init__(steps, numbered)
        self.steps = steps
        self.numbered = numbered


@dataclass(frozen=True, slots=True)
class SpanWindow:
    """The chosen spans, in full, and what was left out."""

    spans: list[SpanRecord]
    skipped: list[SkippedRecord]
    total: int
    """Distinct spans in the run (a span written twice by a retried export counts once)."""
    cut_at_ns: int | None
    """Start of the first span left out by the cap, or None when nothing was."""


def window_spans(
    run_dir: Path | str, *, steps: tuple[int | None, int | None] | None = None,
    max_spans: int | None = None, columns: tuple[SpanColumns, list[SkippedRecord]] | None = None,
) -> SpanWindow:
    """The distinct spans of ``run_dir`` overlapping ``steps`` (first, last; either open),
    at most ``max_spans`` of them, the earliest by start. ``columns``: the run's columns and
    skipped records, when the caller has read them already (the timeline needs them for the
    spans that never ended too): not read twice.

    Raises:
        StoreError: ``run_dir`` does not exist.
        NoStepInRange: ``steps`` is given and no ``rl.step`` span is numbered within it.
    """
    if columns is None:
        cols, skipped, _ = read_span_columns(run_dir)
    else:
        cols, skipped = columns[0], list(columns[1])
    # The read puts each file's spans in canonical order; here "first" is first read (a
    # repeated id keeps its first record, the cap keeps the first read of spans that start
    # together), so the spans go back to the order they were read in: file, line, slot.
    read_order = lexsort((cols.source_slot, cols.source_line, cols.source_file))
    if (read_order[1:] < read_order[:-1]).any():
        cols = reorder(cols, read_order)
    n = len(cols)
    # One slice per span, even where a retried export wrote a batch twice: the first read.
    first = np.ones(n, dtype=bool)
    ids = np.sort(cols.span_id)
    if n > 1 and (ids[1:] == ids[:-1]).any():  # else no (trace, id) pair can repeat
        by_key = lexsort((np.arange(n), cols.span_id, cols.trace))
        first[by_key[1:]] = (cols.span_id[by_key[1:]] != cols.span_id[by_key[:-1]]) | (
            cols.trace[by_key[1:]] != cols.trace[by_key[:-1]])
    chosen = np.flatnonzero(first)
    total = len(chosen)
    if steps is not None:
        lo, hi = steps
        step_id = cols.names.index(STEP_SPAN) if STEP_SPAN in cols.names else -1
        number = cols.step_no[chosen]
        numbered = (cols.name[chosen] == step_id) & (number != NO_STEP)
        match = numbered.copy()
        if lo is not None:
            match &= number >= lo
        if hi is not None:
            match &= number <= hi
        if not match.any():
            have = number[numbered]
            raise NoStepInRange(steps, (int(have.min()), int(have.max())) if len(have) else None)
        start_ns = int(cols.start[chosen[match]].min())
        end_ns = int(cols.end[chosen[match]].max())
        chosen = chosen[(cols.start[chosen] < end_ns) & (cols.end[chosen] > start_ns)]
    cut_at = None
    if max_spans is not None and len(chosen) > max_spans:
        order = np.argsort(cols.start[chosen], kind="stable")
        cut_at = int(cols.start[chosen[order[max_spans]]])
        chosen = np.sort(chosen[order[:max_spans]])
    records = _records(cols.source_files, cols.source_file[chosen], cols.source_line[chosen],
                       cols.source_slot[chosen], skipped)
    return SpanWindow(records, skipped, total, cut_at)


def _records(
    files: list[str], file: np.ndarray, line: np.ndarray, slot: np.ndarray, skipped: list[SkippedRecord],
) -> list[SpanRecord]:
    """The spans at (file, line, slot), read again in full, the files shared with a worker
    process when there are many lines to parse (as :func:`read_span_columns` does)."""
    wanted: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for f, ln, s in zip(file.tolist(), line.tolist(), slot.tolist(), strict=True):
        wanted[f][ln].add(s)
    work = [(files[f], dict(wanted[f])) for f in sorted(wanted)]
    if len(work) > 1 and len(file) > _PARALLEL_MIN_SPANS and usable_cpus() > 1:
        sizes = [len(lines) for _, lines in work]
        cut = half_way(sizes)
        worker = start_worker(_read_record_fields, work[cut:])
        if worker is not None:
            first = _read_records(work[:cut])
            flat = collect_worker(worker)
            if isinstance(flat, tuple):
                with gc_paused():
                    second = ([SpanRecord(*values) for values in flat[0]], flat[1])
            else:  # the worker failed: read its share here
                second = _read_records(work[cut:])
            records: list[SpanRecord] = first[0] + second[0]
            skipped += first[1] + second[1]
            return records
    alone, bad = _read_records(work)
    skipped += bad
    return alone


def _read_record_fields(
    work: list[tuple[str, dict[int, set[int]]]],
) -> tuple[list[tuple[Any, ...]], list[SkippedRecord]]:
    """:func:`_read_records` with each record as a tuple of its fields, for the worker: a
    tuple unpickles in a third of the time of a frozen dataclass (its ``__setstate__`` is
    Python, field by field), and the parent waits on that."""
    records, skipped = _read_records(work)
    return [tuple(getattr(r, name) for name in _RECORD_FIELDS) for r in records], skipped


def _read_records(
    work: list[tuple[str, dict[int, set[int]]]],
) -> tuple[list[SpanRecord], list[SkippedRecord]]:
    """For each (file, {line: slots}), those spans in full. A line with an attribute that is
    not OTLP (one the columns never decode) is skipped as :func:`read_spans` skips it; a line
    that no longer reads as it did (the file changed in between) gives what it still holds."""
    out: list[SpanRecord] = []
    skipped: list[SkippedRecord] = []
    with gc_paused():
        for path, lines in work:
            for batch in file_span_batches(Path(path), only=lines):
                if isinstance(batch, SkippedRecord):
                    continue
                try:
                    records = span_records(batch)
                except PARSE_ERRORS as exc:
                    skipped.append(not_otlp(batch.path, batch.line, exc))
                    continue
                out += [records[s] for s in sorted(lines.get(batch.line, ())) if s < len(records)]
    return out, skipped
