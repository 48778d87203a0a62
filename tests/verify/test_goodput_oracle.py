"""An independent second implementation of the goodput partition, checked against rlsight.

The oracle below is written from ``docs/goodput.md`` and DESIGN.md ("Buckets and goodput")
alone, without reading ``rlsight.analysis``: if the two implementations agree on random span
forests, a misreading of the spec would have to be made twice, independently, to go unseen.

It is deliberately naive so that it is obviously right: every span starts and ends on an
integer tick, and for every tick and every timeline it asks, by brute force, which open span
decides. The partition rule it encodes (docs/goodput.md, "The partition rule"):

1. only spans with ``rl.bucket`` that are not ``rl.concurrent=true`` take part;
2. the deepest decides; depth = number of ancestors in the trace tree within the span's own
   process (a parent in another process ends the count), unbucketed umbrella ancestors
   included, a parent missing from the store counting as one level;
3. equal depth: productive > wasted > overhead > idle;
4. nothing open: unattributed.

Steps and the run are partitioned on the controller timeline (the one holding ``rl.step``
spans); a rank's fleet partition takes, at each instant, the best bucket any of its timelines
shows, over the run wall (first span start to last span end, all processes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsight.analysis import Buckets, RunReport, analyze_spans
from rlsight.store import SpanRecord
from rlsight.store._schema import AttributeValue

#: Epoch of tick 0, and the length of one tick: deliberately not a round number of
#: nanoseconds, so a rollup that rounds to microseconds or seconds anywhere shows up.
T0 = 1_700_000_000_000_000_000
TICK_NS = 1_000_000_007

BUCKETS = ("productive", "wasted", "overhead", "idle")
#: Equal-depth priority: a higher number wins.
_PRIORITY = {"idle": 0, "overhead": 1, "wasted": 2, "productive": 3}
PARTS = ("productive", "overhead", "idle", "wasted", "unattributed", "wall")

TRACE = "ab" * 16
CONTROLLER_PROCESS = "run/driver/0/100"
CONTROLLER_THREAD = 1


# --------------------------------------------------------------------------------------------
# The oracle
# --------------------------------------------------------------------------------------------


def _tick(ns: int) -> int:
    """A span time back in ticks; the generated traces only ever use whole ticks."""
    offset = ns - T0
    assert offset % TICK_NS == 0, f"{ns} is not on a tick"
    return offset // TICK_NS


def _timeline(record: SpanRecord) -> tuple[str, int]:
    thread = record.attributes.get("thread.id", 0)
    return (str(record.resource.get("service.instance.id", "")),
            thread if isinstance(thread, int) else 0)


def _depths(records: Sequence[SpanRecord]) -> dict[tuple[str, str], int]:
    """Depth of every span: ancestors in its own process, a missing parent counting as one."""
    by_id = {(r.trace_id, r.span_id): r for r in records}
    depths: dict[tuple[str, str], int] = {}

    def depth(key: tuple[str, str]) -> int:
        if key not in depths:
            record = by_id[key]
            if record.parent_span_id is None:
                depths[key] = 0
            elif (record.trace_id, record.parent_span_id) not in by_id:
                depths[key] = 1
            elif (by_id[(record.trace_id, record.parent_span_id)].resource.get("service.instance.id")
                  != record.resource.get("service.instance.id")):
                depths[key] = 0  # the caller is another process: a local root
            else:
                depths[key] = depth((record.trace_id, record.parent_span_id)) + 1
        return depths[key]

    for key in by_id:
        depth(key)
    return depths


def _int(value: AttributeValue) -> int:
    assert isinstance(value, int), f"expected an int attribute, got {value!r}"
    return value


def _decides(record: SpanRecord) -> bool:
    return (record.attributes.get("rl.bucket") in _PRIORITY
            and record.attributes.get("rl.concurrent") is not True)


def _winner(records: Iterable[SpanRecord], depths: Mapping[tuple[str, str], int],
            tick: int) -> str:
    """The bucket one timeline shows during ``[tick, tick + 1)``."""
    best: tuple[int, int] | None = None
    bucket = "unattributed"
    for r in records:
        if _decides(r) and _tick(r.start_ns) <= tick < _tick(r.end_ns):
            name = str(r.attributes["rl.bucket"])
            key = (depths[(r.trace_id, r.span_id)], _PRIORITY[name])
            if best is None or key > best:
                best, bucket = key, name
    return bucket


def _partition(buckets_per_tick: Iterable[str]) -> dict[str, int]:
    """Tick winners summed into nanoseconds, with ``wall`` the number of ticks."""
    totals = dict.fromkeys(PARTS, 0)
    for bucket in buckets_per_tick:
        totals[bucket] += TICK_NS
        totals["wall"] += TICK_NS
    return totals


@dataclass
class Oracle:
    """What the docs say ``analyze_spans`` must report for a set of tick-aligned spans."""

    steps: list[tuple[int, dict[str, int]]]
    """(rl.step number, partition of the step window), in start order."""
    run: dict[str, int]
    ranks: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    """(worker group, rank) -> partition of the run wall."""


def oracle(records: Sequence[SpanRecord]) -> Oracle:
    """The per-step, per-run and per-rank partitions, computed tick by tick."""
    # one span per (trace id, span id); the generated duplicates are identical copies
    records = list({(r.trace_id, r.span_id): r for r in records}.values())
    depths = _depths(records)
    timelines: dict[tuple[str, int], list[SpanRecord]] = {}
    for r in records:
        timelines.setdefault(_timeline(r), []).append(r)
    lo = min(_tick(r.start_ns) for r in records)
    hi = max(_tick(r.end_ns) for r in records)

    step_spans = sorted((r for r in records if r.name == "rl.step"), key=lambda r: r.start_ns)
    controllers = {_timeline(r) for r in step_spans}
    assert len(controllers) == 1, "the oracle handles one controller timeline"
    (controller,) = controllers
    on_controller = timelines[controller]

    steps = [
        (_int(s.attributes["rl.step"]),
         _partition(_winner(on_controller, depths, t)
                    for t in range(_tick(s.start_ns), _tick(s.end_ns))))
        for s in step_spans
    ]
    run = _partition(_winner(on_controller, depths, t) for t in range(lo, hi))

    ranks: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for r in records:
        rank = (str(r.resource["rl.worker_group"]), _int(r.resource["rl.rank"]))
        ranks.setdefault(rank, [])
        if _timeline(r) not in ranks[rank]:
            ranks[rank].append(_timeline(r))

    def best(rank_timelines: list[tuple[str, int]], tick: int) -> str:
        shown = [_winner(timelines[tl], depths, tick) for tl in rank_timelines]
        decided = [b for b in shown if b != "unattributed"]
        return max(decided, key=_PRIORITY.__getitem__) if decided else "unattributed"

    return Oracle(
        steps=steps,
        run=run,
        ranks={rank: _partition(best(tls, t) for t in range(lo, hi))
               for rank, tls in ranks.items()},
    )


# --------------------------------------------------------------------------------------------
# Reading rlsight's answer in the same shape
# --------------------------------------------------------------------------------------------


def _parts(buckets: Buckets) -> dict[str, int]:
    return {name: buckets.get(name) for name in PARTS}


def actual_steps(report: RunReport) -> list[tuple[int, dict[str, int]]]:
    return [(s.step, _parts(s.buckets)) for s in report.steps]


def actual_ranks(report: RunReport) -> dict[tuple[str, int], dict[str, int]]:
    return {(r.worker_group, r.rank): _parts(r.buckets) for r in report.fleets.ranks}


# --------------------------------------------------------------------------------------------
# Building span records by hand
# --------------------------------------------------------------------------------------------


@dataclass
class Trace:
    """Spans in ticks, with resources per process; ``records`` turns them into SpanRecords."""

    records: list[SpanRecord] = field(default_factory=list)

    def span(self, span_id: int, parent: int | None, name: str, start: int, end: int,
             bucket: str | None = None, *, process: str = CONTROLLER_PROCESS,
             thread: int = CONTROLLER_THREAD, group: str = "driver", rank: int = 0,
             devices: int = 1, trace_id: str = TRACE,
             attrs: Mapping[str, AttributeValue] | None = None) -> None:
        attributes: dict[str, AttributeValue] = {"thread.id": thread, **(attrs or {})}
        if bucket is not None:
            attributes["rl.bucket"] = bucket
        resource: dict[str, AttributeValue] = {
            "service.instance.id": process, "rl.worker_group": group, "rl.rank": rank,
            "rl.devices": devices}
        self.records.append(SpanRecord(
            trace_id, f"{span_id:016x}", None if parent is None else f"{parent:016x}", name,
            T0 + start * TICK_NS, T0 + end * TICK_NS, attributes, resource))


def ns(ticks: int) -> int:
    return ticks * TICK_NS


def parts(productive: int = 0, overhead: int = 0, idle: int = 0, wasted: int = 0,
          unattributed: int = 0) -> dict[str, int]:
    """A partition from tick counts, with the wall their sum."""
    ticks = {"productive": productive, "overhead": overhead, "idle": idle, "wasted": wasted,
             "unattributed": unattributed}
    return {**{k: ns(v) for k, v in ticks.items()}, "wall": ns(sum(ticks.values()))}


def check_both(trace: Trace, steps: list[tuple[int, dict[str, int]]],
               run: dict[str, int]) -> RunReport:
    """Hand-computed numbers must match the oracle, and rlsight must match them too."""
    expected = oracle(trace.records)
    assert expected.steps == steps, "the oracle disagrees with the hand arithmetic"
    assert expected.run == run, "the oracle disagrees with the hand arithmetic"
    report = analyze_spans(trace.records)
    assert actual_steps(report) == steps
    assert _parts(report.summary.buckets) == run
    return report


# --------------------------------------------------------------------------------------------
# Hand-computed examples
# --------------------------------------------------------------------------------------------


def test_overhead_nested_in_productive_decides_while_it_runs() -> None:
    t = Trace()
    t.span(1, None, "rl.job", 0, 10)
    t.span(2, 1, "rl.step", 0, 10, attrs={"rl.step": 1})
    t.span(3, 2, "rl.train", 1, 9, "productive")          # depth 2
    t.span(4, 3, "rl.data_plane.get", 3, 5, "overhead")   # depth 3
    # productive: 1-3 and 5-9 = 2 + 4 = 6; overhead 3-5 = 2; unattributed 0-1, 9-10 = 2
    expected = parts(productive=6, overhead=2, unattributed=2)
    check_both(t, [(1, expected)], expected)


def test_equal_depth_overlap_of_all_four_buckets_ranks_productive_wasted_overhead_idle() -> None:
    t = Trace()
    t.span(1, None, "rl.job", 0, 10)
    t.span(2, 1, "rl.step", 0, 10, attrs={"rl.step": 1})
    # all children of the step (depth 2), nested intervals so every pair overlaps
    t.span(3, 2, "idle", 0, 9, "idle")
    t.span(4, 2, "overhead", 1, 8, "overhead")
    t.span(5, 2, "wasted", 2, 7, "wasted")
    t.span(6, 2, "productive", 4, 6, "productive")
    # 0-1 idle | 1-2 overhead | 2-4 wasted | 4-6 productive | 6-7 wasted | 7-8 overhead
    # | 8-9 idle | 9-10 nothing
    # productive 2; wasted 2 + 1 = 3; overhead 1 + 1 = 2; idle 1 + 1 = 2; unattributed 1
    expected = parts(productive=2, wasted=3, overhead=2, idle=2, unattributed=1)
    check_both(t, [(1, expected)], expected)


def test_concurrent_span_over_everything_never_takes_part() -> None:
    t = Trace()
    t.span(1, None, "rl.job", 0, 10)
    t.span(2, 1, "rl.step", 0, 10, attrs={"rl.step": 1})
    t.span(3, 2, "rl.collector", 0, 10, "productive", attrs={"rl.concurrent": True})   # depth 2
    t.span(4, 3, "rl.collector.put", 0, 10, "wasted", attrs={"rl.concurrent": True})   # depth 3
    t.span(5, 2, "rl.efficiency.idle.barrier", 2, 4, "idle")                     # depth 2
    # only the idle wait counts: idle 2-4 = 2; unattributed 10 - 2 = 8
    expected = parts(idle=2, unattributed=8)
    check_both(t, [(1, expected)], expected)


def test_bucketed_span_crossing_a_step_boundary_is_split_between_the_steps() -> None:
    t = Trace()
    t.span(1, None, "rl.job", 0, 10)
    t.span(2, 1, "rl.step", 0, 5, attrs={"rl.step": 1})
    t.span(3, 1, "rl.step", 5, 10, attrs={"rl.step": 2})
    t.span(4, 2, "rl.train", 3, 8, "productive")   # child of step 1, runs into step 2
    # step 1 [0,5): productive 3-5 = 2, unattributed 0-3 = 3
    # step 2 [5,10): productive 5-8 = 3, unattributed 8-10 = 2
    # run [0,10): productive 5, unattributed 5
    check_both(t, [(1, parts(productive=2, unattributed=3)),
                   (2, parts(productive=3, unattributed=2))],
               parts(productive=5, unattributed=5))


def test_gap_with_nothing_bucketed_is_unattributed_and_run_wall_spans_all_processes() -> None:
    t = Trace()
    t.span(1, None, "rl.job", 0, 20)
    t.span(2, 1, "rl.step", 2, 8, attrs={"rl.step": 1})
    t.span(3, 2, "rl.generate", 2, 6, "productive")
    t.span(4, 1, "rl.step", 12, 18, attrs={"rl.step": 2})
    t.span(5, 4, "rl.efficiency.idle.buffer_starvation", 12, 14, "idle")
    # a worker's span outlives the driver's job: the run wall is [0, 25)
    t.span(6, 4, "rl.train.policy", 16, 25, "productive", process="run/policy/0/200",
           group="policy", rank=0)
    # step 1 [2,8): productive 2-6 = 4, unattributed 6-8 = 2
    # step 2 [12,18): idle 12-14 = 2, unattributed 14-18 = 4 (the worker's time is not the
    # controller's)
    # run [0,25) on the controller: productive 4, idle 2,
    # unattributed 0-2 + 6-12 + 14-25 = 2 + 6 + 11 = 19
    check_both(t, [(1, parts(productive=4, unattributed=2)),
                   (2, parts(idle=2, unattributed=4))],
               parts(productive=4, idle=2, unattributed=19))


def test_unbucketed_umbrella_adds_depth_so_a_shallower_productive_sibling_loses() -> None:
    t = Trace()
    t.span(1, None, "rl.job", 0, 10)
    t.span(2, 1, "rl.step", 0, 10, attrs={"rl.step": 1})
    t.span(3, 2, "rl.rollout", 0, 6)                                        # umbrella, 2
    t.span(4, 3, "rl.efficiency.idle.generation_wait", 1, 5, "idle")       # depth 3
    t.span(5, 2, "rl.train", 0, 8, "productive")                           # depth 2
    # 0-1 productive | 1-5 idle (deeper beats productive) | 5-8 productive | 8-10 nothing
    # productive 1 + 3 = 4; idle 4; unattributed 2
    expected = parts(productive=4, idle=4, unattributed=2)
    check_both(t, [(1, expected)], expected)


def test_missing_parent_counts_as_one_level() -> None:
    t = Trace()
    t.span(1, None, "rl.job", 0, 10)
    t.span(2, 1, "rl.step", 0, 10, attrs={"rl.step": 1})
    t.span(3, 2, "rl.train", 0, 10, "productive")              # depth 2
    t.span(4, 99, "orphan.wait", 2, 6, "idle")                 # parent 99 missing: depth 1
    t.span(5, 98, "orphan.refit", 0, 4, "overhead")            # depth 1
    t.span(6, 5, "orphan.discard", 3, 4, "wasted")             # depth 2 (ties with train)
    # train (depth 2) beats both orphans (depth 1) everywhere; at 3-4 wasted ties at depth 2
    # and loses to productive: productive 10
    expected = parts(productive=10)
    check_both(t, [(1, expected)], expected)


def test_superseded_step_keeps_its_partition_but_counts_wasted_in_the_run() -> None:
    t = Trace()
    t.span(1, None, "rl.step", 0, 4, attrs={"rl.step": 1})
    t.span(2, 1, "rl.train", 0, 3, "productive")
    t.span(3, None, "rl.step", 4, 8, attrs={"rl.step": 2})
    t.span(4, 3, "rl.train", 4, 7, "productive")
    # the driver restarted from step 1's checkpoint (a new process) and redid step 2
    restarted = "run/driver/0/101"
    t.span(5, None, "rl.step", 8, 12, process=restarted, attrs={"rl.step": 2})
    t.span(6, 5, "rl.train", 8, 11, "productive", process=restarted)
    # every step keeps its own partition: productive 3, unattributed 1
    # run [0,12): step 1 productive 3 + unattributed 1; the first step 2 is superseded, its
    # whole window 4-8 wasted (4); the redone step 2 productive 3 + unattributed 1
    # = productive 6, wasted 4, unattributed 2
    step = parts(productive=3, unattributed=1)
    report = analyze_spans(t.records)
    assert actual_steps(report) == [(1, step), (2, step), (2, step)]
    assert [s.superseded for s in report.steps] == [False, True, False]
    assert _parts(report.summary.buckets) == parts(productive=6, wasted=4, unattributed=2)


def test_rank_shows_its_best_timeline_and_a_restarted_rank_is_one_rank() -> None:
    t = Trace()
    t.span(1, None, "rl.job", 0, 10)
    t.span(2, 1, "rl.step", 0, 10, attrs={"rl.step": 1})
    # policy/0: two threads of one process, then a second process after a restart
    t.span(10, 2, "rl.train.policy", 0, 4, "productive", process="run/policy/0/200",
           thread=1, group="policy", rank=0, devices=2)
    t.span(11, 2, "rl.efficiency.idle.barrier", 2, 8, "idle", process="run/policy/0/200",
           thread=2, group="policy", rank=0, devices=2)
    t.span(12, 2, "rl.refit", 8, 9, "overhead", process="run/policy/0/300",
           group="policy", rank=0, devices=2)
    t.span(13, 12, "rl.collector", 0, 10, "productive", process="run/policy/0/300",
           group="policy", rank=0, devices=2, attrs={"rl.concurrent": True})
    # policy/1: one wasted span
    t.span(20, 2, "rl.efficiency.wasted.recompute", 5, 10, "wasted",
           process="run/policy/1/400", group="policy", rank=1, devices=1)
    # run wall [0,10)
    # policy/0: productive 0-4 = 4 (beats idle on the other thread at 2-4), idle 4-8 = 4,
    #           overhead 8-9 = 1, unattributed 9-10 = 1; concurrent collector ignored
    #           utilisation (4 + 1) / 10 = 0.5
    # policy/1: wasted 5-10 = 5, unattributed 5; utilisation 0.5
    report = analyze_spans(t.records)
    ranks = actual_ranks(report)
    assert ranks[("policy", 0)] == parts(productive=4, idle=4, overhead=1, unattributed=1)
    assert ranks[("policy", 1)] == parts(wasted=5, unattributed=5)
    assert ranks == oracle(t.records).ranks
    by_rank = {(r.worker_group, r.rank): r for r in report.fleets.ranks}
    assert by_rank[("policy", 0)].utilisation == pytest.approx(0.5)
    assert by_rank[("policy", 0)].timelines == 3
    (policy,) = [g for g in report.fleets.groups if g.worker_group == "policy"]
    # device-weighted: (2 * 0.5 + 1 * 0.5) / 3 = 0.5 utilisation; productive (2 * 0.4) / 3
    assert (policy.ranks, policy.devices) == (2, 3)
    assert policy.utilisation == pytest.approx(0.5)
    assert policy.productive == pytest.approx(0.8 / 3)
    assert policy.wasted == pytest.approx(0.5 / 3)


# --------------------------------------------------------------------------------------------
# Random span forests
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Process:
    instance: str
    group: str
    rank: int
    devices: int


@st.composite
def span_forests(draw: st.DrawFn) -> list[SpanRecord]:
    """A random, valid run: steps 1..N on the driver's main thread, spans everywhere.

    Spans nest by parent id at random (children mostly inside their parent's interval, but
    not always: an async task may outlive its caller), siblings overlap, some spans are
    concurrent, some parents are missing from the store, some spans live in another trace,
    some records are exported twice, and worker ranks (one restarted into a second process)
    run spans of their own or as remote children of the driver's.
    """
    trace = Trace()
    rng = draw(st.randoms(use_true_random=False))

    # Steps: contiguous numbers, ordered non-overlapping windows, possibly with gaps.
    t = draw(st.integers(0, 3))
    windows: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(1, 4))):
        t += draw(st.integers(0, 3))
        length = draw(st.integers(1, 8))
        windows.append((t, t + length))
        t += length
    horizon = t + draw(st.integers(0, 4))

    processes = [_Process(CONTROLLER_PROCESS, "driver", 0, 1)]
    pid = 200
    for group in ("policy", "ref")[: draw(st.integers(0, 2))]:
        for rank in range(draw(st.integers(1, 3))):
            for _ in range(draw(st.integers(1, 2))):   # a second process: a restarted rank
                processes.append(_Process(f"run/{group}/{rank}/{pid}", group, rank,
                                          draw(st.integers(1, 4))))
                pid += 1
    timelines = [(p, thread) for p in processes for thread in (1, 2)]
    controller = timelines[0]

    # (span id, trace id, timeline, start, end) of every span so far, for parents
    nodes: list[tuple[int, str, tuple[_Process, int], int, int]] = []
    next_id = 1

    def add(parent: int | None, name: str, start: int, end: int, bucket: str | None,
            where: tuple[_Process, int], trace_id: str,
            attrs: Mapping[str, AttributeValue] | None = None) -> None:
        nonlocal next_id
        proc, thread = where
        trace.span(next_id, parent, name, start, end, bucket, process=proc.instance,
                   thread=thread, group=proc.group, rank=proc.rank, devices=proc.devices,
                   trace_id=trace_id, attrs=attrs)
        nodes.append((next_id, trace_id, where, start, end))
        next_id += 1

    job: int | None = None
    if draw(st.booleans()):
        add(None, "rl.job", draw(st.integers(0, windows[0][0])),
            draw(st.integers(windows[-1][1], horizon)), None, controller, TRACE)
        job = 1
    for number, (start, end) in enumerate(windows, start=1):
        add(job, "rl.step", start, end, None, controller, TRACE, attrs={"rl.step": number})

    for i in range(draw(st.integers(0, 30))):
        choice = draw(st.integers(-2, len(nodes) - 1))
        if choice >= 0:
            parent_id, trace_id, parent_where, p_start, p_end = nodes[choice]
            parent: int | None = parent_id
            where = parent_where if draw(st.integers(0, 3)) else draw(st.sampled_from(timelines))
            if draw(st.integers(0, 4)):   # mostly inside the parent
                lo, hi = p_start, p_end
            else:
                lo, hi = 0, horizon
        else:
            # -1: a root of its own trace; -2: a parent missing from the store
            parent = None if choice == -1 else 10_000 + i
            trace_id = draw(st.sampled_from([TRACE, "cd" * 16]))
            where = controller if draw(st.booleans()) else draw(st.sampled_from(timelines))
            lo, hi = 0, horizon
        start = draw(st.integers(lo, hi))
        end = draw(st.integers(start, hi))
        bucket = draw(st.sampled_from((None, *BUCKETS)))
        concurrent = draw(st.sampled_from((None, None, None, True, False)))
        attrs: dict[str, AttributeValue] = (
            {} if concurrent is None else {"rl.concurrent": concurrent})
        add(parent, f"span{i}", start, end, bucket, where, trace_id, attrs)

    # a span exported twice (a retried export) is one span: duplicates change nothing
    records = trace.records + draw(st.lists(st.sampled_from(trace.records), max_size=3))
    rng.shuffle(records)
    return records


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_forests())
def test_random_forests_partition_like_the_oracle(records: list[SpanRecord]) -> None:
    expected = oracle(records)
    report = analyze_spans(records)
    assert actual_steps(report) == expected.steps
    assert _parts(report.summary.buckets) == expected.run


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_forests())
def test_random_forests_rank_partitions_like_the_oracle(records: list[SpanRecord]) -> None:
    expected = oracle(records)
    report = analyze_spans(records)
    assert actual_ranks(report) == expected.ranks
    wall = expected.run["wall"]
    for usage in report.fleets.ranks:
        busy = sum(expected.ranks[(usage.worker_group, usage.rank)][b]
                   for b in ("productive", "overhead", "wasted"))
        assert usage.utilisation == pytest.approx(busy / wall)
