"""Invariants of the rollup on random nested and overlapping span sets (hypothesis).

A brute-force oracle walks every elementary interval of every timeline and picks the
deepest active bucketed span by hand; the vectorised rollup must agree to the nanosecond.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import numpy as np
from _build import T0, RunBuilder, Span, ns
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.analysis import RunReport, analyze_spans
from rlsight.analysis._steps import find_steps
from rlsight.analysis._table import build_table
from rlsight.analysis.columns import span_columns_from_records
from rlsight.analysis.goodput import contributors, partition_timelines, step_buckets
from rlsight.store._schema import SpanRecord

BUCKETS = (None, "productive", "overhead", "idle", "wasted")
PRIORITY = {"idle": 0, "overhead": 1, "wasted": 2, "productive": 3}
#: (process, thread) of the controller; the other timelines are workers or driver threads.
TIMELINES = ((0, 1), (0, 2), (1, 1), (2, 1))


@dataclass
class SpecSpan:
    timeline: int
    start: int
    end: int
    parent: int  # -1 root; -2 - k: step k; i >= 0: earlier random span
    bucket: str | None
    concurrent: bool


span_specs = st.builds(
    SpecSpan,
    timeline=st.integers(0, len(TIMELINES) - 1),
    start=st.integers(0, 30),
    end=st.integers(0, 30),
    parent=st.integers(-4, 12),
    bucket=st.sampled_from(BUCKETS),
    concurrent=st.booleans(),
)


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[SpecSpan]]:
    cuts = sorted(draw(st.lists(st.integers(0, 30), min_size=2, max_size=6, unique=True)))
    steps = [(a, b) for a, b in itertools.pairwise(cuts)][:3]
    spans = draw(st.lists(span_specs, max_size=14))
    for i, s in enumerate(spans):
        s.start, s.end = min(s.start, s.end), max(s.start, s.end)
        if s.parent >= i:
            s.parent = -1
        if s.parent <= -2 and -2 - s.parent >= len(steps):
            s.parent = -1
    return steps, spans


def build(steps: list[tuple[int, int]], spans: list[SpecSpan]) -> RunBuilder:
    run = RunBuilder()
    procs = [run.process(pid=1), run.process("policy", 0, pid=2), run.process("policy", 1, pid=3)]
    step_spans = [procs[0].step(n + 1, a, b) for n, (a, b) in enumerate(steps)]
    made: list[Span] = []
    for s in spans:
        proc, thread = TIMELINES[s.timeline]
        parent = None if s.parent == -1 else step_spans[-2 - s.parent] if s.parent <= -2 else made[s.parent]
        made.append(procs[proc].span(f"s{len(made)}", s.start, s.end, parent=parent, bucket=s.bucket,
                                     concurrent=s.concurrent, thread=thread))
    return run


def _depths(records: list[SpanRecord]) -> dict[str, int]:
    """Ancestors in the span's own process: a parent in another process ends the count."""
    by_id = {r.span_id: r for r in records}

    def depth(r: SpanRecord) -> int:
        if r.parent_span_id is None:
            return 0
        parent = by_id[r.parent_span_id]
        if parent.resource["service.instance.id"] != r.resource["service.instance.id"]:
            return 0
        return 1 + depth(parent)

    return {r.span_id: depth(r) for r in records}


def _timeline(r: SpanRecord) -> tuple[object, object]:
    return (r.resource["service.instance.id"], r.attributes["thread.id"])


def oracle_label(records: list[SpanRecord], depths: dict[str, int], timeline: object,
                 a: int, b: int) -> str | None:
    """The bucket that decides [a, b) on ``timeline``, by scanning every span."""
    best: tuple[int, int] | None = None
    label = None
    for r in records:
        bucket = r.attributes.get("rl.bucket")
        if (bucket is None or r.attributes.get("rl.concurrent") or _timeline(r) != timeline
                or r.end_ns <= r.start_ns or not (r.start_ns <= a and r.end_ns >= b)):
            continue
        key = (depths[r.span_id], PRIORITY[str(bucket)])
        if best is None or key > best:
            best, label = key, str(bucket)
    return label


def oracle_window(records: list[SpanRecord], timeline: object, a: int, b: int) -> dict[str, int]:
    depths = _depths(records)
    points = sorted({a, b} | {t for r in records if _timeline(r) == timeline
                              for t in (r.start_ns, r.end_ns) if a < t < b})
    out = dict.fromkeys(("productive", "overhead", "idle", "wasted", "unattributed"), 0)
    for lo, hi in itertools.pairwise(points):
        out[oracle_label(records, depths, timeline, lo, hi) or "unattributed"] += hi - lo
    return out


def _buckets(b: object) -> dict[str, int]:
    return {k: getattr(b, f"{k}_ns") for k in ("productive", "overhead", "idle", "wasted", "unattributed")}


def _partition_view(report: RunReport) -> tuple[object, ...]:
    """Step, run and rank partitions; a rank with no bucketed time is left out (a concurrent
    span may be the first span of a process, which adds a rank that did nothing)."""
    return (
        [(s.step, _buckets(s.buckets)) for s in report.steps],
        _buckets(report.summary.buckets),
        [(r.worker_group, r.rank, _buckets(r.buckets)) for r in report.fleets.ranks
         if r.buckets.unattributed_ns != r.buckets.wall_ns],
    )


@given(runs())
@settings(max_examples=150, deadline=None)
def test_step_buckets_match_a_brute_force_scan(case):
    """Per step: buckets + unattributed == wall, and each bucket equals the oracle's."""
    steps, spans = case
    run = build(steps, spans)
    records = run.records()
    report = analyze_spans(records)
    controller = ("run1/driver/0/1", 1)
    for s, (a, b) in zip(report.steps, steps, strict=True):
        assert s.buckets.wall_ns == ns(b - a)
        assert _buckets(s.buckets) == oracle_window(records, controller, T0 + ns(a), T0 + ns(b))


@given(runs())
@settings(max_examples=100, deadline=None)
def test_run_buckets_match_a_brute_force_scan_of_the_run_window(case):
    steps, spans = case
    records = build(steps, spans).records()
    report = analyze_spans(records)
    a = min(r.start_ns for r in records)
    b = max(r.end_ns for r in records)
    assert report.summary.buckets.wall_ns == b - a
    assert _buckets(report.summary.buckets) == oracle_window(records, ("run1/driver/0/1", 1), a, b)


@given(runs())
@settings(max_examples=100, deadline=None)
def test_no_second_is_counted_twice(case):
    """Segments of a timeline are disjoint, each inside the one span that owns it."""
    steps, spans = case
    table = build_table(span_columns_from_records(build(steps, spans).records()))
    part = partition_timelines(table, find_steps(table))
    seg = part.cover
    for k in range(len(seg.start)):
        if k + 1 < len(seg.start) and seg.group[k + 1] == seg.group[k]:
            assert seg.end[k] == seg.start[k + 1]
        owner = part.owner[k]
        if owner >= 0:
            assert table.timeline[owner] == seg.group[k]
            assert table.cols.start[owner] <= seg.start[k] and seg.end[k] <= table.cols.end[owner]
            assert not table.cols.concurrent[owner]
    attributed: dict[int, int] = {}
    for owner, length in zip(part.owner.tolist(), seg.length.tolist(), strict=True):
        if owner >= 0:
            attributed[owner] = attributed.get(owner, 0) + length
    for owner, total in attributed.items():
        assert total <= table.duration[owner]


@given(runs(), span_specs, st.integers(-4, 20))
@settings(max_examples=100, deadline=None)
def test_adding_a_concurrent_span_never_changes_the_partition(case, extra, parent):
    """Anywhere inside the run window (outside it, it would widen the run's wall)."""
    steps, spans = case
    before = _partition_view(analyze_spans(build(steps, spans).records()))
    lo = min([steps[0][0], *(s.start for s in spans)])
    hi = max([steps[-1][1], *(s.end for s in spans)])
    extra.start, extra.end = sorted((min(max(extra.start, lo), hi), min(max(extra.end, lo), hi)))
    extra.concurrent = True
    extra.bucket = extra.bucket or "productive"
    extra.parent = parent if parent < len(spans) and (parent > -2 or -2 - parent < len(steps)) else -1
    after = _partition_view(analyze_spans(build(steps, [*spans, extra]).records()))
    assert after == before


@given(runs(), st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None)
def test_results_do_not_depend_on_span_order(case, rnd: random.Random):
    steps, spans = case
    records = build(steps, spans).records()
    shuffled = list(records)
    rnd.shuffle(shuffled)
    assert analyze_spans(shuffled).to_dict() == analyze_spans(records).to_dict()


@given(runs())
@settings(max_examples=60, deadline=None)
def test_fleet_ranks_take_the_best_bucket_of_their_timelines(case):
    """policy/0 runs two timelines... here one per rank; the driver has two threads."""
    steps, spans = case
    records = build(steps, spans).records()
    report = analyze_spans(records)
    a = min(r.start_ns for r in records)
    b = max(r.end_ns for r in records)
    depths = _depths(records)
    rank_timelines = {("driver", 0): [("run1/driver/0/1", 1), ("run1/driver/0/1", 2)],
                      ("policy", 0): [("run1/policy/0/2", 1)], ("policy", 1): [("run1/policy/1/3", 1)]}
    points = sorted({a, b} | {t for r in records for t in (r.start_ns, r.end_ns)})
    for rank in report.fleets.ranks:
        expected = dict.fromkeys(("productive", "overhead", "idle", "wasted", "unattributed"), 0)
        for lo, hi in itertools.pairwise(points):
            labels = [oracle_label(records, depths, t, lo, hi)
                      for t in rank_timelines[(rank.worker_group, rank.rank)]]
            present = [x for x in labels if x is not None]
            best = max(present, key=PRIORITY.__getitem__) if present else "unattributed"
            expected[best] += hi - lo
        assert _buckets(rank.buckets) == expected


@given(runs())
@settings(max_examples=100, deadline=None)
def test_contributors_of_all_steps_add_up_to_each_steps_own(case):
    """The report asks for every step at once, the driver for one step at a time: per
    (bucket, name) the totals add up and ``steps_present`` counts the steps it decided time
    in; and each step's contributors add up to that step's buckets."""
    steps, spans = case
    table = build_table(span_columns_from_records(build(steps, spans).records()))
    found = find_steps(table)
    part = partition_timelines(table, found)
    every = {(c.bucket, c.name): (c.attributed_ns, c.steps_present)
             for c in contributors(table, part, found, top=None)}
    added: dict[tuple[str, str], tuple[int, int]] = {}
    for row, b in enumerate(step_buckets(part, found)):
        own = contributors(table, part, found, top=None, rows=np.asarray([row]))
        for bucket in ("productive", "overhead", "idle", "wasted"):
            assert sum(c.attributed_ns for c in own if c.bucket == bucket) == b.get(bucket)
        for c in own:
            total, present = added.get((c.bucket, c.name), (0, 0))
            added[(c.bucket, c.name)] = (total + c.attributed_ns, present + c.steps_present)
    assert every == added
