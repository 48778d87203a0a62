"""What every process is doing: open spans from start records, stalls, the post-mortem.

A start record whose span id has no finished span in ``traces/`` is *open*. Per process, the
open spans with no open child in that same process are where it is right now (a driver
waiting on actors is in the span it dispatched from); one of them is
*stalled* when its age exceeds both a floor (``min_age``) and ``k`` times the median duration
of finished spans of the same name. A span with no finished peer has no median; it is judged
against ``k`` times the floor, so a long first step is not called a stall after the floor
alone. ``rl.job`` (open for the whole run) is never stalled.

``rlsight watch`` measures ages to now; the report's post-mortem measures them to the last
moment the store saw, so a dead run reads the same tomorrow as it did when it died. A process
that went *silent* (no heartbeat for three intervals, no clean shutdown) has its open spans aged
to its last heartbeat in the post-mortem: how long it hung while it still ran.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import socket
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsight._host import pid_alive
from rlsight._semconv import (
    BUCKET,
    EFFICIENCY_SPAN_PREFIX,
    HOST_IP,
    HOST_NAME,
    JOB_SPAN,
    PROCESS_PID,
    RANK,
    RUN_ID,
    SPAN_GROUP,
    STEP_SPAN,
    THREAD_ID,
    TOTAL_STEPS,
    WORKER_GROUP,
)
from rlsight.analysis._read import read_span_columns
from rlsight.analysis._sorting import lexsort
from rlsight.analysis.columns import NO_STEP, SpanColumns, concat_columns, span_columns_from_records
from rlsight.analysis.model import SCHEMA_VERSION, ErrorSpan, OpenSpan, PostMortem, ProcessState
from rlsight.store._live import LiveProcess, LiveReadResult, StartRecord, read_live
from rlsight.store._schema import STATUS_ERROR, AttributeValue, SpanRecord
from rlsight.watchdog import DEFAULT_MIN_AGE_S, DEFAULT_STALL_K

__all__ = [
    "DEFAULT_MIN_AGE_S",
    "DEFAULT_STALL_K",
    "LOST_WORK_SPAN",
    "OPEN_ATTRIBUTE",
    "ErrorSpan",
    "LostWork",
    "WatchSnapshot",
    "lost_work",
    "nothing_ended",
    "open_span_records",
    "post_mortem",
    "process_states",
    "watch_snapshot",
    "with_lost_work",
]


def _hex(span_id: str) -> int:
    try:
        return int(span_id or "0", 16) & 0xFFFF_FFFF_FFFF_FFFF
    except ValueError:
        return -1


def _medians(cols: SpanColumns, names: set[str]) -> dict[str, float]:
    """Median finished duration of each of ``names`` (only those with a finished span)."""
    index = {n: i for i, n in enumerate(cols.names) if n in names}
    if not index or not len(cols):
        return {}
    durations = np.maximum(cols.end - cols.start, 0)
    out: dict[str, float] = {}
    for name, i in index.items():
        mask = cols.name == i
        if mask.any():
            out[name] = float(np.median(durations[mask]))
    return out


def _last_spans(cols: SpanColumns) -> dict[str, tuple[str, int]]:
    """Per process key: the name and end of the span it finished last; of spans that ended
    together, the one read last (the read sorts each file's spans: the source columns keep
    the order they were read in)."""
    if not len(cols):
        return {}
    order = lexsort((cols.source_slot, cols.source_line, cols.source_file, cols.end, cols.process))
    proc = cols.process[order]
    last = order[np.r_[proc[1:] != proc[:-1], True]]
    return {cols.process_keys[int(cols.process[i])]: (cols.names[int(cols.name[i])], int(cols.end[i]))
            for i in last}


def _int(value: AttributeValue | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _label(start: StartRecord) -> str:
    return f"{start.name} {start.step}" if start.step is not None and start.name == STEP_SPAN else start.name


def _replacements(live: LiveReadResult, last_ends: Mapping[str, int],
                  running: Collection[str]) -> dict[str, LiveProcess]:
    """Per process that Ray (or a launcher) replaced: the next process of its worker group and
    rank to open the store.

    Two processes of one group and rank may also run side by side (the actors of an unnamed
    pool all take their class name and rank 0), so a process counts as replaced only when
    nothing of it (heartbeat, start record, finished span) is later than the next one's
    opening, since a dead process stops before its replacement starts, and it is not among
    ``running`` (its pid is alive on this host). A process that runs on beside the next one
    beats again within one heartbeat; until then, on another host, it may read as replaced.
    """
    last_start: dict[str, int] = {}
    for s in live.starts:
        last_start[s.process] = max(last_start.get(s.process, 0), s.start_ns)
    ranks: dict[tuple[str, int | None], list[LiveProcess]] = {}
    for proc in live.processes.values():
        group = proc.resource.get(WORKER_GROUP)
        if group is not None:
            ranks.setdefault((str(group), _int(proc.resource.get(RANK))), []).append(proc)
    out = {}
    for procs in ranks.values():
        procs.sort(key=lambda p: (p.opened_ns, p.process))
        for earlier, later in itertools.pairwise(procs):
            if (earlier.shutdown_ns is not None or earlier.heartbeat_s is None
                    or earlier.process in running):
                continue
            last_sign = max(earlier.last_heard_ns or 0, last_start.get(earlier.process, 0),
                            last_ends.get(earlier.process, 0))
            if last_sign <= later.opened_ns:
                out[earlier.process] = later
    return out


#: The span the report adds on the caller's timeline for its wait on work a dead process lost.
LOST_WORK_SPAN = f"{EFFICIENCY_SPAN_PREFIX}wasted.lost_worker"
#: Flips a lost span's id into the id of the caller-side span that stands for it.
_LOST_ID_MASK = 0x6C6F_7374_776F_726B


@dataclass(frozen=True, slots=True)
class LostWork:
    """What :func:`lost_work` found: the caller-side spans it adds, and how many lost spans
    they stand for."""

    spans: list[SpanRecord]
    """One per caller and disjoint stretch of its wait: two calls lost together are one wait."""
    lost: int
    """Distinct lost span ids charged (a start record listed twice is one span)."""


def lost_work(cols: SpanColumns, live: LiveReadResult, running: Collection[str] = ()) -> LostWork:
    """The caller's wait on work a process Ray replaced lost, as spans in the ``wasted`` bucket.

    A process that died inside a call (SIGKILL, OOM) and was replaced never ends its spans; the
    driver that dispatched the call waited on it until Ray (or its own code) started the
    replacement and called again, all of it inside its own productive span: a step that lost
    4 s to a killed generation worker read 100% productive. For each open span of a replaced
    process whose parent is a finished span of another process (the caller's dispatch), the
    wait runs from the lost span's start to the replacement's start (clipped to the caller's
    span). Only a caller with a bucket of its own is charged: an umbrella (``rl.job``,
    ``rl.step``, a startup umbrella) carries none, and a call dispatched with the job's context
    (a producer thread of an async run) hangs under ``rl.job``, whose thread meanwhile did
    unrelated work (training, a checkpoint) that the wait must not relabel; that loss is in the
    post-mortem, not the partition. A ``rl.concurrent`` caller is outside the partition and is
    not charged either. A caller's waits are merged (two workers lost in one call are one
    wait, not two overlapping spans whose durations add up), and each merged stretch is a
    child of the caller on its timeline, in the ``wasted`` bucket, so the partition (the
    deepest span decides) counts that wait as wasted. ``running``: as in
    :func:`process_states`.
    """
    finished = {s: i for i, s in enumerate(cols.span_id.tolist())}
    replaced = _replacements(live, {key: end for key, (_, end) in _last_spans(cols).items()}, running)
    waits: dict[int, list[tuple[int, int, int]]] = {}
    for s in live.starts:
        later = replaced.get(s.process)
        lost_id = _hex(s.span_id)
        if later is None or lost_id in finished:
            continue
        i = finished.get(_hex(s.parent_span_id or ""))
        if (i is None or cols.process_keys[int(cols.process[i])] == s.process
                or cols.bucket[i] < 0 or cols.concurrent[i]):
            continue
        start, end = max(s.start_ns, int(cols.start[i])), min(later.opened_ns, int(cols.end[i]))
        if end > start:
            waits.setdefault(i, []).append((start, end, lost_id))
    spans = []
    for i, intervals in waits.items():
        merged: list[list[int]] = []
        for start, end, lost_id in sorted(intervals):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end, lost_id])
        for start, end, lost_id in merged:
            spans.append(SpanRecord(
                trace_id=cols.traces[int(cols.trace[i])], span_id=f"{lost_id ^ _LOST_ID_MASK:016x}",
                parent_span_id=f"{int(cols.span_id[i]):016x}", name=LOST_WORK_SPAN, start_ns=start,
                end_ns=end, resource=cols.resources[int(cols.process[i])],
                attributes={THREAD_ID: int(cols.thread[i]), BUCKET: "wasted", SPAN_GROUP: "efficiency"}))
    return LostWork(spans=spans, lost=len({w[2] for ws in waits.values() for w in ws}))


def with_lost_work(cols: SpanColumns, live: LiveReadResult,
                   running: Collection[str] = ()) -> tuple[SpanColumns, LostWork]:
    """``cols`` with :func:`lost_work`'s spans added, and what was added."""
    lost = lost_work(cols, live, running)
    if not lost.spans:
        return cols, lost
    return concat_columns([cols, span_columns_from_records(lost.spans)]), lost


def process_states(
    cols: SpanColumns,
    live: LiveReadResult,
    *,
    now_ns: int,
    k: float = DEFAULT_STALL_K,
    min_age_s: float = DEFAULT_MIN_AGE_S,
    unseen_factor: float | None = None,
    until: Mapping[str, int] | None = None,
    running: Collection[str] = (),
) -> list[ProcessState]:
    """Every process the store knows of, with its open spans judged against ``now_ns``.

    Args:
        cols: The run's finished spans.
        live: Its start records.
        now_ns: The moment ages are measured to.
        k: Stall threshold in multiples of a span name's median duration.
        min_age_s: Stall floor in seconds.
        unseen_factor: A span with no finished peer is stalled past this many floors
            (default ``k``); the watchdog, which already knows the run stopped, passes 1.
        until: Per process key, the moment its open spans are aged to instead of ``now_ns``
            (the post-mortem: a process that went silent, to its last heartbeat).
        running: Process keys known to run now (``watch``: their pid is alive on this host);
            never taken for a process Ray replaced.
    """
    finished = set(cols.span_id.tolist())
    open_starts = [s for s in live.starts if _hex(s.span_id) not in finished]
    by_id = {s.span_id: s for s in live.starts}
    # A parent with an open child in *its own* process is not where that process is; one whose
    # only open children run elsewhere (a driver waiting on actors) is.
    parents = {(s.process, s.parent_span_id) for s in open_starts if s.parent_span_id}
    medians = _medians(cols, {s.name for s in open_starts})
    floor_ns = min_age_s * 1e9
    unseen_ns = (k if unseen_factor is None else unseen_factor) * floor_ns
    resources: dict[str, Mapping[str, AttributeValue]] = {
        key: res for key, res in zip(cols.process_keys, cols.resources, strict=True)}
    for key, proc in live.processes.items():
        resources[key] = proc.resource
    last = _last_spans(cols)
    replaced = _replacements(live, {key: end for key, (_, end) in last.items()}, running)
    # A process Ray replaced was dead by the time its replacement started: its spans end there.
    until = {**(until or {}), **{key: later.opened_ns for key, later in replaced.items()}}

    def rank_label(key: str) -> str:
        res = resources.get(key, {})
        return f"{res.get(WORKER_GROUP, '?')}/{res.get(RANK, '?')}"

    per_process: dict[str, list[OpenSpan]] = {}
    leaves: dict[str, list[OpenSpan]] = {}
    items: dict[str, OpenSpan] = {}
    for s in sorted(open_starts, key=lambda s: s.start_ns):
        chain: list[str] = []
        chain_ranks: list[str] = []
        seen = {s.span_id}
        parent = by_id.get(s.parent_span_id or "")
        while parent is not None and parent.span_id not in seen:
            seen.add(parent.span_id)
            chain.append(_label(parent))
            chain_ranks.append(rank_label(parent.process))
            parent = by_id.get(parent.parent_span_id or "")
        median = medians.get(s.name)
        threshold = max(floor_ns, k * median) if median is not None else unseen_ns
        age = max(0, (until.get(s.process, now_ns) if until else now_ns) - s.start_ns)
        is_leaf = (s.process, s.span_id) not in parents
        item = OpenSpan(
            name=s.name, group=s.group, trace_id=s.trace_id, span_id=s.span_id,
            parent_span_id=s.parent_span_id, thread=s.thread_id, start_unix_ns=s.start_ns,
            age_ns=age, chain=chain[::-1], chain_ranks=chain_ranks[::-1], step=s.step,
            median_ns=median, threshold_ns=threshold,
            stalled=is_leaf and s.name != JOB_SPAN and age > threshold and s.process not in replaced,
        )
        per_process.setdefault(s.process, []).append(item)
        items[s.span_id] = item
        if is_leaf:
            leaves.setdefault(s.process, []).append(item)
    # A span no peer has finished waits k floors, but not when a stalled span waits on it
    # (an ancestor in another process): the stall is there, at the end of the waiting chain (a
    # first collective that never returns read 'running' under its stalled callers for 25 min).
    for process, spans in leaves.items():
        if process in replaced:
            continue
        for i, o in enumerate(spans):
            if o.stalled or o.median_ns is not None or o.age_ns <= floor_ns:
                continue
            ancestor = items.get(o.parent_span_id or "")
            seen = {o.span_id}
            while ancestor is not None and ancestor.span_id not in seen and not ancestor.stalled:
                seen.add(ancestor.span_id)
                ancestor = items.get(ancestor.parent_span_id or "")
            if ancestor is not None and ancestor.stalled:
                spans[i] = items[o.span_id] = dataclasses.replace(o, stalled=True, threshold_ns=floor_ns)
                opened = per_process[process]
                opened[opened.index(o)] = spans[i]
    # Open spans started from a span of another process (a dispatched actor call).
    remote_children: dict[str, set[str]] = {}
    for s in open_starts:
        parent = by_id.get(s.parent_span_id or "")
        if parent is not None and parent.process != s.process:
            remote_children.setdefault(parent.span_id, set()).add(s.process)

    states = []
    for key in sorted(set(resources) | set(per_process)):
        res = resources.get(key, {})
        spans = per_process.get(key, [])
        stalled = [o for o in leaves.get(key, []) if o.stalled]
        here = leaves.get(key, [])
        innermost = max(stalled, key=lambda o: o.age_ns) if stalled else (here[-1] if here else None)
        live_proc = live.processes.get(key)
        last_name, last_end = last.get(key, (None, None))
        states.append(ProcessState(
            process=key, worker_group=str(res.get(WORKER_GROUP, "?")),
            rank=_int(res.get(RANK)) or 0, pid=_int(res.get(PROCESS_PID)),
            host=str(res[HOST_NAME]) if HOST_NAME in res else None,
            clean_shutdown=live_proc is not None and live_proc.shutdown_ns is not None,
            open=spans, innermost=innermost, stalled=bool(stalled),
            silent=live_proc is not None and live_proc.silent(now_ns),
            last_span=last_name, last_end_unix_ns=last_end,
            last_heard_unix_ns=live_proc.last_heard_ns if live_proc is not None else None,
            waiting_on=sorted({rank_label(q) for q in remote_children.get(innermost.span_id, ())})
            if innermost is not None else [],
            replaced_by_pid=_int(replaced[key].resource.get(PROCESS_PID)) if key in replaced else None,
        ))
    return states


def _store_end(cols: SpanColumns, live: LiveReadResult) -> int:
    """The last moment the store saw: a span end, a start record, a heartbeat or a shutdown."""
    times = [int(cols.end.max())] if len(cols) else []
    times += [s.start_ns for s in live.starts]
    times += [max(p.opened_ns, p.alive_ns or 0, p.shutdown_ns or 0) for p in live.processes.values()]
    return max(times, default=0)


def nothing_ended(run_dir: Path | str, live: LiveReadResult | None = None) -> str | None:
    """Why a run folder with no ended span has none, when its start records tell: a run hung or
    killed before its first span ended (a startup that never ends). ``None`` when it has no
    start record either (not a run, or telemetry was off), for the caller's own message."""
    starts = (read_live(run_dir) if live is None else live).starts
    if not starts:
        return None
    last = max(starts, key=lambda s: s.start_ns)
    return (f"no span of {run_dir} has ended: {len(starts)} span(s) started and none ended, the "
            f"latest {last.name} (the run was killed, or still runs, before its first span "
            f"ended); `rlsight watch {run_dir}` shows where each process is")


def post_mortem(
    cols: SpanColumns, live: LiveReadResult, *, stall_records: list[str] | None = None,
) -> PostMortem:
    """The report's post-mortem. Without start records (``start_records`` false) it lists no
    process, but its error fields come from the finished spans all the same: a run whose job
    raised read 'failed' only when ``live/`` was there, and ``diff --fail-if-slower`` passed
    it from Collector files."""
    errors = cols.status == STATUS_ERROR
    as_of = _store_end(cols, live)
    if not live.processes:
        return PostMortem(
            as_of_unix_ns=as_of, open_spans=0, processes=[], unclean=0,
            stall_records=list(stall_records or []), errors=int(errors.sum()),
            last_error=_naming_pid(_last_error(cols, errors), cols, live),
            job_error=_naming_pid(_job_error(cols, errors, live), cols, live),
            failed_step=_failed_step(cols, errors, live), start_records=False)
    # A process that went silent before the end hung (or lay dead) only until its last
    # heartbeat: its open spans are aged to that, not to when the rest of the run stopped.
    silent = {key: p.last_heard_ns for key, p in live.processes.items() if p.silent(as_of)}
    states = process_states(cols, live, now_ns=as_of,
                            until={k: v for k, v in silent.items() if v is not None})
    # Only processes that wrote a live file can be judged for a clean shutdown.
    kept = [p for p in states if p.open or (p.process in live.processes and not p.clean_shutdown)]
    kept.sort(key=lambda p: (not p.open, p.worker_group, p.rank, p.process))
    return PostMortem(
        as_of_unix_ns=as_of,
        open_spans=sum(len(p.open) for p in states),
        processes=kept,
        unclean=sum(1 for p in live.processes.values() if p.shutdown_ns is None),
        stall_records=list(stall_records or []),
        errors=int(errors.sum()),
        last_error=_naming_pid(_last_error(cols, errors), cols, live),
        job_error=_naming_pid(_job_error(cols, errors, live), cols, live),
        failed_step=_failed_step(cols, errors, live),
    )


def _name_mask(cols: SpanColumns, name: str) -> Any:
    return cols.name == (cols.names.index(name) if name in cols.names else -1)


def _failed_job(cols: SpanColumns, errors: Any, live: LiveReadResult) -> int | None:
    """Index of the latest ``rl.job`` when it ended in error and no driver resumed the run
    after it, else ``None``. A job that started later and never ended (a resumed driver still
    running, or killed) decides instead: the job a replaced driver raised out of is not how
    the run ended (the report read 'failed' where watch, which sees the open job, did not)."""
    jobs = _name_mask(cols, JOB_SPAN)
    if not jobs.any():
        return None
    index = np.flatnonzero(jobs)
    last = int(index[np.argmax(cols.end[index])])
    if not errors[last]:
        return None
    started = int(cols.start[last])
    later = [_hex(s.span_id) for s in live.starts if s.name == JOB_SPAN and s.start_ns > started]
    if later and not np.isin(np.asarray(later, dtype=np.uint64), cols.span_id).all():
        return None
    return last


def _job_error(cols: SpanColumns, errors: Any, live: LiveReadResult) -> ErrorSpan | None:
    """The latest ``rl.job`` when it ended in error: the run failed (a driver that raised out of
    its job read 'finished' in watch and nothing in the report but the steps it did)."""
    if _failed_job(cols, errors, live) is None:
        return None
    return _last_error(cols, errors & _name_mask(cols, JOB_SPAN))


def _failed_step(cols: SpanColumns, errors: Any, live: LiveReadResult) -> int | None:
    """The step the job failed in: the job process's last step (by end) when it ended in error,
    or an errored step open when the job ended. ``None`` when the job did not fail, or failed
    between steps: a step error the loop caught (a retry, a skipped batch) three steps before
    the job raised is not where the run failed."""
    job = _failed_job(cols, errors, live)
    steps = _name_mask(cols, STEP_SPAN)
    if job is None or not steps.any():
        return None
    failed_at = int(cols.end[job])
    own = np.flatnonzero(steps & (cols.process == cols.process[job]))
    candidates = np.flatnonzero(errors & steps & (cols.start <= failed_at) & (cols.end >= failed_at))
    if len(own):
        last = int(own[np.argmax(cols.end[own])])
        if errors[last]:
            candidates = np.r_[candidates, last]
    if not len(candidates):
        return None
    number = int(cols.step_no[int(candidates[np.argmax(cols.end[candidates])])])
    return None if number == NO_STEP else number


#: Attribute on a span the timeline draws from a start record: it never ended.
OPEN_ATTRIBUTE = "rl.open"


def open_span_records(cols: SpanColumns, live: LiveReadResult) -> list[SpanRecord]:
    """The spans that started and never ended, as records that end where the post-mortem ages
    them to (the store's last moment; a silent process's last heartbeat; a replaced one's
    replacement), tagged ``rl.open``: the timeline of a hung run drew everything but the spans
    it hung in."""
    pm = post_mortem(cols, live)
    out = []
    for p in pm.processes:
        resource = live.processes[p.process].resource if p.process in live.processes else {}
        for o in p.open:
            out.append(SpanRecord(
                trace_id=o.trace_id, span_id=o.span_id, parent_span_id=o.parent_span_id,
                name=o.name, start_ns=o.start_unix_ns, end_ns=o.start_unix_ns + max(o.age_ns, 1000),
                attributes={THREAD_ID: o.thread, OPEN_ATTRIBUTE: "never ended: drawn to the "
                            "last moment the store saw of its process"},
                resource=resource))
    return out


#: Finished steps the watch's rate is taken over: recent enough to follow a run that slows down.
_RATE_STEPS = 10


def _last_error(cols: SpanColumns, errors: Any) -> ErrorSpan | None:
    """The span of ``errors`` (a mask over ``cols``) that ended last, with its status message."""
    if not errors.any():
        return None
    index = np.flatnonzero(errors)
    i = int(index[np.argmax(cols.end[index])])
    res = cols.resources[int(cols.process[i])]
    message = None
    if cols.source_file[i] >= 0:  # the columns keep no message: read that one span again
        from rlsight.analysis.window import _read_records

        records, _ = _read_records([(cols.source_files[int(cols.source_file[i])],
                                     {int(cols.source_line[i]): {int(cols.source_slot[i])}})])
        message = records[0].status_message or None if records else None
    return ErrorSpan(name=cols.names[int(cols.name[i])], process=cols.process_keys[int(cols.process[i])],
                     worker_group=str(res.get(WORKER_GROUP, "?")), rank=_int(res.get(RANK)) or 0,
                     end_unix_ns=int(cols.end[i]), message=message)


#: A pid in an error message, as Ray's ActorDiedError lists the dead actor's (``\tpid: 11434``).
_PID_IN_MESSAGE = re.compile(r"\bpid[:=]\s*(\d+)\b")
#: The node address Ray gives with it: ``(pid=4242, ip=10.0.0.9, ...)``, ``\tip: 10.0.0.9``.
_IP_IN_MESSAGE = re.compile(r"\bip[:=]\s*([0-9A-Za-z:][0-9A-Za-z.:-]*[0-9A-Za-z])")
#: How far after a pid its ``ip`` may be (Ray's ActorDiedError puts name and namespace between).
_IP_REACH = 400
#: Resource attribute with a process's addresses (OpenTelemetry's host convention).


def _addresses(resource: Mapping[str, AttributeValue]) -> set[str]:
    """The addresses a process is known by: its ``host.ip`` values and its host name."""
    ips = resource.get(HOST_IP)
    out = {str(v) for v in ips} if isinstance(ips, list | tuple) else {str(ips)} if ips is not None else set()
    return out | ({str(resource[HOST_NAME])} if HOST_NAME in resource else set())


def _naming_pid(error: ErrorSpan | None, cols: SpanColumns, live: LiveReadResult) -> ErrorSpan | None:
    """``error`` with the run's processes its message names by pid: the driver of a sink run read
    'ActorDiedError' over six ranks all open in the same span, the dead one among them.

    A pid is named only when one process of the run has it; when Ray gives the pid's node
    (``ip=``), that process must be known by that address too (``host.ip`` or its host name):
    a pid number is per host, and a task that raised on another node read as the run's rank
    with the same pid number. A process whose address is unknown is not named."""
    if error is None or not error.message:
        return error
    known: dict[int, dict[str, set[str]]] = {}
    for r in [*cols.resources, *(p.resource for p in live.processes.values())]:
        pid = _int(r.get(PROCESS_PID))
        if pid is not None:
            label = f"{r.get(WORKER_GROUP, '?')}/{r.get(RANK, '?')}"
            known.setdefault(pid, {}).setdefault(label, set()).update(_addresses(r))
    named: dict[int, str] = {}
    matches = list(_PID_IN_MESSAGE.finditer(error.message))
    for m, after in itertools.zip_longest(matches, matches[1:]):
        pid = int(m.group(1))
        stop = min(m.end() + _IP_REACH, after.start() if after is not None else len(error.message))
        ip = _IP_IN_MESSAGE.search(error.message, m.end(), stop)
        labels = [label for label, addresses in known.get(pid, {}).items()
                  if ip is None or ip.group(1) in addresses]
        if len(known.get(pid, {})) == 1 and len(labels) == 1:
            named.setdefault(pid, labels[0])
    if not named:
        return error
    return dataclasses.replace(error, named_pids=list(named), named_processes=list(named.values()))


def _steps_per_min(step_ends: Any) -> float | None:
    """Steps per minute over the last few finished steps (``None`` before two have ended)."""
    ends = np.sort(step_ends)[-(_RATE_STEPS + 1):]
    span_ns = float(ends[-1] - ends[0]) if len(ends) > 1 else 0.0
    return (len(ends) - 1) * 60e9 / span_ns if span_ns > 0 else None


@dataclass(frozen=True, slots=True)
class WatchSnapshot:
    """One refresh of ``rlsight watch``: progress so far and what every process has open."""

    run_dir: str
    run_id: str | None
    now_unix_ns: int
    steps: int
    """Finished ``rl.step`` spans."""
    last_step: int | None
    """``rl.step`` number of the latest step that started (finished or open)."""
    total_steps: int | None
    """``job_span(total_steps=...)`` of the latest ``rl.job``; ``None`` when not given."""
    median_step_ns: float | None
    steps_per_min: float | None
    """Over the last ten finished steps."""
    last_step_end_unix_ns: int | None
    goodput_pct: float | None
    """Goodput of what has finished so far; ``None`` before the first span ends."""
    stalled: bool
    errors: int
    """Spans that ended with an error status."""
    job_ended_unix_ns: int | None
    """When the run's ``rl.job`` ended, when it has and none is open: the run is over."""
    last_error: ErrorSpan | None
    processes: list[ProcessState]
    k: float
    min_age_s: float
    skipped: int
    job_failed: bool = False
    """The run is over and its last ``rl.job`` ended with an error status: it failed."""

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (schema in docs/live.md)."""
        return {"schema_version": SCHEMA_VERSION, **dataclasses.asdict(self)}


def _alive(pid: int | None) -> bool | None:
    """Whether ``pid`` runs on this host; ``None`` when the record named no pid."""
    return None if pid is None else pid_alive(pid)


def watch_snapshot(
    run_dir: Path | str,
    *,
    now_ns: int | None = None,
    k: float = DEFAULT_STALL_K,
    min_age_s: float = DEFAULT_MIN_AGE_S,
) -> WatchSnapshot:
    """Read ``run_dir`` once and say what every process is doing.

    Raises:
        StoreError: ``run_dir`` does not exist.
    """
    from rlsight.analysis._run import analyze_columns, most_common
    from rlsight.store import read_manifest

    cols, skipped, _ = read_span_columns(run_dir, workers=1)
    live = read_live(run_dir)
    now = time.time_ns() if now_ns is None else now_ns
    host = socket.gethostname()
    # Each pid on this host is looked up once: for the restart rule, then for the rows.
    alive = {key: _alive(_int(p.resource.get(PROCESS_PID))) for key, p in live.processes.items()
             if p.resource.get(HOST_NAME) == host}
    running = [key for key, up in alive.items() if up]
    states = [dataclasses.replace(p, alive=alive[p.process] if p.process in alive else _alive(p.pid))
              if p.host == host else p
              for p in process_states(cols, live, now_ns=now, k=k, min_age_s=min_age_s, running=running)]
    manifest = read_manifest(run_dir) or {}
    step_index = cols.names.index(STEP_SPAN) if STEP_SPAN in cols.names else -1
    step_mask = cols.name == step_index
    step_numbers = [int(n) for n in cols.step_no[step_mask] if n != NO_STEP]
    step_numbers += [s.step for s in live.starts if s.name == STEP_SPAN and s.step is not None]
    durations = (cols.end - cols.start)[step_mask]
    errors = cols.status == STATUS_ERROR
    job_index = cols.names.index(JOB_SPAN) if JOB_SPAN in cols.names else -1
    job_mask = cols.name == job_index
    # The planned length: from the job's start record, or from the finished job where the
    # run has no start records (Collector files carry none).
    jobs = sorted([*((s.start_ns, s.total_steps) for s in live.starts
                     if s.name == JOB_SPAN and s.total_steps is not None),
                   *((int(cols.start[i]), total) for i in np.flatnonzero(job_mask)
                     if isinstance(total := cols.kept_attributes.get(int(i), {}).get(TOTAL_STEPS), int)
                     and not isinstance(total, bool))])
    # A replaced process (a driver killed, then resumed by a new one) never ends its job: the
    # run is over when every job still open belongs to one.
    job_open = any(o.name == JOB_SPAN for p in states if p.replaced_by_pid is None for o in p.open)
    goodput = None
    if len(cols):
        try:
            goodput = analyze_columns(with_lost_work(cols, live, running)[0], manifest=manifest,
                                      per_step={}).summary.goodput_pct
        except ValueError:
            goodput = None
    return WatchSnapshot(
        run_dir=str(run_dir), now_unix_ns=now,
        run_id=str(manifest["run_id"]) if manifest.get("run_id") else most_common(
            r.get(RUN_ID) for r in [*cols.resources, *(p.resource for p in live.processes.values())]),
        steps=int(step_mask.sum()), last_step=max(step_numbers, default=None),
        total_steps=jobs[-1][1] if jobs else None,
        median_step_ns=float(np.median(durations)) if len(durations) else None,
        steps_per_min=_steps_per_min(cols.end[step_mask]),
        last_step_end_unix_ns=int(cols.end[step_mask].max()) if step_mask.any() else None,
        goodput_pct=goodput, stalled=any(p.stalled for p in states),
        errors=int(errors.sum()), last_error=_naming_pid(_last_error(cols, errors), cols, live),
        processes=states,
        job_ended_unix_ns=int(cols.end[job_mask].max()) if job_mask.any() and not job_open else None,
        job_failed=not job_open and _job_error(cols, errors, live) is not None,
        k=k, min_age_s=min_age_s, skipped=len(skipped) + len(live.skipped),
    )
