"""Read a run folder's spans into :class:`~rlsight.analysis.columns.SpanColumns`, fast.

The store walks each request once (:func:`rlsight.store._reader.span_batches`); this module
projects the walked requests onto columns, file by file, with the skipped lines in file order.
Parsing JSON and walking it is most of the cost, so a large run is read by two processes: the
files are cut into two contiguous shards of about equal size, a worker process reads the
second while this one reads the first, and the columns are merged. A worker that cannot start
or fails leaves its shard to this process, so the result is always that of a serial read.
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from rlsight.analysis.columns import ColumnBuilder, SpanColumns
from rlsight.store._lines import PARSE_ERRORS
from rlsight.store._reader import not_otlp, span_batches, trace_files
from rlsight.store._schema import SkippedRecord

__all__ = ["PARALLEL_MIN_BYTES", "read_span_columns"]


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
    files = trace_files(run_dir)
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
            [sys.executable, "-c", "from rlsight.analysis._read import _worker_main; _worker_main()",
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
    builder = ColumnBuilder()
    skipped: list[SkippedRecord] = []
    done = 0
    for path in files:
        for item in span_batches([path]):
            if isinstance(item, SkippedRecord):
                skipped.append(item)
                continue
            try:
                builder.add_batch(item)
            except PARSE_ERRORS as exc:
                skipped.append(not_otlp(item.path, item.line, exc))
        done += _size(path)
        if progress is not None:
            progress(done, total)
    return builder.finish(), skipped
