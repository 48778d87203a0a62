"""The stall watchdog: when no step has ended for too long, say what every process is doing.

Opt-in (``TelemetryConfig.stall_after_s`` / ``stall_after_steps``), driver only. A daemon
thread compares the time since the last ``rl.step`` ended (or since the first step started)
with the threshold; when it passes, the watchdog reads the run's start records, writes a
stall record to ``<run_dir>/stalls/``, logs one warning naming the innermost open span of
each stalled process, and calls the ``on_stall`` hook given to
:func:`~rlsight.setup_telemetry`. It fires once per stall: the next step that ends re-arms it.
It stops judging when ``rl.job`` ends (the teardown after it is never a stall) until a step
starts again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from rlsight.analysis.model import ProcessState
    from rlsight.config import TelemetryConfig

__all__ = ["DEFAULT_MIN_AGE_S", "DEFAULT_STALL_K", "StallHook", "StallRecord"]

_log = logging.getLogger("rlsight")
#: Step durations the median of ``stall_after_steps`` is taken over (the most recent ones).
_RECENT_STEPS: Final = 50
#: A span is stalled beyond this many times its name's median duration (``rlsight watch --k``,
#: the watchdog)...
DEFAULT_STALL_K: Final = 5.0
#: ...and beyond this floor in seconds (``rlsight watch --min-age``): shorter waits are normal
#: in real runs (a refit, a checkpoint, a slow batch), and alerting on them pages for nothing.
DEFAULT_MIN_AGE_S: Final = 300.0
#: Format version of the stall record file.
STALL_RECORD_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class StallRecord:
    """What the watchdog saw when it fired; also written as JSON to :attr:`path`."""

    detected_unix_ns: int
    last_step: int | None
    """The step the controller is in (its ``rl.step`` number)."""
    steps_ended: int
    seconds_since_progress: float
    """Since the last step ended (or the first step started, before any ended)."""
    threshold_s: float
    path: str | None
    """The stall record file; ``None`` when the run has no local store."""
    processes: list[ProcessState] = field(default_factory=list)
    """Processes with open spans, stalled ones first (see ``rlsight watch``)."""

    def to_dict(self) -> dict[str, Any]:
        """The stall record as JSON data (``schema_version`` first)."""
        return {"schema_version": STALL_RECORD_VERSION, **dataclasses.asdict(self)}

    def describe(self) -> str:
        """One line per stalled process: ``policy/5 in rl.train.step open 14m01s < rl.step 118``."""
        from rlsight.render._format import open_span_text

        lines = []
        for p in self.processes:
            if p.innermost is not None and (p.stalled or not any(q.stalled for q in self.processes)):
                how = ", exited" if p.alive is False else ", silent" if p.silent else ""
                lines.append(f"{p.worker_group}/{p.rank} (pid {p.pid}{how}) in "
                             f"{open_span_text(p.innermost, rank=f'{p.worker_group}/{p.rank}')}")
        return "; ".join(lines) or "no open span found in the store"


#: The ``on_stall`` hook: called once per stall, on the watchdog's thread.
StallHook = Callable[[StallRecord], object]


class _Progress:
    """Step ends as the driver's step spans report them (thread-safe, cheap)."""

    __slots__ = ("durations", "ended", "last_progress", "lock", "step")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ended = 0
        self.step: int | None = None
        #: Monotonic seconds; ``None`` until a step starts (startup, and the teardown after
        #: ``rl.job`` ended, are never a stall).
        self.last_progress: float | None = None
        self.durations: deque[float] = deque(maxlen=_RECENT_STEPS)

    def started(self, step: int | None) -> None:
        with self.lock:
            self.step = step
            if self.last_progress is None:
                self.last_progress = time.monotonic()

    def ended_step(self, seconds: float) -> None:
        with self.lock:
            self.ended += 1
            self.durations.append(seconds)
            self.last_progress = time.monotonic()

    def job_ended(self) -> None:
        """``rl.job`` ended: not judged again until a step starts (a sweep's next job)."""
        with self.lock:
            self.last_progress = None


class Watchdog:
    """The daemon thread; built by ``setup_telemetry`` when a stall threshold is set."""

    def __init__(self, config: TelemetryConfig, hook: StallHook | None) -> None:
        self._config = config
        self._hook = hook
        self.progress = _Progress()
        self._stop = threading.Event()
        self._fired_at: int | None = None  # the ``ended`` count when it last fired
        self.fired = 0
        self._thread = threading.Thread(target=self._run, name="rlsight-watchdog", daemon=True)
        self._thread.start()

    def _threshold(self) -> float | None:
        """Seconds without progress that make a stall; ``None`` while it cannot be judged."""
        by_time = self._config.stall_after_s
        by_steps = self._config.stall_after_steps
        limits = [] if by_time is None else [by_time]
        if by_steps is not None:
            with self.progress.lock:
                durations = list(self.progress.durations)
            if not durations:
                return None  # no step has ended: there is no median step yet
            limits.append(by_steps * statistics.median(durations))
        return max(limits) if limits else None

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s()):
            try:
                self.check()
            except Exception:  # the watchdog must never take the run down
                _log.warning("rlsight: the stall watchdog failed a check; it keeps watching",
                             exc_info=True)

    def _poll_s(self) -> float:
        limit = self._threshold()
        return 0.5 if limit is None else min(1.0, max(0.05, limit / 10))

    def check(self) -> StallRecord | None:
        """Fire if no progress for longer than the threshold (once per stall)."""
        limit = self._threshold()
        with self.progress.lock:
            last, ended, step = self.progress.last_progress, self.progress.ended, self.progress.step
        if limit is None or last is None or self._fired_at == ended:
            return None
        quiet = time.monotonic() - last
        if quiet <= limit:
            return None
        self._fired_at = ended
        self.fired += 1
        record = self._record(step, ended, quiet, limit)
        _log.warning(
            "rlsight: stall: no step has ended for %.1fs (threshold %.1fs, %s): %s%s",
            quiet, limit, f"in step {step}" if step is not None else "in a step with no whole number",
            record.describe(),
            f"; stall record {record.path}" if record.path else "",
        )
        if self._hook is not None:
            try:
                self._hook(record)
            except Exception:
                _log.warning("rlsight: the on_stall hook raised; the run continues", exc_info=True)
        return record

    def _record(self, step: int | None, ended: int, quiet: float, limit: float) -> StallRecord:
        now = time.time_ns()
        processes: list[ProcessState] = []
        path: Path | None = None
        if self._config.local_store:
            from rlsight.analysis._read import read_span_columns
            from rlsight.analysis.live import process_states
            from rlsight.store._live import read_live

            run_dir = self._config.run_path
            cols, _, _ = read_span_columns(run_dir, workers=1, cache=False)  # in the driver: no writes
            # A span open for at least half the quiet period, and k medians of its name, is
            # part of the stall; one that started a moment ago is not.
            states = process_states(cols, read_live(run_dir), now_ns=now, k=DEFAULT_STALL_K,
                                    min_age_s=limit / 2, unseen_factor=1.0)
            # A worker on this host whose pid is gone is dead, not slow: say so before its
            # heartbeat's silence would (three intervals, 30 s).
            from rlsight._host import pid_alive

            host = socket.gethostname()
            processes = sorted((dataclasses.replace(p, alive=pid_alive(p.pid))
                                if p.host == host and p.pid is not None else p
                                for p in states if p.open),
                               key=lambda p: (not p.stalled, p.worker_group, p.rank))
            path = run_dir / "stalls" / f"stall-{self.fired}-{now // 1_000_000_000}.json"
        record = StallRecord(now, step, ended, quiet, limit, str(path) if path else None, processes)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(record.to_dict(), indent=1) + "\n")
            tmp.replace(path)
        return record

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop the thread (at shutdown); waits at most ``timeout_s``."""
        self._stop.set()
        self._thread.join(timeout_s)
