"""Number formatting shared by the terminal and HTML reports, so both print the same text."""

from __future__ import annotations

from rlsight._semconv import STEP_SPAN
from rlsight._status_message import first_line
from rlsight._terminal import terminal_safe
from rlsight.analysis.model import (
    Engine,
    OpenSpan,
    PostMortem,
    ProcessState,
    RunReport,
    span_label,
)

__all__ = [
    "chain_text",
    "clock",
    "count",
    "engine_outcomes",
    "error_line",
    "first_line",
    "open_label",
    "open_span_text",
    "pct",
    "postmortem_rows",
    "postmortem_summary",
    "secs",
    "short_time",
    "span_label",
    "startup_line",
    "step_digits",
    "summary_line",
    "terminal_safe",
    "volume_lines",
]


def secs(ns: float, digits: int = 1) -> str:
    """Nanoseconds as seconds with ``digits`` decimals: ``12.9``."""
    return f"{ns / 1e9:.{digits}f}"


def short_time(ns: float) -> str:
    """A duration with three significant digits in a fitting unit: ``54.0ms``, ``1.23s``.

    Used where two nearby durations are compared (a straggler and its median), which one
    decimal of seconds would print as the same number.
    """
    value = abs(ns)
    unit, scale = next(((u, f) for u, f in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)) if value >= f),
                       ("ns", 1.0))
    scaled = ns / scale
    digits = 0 if abs(scaled) >= 100 else 1 if abs(scaled) >= 10 else 2
    return f"{scaled:.{digits}f}{unit}"


def step_digits(report: RunReport) -> int:
    """Decimals for seconds in a report: enough that a sub-second step does not print as 0.0."""
    wall = report.step_summary.wall.median_ns if report.step_summary else report.summary.buckets.wall_ns
    return 1 if wall >= 10e9 else 2 if wall >= 1e9 else 3


def clock(ns: float) -> str:
    """A duration as ``42m18s`` (or ``1h02m`` past an hour, ``0.35s`` under a second)."""
    seconds = ns / 1e9
    if seconds < 1:
        return f"{seconds:.2f}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, sec = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{sec:02d}s"


def pct(fraction: float) -> str:
    """A fraction as a whole percentage: ``58%``."""
    return f"{100 * fraction:.0f}%"


def count(value: float) -> str:
    """A count with k/M suffixes: ``20.1k``, ``1.21M``."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.1f}k"
    if value == int(value):
        return f"{int(value)}"
    return f"{value:.1f}"


def engine_outcomes(engine: Engine) -> str:
    """``, preemptions 0, finish: stop 93% length 7%``; empty where the engines said nothing."""
    out = ""
    if engine.preemptions is not None:
        out += f", preemptions {count(engine.preemptions)}"
    total = sum(engine.finished.values())
    if total:
        out += ", finish: " + " ".join(f"{r} {pct(n / total)}" for r, n in engine.finished.items())
    return out


def summary_line(report: RunReport) -> str:
    """``run 7f3a91c2  grpo  wall 42m18s  steps 200  goodput 61.4%  (driver timeline)``."""
    s = report.summary
    parts = [f"run {s.run_id or '?'}"]
    if s.algorithm:
        parts.append(s.algorithm)
    parts += [f"wall {clock(s.buckets.wall_ns)}", f"steps {s.steps}", f"goodput {s.goodput_pct:.1f}%"]
    where = "driver timeline" if len(s.controller_timelines) == 1 else (
        f"{len(s.controller_timelines)} controller timelines" if s.controller_timelines else "no steps")
    return "  ".join(parts) + f"   ({where})" + (_hung_tail(report) or _failed_tail(report))


def _failed_tail(report: RunReport) -> str:
    """``; failed in step 5: RuntimeError: loss is NaN`` for a run whose ``rl.job`` ended in
    error: the driver raised out of its loop (the report read as a run that finished)."""
    pm = report.postmortem
    if pm is None or pm.job_error is None:
        return ""
    where = f" in step {pm.failed_step}" if pm.failed_step is not None else ""
    said = f": {first_line(pm.job_error.message)}" if pm.job_error.message else ""
    return f"; failed{where}{said} (see errors)"


def error_line(pm: PostMortem | None) -> str | None:
    """``3 span(s) ended in error; last: rl.job on driver/0, 0m00s before the end: ...``."""
    if pm is None or pm.last_error is None:
        return None
    e = pm.last_error
    said = f": {first_line(e.message)}" if e.message else ""
    if e.named_pids:
        said += " (in the message: " + ", ".join(
            f"pid {pid} is {who}" for pid, who in zip(e.named_pids, e.named_processes, strict=True)) + ")"
    return (f"{pm.errors} span(s) ended in error; last: {span_label(e.name)} on "
            f"{e.worker_group}/{e.rank}, {clock(max(0, pm.as_of_unix_ns - e.end_unix_ns))} before "
            f"the end{said}")


def _hung_tail(report: RunReport) -> str:
    """``; then step 6 open 0m58s, never ended (see open at end)`` for a run whose last step
    never ended: the wall above covers only what finished, so a run that hung for an hour and
    was killed would otherwise read as a short one that ended."""
    pm = report.postmortem
    if pm is None:
        return ""
    done = max((s.step for s in report.steps), default=None)
    # A process Ray replaced left its step to the replacement; a step number that finished
    # later (in another attempt) did end.
    steps = [(p, o) for p in pm.processes if p.replaced_by_pid is None for o in p.open
             if o.name == STEP_SPAN and (o.step is None or done is None or o.step > done)]
    if not steps:
        return ""
    proc, step = max(steps, key=lambda po: (po[1].step or 0, po[1].age_ns))
    number = f" {step.step}" if step.step is not None else ""
    if proc.silent:  # aged only to its last heartbeat: say when it started instead
        before = clock(max(0, pm.as_of_unix_ns - step.start_unix_ns))
        return f"; then step{number} started {before} before the end, never ended (see open at end)"
    return f"; then step{number} open {clock(step.age_ns)}, never ended (see open at end)"


def startup_line(report: RunReport) -> str:
    """``startup 3m05s: ray 0m41s | workers 1m52s (load_model max 1m48s on policy/3)``."""
    st = report.startup
    phases = []
    slowest = max(st.load_model_groups, key=lambda g: g.max_ns, default=None)
    for total in st.phase_totals:
        text = f"{total.phase} {clock(total.duration_ns)}"
        if total.phase == "workers" and slowest is not None:
            text += f" (load_model max {clock(slowest.max_ns)} on {slowest.worker_group}/{slowest.max_rank})"
        phases.append(text)
    if slowest is not None and not any(t.phase == "workers" for t in st.phase_totals):
        phases.append(f"load_model max {clock(slowest.max_ns)} on {slowest.worker_group}/{slowest.max_rank}")
    if st.unaccounted_ns and phases:
        phases.append(f"unaccounted {clock(st.unaccounted_ns)}")
    return f"startup {clock(st.wall_ns)}" + (": " + " | ".join(phases) if phases else "")


def volume_lines(report: RunReport) -> list[str]:
    """Per-step span volume: the per_step groups together, per_prompt, and flagged groups."""
    v = report.volume
    if not report.steps:
        return []
    steps = len(report.steps)
    per_step = [g for g in v.groups if g.in_per_step]
    out = []
    if per_step:
        total = sum(sum(g.per_step) for g in per_step) / steps
        flat = all(g.flat for g in per_step)
        out.append(f"per_step {count(total)} spans/step ({'flat' if flat else 'varies'})")
    for g in v.groups:
        if g.group == "per_prompt":
            verdict = {True: "scales with prompts", False: "does not scale with prompts",
                       None: "prompts constant"}[g.scales_with_prompts]
            out.append(f"per_prompt {count(sum(g.per_step) / steps)} spans/step ({verdict})")
    for g in v.groups:
        if g.flagged:
            out.append(f"WARNING group '{g.group}' is in per_step but its spans scale with prompts "
                       f"(r={g.correlation:.2f}); emit them under per_prompt_scope()")
    return out



def open_label(o: OpenSpan) -> str:
    """An open span's name as watch and the post-mortem show it; a step with its number, as in
    the parents (``rl.step 6``): a driver in ``rl.step`` alone does not say which step hung."""
    return f"{o.name} {o.step}" if o.name == STEP_SPAN and o.step is not None else span_label(o.name)


def chain_text(o: OpenSpan, rank: str | None = None) -> str:
    """``rl.train.policy < driver/0: rl.train.policy < rl.step 6``: an open span's parents,
    innermost first, naming the rank where the chain crosses into another process (from
    ``rank``, the span's own): an actor's span and the driver's dispatch often share a name."""
    if len(o.chain_ranks) != len(o.chain):  # a stall record written before chain_ranks
        return " < ".join(reversed(o.chain))
    parts = []
    here = rank
    for name, where in zip(reversed(o.chain), reversed(o.chain_ranks), strict=True):
        parts.append(f"{where}: {name}" if here is not None and where != here else name)
        here = where
    return " < ".join(parts)


def open_span_text(o: OpenSpan, *, silent_since_ns: int | None = None, as_of_ns: int = 0,
                   aged_to: str = "", rank: str | None = None) -> str:
    """``rl.refit.push open 14m01s, median 1.1s < rl.step 118 < rl.job``.

    ``aged_to`` names what the age runs to when it is not the end (``its replacement
    started``). ``silent_since_ns`` (a silent process's last heartbeat, its spans aged to it)
    says so: a span started after that heartbeat has no age to tell (it died within one
    interval of it), so the text says how long before ``as_of_ns`` it started instead of
    ``open 0.00s``.
    """
    median = f", median {clock(o.median_ns)}" if o.median_ns is not None else ""
    chain = f" < {chain_text(o, rank)}" if o.chain else ""
    if silent_since_ns is not None and o.start_unix_ns >= silent_since_ns:
        ago = clock(max(0, as_of_ns - o.start_unix_ns))
        return f"{open_label(o)}, started {ago} before the end, after its last heartbeat{median}{chain}"
    if silent_since_ns is not None:
        aged_to = "its last heartbeat"
    until = f" until {aged_to}" if aged_to else ""
    return f"{open_label(o)} open {clock(o.age_ns)}{until}{median}{chain}"


def postmortem_summary(pm: PostMortem | None) -> str:
    """The ``open at end`` line: what the run left open."""
    if pm is None or not pm.start_records:
        return "not recorded (no start records in this run folder)"
    if not pm.open_spans and not pm.unclean:
        return "none"
    unclean = f"{pm.unclean} process(es) without a clean shutdown"
    if not pm.open_spans:
        return f"nothing open; {unclean}"
    ranks = sum(1 for p in pm.processes if p.open)
    return f"{pm.open_spans} span(s) never ended on {ranks} process(es); {unclean}"


def _waited_on(rank: str, pm: PostMortem) -> str:
    """``generation/0 (silent)`` (or ``(restarted)``) when every listed process of that rank with
    an open span went silent or was replaced: the wait was on a dead worker, not a slow one."""
    procs = [p for p in pm.processes if f"{p.worker_group}/{p.rank}" == rank and p.open]
    if not procs or not all(p.silent or p.replaced_by_pid is not None for p in procs):
        return rank
    return rank + (" (restarted)" if any(p.replaced_by_pid is not None for p in procs) else " (silent)")


def postmortem_rows(pm: PostMortem) -> list[tuple[ProcessState, str, str]]:
    """Per listed process: (state, how it ended, what it was doing last)."""
    rows = []
    for p in pm.processes:
        ended = "clean shutdown" if p.clean_shutdown else "no clean shutdown"
        if p.replaced_by_pid is not None:
            ended += f", replaced by pid {p.replaced_by_pid}"
        elif p.silent and p.last_heard_unix_ns is not None:
            ended += f", silent for the last {clock(max(0, pm.as_of_unix_ns - p.last_heard_unix_ns))}"
        own = f"{p.worker_group}/{p.rank}"
        if p.innermost is not None and p.replaced_by_pid is not None:
            doing = "in " + open_span_text(p.innermost, aged_to="its replacement started", rank=own)
        elif p.innermost is not None:
            silent_since = p.last_heard_unix_ns if p.silent else None
            doing = "in " + open_span_text(p.innermost, silent_since_ns=silent_since,
                                           as_of_ns=pm.as_of_unix_ns, rank=own)
            others = len(p.open) - 1 - len(p.innermost.chain)
            if others > 0:
                doing += f" (+{others} more open)"
            if p.waiting_on:
                doing += "; waiting on " + ", ".join(_waited_on(rank, pm) for rank in p.waiting_on)
        elif p.last_span is not None and p.last_end_unix_ns is not None:
            ago = clock(max(0, pm.as_of_unix_ns - p.last_end_unix_ns))
            doing = f"nothing open; last finished {span_label(p.last_span)} {ago} before the end"
        else:
            doing = "nothing open, no span finished"
        rows.append((p, ended, doing))
    return rows
