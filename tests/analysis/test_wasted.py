"""Wasted work: wasted-bucket spans per step across timelines, by name."""

from __future__ import annotations

from _build import SEC, RunBuilder, analyze


def test_wasted_spans_on_every_timeline_are_summed_per_step(run: RunBuilder):
    """Driver discards 1 s in step 1; a worker aborts 2 s (its own trace, by time) in step 2."""
    d = run.process()
    s1 = d.step(1, 0, 10)
    d.step(2, 10, 20)
    d.span("rl.efficiency.wasted.stale_discard", 2, 3, parent=s1, bucket="wasted")
    w = run.process("generation", 0)
    abort = w.span("rl.efficiency.wasted.aborted_rollout", 12, 14, bucket="wasted")
    w.span("nested_wasted", 12, 13, parent=abort, bucket="wasted")
    report = analyze(run)
    assert report.wasted.by_step_ns == [1 * SEC, 2 * SEC]
    assert [s.wasted_fleet_ns for s in report.steps] == [1 * SEC, 2 * SEC]
    assert [(w.name, w.spans, w.total_ns) for w in report.wasted.by_name] == [
        ("rl.efficiency.wasted.aborted_rollout", 1, 2 * SEC),
        ("nested_wasted", 1, 1 * SEC),
        ("rl.efficiency.wasted.stale_discard", 1, 1 * SEC),
    ]


def test_a_step_number_repeating_counts_as_a_restart(run: RunBuilder):
    d = run.process()
    for start, number in ((0, 1), (10, 2), (20, 2), (30, 3)):
        d.step(number, start, start + 10)
    report = analyze(run)
    assert report.wasted.restarts == 1 and report.wasted.superseded_steps == [1]
    assert report.summary.buckets.wasted_ns == 10 * SEC
