"""Every process's own busy time per window (``rl.goodput.process.seconds``): the live
fleet-utilisation figure. Windows add up to the report's fleet view of the process."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace

import rlsight
from rlsight import RL
from rlsight.analysis import analyze_run
from rlsight.step_summary import PROCESS_SECONDS
from rlsight.store import read_metrics

BUCKETS = ("productive", "overhead", "idle", "wasted", "unattributed")
_T0 = 1_700_000_000_000_000_000


def _config(run_dir: Path) -> rlsight.TelemetryConfig:
    return rlsight.TelemetryConfig(run_dir=str(run_dir), strict=True, span_groups=("all",))


def busy_seconds(run_dir: Path) -> dict[tuple[str, int], dict[str, float]]:
    """(worker group, rank) -> bucket -> seconds, from the store's metric lines, as a
    collector or Prometheus would aggregate them: delta points summed, the latest cumulative."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    latest: dict[tuple[str, int, str], tuple[int, float]] = {}
    for p in read_metrics(run_dir).points:
        if p.name != PROCESS_SECONDS:
            continue
        key = (str(p.attributes["rl.worker_group"]), int(p.attributes["rl.rank"]))  # type: ignore[arg-type]
        bucket = str(p.attributes["rl.bucket"])
        value = float(p.value or 0)
        if p.temporality == 2:  # cumulative
            latest[(*key, bucket)] = max(latest.get((*key, bucket), (0, 0.0)), (p.time_ns, value))
        else:
            out.setdefault(key, dict.fromkeys(BUCKETS, 0.0))[bucket] += value
    for (group, rank, bucket), (_, value) in latest.items():
        out.setdefault((group, rank), dict.fromkeys(BUCKETS, 0.0))[bucket] = value
    return out


def _report_rank(run_dir: Path, group: str, rank: int) -> dict[str, float]:
    report = analyze_run(run_dir)
    (usage,) = [u for u in report.fleets.ranks if (u.worker_group, u.rank) == (group, rank)]
    return {b: usage.buckets.get(b) / 1e9 for b in BUCKETS}


@settings(max_examples=25, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 300), st.integers(1, 200),
                                st.sampled_from((None, "productive", "overhead", "idle", "wasted")),
                                st.booleans()), min_size=1, max_size=12),
       cuts=st.lists(st.integers(1, 600), max_size=4))
def test_windows_add_up_to_the_reports_fleet_view(tmp_path_factory, spans, cuts):
    """Random spans on three threads (nested under one root per thread or not), with window
    cuts at random instants, mid-span included: the busy seconds of the process summed over
    its windows equal the report's fleet buckets for it, bucket by bucket."""
    run_dir = tmp_path_factory.mktemp("busy") / "run"
    telemetry = rlsight.setup_telemetry(_config(run_dir))
    rollup = telemetry._rollup
    assert rollup is not None
    base = time.time_ns() + 10**9  # after the first window's start
    try:
        tracer = telemetry.tracer
        roots = {t: tracer.start_span("rl.prop.root", attributes={"thread.id": t},
                                      start_time=base) for t in range(3)}
        events = []
        for i, (_, offset, length, _, _) in enumerate(spans):
            events.append((offset, 1, i))
            events.append((offset + length, 0, i))
        events += [(c, 2, -1) for c in cuts]
        opened = {}
        for t, kind, i in sorted(events):
            if kind == 2:  # cut a window at that instant of the run
                rollup._cut_at(base + t)
                continue
            thread, offset, length, bucket, nested = spans[i]
            if kind == 1:
                parent = trace.set_span_in_context(roots[thread]) if nested else None
                opened[i] = tracer.start_span(
                    "rl.prop.work", context=parent, start_time=base + offset,
                    attributes={"thread.id": thread, **({"rl.bucket": bucket} if bucket else {})})
            else:
                opened[i].end(end_time=base + offset + length)
        for root in roots.values():
            root.end(end_time=base + 700)
        rollup._cut_at(base + 800)
    finally:
        rlsight.shutdown_telemetry()
    online = busy_seconds(run_dir)[("driver", 0)]
    offline = _report_rank(run_dir, "driver", 0)
    for bucket in ("productive", "overhead", "idle", "wasted"):
        assert online[bucket] == pytest.approx(offline[bucket], abs=1e-9), bucket


def test_a_real_run_records_busy_time_by_process_that_reaches_the_store(tmp_path):
    """Two threads of work, windows cut by flush_telemetry and at shutdown: the store's
    metric lines say how busy the process was, as the report's fleet view does."""
    run_dir = tmp_path / "run"
    rlsight.setup_telemetry(_config(run_dir))
    try:
        def other() -> None:
            with rlsight.span(RL.TRAINING, "rl.train.policy"):
                time.sleep(0.03)

        with rlsight.job_span():
            for step in range(3):
                with rlsight.step_span(step):
                    worker = threading.Thread(target=other)
                    worker.start()
                    with rlsight.span(RL.GENERATION, "rl.rollout.generate"):
                        time.sleep(0.02)
                    with rlsight.efficiency_span("idle/buffer_starvation"):
                        time.sleep(0.02)
                    worker.join()
                rlsight.flush_telemetry()
            time.sleep(0.01)
    finally:
        rlsight.shutdown_telemetry()
    online = busy_seconds(run_dir)[("driver", 0)]
    offline = _report_rank(run_dir, "driver", 0)
    assert online["productive"] > 0.08 and online["idle"] > 0.02  # threads overlap: the best wins
    for bucket in ("productive", "overhead", "idle", "wasted"):
        assert online[bucket] == pytest.approx(offline[bucket], abs=1e-9), bucket


@pytest.mark.ray
def test_a_ray_workers_busy_time_reaches_the_store_with_its_identity(ray_cluster):
    """A Ray worker records its own busy seconds, labelled with its worker group and rank,
    equal to what the report's fleet view computes from that process's spans."""
    import ray

    from _trap_actors import BusyRank
    from rlsight.analysis import analyze_spans
    from rlsight.store import read_spans

    actor = BusyRank.remote()  # type: ignore[attr-defined]
    try:
        resource = ray.get(actor.work.remote(0.05, 0.03))
    finally:
        ray.kill(actor)
    pid = resource["process.pid"]
    group, rank = str(resource["rl.worker_group"]), int(resource["rl.rank"])
    points = [p for p in read_metrics(ray_cluster.run_dir).points
              if p.name == PROCESS_SECONDS and p.resource.get("process.pid") == pid]
    assert {(p.attributes["rl.worker_group"], p.attributes["rl.rank"]) for p in points} == {(group, rank)}
    online = dict.fromkeys(BUCKETS, 0.0)
    for p in points:  # the store writes delta points: the window's seconds
        online[str(p.attributes["rl.bucket"])] += float(p.value or 0)
    spans = [s for s in read_spans(ray_cluster.run_dir).spans if s.resource.get("process.pid") == pid]
    (usage,) = analyze_spans(spans).fleets.ranks
    assert online["productive"] >= 0.05 and online["idle"] >= 0.03
    for bucket in ("productive", "overhead", "idle", "wasted"):
        assert online[bucket] == pytest.approx(usage.buckets.get(bucket) / 1e9, abs=1e-9), bucket


def test_a_window_closes_early_once_many_spans_ended_in_it(tmp_path):
    """A process emitting spans fast never holds more than WINDOW_SPANS ended spans for its
    busy time: the window thread closes the window without waiting for its 10 s."""
    from rlsight._step_rollup import WINDOW_SPANS

    with rlsight.setup_telemetry(_config(tmp_path / "run")) as telemetry:
        rollup = telemetry._rollup
        assert rollup is not None
        first = rollup._window_start
        for _ in range(WINDOW_SPANS):
            with rlsight.span(RL.TRAINING, "rl.train.policy"):
                pass
        deadline = time.monotonic() + 5
        while rollup._window_start == first and time.monotonic() < deadline:
            time.sleep(0.02)
        with rollup._lock:  # the cut sets _window_start before it trims the rows it read
            assert rollup._window_start > first
            assert len(rollup._rows) // 7 < WINDOW_SPANS


def test_the_window_stays_bounded_while_threads_emit_spans_flat_out(tmp_path):
    """Four threads emitting spans as fast as they can starve the window thread of the GIL;
    the window must not hold every span until it gets to run (it grew by ~40k spans/s, to
    hundreds of MiB, before app threads cut it themselves)."""
    from rlsight._step_rollup import WINDOW_SPANS

    per_thread = 25_000
    peak = [0]
    with rlsight.setup_telemetry(_config(tmp_path / "run")) as telemetry:
        rollup = telemetry._rollup
        assert rollup is not None

        def work() -> None:
            for _ in range(per_thread):
                with rlsight.span(RL.TRAINING, "rl.train.policy"):
                    pass
                peak[0] = max(peak[0], len(rollup._rows) // 7)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert peak[0] >= WINDOW_SPANS, "too little load to test anything"
    assert peak[0] <= 4 * WINDOW_SPANS + 1_000, f"the window held {peak[0]} spans"


def test_a_span_filed_with_an_end_after_the_cut_counts_on_both_sides_of_it(tmp_path):
    """A span ended with an explicit end time later than the next cut is carried into the
    window after it: each window counts its own part, and they add up to the report."""
    run_dir = tmp_path / "run"
    telemetry = rlsight.setup_telemetry(_config(run_dir))
    rollup = telemetry._rollup
    assert rollup is not None
    base = time.time_ns() + 10**9  # after the first window's start
    try:
        span = telemetry.tracer.start_span("rl.prop.work", start_time=base + 100,
                                           attributes={"thread.id": 1, "rl.bucket": "idle"})
        span.end(end_time=base + 500)
        rollup._cut_at(base + 300)
        rollup._cut_at(base + 800)
    finally:
        rlsight.shutdown_telemetry()
    online = busy_seconds(run_dir)[("driver", 0)]
    assert online["idle"] == pytest.approx(400e-9, abs=1e-15)
    assert online["idle"] == pytest.approx(_report_rank(run_dir, "driver", 0)["idle"], abs=1e-15)



def test_a_span_ending_after_several_cuts_is_carried_through_each(tmp_path):
    """A carried row is carried again while it still ends after the cut, next to the rows
    filed in the window (each window reads the processor's rows in place, carried first)."""
    run_dir = tmp_path / "run"
    telemetry = rlsight.setup_telemetry(_config(run_dir))
    rollup = telemetry._rollup
    assert rollup is not None
    base = time.time_ns() + 10**9
    try:
        tracer = telemetry.tracer
        long = tracer.start_span("rl.prop.work", start_time=base + 100,
                                 attributes={"thread.id": 1, "rl.bucket": "idle"})
        long.end(end_time=base + 900)
        rollup._cut_at(base + 300)
        short = tracer.start_span("rl.prop.work", start_time=base + 350,
                                  attributes={"thread.id": 2, "rl.bucket": "overhead"})
        short.end(end_time=base + 700)
        rollup._cut_at(base + 400)
        rollup._cut_at(base + 500)
        rollup._cut_at(base + 1_000)
    finally:
        rlsight.shutdown_telemetry()
    online = busy_seconds(run_dir)[("driver", 0)]
    assert online["idle"] == pytest.approx(450e-9, abs=1e-15)  # 100-350, 700-900
    assert online["overhead"] == pytest.approx(350e-9, abs=1e-15)
    report = _report_rank(run_dir, "driver", 0)
    for bucket in ("idle", "overhead"):
        assert online[bucket] == pytest.approx(report[bucket], abs=1e-15), bucket
