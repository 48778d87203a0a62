"""Read a run folder's spans into :class:`~rlsight.analysis.columns.SpanColumns`, fast.

The store walks each request once (:func:`rlsight.store._reader.file_span_blocks`); this
module projects the walked requests onto columns file by file, keeps each file's columns in
the run's column cache (:mod:`rlsight.analysis._cache`) and reads from the JSON only what the
cache does not cover. Parsing and walking JSON is most of the cost, so a large read is shared
with a second process (:func:`shared_jobs`): this one reads files from the first on, a worker
process from the last back, until they meet, so neither waits for the other however long the
worker takes to start. A worker that cannot start or fails leaves its files to this process,
so the result is always that of a serial read.
"""

from __future__ import annotations

import gc
import mmap
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rlsight import _spare_worker
from rlsight._spare_worker import PARALLEL_MIN_BYTES, usable_cpus
from rlsight.analysis import _cache
from rlsight.analysis._order import sort_part
from rlsight.analysis.columns import ColumnBuilder, SpanColumns, concat_columns
from rlsight.store._lines import PARSE_ERRORS, LineCursor, last_line_end
from rlsight.store._reader import SpanBatch, SpanBlock, file_span_blocks, not_otlp, trace_files
from rlsight.store._schema import SkippedRecord

__all__ = [
    "PARALLEL_MIN_BYTES", "collect_worker", "gc_paused", "half_way", "read_span_columns", "shared_jobs",
    "start_worker", "usable_cpus",
]

@dataclass(frozen=True, slots=True)
class _Save:
    """Where a job that reads a whole file keeps its columns: the run's cache, the file's
    stat key as planned, and the code's fingerprint (which a worker, its ``rlsight`` entered
    bare, cannot compute)."""

    run_dir: Path
    stat: tuple[int, int, int, int, int]
    fingerprint: str


@dataclass(frozen=True, slots=True)
class _Job:
    """Bytes [start, stop) of a trace file to parse; ``start`` follows line ``line``, and
    ``crc`` is the CRC-32 of the bytes before ``start``. With ``save``, the job writes the
    cache entry of the file's complete lines itself, so that each process of a shared read
    saves the files it read."""

    path: Path
    start: int
    stop: int
    line: int
    crc: int
    save: _Save | None = None


@dataclass(frozen=True, slots=True)
class _Parsed:
    """A job's result: its complete lines (``body``, up to byte ``end``, line ``lines``, CRC
    from the file's start ``crc``) and a last line without its newline (``tail``)."""

    body: SpanColumns
    body_skipped: list[SkippedRecord]
    end: int
    lines: int
    crc: int
    tail: SpanColumns
    tail_skipped: list[SkippedRecord]


def _read_range(
    path: Path, start: int, stop: int, cursor: LineCursor,
) -> tuple[SpanColumns, list[SkippedRecord]]:
    builder = ColumnBuilder()
    skipped: list[SkippedRecord] = []

    def add(item: SpanBatch | SkippedRecord) -> None:
        if isinstance(item, SkippedRecord):
            skipped.append(item)
            return
        try:
            builder.add_batch(item)
        except PARSE_ERRORS as exc:
            skipped.append(not_otlp(item.path, item.line, exc))

    for item in file_span_blocks(path, start, stop, cursor):
        if not isinstance(item, SpanBlock):
            add(item)
            continue
        try:
            builder.add_batch(item.batch, item.requests)
        except PARSE_ERRORS:  # a request in it is not readable: each is read or skipped alone
            for part in item.apart():
                add(part)
    return builder.finish(), skipped


def _run_job(job: _Job) -> _Parsed:
    try:
        end = last_line_end(job.path, job.start, job.stop)
    except OSError:
        end = job.start  # unreadable: the tail read below says so, as a skipped record
    cursor = LineCursor(job.line, job.crc)
    empty = ColumnBuilder().finish()
    body, body_skipped = _read_range(job.path, job.start, end, cursor) if end > job.start else (empty, [])
    lines, crc = cursor.line, cursor.crc or 0
    # Also opened when there is nothing to read, so that a file that cannot be is reported.
    if end < job.stop or job.stop == 0:
        tail, tail_skipped = _read_range(job.path, end, job.stop, LineCursor(lines))
    else:
        tail, tail_skipped = empty, []
    # In canonical order, so that the table finds the run sorted (rlsight.analysis._order):
    # each process of a shared read sorts the files it read.
    body = sort_part(body)
    if job.save is not None and end > job.start:
        save, stat = job.save, job.save.stat
        _cache.save_entry(save.run_dir, job.path, _cache.CachedFile(
            body, body_skipped, end, lines, crc, stat, _cache.settled(stat)), save.fingerprint)
    return _Parsed(body, body_skipped, end, lines, crc, tail, tail_skipped)


def read_span_columns(
    run_dir: Path | str,
    *,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
    cache: bool = True,
) -> tuple[SpanColumns, list[SkippedRecord], int]:
    """Every span in ``<run_dir>/traces/*.jsonl`` as columns, the skipped lines, the file count.

    The files come in order, each file's spans in the analysis' canonical order
    (:func:`rlsight.analysis._order.sort_part`); ``source_file``, ``source_line`` and
    ``source_slot`` say where each span was read, so sorting by them gives the order of one
    serial pass over the JSON. The skipped lines are in file order. The result is the same
    whatever the cache held and however the work was shared.

    Args:
        run_dir: The run folder.
        progress: Called with (bytes done, bytes total) of JSON parsed, for a progress bar.
        workers: 1 reads in this process only; 2 always shares the JSON to parse with a
            worker process; ``None`` (default) does when there is over
            :data:`PARALLEL_MIN_BYTES` to parse and this process may use two CPUs.
        cache: Use and update the run's column cache (``<run_dir>/.rlsight-cache``).

    Raises:
        StoreError: ``run_dir`` does not exist.
    """
    run_dir = Path(run_dir)
    files = trace_files(run_dir)
    plans: list[tuple[Path, os.stat_result | None, _cache.CachedFile | None, _Job | None]] = []
    for path in files:
        plans.append(_plan(run_dir, path, cache))
    jobs = [job for _, _, _, job in plans if job is not None]
    total = sum(job.stop - job.start for job in jobs)
    parsed = _parse(jobs, progress, total, workers)
    parts: list[SpanColumns] = []
    skipped: list[SkippedRecord] = []
    for path, st, entry, job in plans:
        if entry is not None:
            parts.append(entry.cols)
            skipped += entry.skipped
        if job is None:
            continue
        done = parsed[job]
        parts += [done.body, done.tail]
        skipped += done.body_skipped + done.tail_skipped
        if entry is not None and st is not None and done.end > job.start:  # (else the job saved)
            stat = _cache.stat_key(st)
            _cache.save_entry(run_dir, path, _cache.CachedFile(
                concat_columns([entry.cols, done.body]), [*entry.skipped, *done.body_skipped],
                done.end, done.lines, done.crc, stat, _cache.settled(stat)))
    return concat_columns(parts), skipped, len(files)


def _plan(
    run_dir: Path, path: Path, cache: bool,
) -> tuple[Path, os.stat_result | None, _cache.CachedFile | None, _Job | None]:
    """What to read of ``path``: the cache entry to use (or None) and the bytes to parse."""
    try:
        st = path.stat()
    except OSError:
        return path, None, None, _Job(path, 0, 0, 0, 0)  # the read reports it as skipped
    entry = _cache.load_entry(run_dir, path) if cache else None
    if entry is not None and not _usable(path, st, entry):
        entry = None
    if entry is None:
        save = _Save(run_dir, _cache.stat_key(st), _cache.fingerprint()) if cache else None
        return path, st, None, _Job(path, 0, st.st_size, 0, 0, save)
    if entry.covered == st.st_size:
        return path, st, entry, None
    return path, st, entry, _Job(path, entry.covered, st.st_size, entry.lines, entry.crc)


def _usable(path: Path, st: os.stat_result, entry: _cache.CachedFile) -> bool:
    """Whether ``entry`` still describes the first ``entry.covered`` bytes of ``path``."""
    key = _cache.stat_key(st)
    if key[:2] != entry.stat[:2] or st.st_size < entry.covered:
        return False  # another file under this name, or a shorter one
    if entry.settled and key == entry.stat:
        return True
    return _cache.crc_of(path, entry.covered) == entry.crc


def _parse(
    jobs: list[_Job], progress: Callable[[int, int], None] | None, total: int, workers: int | None,
) -> dict[_Job, _Parsed]:
    """Run ``jobs``, sharing them with a worker process when that pays."""
    done = [0]

    def advance(job: _Job) -> None:
        done[0] += job.stop - job.start
        if progress is not None:
            progress(done[0], total)

    if workers is None:
        workers = 2 if total > PARALLEL_MIN_BYTES and usable_cpus() > 1 else 1
    with gc_paused():
        if workers > 1 and len(jobs) > 1:
            results = shared_jobs(_run_job, jobs, advance)
        else:
            results = []
            for job in jobs:
                results.append(_run_job(job))
                advance(job)
    return dict(zip(jobs, results, strict=True))


def shared_jobs(run: Callable[[Any], Any], jobs: Sequence[Any],
                done: Callable[[Any], None] | None = None) -> list[Any]:
    """``[run(job) for job in jobs]``, this process taking jobs from the first on and a worker
    process from the last back, until they meet: each side does what it has time for, so a
    worker slow to start (imports) or a busy CPU does not leave this one waiting.

    ``run`` is a module-level function (pickled by name). The worker announces each job it
    starts and each result as it is done; this process takes a job only if the worker has
    not started it, and waits for the worker's results from there on. Results go through
    files in a folder this process owns, their columns mapped rather than copied
    (:func:`_load_result`), not the pipe: a pipe is drained by a thread of this process, which
    needs the GIL that this process's own reading holds, so a worker writing a megabyte
    result into it waited on this process (measured: most of its time) and this process, not
    seeing the worker's announcements behind it, read the worker's jobs too. A worker that
    cannot start or dies leaves its jobs to this process, so the result is always that of a
    serial run. ``done(job)`` is called here as each job's result arrives.
    """
    results: dict[int, Any] = {}
    try:
        folder = tempfile.TemporaryDirectory(prefix="rlsight-read-", ignore_cleanup_errors=True)
    except OSError:  # no temporary folder for the worker's results: every job is run here
        folder = None
    worker = start_worker(_stream_jobs, (run, list(jobs), folder.name)) if folder else None
    channel = _Channel(worker, Path(folder.name)) if folder and worker else None
    try:
        for index, job in enumerate(jobs):
            if channel is not None and channel.started(index):
                break  # the worker has this one and every later one
            results[index] = run(job)
            if done is not None:
                done(job)
        missing = [i for i in range(len(jobs)) if i not in results]
        got = channel.wait(missing) if channel is not None else {}
        for index in missing:
            if index in got:
                results[index] = got[index]
            else:  # the worker failed: its share is done here
                results[index] = run(jobs[index])
            if done is not None:
                done(jobs[index])
    finally:
        if channel is not None:
            channel.close()
        if folder is not None:
            folder.cleanup()
    return [results[i] for i in range(len(jobs))]


class _Channel:
    """This process's end of a :func:`_stream_jobs` worker: a thread reads its frames and
    loads the results they announce from ``folder``."""

    def __init__(self, worker: subprocess.Popen[bytes], folder: Path) -> None:
        self.worker = worker
        self.folder = folder
        self.lock = threading.Condition()
        self.first_started = -1  # lowest job index the worker has started (it goes backwards)
        self.results: dict[int, Any] = {}
        self.ended = False
        self.maps_left = _mapping_budget()
        self.thread = threading.Thread(target=self._read, name="rlsight-read-worker", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        stream = self.worker.stdout
        assert stream is not None
        try:
            while True:
                head = stream.read(5)
                if len(head) < 5:
                    return
                kind, index = head[:1], int.from_bytes(head[1:], "little")
                # Our own child process wrote it; read without the lock (it releases the GIL).
                result = None
                if kind == b"r":
                    result = _load_result(_result_path(self.folder, index), self.maps_left > 0)
                    self.maps_left -= 1
                with self.lock:
                    if kind == b"s":
                        self.first_started = index
                    else:
                        self.results[index] = result
                    self.lock.notify_all()
        except (OSError, ValueError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            return
        finally:
            with self.lock:
                self.ended = True
                self.lock.notify_all()

    def started(self, index: int) -> bool:
        with self.lock:
            return 0 <= self.first_started <= index

    def wait(self, indices: list[int]) -> dict[int, Any]:
        """The worker's results for ``indices``, as many as it delivers before it ends."""
        with self.lock:
            while not self.ended and not all(i in self.results for i in indices):
                self.lock.wait()
            return {i: self.results[i] for i in indices if i in self.results}

    def close(self) -> None:
        if self.worker.poll() is None:
            self.worker.kill()  # still on a job this process has done
        self.worker.wait()
        self.thread.join()
        if self.worker.stdout is not None:
            self.worker.stdout.close()


def _result_path(folder: Path, index: int) -> Path:
    return folder / f"{index}.pickle"


#: Alignment of each out-of-band buffer in a result file (a cache line; numpy wants 8 at least).
_ALIGN: Final = 64


def _save_result(path: Path, result: Any) -> None:
    """Pickle ``result`` to ``path`` with its buffers (the numpy columns) out of band after the
    pickle, each aligned, so that :func:`_load_result` maps them instead of copying them.

    Layout: the count of sizes, the sizes (the pickle's, then each buffer's; 8 bytes each,
    little-endian), the pickle, then the buffers.
    """
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(result, protocol=5, buffer_callback=buffers.append)
    raws = [buffer.raw() for buffer in buffers]
    sizes = [len(data), *(raw.nbytes for raw in raws)]
    with path.open("wb") as file:
        file.write(b"".join(n.to_bytes(8, "little") for n in (len(sizes), *sizes)))
        file.write(data)
        for raw in raws:
            file.write(b"\0" * (-file.tell() % _ALIGN))
            file.write(raw)


#: Most worker results one read maps (each mapping holds an open file until the read's
#: columns are joined); the rest are read into memory. A run of many small files has many
#: results, but their bytes are mostly in the first ones mapped when the files are large.
_MAPPED_MAX: Final = 64


def _mapping_budget() -> int:
    """How many worker results one read may map: :data:`_MAPPED_MAX`, or an eighth of the
    open files this process may have where that is fewer (a mapping keeps its file open: at
    the limit the read would lose its worker and redo the worker's files)."""
    try:
        import resource  # Unix only
    except ImportError:
        return _MAPPED_MAX
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _MAPPED_MAX if soft == resource.RLIM_INFINITY else min(_MAPPED_MAX, soft // 8)


def _load_result(path: Path, mapped: bool = True) -> Any:
    """What :func:`_save_result` wrote, its columns mapped from the file (copy on write), or
    read into memory if not ``mapped``.

    The worker's columns are half a run's: copied out of a pickle they were as much fresh
    memory in this process, each page faulted in and zeroed before the copy (several ms per
    10 MB on a virtual machine), while the file's pages are in the page cache already.
    Mapping ``path`` keeps it readable after its folder is removed, and keeps a file open
    (CPython's mmap holds a duplicate of the descriptor), so the caller maps only so many.
    """
    with path.open("rb") as file:
        if mapped:
            buffer: mmap.mmap | bytearray = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
        else:
            buffer = bytearray(os.fstat(file.fileno()).st_size)
            file.readinto(buffer)
    view = memoryview(buffer)
    count = int.from_bytes(view[:8], "little")
    sizes = [int.from_bytes(view[8 * i:8 * i + 8], "little") for i in range(1, count + 1)]
    at = 8 * (count + 1)
    data, at = view[at:at + sizes[0]], at + sizes[0]
    buffers = []
    for size in sizes[1:]:
        at += -at % _ALIGN
        buffers.append(view[at:at + size])
        at += size
    if at > len(view):
        raise ValueError(f"{path} is shorter than its sizes say")
    return pickle.loads(data, buffers=buffers)  # our own child process wrote it


def _stream_jobs(payload: tuple[Callable[[Any], Any], list[Any], str]) -> None:
    """Worker side of :func:`shared_jobs`: jobs from the last back, each announced on stdout
    (``s``, index) and, when done, its result pickled to a file of ``folder`` and announced
    (``r``, index)."""
    run, jobs, folder = payload
    out = sys.stdout.buffer
    with gc_paused():
        for index in range(len(jobs) - 1, -1, -1):
            out.write(b"s" + index.to_bytes(4, "little"))
            out.flush()
            result = run(jobs[index])
            _save_result(_result_path(Path(folder), index), result)
            out.write(b"r" + index.to_bytes(4, "little"))
            out.flush()


def start_worker(task: Callable[[Any], Any], payload: Any) -> subprocess.Popen[bytes] | None:
    """Start a Python process that runs ``task(payload)`` (``task`` a module-level function,
    pickled by name) and pickles the result to its stdout; the spare the command started
    (:mod:`rlsight._spare_worker`) when there is one.

    A plain subprocess rather than ``multiprocessing``: spawning through multiprocessing
    re-imports the caller's ``__main__``, which breaks scripts without a main guard, and
    forking would copy whatever threads the caller runs (a progress bar) mid-operation.
    """
    worker = _spare_worker.take() or _spare_worker.spawn()
    if worker is None:
        return None  # no process to be had here (sandbox, limits): the caller reads serially
    assert worker.stdin is not None
    try:
        worker.stdin.write(pickle.dumps((task, payload), protocol=pickle.HIGHEST_PROTOCOL))
        worker.stdin.close()
    except OSError:
        pass  # it died already: collecting it says so
    return worker


def collect_worker(worker: subprocess.Popen[bytes]) -> Any:
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
        with gc_paused():  # a list of many small objects, like a read
            result = pickle.loads(payload)  # our own child process wrote it
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None
    return result


def _worker_main() -> None:
    """Entry point of the worker process: a pickled task on stdin, its pickled result on stdout."""
    task, payload = pickle.loads(sys.stdin.buffer.read())  # our own parent process wrote it
    result = task(payload)
    if task is not _stream_jobs:  # which sends its results as it goes
        sys.stdout.buffer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


def half_way(sizes: list[int]) -> int:
    """Index that cuts ``sizes`` into two contiguous parts of about equal sum (both non-empty)."""
    total, running = sum(sizes), 0
    for i, size in enumerate(sizes):
        running += size
        if running * 2 >= total:
            return min(max(i + 1, 1), len(sizes) - 1)
    return len(sizes) - 1


@contextmanager
def gc_paused() -> Iterator[None]:
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
