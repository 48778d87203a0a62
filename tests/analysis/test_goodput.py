"""The rollup on hand-built traces whose answers are worked out by hand in the docstrings."""

from __future__ import annotations

from _build import SEC, RunBuilder, analyze


def _step_seconds(report, index: int = 0) -> dict[str, float]:
    b = report.steps[index].buckets
    return {name: b.get(name) / SEC
            for name in ("productive", "overhead", "idle", "wasted", "unattributed", "wall")}


class TestNesting:
    def test_nested_overhead_inside_productive_takes_its_own_interval(self, run: RunBuilder):
        """step [0,10]; train (productive) [1,9]; ckpt (overhead, child of train) [3,5]."""
        d = run.process()
        step = d.step(1, 0, 10)
        train = d.span("train", 1, 9, parent=step, bucket="productive")
        d.span("ckpt", 3, 5, parent=train, bucket="overhead", group="checkpoint")
        assert _step_seconds(analyze(run)) == {
            "productive": 6, "overhead": 2, "idle": 0, "wasted": 0, "unattributed": 2, "wall": 10}

    def test_a_wait_inside_a_step_counts_as_idle(self, run: RunBuilder):
        """step [0,10]; generate [0,6] productive; buffer starvation [6,9] idle."""
        d = run.process()
        step = d.step(1, 0, 10)
        d.span("generate", 0, 6, parent=step, bucket="productive", group="generation")
        d.span("rl.efficiency.idle.buffer_starvation", 6, 9, parent=step, bucket="idle",
               group="efficiency", **{"rl.efficiency.category": "idle/buffer_starvation"})
        report = analyze(run)
        assert _step_seconds(report) == {
            "productive": 6, "overhead": 0, "idle": 3, "wasted": 0, "unattributed": 1, "wall": 10}
        idle = [c for c in report.top if c.bucket == "idle"]
        assert [(c.name, c.attributed_ns, c.steps_present) for c in idle] == [
            ("rl.efficiency.idle.buffer_starvation", 3 * SEC, 1)]

    def test_a_deeper_idle_span_wins_over_its_productive_parent(self, run: RunBuilder):
        """Depth decides before bucket: a wait nested in training is a wait."""
        d = run.process()
        step = d.step(1, 0, 10)
        train = d.span("train", 0, 10, parent=step, bucket="productive")
        d.span("barrier", 4, 7, parent=train, bucket="idle")
        assert _step_seconds(analyze(run))["idle"] == 3

    def test_unbucketed_umbrella_ancestors_count_towards_depth(self, run: RunBuilder):
        """An overhead span under an umbrella (depth 2) beats an overlapping productive one at depth 1."""
        d = run.process()
        step = d.step(1, 0, 10)
        d.span("train", 0, 10, parent=step, bucket="productive")
        rollout = d.span("rl.rollout", 2, 8, parent=step, group="rollout")
        d.span("refit", 3, 5, parent=rollout, bucket="overhead")
        assert _step_seconds(analyze(run)) == {
            "productive": 8, "overhead": 2, "idle": 0, "wasted": 0, "unattributed": 0, "wall": 10}

    def test_a_span_whose_parent_is_missing_is_not_treated_as_a_root(self, run: RunBuilder):
        """An orphan is at least one level deep, so it beats a root-level span it overlaps."""
        d = run.process()
        d.step(1, 0, 10)
        d.span("root_train", 0, 10, bucket="productive")
        lost = d.span("lost_parent", 0, 0)
        d.span("orphan_refit", 2, 4, parent=lost, bucket="overhead")
        d.spans.remove(lost.record)
        report = analyze(run)
        assert report.summary.buckets.overhead_ns == 2 * SEC
        assert any("parent is not in the store" in n for n in report.notes)


class TestConcurrency:
    def test_equal_depth_overlap_goes_to_productive(self, run: RunBuilder):
        """Two tasks under one rollout: generate [0,4] productive, refit [2,6] overhead."""
        d = run.process()
        step = d.step(1, 0, 10)
        rollout = d.span("rl.rollout", 0, 8, parent=step, group="rollout")
        d.span("generate", 0, 4, parent=rollout, bucket="productive")
        d.span("refit", 2, 6, parent=rollout, bucket="overhead")
        assert _step_seconds(analyze(run)) == {
            "productive": 4, "overhead": 2, "idle": 0, "wasted": 0, "unattributed": 4, "wall": 10}

    def test_equal_depth_overlap_ranks_wasted_above_overhead_above_idle(self, run: RunBuilder):
        d = run.process()
        step = d.step(1, 0, 10)
        d.span("discard", 0, 4, parent=step, bucket="wasted")
        d.span("refit", 2, 8, parent=step, bucket="overhead")
        d.span("wait", 6, 10, parent=step, bucket="idle")
        assert _step_seconds(analyze(run)) == {
            "productive": 0, "overhead": 4, "idle": 2, "wasted": 4, "unattributed": 0, "wall": 10}

    def test_concurrent_spans_never_take_part_in_the_partition(self, run: RunBuilder):
        """A background collector tagged rl.concurrent spans the whole step and changes nothing."""
        d = run.process()
        step = d.step(1, 0, 10)
        d.span("train", 2, 5, parent=step, bucket="productive")
        d.span("collector", 0, 10, parent=step, bucket="productive", concurrent=True)
        d.span("collector.put", 6, 9, parent=step, bucket="overhead", concurrent=True)
        assert _step_seconds(analyze(run)) == {
            "productive": 3, "overhead": 0, "idle": 0, "wasted": 0, "unattributed": 7, "wall": 10}


class TestBucketScope:
    def test_validation_generation_under_bucket_scope_is_overhead(self, run: RunBuilder):
        """bucket_scope(overhead) writes rl.bucket=overhead on the generation group's spans."""
        d = run.process()
        step = d.step(1, 0, 10)
        d.span("generate", 0, 4, parent=step, bucket="productive", group="generation")
        validate = d.span("validate", 5, 9, parent=step, bucket="overhead", group="validation")
        d.span("generate", 5, 8, parent=validate, bucket="overhead", group="generation")
        report = analyze(run)
        assert _step_seconds(report) == {
            "productive": 4, "overhead": 4, "idle": 0, "wasted": 0, "unattributed": 2, "wall": 10}
        overhead = {(c.name, c.attributed_ns) for c in report.top if c.bucket == "overhead"}
        assert overhead == {("generate", 3 * SEC), ("validate", 1 * SEC)}


class TestRun:
    def test_run_buckets_cover_startup_and_gaps_as_unattributed(self, run: RunBuilder):
        """job [0,30], steps [5,15] and [20,30] each with 8 s of training."""
        d = run.process()
        job = d.span("rl.job", 0, 30, group="job")
        for n, start in ((1, 5), (2, 20)):
            step = d.step(n, start, start + 10, parent=job)
            d.span("train", start, start + 8, parent=step, bucket="productive")
        report = analyze(run)
        b = report.summary.buckets
        assert (b.productive_ns, b.unattributed_ns, b.wall_ns) == (16 * SEC, 14 * SEC, 30 * SEC)
        assert report.summary.goodput_pct == 100 * 16 / 30
        assert report.summary.step_goodput_pct == 100 * 16 / 20

    def test_only_controller_timelines_count_in_the_run_partition(self, run: RunBuilder):
        """A worker computing all run long does not make the driver's idle time productive."""
        d = run.process()
        d.step(1, 0, 10)
        run.process("policy", 0).span("train", 0, 10, bucket="productive")
        assert analyze(run).summary.buckets.productive_ns == 0

    def test_a_restart_marks_the_redone_steps_superseded_and_wasted(self, run: RunBuilder):
        """Driver A runs steps 1-3 in [0,30] then dies; driver B redoes 2-3 and adds 4 in [40,70]."""
        for pid, steps in ((1, ((1, 0), (2, 10), (3, 20))), (2, ((2, 40), (3, 50), (4, 60)))):
            d = run.process(pid=pid)
            for number, start in steps:
                step = d.step(number, start, start + 10)
                d.span("train", start, start + 8, parent=step, bucket="productive")
        report = analyze(run)
        assert [(s.step, s.superseded) for s in report.steps] == [
            (1, False), (2, True), (3, True), (2, False), (3, False), (4, False)]
        assert report.wasted.restarts == 1
        assert report.wasted.superseded_steps == [1, 2]
        assert report.wasted.superseded_wall_ns == 20 * SEC
        b = report.summary.buckets
        assert (b.productive_ns, b.wasted_ns, b.unattributed_ns, b.wall_ns) == (
            32 * SEC, 20 * SEC, 18 * SEC, 70 * SEC)
        assert len(report.summary.controller_timelines) == 2
        assert report.summary.step_goodput_pct == 100 * 32 / 60

    def test_a_run_without_step_spans_says_so(self, run: RunBuilder):
        run.process().span("train", 0, 10, bucket="productive")
        report = analyze(run)
        assert report.steps == [] and report.step_summary is None
        assert report.summary.buckets.unattributed_ns == 10 * SEC
        assert any("no rl.step spans" in n for n in report.notes)

    def test_step_medians_and_p90_over_steps(self, run: RunBuilder):
        d = run.process()
        for n in range(10):
            step = d.step(n, 10 * n, 10 * n + 10)
            d.span("train", 10 * n, 10 * n + n, parent=step, bucket="productive")
        summary = analyze(run).step_summary
        assert summary is not None
        assert summary.productive.median_ns == 4.5 * SEC
        assert summary.productive.p90_ns == 8.1 * SEC
        assert summary.wall.median_ns == 10 * SEC
