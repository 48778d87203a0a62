"""Which step a span belongs to: trace ancestry first, then time."""

from __future__ import annotations

import numpy as np
from _build import RunBuilder, analyze
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.analysis._steps import _by_time


def _steps_of(run: RunBuilder) -> dict[str, list[int]]:
    """Span counts per step index, by span group (through the volume per-step counts)."""
    return {g.group: g.per_step for g in analyze(run).volume.groups}


def test_a_span_under_a_step_belongs_to_it_whatever_its_time(run: RunBuilder):
    d = run.process()
    s1 = d.step(1, 0, 10)
    d.step(2, 10, 20)
    d.span("late_child", 12, 13, parent=s1, group="a")
    assert _steps_of(run)["a"] == [1, 0]


def test_a_span_in_another_trace_belongs_to_the_step_it_starts_in(run: RunBuilder):
    run.process().step(1, 0, 10)
    run.process().step(2, 10, 20)
    run.process("policy", 0).span("worker_root", 11, 25, group="a")
    assert _steps_of(run)["a"] == [0, 1]


def test_a_span_that_starts_just_before_a_step_and_ends_in_it_belongs_to_it(run: RunBuilder):
    """Clock skew between hosts: the worker's span starts 0.5 s before the step it serves."""
    d = run.process()
    d.step(1, 0, 10)
    d.step(2, 12, 20)
    run.process("policy", 0).span("skewed", 11.5, 15, group="a")
    assert _steps_of(run)["a"] == [0, 1]


def test_a_span_enclosing_steps_belongs_to_none(run: RunBuilder):
    d = run.process()
    d.span("rl.job", 0, 30, group="job")
    d.step(1, 5, 10)
    d.step(2, 10, 20)
    groups = {g.group: g for g in analyze(run).volume.groups}
    assert groups["job"].per_step == [0, 0] and groups["job"].outside_steps == 1


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 20), st.integers(0, 20),
       st.lists(st.tuples(st.integers(-5, 30), st.integers(-5, 30)), max_size=12))
def test_one_step_places_spans_by_time_as_the_search_over_several_does(a, b, spans):
    """The one-step shortcut (the driver's online rollup) against the general search, which a
    second step after every span's time leaves unchanged for the first."""
    start, end = min(a, b), max(a, b)
    s = np.asarray([x for x, _ in spans], np.int64)
    e = np.asarray([y for _, y in spans], np.int64)
    one = _by_time(np.asarray([start]), np.asarray([end]), s, e)
    two = _by_time(np.asarray([start, 100]), np.asarray([end, 101]), s, e)
    assert one.dtype == two.dtype and one.tolist() == two.tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 6), st.none()), min_size=1, max_size=12))
def test_steps_without_a_number_change_no_restart_nor_superseded_step(numbers):
    """``step_span(2.5)`` records an rl.step span without rl.step (None here): the restarts
    and superseded steps are those of the numbered steps alone, wherever those spans fall."""
    with_gaps, alone = RunBuilder(), RunBuilder()
    d, a = with_gaps.process(), alone.process()
    for k, number in enumerate(numbers):
        if number is None:
            d.span("rl.step", 10 * k, 10 * k + 10, group="step")
        else:
            d.step(number, 10 * k, 10 * k + 10)
            a.step(number, 10 * k, 10 * k + 10)
    got = analyze(with_gaps).wasted
    numbered = [k for k, n in enumerate(numbers) if n is not None]  # a step's index in with_gaps
    want = analyze(alone).wasted if numbered else None
    assert got.restarts == (want.restarts if want else 0)
    assert got.superseded_steps == ([numbered[i] for i in want.superseded_steps] if want else [])
