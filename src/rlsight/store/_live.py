"""Start records: what each process has open right now, written while the span is still open.

A span reaches ``traces/`` only when it ends, so the one span that matters in a hang (the one
that never ended) is invisible there. For spans of long-lived kinds (:data:`LIVE_GROUPS`,
umbrella groups, or any span opened with ``live=True``) the store also writes a small start
record to ``<run_dir>/live/<group>-<rank>-<pid>.jsonl``; the finished span in ``traces/``
supersedes it by span id. Per-prompt spans never get one, so the cost stays per step.

Each file holds JSON lines of three kinds (``"record"``):

- ``process``: the first line; the process's resource attributes, when it opened the store, and
  its heartbeat interval (``heartbeatS``).
- ``start``: one span that started: ids, name, group, start time, thread (and the step number
  of ``rl.step``, the planned step count of ``rl.job``).
- ``shutdown``: the process shut its telemetry down cleanly. A file without one belongs to a
  process that was killed, crashed, or exited without ``shutdown_telemetry``.

Beside it, ``<run_dir>/heartbeats/<same name>.jsonl`` gets an ``alive`` line every
:data:`HEARTBEAT_S` while the process's telemetry runs. Without it, a process that hung in a
span and was then killed left nothing later than that span's start, so nobody could say how long
it hung, nor tell a dead worker on another node from a quiet one. Only its last line matters, so
the heartbeats have a file of their own: a reader reads its tail, and a week of them (~3 MB a
process) never slows the reading of the start records.

Writing goes through the store's own batching processor and sink (every 50 ms, one
``os.write`` per batch); a start record whose span has already ended when the batch is written
is left out, since its finished span says more.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from rlsight._rl_groups import RL
from rlsight._semconv import HOST_NAME, PROCESS_PID, SERVICE_INSTANCE_ID, SERVICE_NAME
from rlsight.store._lines import PARSE_ERRORS, int64, json_lines
from rlsight.store._reader import store_files
from rlsight.store._schema import AttributeValue, SkippedRecord

__all__ = [
    "HEARTBEAT_FOLDER",
    "HEARTBEAT_S",
    "LIVE_FOLDER",
    "LIVE_GROUPS",
    "SILENT_AFTER_BEATS",
    "LiveProcess",
    "LiveReadResult",
    "StartRecord",
    "alive_line",
    "last_heartbeat",
    "process_line",
    "read_live",
    "shutdown_line",
]

#: The folder of start records inside a run folder.
LIVE_FOLDER: Final = "live"
#: The folder of heartbeats: one file per process, named as its file in :data:`LIVE_FOLDER`.
HEARTBEAT_FOLDER: Final = "heartbeats"
#: Bytes read from the end of a heartbeat file: many lines' worth, so a torn last line (a
#: process killed mid-write) still leaves a whole one before it.
_TAIL_BYTES: Final = 4096

#: Groups whose spans get a start record (besides umbrella groups and ``live=True`` spans):
#: the work a run can hang in. Per-prompt and engine spans never do.
LIVE_GROUPS: Final = frozenset({
    RL.JOB, RL.STEP, RL.STARTUP, RL.SETUP, RL.ROLLOUT, RL.TRAINING, RL.REFIT, RL.CHECKPOINT,
    RL.VALIDATION, RL.GENERATION, RL.DATA_PLANE, RL.EFFICIENCY,
})
NEVER_LIVE: Final = frozenset({RL.PER_PROMPT, RL.ENGINE})

#: Seconds between two heartbeats of a process: one ~50-byte line, so a week-long run adds
#: ~3 MB per process, against the spans' gigabytes.
HEARTBEAT_S: Final = 10.0

#: A process not heard from for this many of its heartbeat intervals, without a clean shutdown,
#: is *silent*: killed, frozen (a thread holding the GIL stops the heartbeat too), or on a node
#: that is gone.
SILENT_AFTER_BEATS: Final = 3


def process_line(resource: Mapping[str, Any], heartbeat_s: float = HEARTBEAT_S) -> bytes:
    """The first line of a live file: who this process is, and how often it says it runs."""
    return _line({"record": "process", "timeUnixNano": str(time.time_ns()), "heartbeatS": heartbeat_s,
                  "resource": {k: v if isinstance(v, (str, bool, int, float)) else str(v)
                               for k, v in resource.items()}})


def alive_line() -> bytes:
    """A heartbeat: the process's telemetry still ran at this moment."""
    return _line({"record": "alive", "timeUnixNano": str(time.time_ns())})


def shutdown_line() -> bytes:
    """The last line of a cleanly shut down process."""
    return _line({"record": "shutdown", "timeUnixNano": str(time.time_ns())})


def _line(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


# -- reading ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StartRecord:
    """A span that started, as its start record says (it may have ended since)."""

    process: str
    """``service.instance.id`` of the process that started it."""
    trace_id: str
    span_id: str
    """16 hex digits (the reader skips a line whose id is anything else)."""
    parent_span_id: str | None
    name: str
    group: str | None
    start_ns: int
    thread_id: int
    step: int | None = None
    total_steps: int | None = None
    """``rl.total_steps`` of an ``rl.job`` span (``job_span(total_steps=...)``)."""


@dataclass(slots=True)
class LiveProcess:
    """One process that opened the store: who it is and whether it shut down cleanly."""

    process: str
    resource: Mapping[str, AttributeValue]
    opened_ns: int
    shutdown_ns: int | None = None
    file: str = ""
    heartbeat_s: float | None = None
    """Its heartbeat interval; ``None`` for a run written by an rlsight before heartbeats."""
    alive_ns: int | None = None
    """Its last heartbeat; ``None`` before the first one."""

    @property
    def last_heard_ns(self) -> int | None:
        """The last moment it said it ran (opening, heartbeat or shutdown); ``None`` when it
        writes no heartbeat, since then its silence says nothing."""
        if self.heartbeat_s is None:
            return None
        return max(self.opened_ns, self.alive_ns or 0, self.shutdown_ns or 0)

    def silent(self, now_ns: int) -> bool:
        """Not heard from for :data:`SILENT_AFTER_BEATS` heartbeats and never shut down."""
        heard = self.last_heard_ns
        return (heard is not None and self.heartbeat_s is not None and self.shutdown_ns is None
                and now_ns - heard > SILENT_AFTER_BEATS * self.heartbeat_s * 1e9)


@dataclass(frozen=True, slots=True)
class LiveReadResult:
    """Every start record and process of a run, plus the lines that could not be read."""

    processes: dict[str, LiveProcess] = field(default_factory=dict)
    starts: list[StartRecord] = field(default_factory=list)
    skipped: list[SkippedRecord] = field(default_factory=list)


def _process_key(resource: Mapping[str, Any]) -> str:
    key = resource.get(SERVICE_INSTANCE_ID)
    if key is not None:
        return str(key)
    return "/".join(str(resource.get(k, "?")) for k in (HOST_NAME, SERVICE_NAME, PROCESS_PID))


def _positive(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def read_live(run_dir: Path | str) -> LiveReadResult:
    """Every start record in ``<run_dir>/live/*.jsonl`` (none for a run written before them).

    A line that is not JSON or not a start record is skipped and reported with ``file:line``;
    the rest of the file is kept.

    Raises:
        StoreError: ``run_dir`` does not exist.
    """
    result = LiveReadResult()
    for path in store_files(Path(run_dir), LIVE_FOLDER):
        current: LiveProcess | None = None
        for lineno, record in json_lines(path, result.skipped):
            try:
                kind = record["record"]
                if kind == "process":
                    resource = dict(record["resource"])
                    beat = record.get("heartbeatS")
                    current = LiveProcess(_process_key(resource), resource,
                                          int64(record["timeUnixNano"]), file=str(path),
                                          heartbeat_s=float(beat) if _positive(beat) else None)
                    result.processes[current.process] = current
                elif current is None:
                    raise ValueError("record before the file's process line")
                elif kind == "start":
                    step, total = record.get("step"), record.get("totalSteps")
                    result.starts.append(StartRecord(
                        process=current.process, trace_id=str(record["traceId"]),
                        span_id=_span_id(record["spanId"]),
                        parent_span_id=record.get("parentSpanId") or None,
                        name=str(record["name"]), group=record.get("group"),
                        start_ns=int64(record["startTimeUnixNano"]),
                        thread_id=int64(record.get("threadId") or 0),
                        step=int64(step) if isinstance(step, int) else None,
                        total_steps=int64(total) if isinstance(total, int) else None,
                    ))
                elif kind == "shutdown":
                    current.shutdown_ns = int64(record["timeUnixNano"])
                else:
                    raise ValueError(f"unknown record kind {kind!r}")
            except PARSE_ERRORS as exc:
                result.skipped.append(SkippedRecord(str(path), lineno, f"not a start record ({exc!r})"))
    for proc in result.processes.values():
        if proc.heartbeat_s is not None:
            beats = Path(run_dir) / HEARTBEAT_FOLDER / Path(proc.file).name
            proc.alive_ns = last_heartbeat(beats)
    return result


def _span_id(value: object) -> str:
    """A start record's span id: 16 hex digits, as the store writes them (readers turn it into
    the 64-bit id the span's line will carry); anything else makes the line a skipped record."""
    if not (isinstance(value, str) and len(value) == 16):
        raise ValueError(f"spanId {value!r} is not 16 hex digits")
    int(value, 16)  # ValueError if it is not hex
    return value


def last_heartbeat(path: Path) -> int | None:
    """The time of the last whole ``alive`` line of a heartbeat file (``None``: no such file,
    or no whole line in its tail). Reads only the tail, whatever the file's length."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - _TAIL_BYTES))
            tail = handle.read()
    except OSError:
        return None
    for line in reversed(tail.split(b"\n")):
        try:
            record = json.loads(line)
            return int64(record["timeUnixNano"]) if record.get("record") == "alive" else None
        except (ValueError, TypeError, KeyError, AttributeError):
            continue  # the torn line of a killed writer, or the cut-off first line of the tail
    return None
