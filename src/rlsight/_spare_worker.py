"""A reader worker process started before it is needed, so its imports overlap the caller's.

A large read is shared with a second Python process (:func:`rlsight.analysis._read.
shared_jobs`); that process spends its first ~0.2 s importing numpy and the reading modules
before it reads a byte. Started when the read is asked for, those imports come after the caller's
own; started as the command begins (:func:`prestart`), they run on the second CPU while the
caller imports, and the worker is ready when the first job is. A spare that is never used is
ended at exit. This module imports nothing heavy, so a command can call it first.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from pathlib import Path
from typing import Final

__all__ = ["PARALLEL_MIN_BYTES", "prestart", "spawn", "take", "usable_cpus"]

#: Reads of more than this many bytes of JSON use a second process when two CPUs are available.
PARALLEL_MIN_BYTES: Final = 32 * 2**20
#: The worker's program. It reads, so it needs the store and column modules and numpy, not
#: the package's public API (OpenTelemetry) nor the rest of the analysis that ``rlsight`` and
#: ``rlsight.analysis`` import on import (0.08 CPU-s with bytecode, 0.3 s without): those
#: two packages are entered bare (their ``__init__`` not run), and each module a task names
#: is imported, with its own imports, as the task is unpickled.
_ENTRY: Final = (
    "import importlib.util as u, sys\n"
    "for name in ('rlsight', 'rlsight.analysis'):\n"
    "    sys.modules[name] = u.module_from_spec(u.find_spec(name))\n"
    "from rlsight.analysis._read import _worker_main; _worker_main()"
)
_SPARE: list[subprocess.Popen[bytes]] = []


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def spawn() -> subprocess.Popen[bytes] | None:
    """A new worker process, waiting on stdin for its task; None if no process can be had
    here (sandbox, limits): the caller then works alone."""
    package_root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
    try:
        return subprocess.Popen([sys.executable, "-c", _ENTRY], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    except OSError:
        return None


def prestart(run_dir: Path) -> None:
    """Start a spare worker if reading ``run_dir`` will want one: two or more trace files
    not yet in its column cache, over :data:`PARALLEL_MIN_BYTES` in all, and two CPUs."""
    if _SPARE or usable_cpus() < 2:
        return
    try:
        cached = {p.name for p in (run_dir / ".rlsight-cache" / "columns").iterdir()}
    except OSError:
        cached = set()
    try:
        unread = [p.stat().st_size for p in (run_dir / "traces").glob("*.jsonl")
                  if f"{p.name}.cols" not in cached]
    except OSError:
        return  # the read itself reports what is wrong with the folder
    if len(unread) > 1 and sum(unread) > PARALLEL_MIN_BYTES:  # as the read shares files
        worker = spawn()
        if worker is not None:
            _SPARE.append(worker)


def take() -> subprocess.Popen[bytes] | None:
    """The spare worker, if one was started and is still alive (the caller owns it now)."""
    while _SPARE:
        worker = _SPARE.pop()
        if worker.poll() is None:
            return worker
        _end(worker)
    return None


def _end(worker: subprocess.Popen[bytes]) -> None:
    """End a spare that was never given a task (it may still be importing: no need to wait)."""
    worker.kill()
    worker.wait()
    for stream in (worker.stdin, worker.stdout):
        if stream is not None:
            stream.close()


@atexit.register
def _end_spares() -> None:
    while _SPARE:
        _end(_SPARE.pop())
