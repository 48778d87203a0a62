"""What is every worker doing right now: open spans, their age, and which ranks are stalled.

Reads RUN_DIR (a live run or a dead one) and refreshes like ``top``: steps done, seconds per
step, goodput so far, and per worker group and rank the span open right now with its age and
parents. A rank whose innermost open span is older than K times that span name's median and
older than ``--min-age`` is STALLED; one not heard from for three heartbeats (30 s) without a
clean shutdown is *silent* (killed, frozen, or its node is gone). ``--once`` prints one screen
and exits; ``--json`` prints one document (schema in docs/live.md). Exit codes: 0 nothing
stalled; 2 usage error or no run folder; 3 something is stalled.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from rlsight.commands._exit import EXIT_OK, EXIT_STALLED, EXIT_USAGE
from rlsight.commands._extras import missing_extra
from rlsight.commands._numbers import number

if TYPE_CHECKING:
    from rich.console import RenderableType

    from rlsight.analysis.live import WatchSnapshot
    from rlsight.analysis.model import OpenSpan, ProcessState

__all__ = ["add_arguments", "run"]

#: Seconds ``py-spy dump`` gets per process before it is given up on.
_STACK_TIMEOUT_S: Final = 15.0


def _non_negative(text: str) -> float:
    value = number(text, "a number of seconds")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0 seconds")
    return value


def _interval(text: str) -> float:
    value = _non_negative(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{value} must be a number of seconds > 0")
    return value


def _multiple(text: str) -> float:
    value = number(text, "a number of median durations")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} must be > 0 (a multiple of the span name's median "
                                         "duration)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``rlsight watch``'s flags."""
    from rlsight.watchdog import DEFAULT_MIN_AGE_S, DEFAULT_STALL_K

    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                        help="the run folder to watch, or a Collector file exporter's file or folder")
    parser.add_argument("--run-id", metavar="ID",
                        help="the run to watch in Collector files that hold several runs")
    parser.add_argument("--once", action="store_true", help="print one screen and exit")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document and exit (schema in docs/live.md)")
    parser.add_argument("--interval", metavar="SECONDS", type=_interval, default=2.0,
                        help="seconds between refreshes (default 2)")
    parser.add_argument("--min-age", metavar="SECONDS", type=_non_negative, default=DEFAULT_MIN_AGE_S,
                        help=f"never call a span stalled before this age (default {DEFAULT_MIN_AGE_S:g})")
    parser.add_argument("--k", metavar="K", type=_multiple, default=DEFAULT_STALL_K,
                        help="stalled beyond K times the span name's median duration "
                             f"(default {DEFAULT_STALL_K:g})")
    parser.add_argument("--stacks", action="store_true",
                        help="add the Python stack of each stalled process on this host (needs py-spy)")


def _py_spy() -> str | None:
    """The ``py-spy`` executable: on PATH, or beside this Python (a virtualenv's bin)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def _with_stacks(snapshot: WatchSnapshot) -> WatchSnapshot:
    """Stalled processes running on this host get their ``py-spy dump``; others (another host,
    or an exited process, which has no stack) are left as they are."""
    exe = _py_spy()
    if exe is None:
        print("rlsight watch: --stacks needs py-spy (pip install py-spy); showing open spans only",
              file=sys.stderr)
        return snapshot
    host = socket.gethostname()
    processes = []
    for p in snapshot.processes:
        if p.stalled and p.pid is not None and p.host == host and p.alive is not False:
            try:
                done = subprocess.run([exe, "dump", "--pid", str(p.pid)], capture_output=True,
                                      text=True, timeout=_STACK_TIMEOUT_S, check=False)
                stack = _without_own_threads(done.stdout.strip()) if done.returncode == 0 else (
                    f"py-spy dump failed ({done.returncode}): {done.stderr.strip()}")
            except (OSError, subprocess.TimeoutExpired) as exc:
                stack = f"py-spy dump failed: {exc}"
            p = dataclasses.replace(p, stack=stack)
        processes.append(p)
    return dataclasses.replace(snapshot, processes=processes)


#: A thread's header line in ``py-spy dump``: ``Thread 20041 (idle): "rlsight-store"``.
_THREAD_HEADER: Final = re.compile(r'Thread \S+ \((?P<state>[^)]*)\): "(?P<name>[^"]*)"')


def _without_own_threads(dump: str) -> str:
    """``dump`` without the stacks of rlsight's own idle threads (``rlsight-*``, waiting on
    their timers): a drill's driver stack was 70 lines, five of its threads rlsight's, and the
    one that mattered was the first. A busy rlsight thread is kept."""
    kept: list[str] = []
    dropped = 0
    skipping = False
    for line in dump.splitlines():
        header = _THREAD_HEADER.match(line)
        if header is not None:
            skipping = header["name"].startswith("rlsight-") and "idle" in header["state"]
            dropped += skipping
        if not skipping:
            kept.append(line)
    if dropped:
        kept.append(f"({dropped} idle rlsight thread(s) not shown)")
    return "\n".join(kept)


def _rank_label(p: ProcessState, s: WatchSnapshot | None = None) -> str:
    """``policy/1``; with its pid when Ray restarted the rank (two processes, one rank)."""
    label = f"{p.worker_group}/{p.rank}"
    others = s.processes if s is not None else []
    if sum(1 for q in others if (q.worker_group, q.rank) == (p.worker_group, p.rank)) > 1:
        label += f" pid {p.pid}"
    return label + (" (exited)" if p.alive is False else "")


def _silent(p: ProcessState, s: WatchSnapshot) -> bool:
    """Silent, and not merely gone with the run: a worker still heard from within three
    heartbeats of the job's end was killed by ``ray.shutdown()``, which writes no shutdown line."""
    from rlsight.store._live import HEARTBEAT_S, SILENT_AFTER_BEATS

    if not p.silent:
        return False
    if s.job_ended_unix_ns is None or p.last_heard_unix_ns is None:
        return True
    return s.job_ended_unix_ns - p.last_heard_unix_ns > SILENT_AFTER_BEATS * HEARTBEAT_S * 1e9


#: Seconds a step must be open, besides ``k`` median steps, before the header stops estimating
#: the time to go: a run of 20 ms steps is not hung when one step takes 0.2 s.
_OVERDUE_FLOOR_S: Final = 10.0


def _overdue_step(s: WatchSnapshot) -> OpenSpan | None:
    """The open ``rl.step`` of the current step when it has run past ``k`` median steps (and
    :data:`_OVERDUE_FLOOR_S`)."""
    from rlsight._semconv import STEP_SPAN

    steps = [o for p in s.processes for o in p.open if o.name == STEP_SPAN and o.step == s.last_step]
    step = max(steps, key=lambda o: o.age_ns, default=None)
    if step is None or not s.median_step_ns or step.age_ns <= max(s.k * s.median_step_ns,
                                                                  _OVERDUE_FLOOR_S * 1e9):
        return None
    return step


def _waited_on(rank: str, s: WatchSnapshot) -> str:
    """``generation/0``, marked ``(exited)`` or ``(silent)`` when every process of that rank
    with an open span is: a driver waiting on a dead worker should not read as a wait on work."""
    procs = [p for p in s.processes if f"{p.worker_group}/{p.rank}" == rank and p.open]
    marks = [m for m, all_of in (("exited", all(p.alive is False for p in procs)),
                                 ("silent", all(p.silent for p in procs))) if procs and all_of]
    return rank + (f" ({', '.join(marks)})" if marks else "")


def _screen(snapshot: WatchSnapshot) -> RenderableType:
    """The watch screen: one header line, one row per process, stacks of stalled ones.

    Run ids, groups, span names, stacks and error messages come from files anyone can write:
    they are shown through ``terminal_safe`` (an OSC title or a screen clear in a status
    message reached the terminal raw), and the table's cells are Text, not Rich markup."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from rlsight.render._format import chain_text, clock, first_line, open_label, span_label, terminal_safe

    def cell(text: str) -> Text:
        return Text(terminal_safe(text))

    s = snapshot
    head = Text(f"run {terminal_safe(s.run_id or '?')}  ", style="bold")
    ended = s.job_ended_unix_ns
    if ended is not None:
        head.append(f"{'failed' if s.job_failed else 'finished'} {clock(max(0, s.now_unix_ns - ended))} "
                    "ago: ", style="bold red" if s.job_failed else "bold")
        head.append(f"{s.steps} step(s) done")
        if s.total_steps is not None:  # step numbers, not a count: a resumed run starts late
            head.append(f", last step {s.last_step} of {s.total_steps}" if s.last_step is not None
                        else f" of {s.total_steps}")
    else:
        head.append(f"{s.steps} step(s) done")
        if s.last_step is not None:
            head.append(f", in step {s.last_step}")
        if s.total_steps is not None:
            head.append(f" of {s.total_steps}")
    overdue = _overdue_step(s) if ended is None else None
    if overdue is not None and s.median_step_ns:
        # The rate and the time to go extrapolate steps that no longer end: a hung step 6 of 12
        # read "about 0m03s to go" and "146 steps/min" a minute into the hang.
        head.append(f", open {clock(overdue.age_ns)} ({overdue.age_ns / s.median_step_ns:.0f}x the "
                    f"median step {clock(s.median_step_ns)})", style="bold")
    elif ended is None and s.total_steps is not None and s.median_step_ns:
        # Steps left by number, not by count, the one in progress included (numbered from 1):
        # a run resumed at step 150 has done 10 steps in this folder when it is in step 160 of
        # 200, and has 41 to go.
        left = (s.total_steps - s.last_step + 1) if s.last_step is not None else s.total_steps - s.steps
        head.append(f" (about {clock(max(0, left) * s.median_step_ns)} to go)")
    if s.last_step_end_unix_ns is not None:
        head.append(f"  (last step ended {clock(max(0, s.now_unix_ns - s.last_step_end_unix_ns))} ago")
        if overdue is None:
            head.append(f"; median step {clock(s.median_step_ns or 0)}")
            rate = s.steps_per_min
            if rate is not None:
                head.append(f"; {rate:.{1 if rate < 10 else 0}f} steps/min")
        head.append(")")
    if s.goodput_pct is not None:
        head.append(f"  goodput {s.goodput_pct:.1f}%")
    head.append("   STALLED" if s.stalled else "   ok", style="bold red" if s.stalled else "green")
    silent = sum(1 for p in s.processes if _silent(p, s))
    if silent:
        head.append(f"   {silent} silent", style="yellow")
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    for name, justify in (("group/rank", "left"), ("state", "left"), ("open span (innermost)", "left"),
                          ("age", "right"), ("median", "right"), ("parents", "left"),
                          ("waiting on", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    order = sorted(s.processes, key=lambda p: (not p.stalled, p.worker_group, p.rank, p.process))
    for p in order:
        o = p.innermost
        state = ("STALLED" if p.stalled else f"replaced by pid {p.replaced_by_pid}"
                 if p.replaced_by_pid is not None else "exited" if p.alive is False else "running")
        if _silent(p, s) and p.last_heard_unix_ns is not None and p.replaced_by_pid is None:
            state = ("STALLED, " if p.stalled else "") + (
                f"silent {clock(max(0, s.now_unix_ns - p.last_heard_unix_ns))}")
        elif p.silent and p.alive is None and state == "running":
            # The run is over and it stopped beating with it (Ray's shutdown kills actors): on
            # another host its pid cannot be looked up, and six ranks of a failed run read
            # 'running' in an open span two minutes after the end.
            state = "silent since the end"
        if o is None:
            idle = "(shut down)" if p.clean_shutdown else "(nothing open)"
            table.add_row(cell(_rank_label(p, s)), state if _silent(p, s) else "", Text(idle, style="dim"),
                          "", "", "", "", style="yellow" if _silent(p, s) else None)
            continue
        table.add_row(
            cell(_rank_label(p, s)), state, cell(open_label(o)), clock(o.age_ns),
            clock(o.median_ns) if o.median_ns is not None else "-",
            cell(chain_text(o, f"{p.worker_group}/{p.rank}")),
            cell(", ".join(_waited_on(rank, s) for rank in p.waiting_on)),
            style="bold red" if p.stalled else "yellow" if _silent(p, s) else None,
        )
    parts: list[RenderableType] = [head, table]
    for p in order:
        if p.stack:
            parts.append(Text(f"\n{terminal_safe(_rank_label(p, s))} (pid {p.pid}) stack:", style="bold"))
            parts.append(Text(terminal_safe(p.stack)))
    if s.last_error is not None:
        e = s.last_error
        said = f": {first_line(e.message)}" if e.message else ""
        if e.named_pids:
            said += " (in the message: " + ", ".join(
                f"pid {pid} is {who}" for pid, who in zip(e.named_pids, e.named_processes, strict=True)) + ")"
        parts.append(Text(terminal_safe(
            f"last error: {span_label(e.name)} on {e.worker_group}/{e.rank}, "
            f"{clock(max(0, s.now_unix_ns - e.end_unix_ns))} ago{said} "
            f"({s.errors} span(s) ended in error)"), style="red"))
    if s.skipped:
        parts.append(Text(f"{s.skipped} unreadable record(s) skipped", style="yellow"))
    return Group(*parts)


def run(args: argparse.Namespace) -> int:
    """Watch the run; return 3 when the last look found a stalled rank."""
    if missing_extra("watch", "numpy", "orjson", "rich"):
        return EXIT_USAGE
    from rlsight.analysis.live import watch_snapshot
    from rlsight.commands._source import open_run
    from rlsight.errors import StoreError

    run_dir: Path = args.run_dir
    if not run_dir.exists():
        print(f"rlsight watch: no run folder at {run_dir}; pass the folder a run writes "
              "(default ./rlsight-runs/<run_id>)", file=sys.stderr)
        return EXIT_USAGE

    def look() -> WatchSnapshot:
        # Collector files are split again on every look: they grow while the run goes on.
        with open_run(run_dir, args.run_id) as source:
            snapshot = watch_snapshot(source.folder, k=args.k, min_age_s=args.min_age)
        # Collector files are read from a temporary folder, gone now: name what was given.
        snapshot = dataclasses.replace(snapshot, run_dir=str(run_dir))
        return _with_stacks(snapshot) if args.stacks else snapshot

    try:
        return _show(args, look)
    except StoreError as exc:
        print(f"rlsight watch: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _show(args: argparse.Namespace, look: Callable[[], WatchSnapshot]) -> int:
    """Print one look (``--once``, ``--json``, a pipe) or refresh until interrupted."""
    from rich.console import Console

    if args.json:
        snapshot = look()
        sys.stdout.write(json.dumps(snapshot.to_dict(), indent=1, allow_nan=False) + "\n")
        return EXIT_STALLED if snapshot.stalled else EXIT_OK
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
    if args.once or not sys.stdout.isatty():
        snapshot = look()
        console.print(_screen(snapshot))
        return EXIT_STALLED if snapshot.stalled else EXIT_OK
    from rich.live import Live

    snapshot = look()
    try:
        with Live(_screen(snapshot), console=console, screen=True, auto_refresh=False) as live:
            while True:
                time.sleep(args.interval)
                snapshot = look()
                live.update(_screen(snapshot), refresh=True)
    except KeyboardInterrupt:
        pass
    return EXIT_STALLED if snapshot.stalled else EXIT_OK
