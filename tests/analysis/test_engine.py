"""Engine tokens per step from the rl.engine.generation_tokens metric."""

from __future__ import annotations

import pytest
from _build import SEC, T0, RunBuilder, analyze

from rlsight.store import MetricPoint


def _point(step: int, value: float, *, time_s: float, engine: str = "generation/0",
           temporality: int = 2, name: str = "rl.engine.generation_tokens",
           **attributes: object) -> MetricPoint:
    return MetricPoint(
        name=name, kind="sum", unit="{token}", time_ns=T0 + int(time_s * SEC),
        start_time_ns=T0, attributes={"rl.step": step, "rl.engine.name": engine, **attributes},
        resource={"service.instance.id": "run1/generation/0/1"}, value=value, is_monotonic=True,
        temporality=temporality,
    )


def _run(run: RunBuilder) -> RunBuilder:
    d = run.process()
    d.step(1, 0, 10)
    d.step(2, 10, 30)
    return run


def test_cumulative_points_keep_each_steps_last_value_and_sum_engines(run: RunBuilder):
    points = [_point(1, 500, time_s=5), _point(1, 1000, time_s=12), _point(1, 1000, time_s=20),
              _point(1, 3000, time_s=12, engine="generation/1"), _point(2, 4000, time_s=30)]
    engine = analyze(_run(run), metrics=points).engine
    assert engine is not None
    assert [(s.step, s.tokens, s.tokens_per_s) for s in engine.steps] == [
        (1, 4000.0, pytest.approx(400.0)), (2, 4000.0, pytest.approx(200.0))]


def test_delta_points_are_summed(run: RunBuilder):
    points = [_point(1, 100, time_s=5, temporality=1), _point(1, 100, time_s=6, temporality=1)]
    engine = analyze(_run(run), metrics=points).engine
    assert engine is not None and engine.steps[0].tokens == 200.0


def test_no_engine_metric_gives_no_engine_section(run: RunBuilder):
    assert analyze(_run(run)).engine is None


def test_request_outcomes_are_run_totals_and_absent_preemptions_stay_none(run: RunBuilder):
    finish = "rl.engine.finish_reason"
    success = "rl.engine.request.success"
    points = [
        _point(1, 100, time_s=5),
        _point(1, 9, time_s=5, name=success, **{finish: "stop"}),
        _point(2, 9, time_s=25, name=success, **{finish: "stop"}),
        _point(2, 2, time_s=25, name=success, **{finish: "length"}),
    ]
    engine = analyze(_run(run), metrics=points).engine
    assert engine is not None
    assert engine.finished == {"stop": 18.0, "length": 2.0}
    assert list(engine.finished) == ["stop", "length"]  # largest first
    assert engine.preemptions is None  # not reported is not zero


def test_preemptions_are_summed_over_steps_and_engines(run: RunBuilder):
    points = [_point(1, 100, time_s=5),
              _point(1, 2, time_s=5, name="rl.engine.preemptions"),
              _point(2, 3, time_s=25, name="rl.engine.preemptions", engine="generation/1")]
    engine = analyze(_run(run), metrics=points).engine
    assert engine is not None and engine.preemptions == 5.0
