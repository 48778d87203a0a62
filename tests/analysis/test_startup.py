"""Startup: time before the first step, setup phases, and worker model loads."""

from __future__ import annotations

from _build import SEC, RunBuilder, analyze


def _run(run: RunBuilder) -> RunBuilder:
    """Startup [0,10]: ray [0,3], workers [3,8] (policy ranks load 4 s and 4.5 s), gap [8,10]."""
    d = run.process()
    job = d.span("rl.job", 0, 20, group="job")
    startup = d.span("rl.startup", 0, 10, parent=job, group="startup")
    d.span("rl.setup.ray", 0, 3, parent=startup, group="setup")
    d.span("rl.setup.workers", 3, 8, parent=startup, group="setup")
    d.step(1, 10, 20, parent=job)
    for rank, seconds in enumerate((4.0, 4.5)):
        w = run.process("policy", rank)
        w.span("rl.worker.load_model", 3.5, 3.5 + seconds, group="setup", **{"rl.backend": "dtensor"})
        w.span("rl.worker.load_model", 3.5, 4.0, group="setup", **{"rl.backend": "dtensor"})
    return run


def test_startup_is_the_time_before_the_first_step(run: RunBuilder):
    s = analyze(_run(run)).startup
    assert (s.wall_ns, s.startup_span_ns, s.unaccounted_ns) == (10 * SEC, 10 * SEC, 2 * SEC)


def test_setup_phases_form_a_waterfall_in_start_order(run: RunBuilder):
    s = analyze(_run(run)).startup
    assert [(p.phase, p.start_offset_ns, p.duration_ns) for p in s.phases] == [
        ("ray", 0, 3 * SEC), ("workers", 3 * SEC, 5 * SEC)]
    assert [(t.phase, t.duration_ns) for t in s.phase_totals] == [("ray", 3 * SEC), ("workers", 5 * SEC)]


def test_load_model_keeps_each_ranks_longest_load_and_the_groups_slowest_rank(run: RunBuilder):
    s = analyze(_run(run)).startup
    assert [(x.rank, x.start_offset_ns, x.duration_ns, x.backend) for x in s.load_model] == [
        (0, 3.5 * SEC, 4 * SEC, "dtensor"), (1, 3.5 * SEC, 4.5 * SEC, "dtensor")]
    (group,) = s.load_model_groups
    assert (group.worker_group, group.ranks, group.max_ns, group.max_rank) == ("policy", 2, 4.5 * SEC, 1)


def test_overlapping_setup_phases_are_not_counted_twice_in_unaccounted(run: RunBuilder):
    d = run.process()
    d.span("rl.setup.a", 0, 6, group="setup")
    d.span("rl.setup.b", 2, 8, group="setup")
    d.step(1, 10, 11)
    assert analyze(run).startup.unaccounted_ns == 2 * SEC


def test_a_setup_phase_running_past_the_first_step_counts_only_until_it(run: RunBuilder):
    d = run.process()
    d.span("rl.setup.warmup", 0, 12, group="setup")
    d.step(1, 10, 20)
    assert analyze(run).startup.unaccounted_ns == 0
