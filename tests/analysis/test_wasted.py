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


def test_a_step_without_a_number_is_no_restart(run: RunBuilder):
    """``step_span(samples_seen / batch)``: 1, 2, 3, then 3.5 and 4.5 after a partial batch,
    recorded without rl.step (truncated to 3 and 4 they read as a restart and waste)."""
    d = run.process()
    for start, number in ((0, 1), (10, 2), (20, 3), (30, 3.5), (40, 4.5)):
        if number % 1:
            s = d.span("rl.step", start, start + 10, group="step", **{"rl.step.value": number})
        else:
            s = d.step(int(number), start, start + 10)
        d.span("rl.train.policy", start, start + 10, parent=s, bucket="productive")
    report = analyze(run)
    assert report.wasted.restarts == 0 and report.wasted.superseded_steps == []
    assert report.summary.buckets.wasted_ns == 0
    assert [s.step for s in report.steps] == [1, 2, 3, -1, -1]
    assert report.summary.buckets.productive_ns == 50 * SEC


def _discard_run(run: RunBuilder) -> None:
    """Generation makes groups g1 (3 s) and g2 (2 s) in step 1; step 2 discards g1 as stale."""
    d = run.process()
    s1 = d.step(1, 0, 10)
    s2 = d.step(2, 10, 20)
    d.span("rl.train", 12, 18, parent=s2, bucket="productive")
    d.span("rl.discard", 11, 11, parent=s2, group="efficiency",
           **{"rl.discard.group_ids": ("g1", "g9"), "rl.discard.reason": "stale"})
    g = run.process("generation", 0)
    r1 = g.span("rl.rollout", 1, 4, parent=s1, group="rollout", **{"rl.group_id": "g1"})
    g.span("rl.generate", 1, 4, parent=r1, bucket="productive")
    g.span("rl.generate", 5, 7, parent=s1, bucket="productive", **{"rl.group_id": "g2"})


def test_discarded_work_moves_to_wasted_in_the_fleet_view(run: RunBuilder):
    """The generator's 3 s for g1 were productive when made; discarding them makes them waste."""
    _discard_run(run)
    report = analyze(run)
    (gen,) = [r for r in report.fleets.ranks if r.worker_group == "generation"]
    assert (gen.buckets.wasted_ns, gen.buckets.productive_ns) == (3 * SEC, 2 * SEC)


def test_discarded_work_counts_in_the_step_that_discarded_it(run: RunBuilder):
    _discard_run(run)
    report = analyze(run)
    assert report.wasted.by_step_ns == [0, 3 * SEC]
    assert [s.wasted_fleet_ns for s in report.steps] == [0, 3 * SEC]


def test_each_discard_call_is_reported_with_its_reason(run: RunBuilder):
    _discard_run(run)
    (call,) = analyze(run).wasted.discarded
    assert (call.step, call.reason, call.groups, call.groups_found, call.work_ns) == (
        2, "stale", 2, 1, 3 * SEC)


def test_the_controller_partition_keeps_its_own_work(run: RunBuilder):
    """The trainer's 6 s of training in step 2 stay productive; only the discarded work moves."""
    _discard_run(run)
    report = analyze(run)
    assert report.steps[1].buckets.productive_ns == 6 * SEC


def test_discard_survives_the_store_round_trip(run: RunBuilder, tmp_path):
    from rlsight.analysis import analyze_run

    _discard_run(run)
    (call,) = analyze_run(run.write(tmp_path / "r")).wasted.discarded
    assert (call.reason, call.work_ns) == ("stale", 3 * SEC)


def _live_file(run_dir, proc, opened: float, starts=()) -> None:
    """A process's live file as the store writes it: its process line, then start records."""
    import json

    from _build import T0, ns

    r = proc.resource
    live = run_dir / "live"
    live.mkdir(exist_ok=True)
    lines = [{"record": "process", "timeUnixNano": str(T0 + ns(opened)), "heartbeatS": 10.0, "resource": r}]
    lines += [{"record": "start", "traceId": s.trace_id, "spanId": s.span_id, "name": s.name,
               "group": "generation", "startTimeUnixNano": str(s.start_ns), "threadId": 1,
               "parentSpanId": s.parent_span_id} for s in starts]
    path = live / f"{r['rl.worker_group']}-{r['rl.rank']}-{r['process.pid']}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_a_call_lost_with_a_process_ray_replaced_is_wasted_in_the_callers_step(run: RunBuilder, tmp_path):
    """Drill: generation/0 SIGKILLed 1 s into a 2 s generate, Ray restarted it and the driver's
    call ran again: the driver's step 4 (6.7 s, median 2.2 s) read 100% productive. The wait
    from the lost span's start to the replacement's start is wasted; the retry is productive."""
    from rlsight.analysis import analyze_run

    d = run.process()
    step = d.step(1, 0, 10)
    call = d.span("rl.rollout.generate", 0, 10, parent=step, bucket="productive")
    dead = run.process("generation", 0, pid=1)
    new = run.process("generation", 0, pid=2)
    lost = dead.span("rl.rollout.generate", 0.5, 99, parent=call, bucket="productive")  # never ends
    new.span("rl.rollout.generate", 6, 10, parent=call, bucket="productive")
    dead.spans.remove(lost.record)
    run_dir = run.write(tmp_path / "run")
    _live_file(run_dir, d, 0)
    _live_file(run_dir, dead, 0, [lost.record])
    _live_file(run_dir, new, 4)
    report = analyze_run(run_dir)
    (row,) = report.steps
    assert row.buckets.wasted_ns == int(3.5 * SEC)  # 0.5 s .. 4 s, the replacement's start
    assert row.buckets.productive_ns == int(6.5 * SEC)
    assert [w.name for w in report.wasted.by_name] == ["rl.efficiency.wasted.lost_worker"]
    assert any(n.startswith("1 span(s) of a replaced process") for n in report.notes)
    assert report.summary.goodput_pct == 65.0
    # Without a replacement (the worker died with the run) nothing is charged: it was not redone.
    (run_dir / "live" / "generation-0-2.jsonl").unlink()
    (run_dir / "traces" / "generation-0-2.jsonl").unlink()
    assert analyze_run(run_dir).steps[0].buckets.wasted_ns == 0


def _two_workers_lost_in_one_call(run: RunBuilder, tmp_path, *, twice: bool = False):
    """Two generation ranks SIGKILLed inside one driver call (0.5 s in), both replaced at 4 s."""
    d = run.process()
    step = d.step(1, 0, 10)
    call = d.span("rl.rollout.generate", 0, 10, parent=step, bucket="productive")
    pairs = []
    for rank, (old, new) in enumerate([(1, 2), (3, 4)]):
        dead, repl = run.process("generation", rank, pid=old), run.process("generation", rank, pid=new)
        lost = dead.span("rl.rollout.generate", 0.5, 99, parent=call, bucket="productive")
        dead.spans.remove(lost.record)
        repl.span("rl.rollout.generate", 6, 10, parent=call, bucket="productive")
        pairs.append((dead, repl, lost))
    run_dir = run.write(tmp_path / "run")
    _live_file(run_dir, d, 0)
    for dead, repl, lost in pairs:
        _live_file(run_dir, dead, 0, [lost.record] * (2 if twice else 1))
        _live_file(run_dir, repl, 4)
    return run_dir


def test_two_workers_lost_in_one_call_are_one_wait(run: RunBuilder, tmp_path):
    """Review: one synthetic span per lost span gave two overlapping 3.5 s spans under the same
    call: the step counted 3.5 s once, but wasted-by-name said 7.0 s (more than the total)."""
    from rlsight.analysis import analyze_run

    report = analyze_run(_two_workers_lost_in_one_call(run, tmp_path))
    assert report.wasted.by_step_ns == [int(3.5 * SEC)]
    assert [(w.name, w.spans, w.total_ns) for w in report.wasted.by_name] == [
        ("rl.efficiency.wasted.lost_worker", 1, int(3.5 * SEC))]
    assert any(n.startswith("2 span(s) of a replaced process") for n in report.notes)


def test_lost_work_is_not_counted_as_spans_read(run: RunBuilder, tmp_path):
    """The report's own spans partition time but were not read: the summary counted them as read
    (6 where the files held 4), and the volume per step in the efficiency group."""
    import json

    from rlsight.analysis import analyze_run

    run_dir = _two_workers_lost_in_one_call(run, tmp_path)
    in_files = sum(len(ss["spans"]) for f in (run_dir / "traces").glob("*.jsonl")
                   for line in f.read_text().splitlines()
                   for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"])
    report = analyze_run(run_dir)
    assert report.summary.spans == in_files == 4
    assert report.steps[0].spans == 4  # the step, the call and the two retries
    assert "efficiency" not in {g.group for g in report.volume.groups}


def test_a_start_record_listed_twice_is_one_lost_span(run: RunBuilder, tmp_path):
    from rlsight.analysis import analyze_run

    report = analyze_run(_two_workers_lost_in_one_call(run, tmp_path, twice=True))
    assert any(n.startswith("2 span(s) of a replaced process") for n in report.notes), report.notes
    assert report.wasted.by_step_ns == [int(3.5 * SEC)]


def test_work_lost_under_an_umbrella_caller_is_not_charged(run: RunBuilder, tmp_path):
    """Async layout: a producer thread dispatches with the job's context, so the lost span's
    parent is rl.job, while the driver's main thread trained and checkpointed: charging the
    wait under rl.job relabelled the checkpoint at 19-20 s (and step 2's training) as wasted."""
    from rlsight.analysis import analyze_run

    d = run.process()
    job = d.span("rl.job", 0, 30, group="job")
    for k in range(3):
        step = d.step(k + 1, 10 * k, 10 * k + 9, parent=job)
        d.span("rl.train.policy", 10 * k, 10 * k + 8, parent=step, bucket="productive")
        d.span("rl.checkpoint.save", 10 * k + 9, 10 * k + 10, parent=job, bucket="overhead")
    dead, new = run.process("generation", 0, pid=1), run.process("generation", 0, pid=2)
    lost = dead.span("rl.generation.sample", 12, 99, parent=job, bucket="productive")
    dead.spans.remove(lost.record)
    new.span("rl.generation.sample", 23, 25, parent=job, bucket="productive")
    run_dir = run.write(tmp_path / "run")
    _live_file(run_dir, d, 0)
    _live_file(run_dir, dead, 0, [lost.record])
    _live_file(run_dir, new, 22)
    report = analyze_run(run_dir)
    assert report.summary.buckets.overhead_ns == 3 * SEC
    assert [s.buckets.wasted_ns for s in report.steps] == [0, 0, 0]
    assert report.wasted.by_name == []
