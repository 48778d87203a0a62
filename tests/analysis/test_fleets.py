"""Fleet utilisation per rank and device-weighted group means."""

from __future__ import annotations

import pytest
from _build import SEC, RunBuilder, analyze


def _run_with_fleets(run: RunBuilder) -> RunBuilder:
    """Run wall [0,10]. policy: rank 0 (1 device) busy 2 s, rank 1 (3 devices) busy 6 s.
    generation: two ranks of 4 devices; rank 0 busy 10 s, rank 1 busy 5 s then idle 5 s."""
    d = run.process()
    d.step(1, 0, 10)
    run.process("policy", 0, devices=1).span("train", 0, 2, bucket="productive")
    run.process("policy", 1, devices=3).span("train", 0, 6, bucket="productive")
    run.process("generation", 0, devices=4).span("generate", 0, 10, bucket="productive")
    g1 = run.process("generation", 1, devices=4)
    g1.span("generate", 0, 5, bucket="productive")
    g1.span("wait", 5, 10, bucket="idle")
    return run


def test_rank_utilisation_is_busy_time_over_run_wall(run: RunBuilder):
    report = analyze(_run_with_fleets(run))
    util = {(r.worker_group, r.rank): r.utilisation for r in report.fleets.ranks}
    assert util[("policy", 0)] == pytest.approx(0.2)
    assert util[("policy", 1)] == pytest.approx(0.6)
    assert util[("generation", 1)] == pytest.approx(0.5)


def test_group_means_are_weighted_by_devices(run: RunBuilder):
    """policy: (0.2 * 1 + 0.6 * 3) / 4 = 0.5, not the unweighted 0.4."""
    groups = {g.worker_group: g for g in analyze(_run_with_fleets(run)).fleets.groups}
    assert groups["policy"].utilisation == pytest.approx(0.5)
    assert groups["policy"].devices == 4
    assert groups["generation"].utilisation == pytest.approx(0.75)
    assert groups["generation"].idle == pytest.approx(0.25)
    assert groups["generation"].ranks == 2


def test_ranks_without_rl_devices_weigh_one(run: RunBuilder):
    run.process().step(1, 0, 10)
    run.process("ref", 0).span("logprob", 0, 10, bucket="overhead")
    run.process("ref", 1, devices=3).span("logprob", 0, 0.0, bucket="overhead")
    groups = {g.worker_group: g for g in analyze(run).fleets.groups}
    assert groups["ref"].devices == 4
    assert groups["ref"].utilisation == pytest.approx(0.25)


def test_a_rank_busy_on_any_of_its_threads_counts_as_busy(run: RunBuilder):
    """Thread 1 trains [0,4] while thread 2 refits [2,6]: busy [0,6], productive wins [2,4]."""
    run.process().step(1, 0, 10)
    w = run.process("policy", 0)
    w.span("train", 0, 4, bucket="productive", thread=1)
    w.span("refit", 2, 6, bucket="overhead", thread=2)
    (rank,) = [r for r in analyze(run).fleets.ranks if r.worker_group == "policy"]
    assert rank.timelines == 2
    assert rank.utilisation == pytest.approx(0.6)
    assert (rank.buckets.productive_ns, rank.buckets.overhead_ns) == (4 * 10**9, 2 * 10**9)


def test_a_restarted_rank_is_one_rank_across_its_processes(run: RunBuilder):
    run.process().step(1, 0, 10)
    run.process("policy", 0, pid=1).span("train", 0, 3, bucket="productive")
    run.process("policy", 0, pid=2).span("train", 5, 8, bucket="productive")
    ranks = [r for r in analyze(run).fleets.ranks if r.worker_group == "policy"]
    assert len(ranks) == 1 and ranks[0].utilisation == pytest.approx(0.6)


def test_wasted_work_counts_as_busy(run: RunBuilder):
    """A rank computing results that are thrown away is busy, not idle."""
    run.process().step(1, 0, 10)
    w = run.process("generation", 0)
    w.span("generate", 0, 3, bucket="productive")
    w.span("aborted", 3, 5, bucket="wasted")
    (rank,) = [r for r in analyze(run).fleets.ranks if r.worker_group == "generation"]
    assert rank.utilisation == pytest.approx(0.5)


@pytest.mark.parametrize("parent", ["step", "job"])
def test_fleet_buckets_do_not_depend_on_where_a_remote_span_hangs(parent: str):
    """A background producer parents rollouts to step 1 or to the job; same work, same split (#9.9).

    On the rollout worker a refit (called under the step) overlaps a generation (called by the
    producer): both are local roots in that process, so productive wins the overlap either way.
    """
    run = RunBuilder()
    d = run.process()
    job = d.span("rl.job", 0, 20, group="job")
    step = d.step(1, 0, 10, parent=job)
    w = run.process("rollout", 0)
    w.span("rl.refit", 2, 4, parent=step, bucket="overhead")
    w.span("rl.generate", 1, 5, parent=step if parent == "step" else job, bucket="productive")
    (rank,) = [r for r in analyze(run).fleets.ranks if r.worker_group == "rollout"]
    assert (rank.buckets.productive_ns, rank.buckets.overhead_ns) == (4 * SEC, 0)
