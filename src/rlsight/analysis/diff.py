"""Compare two runs: what got slower or faster, per bucket, span name, phase and fleet.

``rlsight diff A B`` answers the before/after question of a change to a training setup
(sync vs async, a new weight-sync path, a bigger batch). It compares two
:class:`~rlsight.analysis.model.RunReport` objects, never raw spans, so either side may be
a run folder or a saved ``rlsight report --json`` document. Every change is B minus A: a
positive number means B spent more time.

Two runs recorded with different span-group settings are compared on what both have: a span
name whose group only one run recorded is listed as "only in A/B", not as a change, and the
:attr:`RunDiff.notes` say which groups differ and which bucket times that can shift.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Final

from rlsight._semconv import STEP_SPAN
from rlsight._status_message import first_line
from rlsight.analysis.model import RunReport, Stat

__all__ = [
    "DIFF_SCHEMA_VERSION",
    "BucketChange",
    "RunDiff",
    "RunSide",
    "StatChange",
    "ValueChange",
    "diff_reports",
]

#: Version of the ``rlsight diff --json`` document. Bump on any change a consumer could notice.
DIFF_SCHEMA_VERSION: Final = 1

_BUCKET_ROWS: Final = ("productive", "overhead", "idle", "wasted", "unattributed", "wall")


@dataclass(frozen=True, slots=True)
class RunSide:
    """One of the two runs, as the diff's header shows it."""

    run_id: str | None
    algorithm: str | None
    steps: int
    median_step_ns: float | None
    """Median wall time of a step; ``None`` for a run without ``rl.step`` spans."""
    p90_step_ns: float | None
    goodput_pct: float
    spans: int
    span_groups: list[str] | None
    """The configured span-group spec (from the run's manifest), if known."""
    groups_seen: list[str]
    """Span groups that have spans in the run."""
    unfinished: str | None = None
    """Why the run did not finish, from its post-mortem: ``failed in step 5: RuntimeError: ...``
    (an exception escaped ``rl.job``) or ``step 5 never ended (open 48 s at the end)`` (it hung
    or was killed); ``None`` when it finished or has no post-mortem."""


@dataclass(frozen=True, slots=True)
class StatChange:
    """A per-step quantity in A and B (median and p90 over steps) and the change of medians."""

    name: str
    a_median_ns: float
    a_p90_ns: float
    b_median_ns: float
    b_p90_ns: float
    change_ns: float
    """``b_median_ns - a_median_ns``."""
    change_pct: float | None
    """The change as a percentage of A's median; ``None`` when A's median is 0."""


@dataclass(frozen=True, slots=True)
class BucketChange:
    """One bucket (or unattributed / wall) per step, and the span name that moved it most."""

    change: StatChange
    driver: str | None = None
    """The span name whose attributed seconds per step changed most in this bucket."""
    driver_change_ns: float = 0.0


@dataclass(frozen=True, slots=True)
class ValueChange:
    """One number in A and B (``None`` where that run has none) and B minus A."""

    name: str
    a: float | None
    b: float | None
    change: float | None


@dataclass(frozen=True, slots=True)
class RunDiff:
    """Everything ``rlsight diff`` reports; ``to_dict()`` is its ``--json`` document.

    Seconds are nanoseconds (fields ending in ``_ns``); fleet utilisation is a fraction.
    """

    a: RunSide
    b: RunSide
    step_change_pct: float | None
    """B's median step against A's, in percent (positive: B is slower)."""
    buckets: list[BucketChange]
    spans: list[StatChange]
    """Span names both runs recorded, largest absolute change first."""
    spans_only_in_a: list[str]
    spans_only_in_b: list[str]
    startup: list[ValueChange]
    """``wall`` first, then each setup phase's summed seconds (ns)."""
    fleets: list[ValueChange]
    """Utilisation of each worker group (fraction of run wall)."""
    stragglers: ValueChange
    """Straggler findings in each run."""
    straggler_ranks: list[ValueChange]
    """Per ``group/rank`` that straggled in either run: the steps it straggled in, in each;
    largest change first."""
    volume: list[ValueChange]
    """Spans per step: ``all`` first, then each span group."""
    engine: ValueChange | None
    """Median generation tokens per second over steps, where either run reported it."""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``rlsight diff --json`` document, with ``schema_version``."""
        return {"schema_version": DIFF_SCHEMA_VERSION, **dataclasses.asdict(self)}


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _change(name: str, a: Stat, b: Stat) -> StatChange:
    delta = b.median_ns - a.median_ns
    return StatChange(name, a.median_ns, a.p90_ns, b.median_ns, b.p90_ns, delta,
                      100.0 * delta / a.median_ns if a.median_ns else None)


def _value(name: str, a: float | None, b: float | None) -> ValueChange:
    return ValueChange(name, a, b, None if a is None or b is None else b - a)


def _groups_seen(report: RunReport) -> list[str]:
    seen = {g.group for g in report.volume.groups if g.spans}
    seen.update(s.group for s in report.span_steps if s.group)
    return sorted(seen)


def _unfinished(report: RunReport) -> str | None:
    """Why ``report``'s run did not finish: a run that hung in step 5 and was killed has a
    median over the four short steps that ended, and read 77% faster than a healthy one."""
    pm = report.postmortem
    if pm is None:
        return None
    if pm.job_error is not None:
        where = f" in step {pm.failed_step}" if pm.failed_step is not None else ""
        said = f": {first_line(pm.job_error.message)}" if pm.job_error.message else ""
        return f"failed{where}{said}"
    done = max((s.step for s in report.steps), default=None)
    # As the report's first line: a replaced process left its step to the replacement.
    hung = [o for p in pm.processes if p.replaced_by_pid is None for o in p.open
            if o.name == STEP_SPAN and (o.step is None or done is None or o.step > done)]
    if not hung:
        return None
    step = max(hung, key=lambda o: (o.step or 0, o.age_ns))
    number = f" {step.step}" if step.step is not None else ""
    return f"step{number} never ended (open {step.age_ns / 1e9:.0f} s at the end)"


def _side(report: RunReport) -> RunSide:
    s = report.summary
    wall = report.step_summary.wall if report.step_summary else None
    return RunSide(
        run_id=s.run_id, algorithm=s.algorithm, steps=s.steps,
        median_step_ns=wall.median_ns if wall else None, p90_step_ns=wall.p90_ns if wall else None,
        goodput_pct=s.goodput_pct, spans=s.spans, span_groups=s.span_groups,
        groups_seen=_groups_seen(report), unfinished=_unfinished(report),
    )


def _bucket_changes(a: RunReport, b: RunReport) -> list[BucketChange]:
    if a.step_summary is None or b.step_summary is None:
        return []
    out = []
    for bucket in _BUCKET_ROWS:
        change = _change(bucket, getattr(a.step_summary, bucket), getattr(b.step_summary, bucket))
        per_step: dict[str, list[float]] = {}
        for side, report in enumerate((a, b)):
            steps = max(1, len(report.steps))
            for c in report.top:
                if c.bucket == bucket:
                    per_step.setdefault(c.name, [0.0, 0.0])[side] = c.attributed_ns / steps
        driver, moved = None, 0.0
        for name, (before, after) in sorted(per_step.items()):
            if abs(after - before) > abs(moved):
                driver, moved = name, after - before
        out.append(BucketChange(change, driver, moved))
    return out


def _span_changes(a: RunReport, b: RunReport) -> tuple[list[StatChange], list[str], list[str]]:
    a_stats = {s.name: s for s in a.span_steps}
    b_stats = {s.name: s for s in b.span_steps}
    changes = []
    for name in sorted(a_stats.keys() & b_stats.keys()):
        sa, sb = a_stats[name], b_stats[name]
        changes.append(_change(name, Stat(sa.median_ns, sa.p90_ns), Stat(sb.median_ns, sb.p90_ns)))
    changes.sort(key=lambda c: (-abs(c.change_ns), c.name))

    def only(mine: dict[str, Any], other: dict[str, Any]) -> list[str]:
        return sorted(n for n in mine.keys() - other.keys())

    return changes, only(a_stats, b_stats), only(b_stats, a_stats)


def _startup(a: RunReport, b: RunReport) -> list[ValueChange]:
    out = [_value("wall", float(a.startup.wall_ns), float(b.startup.wall_ns))]
    a_phases = {p.phase: float(p.duration_ns) for p in a.startup.phase_totals}
    b_phases = {p.phase: float(p.duration_ns) for p in b.startup.phase_totals}
    order = [p.phase for p in a.startup.phase_totals]
    order += [p.phase for p in b.startup.phase_totals if p.phase not in a_phases]
    out += [_value(phase, a_phases.get(phase), b_phases.get(phase)) for phase in order]
    return out


def _fleets(a: RunReport, b: RunReport) -> list[ValueChange]:
    a_util = {g.worker_group: g.utilisation for g in a.fleets.groups}
    b_util = {g.worker_group: g.utilisation for g in b.fleets.groups}
    order = list(a_util) + [g for g in b_util if g not in a_util]
    return [_value(g, a_util.get(g), b_util.get(g)) for g in order]


def _volume(a: RunReport, b: RunReport) -> list[ValueChange]:
    def per_step(report: RunReport) -> dict[str, float]:
        steps = len(report.steps)
        if not steps:
            return {}
        out = {"all": sum(s.spans for s in report.steps) / steps}
        out.update({g.group: sum(g.per_step) / steps for g in report.volume.groups})
        return out

    va, vb = per_step(a), per_step(b)
    order = list(va) + [g for g in vb if g not in va]
    return [_value(g, va.get(g), vb.get(g)) for g in order]


def _engine(a: RunReport, b: RunReport) -> ValueChange | None:
    def rate(report: RunReport) -> float | None:
        engine = report.engine
        return _median([s.tokens_per_s for s in engine.steps]) if engine else None

    ra, rb = rate(a), rate(b)
    return None if ra is None and rb is None else _value("tokens_per_s", ra, rb)


def _setting_notes(side_a: RunSide, side_b: RunSide, a: RunReport, b: RunReport) -> list[str]:
    notes = []
    same_settings = (side_a.span_groups is not None and side_b.span_groups is not None
                     and sorted(side_a.span_groups) == sorted(side_b.span_groups))
    if side_a.span_groups is not None and side_b.span_groups is not None and not same_settings:
        notes.append(f"span-group settings differ: A {','.join(side_a.span_groups)} vs B "
                     f"{','.join(side_b.span_groups)}; compared on what both recorded")
    only_a = sorted(set(side_a.groups_seen) - set(side_b.groups_seen))
    only_b = sorted(set(side_b.groups_seen) - set(side_a.groups_seen))
    if only_a or only_b:
        parts = [f"only A recorded {', '.join(only_a)}" if only_a else "",
                 f"only B recorded {', '.join(only_b)}" if only_b else ""]
        # Same configured spec: the runs' code emits different spans, so blaming the settings
        # would send the user to the wrong place.
        cause = "the instrumented code" if same_settings else "the settings"
        notes.append("span groups differ (" + "; ".join(p for p in parts if p)
                     + (", with the same span-group settings" if same_settings else "")
                     + "): span names of those groups are listed as only in one run, not as changes")
        buckets = sorted({c.bucket for r in (a, b) for c in r.top
                          if any(s.name == c.name and s.group in (*only_a, *only_b)
                                 for s in r.span_steps)})
        if buckets:
            notes.append(f"the {', '.join(buckets)} bucket(s) include time from those groups, so "
                         f"part of their change comes from {cause}, not the run")
    for which, side in (("A", side_a), ("B", side_b)):
        if side.unfinished is not None:
            notes.append(f"{which} did not finish: {side.unfinished}; its per-step numbers "
                         "cover only the steps that ended")
    if not side_a.steps or not side_b.steps:
        which = " and ".join(x for x, s in (("A", side_a), ("B", side_b)) if not s.steps)
        notes.append(f"{which} has no rl.step spans: per-step comparisons are unavailable")
    return notes


def _straggler_ranks(a: RunReport, b: RunReport) -> list[ValueChange]:
    """Which ranks straggled, in how many steps of each run: the count alone hides the rank."""

    def steps(report: RunReport) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for f in report.stragglers.findings:
            out.setdefault(f"{f.worker_group}/{f.rank}", set()).add(f.step_index)
        return out

    in_a, in_b = steps(a), steps(b)
    changes = [_value(rank, float(len(in_a.get(rank, ()))), float(len(in_b.get(rank, ()))))
               for rank in in_a.keys() | in_b.keys()]
    return sorted(changes, key=lambda v: (-abs(v.change or 0), v.name))


def diff_reports(a: RunReport, b: RunReport) -> RunDiff:
    """Compare run ``b`` against run ``a`` (every change is B minus A)."""
    side_a, side_b = _side(a), _side(b)
    step_change = None
    if side_a.median_step_ns and side_b.median_step_ns is not None:
        step_change = 100.0 * (side_b.median_step_ns - side_a.median_step_ns) / side_a.median_step_ns
    spans, only_a, only_b = _span_changes(a, b)
    return RunDiff(
        a=side_a, b=side_b, step_change_pct=step_change,
        buckets=_bucket_changes(a, b),
        spans=spans, spans_only_in_a=only_a, spans_only_in_b=only_b,
        startup=_startup(a, b), fleets=_fleets(a, b),
        stragglers=_value("findings", float(len(a.stragglers.findings)),
                          float(len(b.stragglers.findings))),
        straggler_ranks=_straggler_ranks(a, b),
        volume=_volume(a, b), engine=_engine(a, b),
        notes=_setting_notes(side_a, side_b, a, b),
    )
