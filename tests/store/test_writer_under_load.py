"""The store writer under load: it keeps up with every app thread, and its lag is bounded.

docs/reliability.md names these tests as the proof of the SIGKILL promise under load.
"""

from __future__ import annotations

import mmap
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from rlsight._batching import BatchingSpanProcessor
from rlsight._providers import DROPPED_SPANS, STORE_MAX_LAG_S
from rlsight.store import read_metrics, read_spans

#: The store's promise: a span that ended this long before a SIGKILL is on disk (or counted).
PROMISE_NS = 200_000_000
THREADS = 4
SLOTS = 4096  # checkpoints per thread
EVERY = 50  # spans between checkpoints

_CHILD = textwrap.dedent("""
    import mmap, struct, sys, threading, time
    from rlsight import TelemetryConfig, setup_telemetry
    from rlsight.spans import span

    run_dir, progress, threads, slots, every = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    setup_telemetry(TelemetryConfig(run_dir=run_dir, span_groups=("all",)))
    with open(progress, "r+b") as f:
        board = mmap.mmap(f.fileno(), 0)

    def work(w):
        seq = 0
        while True:
            with span("generation", "rl.test.load", worker=w, seq=seq):
                pass
            if seq % every == 0 and seq // every < slots:
                # (seq, wall ns after the span ended): what the parent holds the store to
                struct.pack_into("qq", board, (w * slots + seq // every) * 16, seq, time.time_ns())
            seq += 1

    for w in range(threads):
        threading.Thread(target=work, args=(w,), daemon=True).start()
    print("running", flush=True)
    time.sleep(600)
""")


def test_sigkill_under_four_flat_out_threads_loses_only_the_last_200_ms(tmp_path: Path) -> None:
    """Every span that ended over 200 ms before the kill is in the store or counted as dropped."""
    run_dir = tmp_path / "run"
    progress = tmp_path / "progress"
    progress.write_bytes(b"\0" * (THREADS * SLOTS * 16))
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(run_dir), str(progress), str(THREADS), str(SLOTS), str(EVERY)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "running"
        time.sleep(2.0)
        kill_ns = time.time_ns()
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    with progress.open("rb") as f:
        board = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        checkpoints = [[struct.unpack_from("qq", board, (w * SLOTS + k) * 16) for k in range(SLOTS)]
                       for w in range(THREADS)]
    present: list[set[int]] = [set() for _ in range(THREADS)]
    for s in read_spans(run_dir).spans:
        present[int(s.attributes["rl.worker"])].add(int(s.attributes["rl.seq"]))
    # The promise is about the process's own time: on a machine short of CPU the scheduler
    # may stop the whole process before the kill, and nothing can write while it is stopped.
    # So the horizon is 200 ms before the child last ran (its newest checkpoint), or before
    # the kill if that is earlier.
    last_ran = max(at for rows in checkpoints for _, at in rows)
    horizon_ns = min(kill_ns, last_ran) - _promise_ns()
    missing_old = 0
    produced = 0
    for w in range(THREADS):
        # The highest checkpoint that ended before the horizon: every span up to it ended
        # earlier still, so each must be in the store.
        old = [seq for seq, at in checkpoints[w] if at and at < horizon_ns]
        horizon = max(old, default=-1)
        produced += horizon + 1
        missing_old += sum(1 for seq in range(horizon + 1) if seq not in present[w])
    dropped = sum(int(p.value or 0) for p in read_metrics(run_dir).points if p.name == DROPPED_SPANS)
    assert produced > 1000, "the child produced too little load to test anything"
    assert missing_old <= dropped, (
        f"{missing_old} of {produced} spans that ended over {_promise_ns() / 1e6:.0f} ms before "
        f"the kill are missing; {dropped} drops were counted")


def _promise_ns() -> int:
    """200 ms; on a machine so oversubscribed that the scheduler starves the writer for longer
    (a shared CI box: over 4 runnable tasks per CPU), the bound that still holds is the lag cap."""
    per_cpu = os.getloadavg()[0] / (os.cpu_count() or 1)
    return PROMISE_NS if per_cpu < 4 else int(STORE_MAX_LAG_S * 1e9) + PROMISE_NS


class _Span:
    """The two fields the processor reads from an ended span."""

    def __init__(self, end_time: int) -> None:
        self.end_time = end_time


def test_a_writer_that_cannot_keep_up_drops_and_counts_instead_of_holding_seconds() -> None:
    """With the exporter stuck, spans past the lag bound are dropped (``lag``), not queued."""
    release = threading.Event()
    seen: list[BatchingSpanProcessor] = []

    def stuck(batch: object) -> bool:
        release.wait(10)
        return True

    proc = BatchingSpanProcessor(stuck, name="t", interval_s=0.01, max_lag_s=0.5,
                                 on_drops=seen.append)
    try:
        t0 = time.time_ns()
        proc.on_end(_Span(t0))  # type: ignore[arg-type]
        time.sleep(0.1)  # the export thread takes it and hangs
        for i in range(1, 2001):
            proc.on_end(_Span(t0 + i * 1_000_000))  # type: ignore[arg-type]  # 1 ms apart: 2 s
        assert proc.queued == 500  # spans within 0.5 s of the stuck one
        assert proc.dropped["lag"] == 1500
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [proc]  # the drop reporter ran on the export thread
    proc.shutdown(1000)


def test_dropped_spans_are_an_observable_metric_in_the_store(tmp_path: Path) -> None:
    """Drops reach the store's metrics file while the run goes, by sink and reason."""
    from rlsight import TelemetryConfig, setup_telemetry

    telemetry = setup_telemetry(TelemetryConfig(run_dir=str(tmp_path / "run")))
    try:
        store = next(p for p in telemetry._processors if p.name == "store")
        store.dropped["lag"] += 7
        deadline = time.monotonic() + 5
        points: list[Any] = []
        while not points and time.monotonic() < deadline:  # the next 50 ms metric write
            time.sleep(0.02)
            points = [p for p in read_metrics(tmp_path / "run").points if p.name == DROPPED_SPANS]
        assert [(p.attributes["rl.telemetry.sink"], p.attributes["rl.telemetry.reason"], p.value)
                for p in points] == [("store", "lag", 7)]
    finally:
        report = telemetry.shutdown()
    assert report.dropped == {"store/lag": 7}
