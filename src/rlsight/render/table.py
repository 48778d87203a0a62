"""The terminal report: the layout of docs/ux (summary, startup, per step, fleets, findings).

Built with rich so it lines up on a terminal and degrades to plain text in a pipe or a file
(no colour codes when the output is not a TTY).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import TYPE_CHECKING, Final

from rlsight.analysis.model import BUCKET_NAMES, RunReport, Straggler
from rlsight.render._format import (
    clock,
    count,
    engine_outcomes,
    error_line,
    pct,
    postmortem_rows,
    postmortem_summary,
    secs,
    short_time,
    span_label,
    startup_line,
    step_digits,
    summary_line,
    terminal_safe,
    volume_lines,
)

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["MAX_FINDINGS", "render_report", "straggler_lines"]

#: Most straggler lines the terminal report prints (the JSON has all of them).
MAX_FINDINGS: Final = 5
#: A two-rank gap smaller than this share of the faster rank's time is not printed: it is the
#: same 5% noise floor the straggler rule puts under its MAD.
PAIR_MATERIAL_PCT: Final = 5.0
#: Nor one smaller than this share of the median step: the straggler rule's floor too.
PAIR_MATERIAL_STEP_SHARE: Final = 0.01
_COLUMNS: Final = ("productive", "overhead", "idle", "wasted", "unattributed", "wall")


def _stat_cell(report: RunReport, column: str) -> str:
    summary = report.step_summary
    assert summary is not None
    stat = getattr(summary, column)
    digits = step_digits(report)
    return f"{secs(stat.median_ns, digits)}/{secs(stat.p90_ns, digits)}"


def _top_lines(report: RunReport) -> list[str]:
    steps = len(report.steps)
    lines = []
    for bucket in BUCKET_NAMES:
        if bucket == "productive":
            continue
        items = [c for c in report.top if c.bucket == bucket]
        if not items:
            continue
        parts = []
        for c in items:
            per_step = c.attributed_ns / max(1, c.steps_present)
            text = f"{span_label(c.name)} {secs(per_step, step_digits(report))}"
            if c.steps_present < steps:
                text += f" (in {c.steps_present} of {steps} steps)"
            parts.append(text)
        lines.append(f"    top {bucket}:  " + "   ".join(parts))
    return lines


def straggler_lines(findings: list[Straggler], steps: int) -> list[str]:
    """One line per rank slow in several steps, then one per (step, rank) of the rest.

    A rank that crawls in every step is one fact: listed per step it filled the section with
    ``step 1: policy/2 ...``, ``step 2: policy/2 ...``. Per step, a rank's longest straggling
    span stands for it; nested spans of a slow rank are usually slow too.
    """
    worst: dict[tuple[str, int], dict[int, list[Straggler]]] = {}
    for f in findings:
        worst.setdefault((f.worker_group, f.rank), {}).setdefault(f.step_index, []).append(f)
    repeated, single = [], []
    for (group, rank), by_step in worst.items():
        picked = [max(g, key=lambda x: (x.duration_ns, x.name)) for g in by_step.values()]
        names = {f.name for g in by_step.values() for f in g}
        if len(by_step) > 1:
            name = Counter(f.name for f in picked).most_common(1)[0][0]
            same = [f for f in picked if f.name == name]
            took = statistics.median(f.duration_ns for f in same)
            median = statistics.median(f.median_ns for f in same)
            more = f" and {len(names) - 1} more span name(s)" if len(names) > 1 else ""
            slower = 100.0 * (took - median) / median if median else 0.0
            repeated.append((-len(by_step), group, rank, (
                f"{group}/{rank} slower in {len(by_step)}/{steps} step(s): {name} "
                f"{short_time(took)} vs median {short_time(median)} (+{slower:.0f}%){more}")))
            continue
        (group_findings,) = by_step.values()
        f = picked[0]
        more = f" and {len(group_findings) - 1} more span name(s)" if len(group_findings) > 1 else ""
        slower = 100.0 * (f.duration_ns - f.median_ns) / f.median_ns if f.median_ns else 0.0
        single.append((f.step_index, group, rank, (
            f"step {f.step}: {group}/{rank} {f.name} {short_time(f.duration_ns)} vs median "
            f"{short_time(f.median_ns)} (+{slower:.0f}%, +{f.excess_mads:.1f} MAD){more}")))
    return [t for *_, t in sorted(repeated)] + [t for *_, t in sorted(single)]


def render_report(report: RunReport, console: Console) -> None:
    """Print ``report`` to ``console`` as the ``rlsight report`` terminal layout."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    def line(text: str, style: str | None = None) -> None:
        console.print(Text(terminal_safe(text), style=style or ""), soft_wrap=True)

    line(summary_line(report), "bold")
    line(startup_line(report))
    console.print()
    if report.step_summary is not None:
        table = Table(box=None, show_edge=False, pad_edge=False, title=None,
                      header_style="bold")
        table.add_column("per step (median / p90 seconds)", no_wrap=True)
        for column in _COLUMNS:
            table.add_column(column, justify="right")
        table.add_row("  rl.step", *(_stat_cell(report, c) for c in _COLUMNS))
        console.print(table)
        for text in _top_lines(report):
            line(text)
        superseded = sum(s.superseded for s in report.steps)
        if superseded:
            line(f"    restarts: {report.wasted.restarts}, {superseded} step(s) redone "
                 f"({clock(report.wasted.superseded_wall_ns)} counted as wasted)", "yellow")
        console.print()
    if report.fleets.groups:
        fleets = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
        for name, justify in (("fleets", "left"), ("ranks", "right"), ("devices", "right"),
                              ("utilisation", "right"), ("productive", "right"),
                              ("overhead", "right"), ("wasted", "right"), ("idle", "right")):
            fleets.add_column(name, justify=justify)  # type: ignore[arg-type]
        for g in report.fleets.groups:
            fleets.add_row(f"  {escape(terminal_safe(g.worker_group))}", str(g.ranks), str(g.devices),
                           pct(g.utilisation), pct(g.productive), pct(g.overhead), pct(g.wasted),
                           pct(g.idle + g.unattributed))
        console.print(fleets)
        console.print()
    s = report.stragglers
    texts = straggler_lines(s.findings, len(report.steps))
    if texts:
        for i, text in enumerate(texts[:MAX_FINDINGS]):
            line(("stragglers   " if i == 0 else "             ") + text, "yellow")
        if len(texts) > MAX_FINDINGS:
            line(f"             ... {len(texts) - MAX_FINDINGS} more (see --json or --html)")
    else:
        insufficient = sum(i.steps for i in s.insufficient)
        line(f"stragglers   none in {s.checks} comparison(s)"
             + (f"; {insufficient} with insufficient evidence" if insufficient else ""))
    # Two-rank gaps below the straggler noise floors are jitter: the JSON keeps them all, the
    # terminal names only the ones that could matter (a 0.35 ms gap on a data-plane call,
    # +75%, read as a finding in 4 s steps).
    step_ns = report.step_summary.wall.median_ns if report.step_summary is not None else 0.0
    material = sorted((p for p in s.pairs if p.median_gap_pct >= PAIR_MATERIAL_PCT
                       and p.median_gap_ns >= PAIR_MATERIAL_STEP_SHARE * step_ns),
                      key=lambda p: -p.median_gap_pct)
    for i, pair in enumerate(material[:MAX_FINDINGS]):
        line(("two ranks    " if i == 0 else "             ")
             + f"{pair.worker_group} {pair.name}: rank {pair.slower_rank} slower in "
             f"{pair.slower_steps}/{pair.steps} step(s), by {short_time(pair.median_gap_ns)} median "
             f"(+{pair.median_gap_pct:.1f}%); a straggler verdict needs 3 ranks")
    if s.pairs and not material:
        line(f"two ranks    {len(s.pairs)} span name(s) compared between two ranks; none slower "
             f"by {PAIR_MATERIAL_PCT:.0f}% or more and {PAIR_MATERIAL_STEP_SHARE:.0%} of the median step")
    vol = volume_lines(report)
    for i, text in enumerate(vol):
        line(("volume       " if i == 0 else "             ") + text,
             "red" if text.startswith("WARNING") else None)
    if report.engine is not None and report.engine.steps:
        tokens = sum(x.tokens for x in report.engine.steps) / len(report.engine.steps)
        rate = sum(x.tokens_per_s for x in report.engine.steps) / len(report.engine.steps)
        line(f"engine       {count(tokens)} gen tokens/step, {count(rate)} tok/s"
             + engine_outcomes(report.engine))
    wasted = sum(report.wasted.by_step_ns)
    digits = step_digits(report)  # the per-step table's precision: 42 ms must not print as 0.0s
    if wasted:
        top = report.wasted.by_name[0] if report.wasted.by_name else None
        line(f"wasted       {secs(wasted, digits)}s of wasted work on all ranks"
             + (f" (most: {top.name} {secs(top.total_ns, digits)}s)" if top else ""))
    reasons: dict[str, tuple[int, int]] = {}
    for d in report.wasted.discarded:
        calls, work = reasons.get(d.reason, (0, 0))
        reasons[d.reason] = (calls + 1, work + d.work_ns)
    for reason, (calls, work) in sorted(reasons.items(), key=lambda kv: (-kv[1][1], kv[0])):
        line(f"discarded    {secs(work, digits)}s of earlier work thrown away ({reason}, {calls} "
             "discard call(s)); counted as wasted in the discarding steps")
    pm = report.postmortem
    errors = error_line(pm)
    if errors is not None:
        line(f"errors       {errors}", "red")
    summary = postmortem_summary(pm)
    recorded = pm is not None and pm.start_records
    line(f"open at end  {summary}", "red" if recorded and summary != "none" else None)
    if pm is not None:
        rows = postmortem_rows(pm)
        for p, ended, doing in rows[:MAX_FINDINGS]:
            line(f"             {p.worker_group}/{p.rank} (pid {p.pid}, {ended}): {doing}",
                 "red" if p.open else "yellow")
        if len(rows) > MAX_FINDINGS:
            line(f"             ... {len(rows) - MAX_FINDINGS} more process(es) (see --json or --html)")
        if pm.stall_records:
            line(f"stalls       the watchdog fired {len(pm.stall_records)} time(s); last record: "
                 f"{pm.stall_records[-1]}", "red")
    sm = report.summary
    line(f"read         {count(sm.spans)} spans, {sm.processes} processes, {sm.files} files; "
         f"{sm.skipped} record(s) skipped", "yellow" if sm.skipped else None)
    for example in sm.skipped_examples:
        line(f"             skipped {example}", "yellow")
    for note in report.notes:
        line(f"note         {note}", "yellow")
