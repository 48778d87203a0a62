"""``diff_reports``: B minus A per bucket, span name, phase and fleet; honest about settings."""

from __future__ import annotations

import pytest
from _build import SEC, RunBuilder, analyze

from rlsight.analysis import RunReport
from rlsight.analysis.diff import diff_reports


def _run(run_id: str, *, train_delay: float = 0.0, refit_delay: float = 0.0, steps: int = 5,
         ranks: int = 2,
         refit: bool = True, span_groups: tuple[str, ...] | None = None) -> RunReport:
    """A driver that generates 1 s, ranks that train 1 s in parallel, the driver refits 1 s."""
    run = RunBuilder(run_id)
    driver = run.process("driver")
    workers = [run.process("policy", r) for r in range(ranks)]
    t = 0.0
    for i in range(steps):
        end = t + 2 + train_delay + (1 + refit_delay if refit else 0)
        step = driver.step(i, t, end)
        driver.span("rl.rollout.generate", t, t + 1, parent=step, bucket="productive", group="rollout")
        for w in workers:
            w.span("rl.train.policy", t + 1, t + 2 + train_delay, parent=step, bucket="productive")
        if refit:
            driver.span("rl.refit.push_weights", t + 2 + train_delay, end, parent=step, bucket="overhead")
        t = end + 0.5
    report = analyze(run)
    if span_groups is not None:
        from dataclasses import replace

        report = replace(report, summary=replace(report.summary, span_groups=list(span_groups)))
    return report


class TestChanges:
    def test_a_delay_in_one_phase_is_that_phases_change_with_its_sign_and_size(self) -> None:
        """Parallel ranks count once: 2 ranks each 0.4 s slower make the phase 0.4 s slower."""
        diff = diff_reports(_run("a"), _run("b", train_delay=0.4))
        top = diff.spans[0]
        assert top.name == "rl.train.policy"
        assert top.change_ns == pytest.approx(0.4 * SEC)
        assert top.change_pct == pytest.approx(40.0)
        others = {c.name: c.change_ns for c in diff.spans[1:]}
        assert others == {"rl.refit.push_weights": 0, "rl.rollout.generate": 0}
        assert diff.step_change_pct == pytest.approx(100 * 0.4 / 3)

    def test_the_reverse_comparison_has_the_opposite_sign(self) -> None:
        diff = diff_reports(_run("b", train_delay=0.4), _run("a"))
        assert diff.spans[0].change_ns == pytest.approx(-0.4 * SEC)
        assert diff.step_change_pct == pytest.approx(-100 * 0.4 / 3.4)

    def test_buckets_name_the_span_that_moved_them(self) -> None:
        diff = diff_reports(_run("a"), _run("b", refit_delay=0.3))
        by_bucket = {b.change.name: b for b in diff.buckets}
        assert by_bucket["overhead"].change.change_ns == pytest.approx(0.3 * SEC)
        assert by_bucket["overhead"].driver == "rl.refit.push_weights"
        assert by_bucket["overhead"].driver_change_ns == pytest.approx(0.3 * SEC)
        assert by_bucket["productive"].change.change_ns == 0
        assert by_bucket["productive"].driver is None
        assert by_bucket["wall"].change.change_ns == pytest.approx(0.3 * SEC)

    def test_a_slower_worker_shows_as_the_controllers_unattributed_wait(self) -> None:
        """The buckets are the controller's timeline: it waits (unattributed) on slow ranks."""
        diff = diff_reports(_run("a"), _run("b", train_delay=0.4))
        by_bucket = {b.change.name: b.change for b in diff.buckets}
        assert by_bucket["unattributed"].change_ns == pytest.approx(0.4 * SEC)
        assert by_bucket["productive"].change_ns == 0

    def test_identical_runs_have_no_change_anywhere(self) -> None:
        diff = diff_reports(_run("a"), _run("a"))
        assert diff.step_change_pct == 0
        assert all(c.change_ns == 0 for c in diff.spans)
        assert all(b.change.change_ns == 0 for b in diff.buckets)
        assert all(v.change == 0 for v in (*diff.fleets, *diff.volume, *diff.startup))
        assert diff.notes == []

    def test_fleet_utilisation_and_volume_are_compared_per_group(self) -> None:
        diff = diff_reports(_run("a", ranks=2), _run("b", ranks=2, train_delay=1.0))
        fleets = {f.name: f for f in diff.fleets}
        assert set(fleets) == {"driver", "policy"}
        assert fleets["policy"].change is not None and fleets["policy"].change > 0
        volume = {v.name: v for v in diff.volume}
        assert volume["all"].a == volume["all"].b


class TestSettings:
    def test_a_group_only_one_run_recorded_is_listed_not_compared(self) -> None:
        diff = diff_reports(_run("a"), _run("b", refit=False))
        assert diff.spans_only_in_a == ["rl.refit.push_weights"]
        assert "rl.refit.push_weights" not in {c.name for c in diff.spans}
        assert any("only A recorded refit" in n for n in diff.notes)
        assert any("overhead" in n and "settings" in n for n in diff.notes)

    def test_same_settings_do_not_blame_the_settings(self) -> None:
        """Both runs per_step, one emits no refit: the code differs, not the settings (reviewer r1)."""
        diff = diff_reports(_run("a", span_groups=("per_step",)),
                            _run("b", refit=False, span_groups=("per_step",)))
        assert any("with the same span-group settings" in n for n in diff.notes)
        assert not any("settings, not the run" in n for n in diff.notes)
        assert any("comes from the instrumented code" in n for n in diff.notes)

    def test_different_configured_specs_are_said(self) -> None:
        diff = diff_reports(_run("a", span_groups=("per_step",)), _run("b", span_groups=("all",)))
        assert any("span-group settings differ: A per_step vs B all" in n for n in diff.notes)


class TestJson:
    def test_the_document_round_trips_through_json_and_reports_read_back(self) -> None:
        import json

        a = RunReport.from_dict(json.loads(json.dumps(_run("a").to_dict())))
        doc = diff_reports(a, _run("b", train_delay=0.4)).to_dict()
        assert doc["schema_version"] == 1
        assert json.loads(json.dumps(doc, allow_nan=False)) == doc
        assert doc["spans"][0]["name"] == "rl.train.policy"


def _crawl(run_id: str, slow_rank: int | None) -> RunReport:
    """Three policy ranks for six steps; ``slow_rank`` takes three times as long in each."""
    run = RunBuilder(run_id)
    driver = run.process("driver")
    workers = [run.process("policy", r) for r in range(3)]
    for i in range(6):
        t = 10.0 * i
        step = driver.step(i, t, t + 4)
        for r, w in enumerate(workers):
            w.span("rl.train.policy", t, t + (3 if r == slow_rank else 1), parent=step,
                   bucket="productive")
    return analyze(run)


def test_a_rank_that_crawls_only_in_b_is_named_with_its_steps_in_each_run() -> None:
    """The diff said 'findings 0 -> 6': the one thing a user needs, which rank, was missing."""
    diff = diff_reports(_crawl("healthy", None), _crawl("crawl", 2))
    assert [(v.name, v.a, v.b, v.change) for v in diff.straggler_ranks] == [("policy/2", 0, 6, 6)]
    from rlsight.render.diff import diff_sections

    (section,) = [s for s in diff_sections(diff) if s.title == "stragglers"]
    assert ["policy/2 (steps)", "0", "6", "+6"] in section.rows
