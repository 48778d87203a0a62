"""The terminal report: the UX layout, in plain text when not on a terminal."""

from __future__ import annotations

import io

from _build import RunBuilder, analyze
from _sample import sample_run
from rich.console import Console

from rlsight.render.table import render_report


def _text(run: RunBuilder) -> str:
    out = io.StringIO()
    render_report(analyze(run), Console(file=out, width=140, highlight=False))
    return out.getvalue()


def test_the_summary_line_names_run_wall_steps_and_goodput():
    first = _text(sample_run()).splitlines()[0]
    assert first.startswith("run run<1>  grpo  wall 1m00s  steps 5  goodput ")
    assert first.endswith("(driver timeline)")


def test_startup_lists_phases_and_the_slowest_model_load():
    text = _text(sample_run())
    assert "startup 0m05s: ray 0m02s | workers 0m02s (load_model max 0m03s on policy/2)" in text


def test_the_per_step_row_shows_median_and_p90_of_every_bucket():
    text = _text(sample_run())
    row = next(line for line in text.splitlines() if line.strip().startswith("rl.step"))
    assert row.split() == ["rl.step", "6.0/6.0", "1.0/1.0", "1.0/1.0", "0.0/0.0", "2.0/2.0", "10.0/10.0"]
    assert "top overhead:  rl.refit 1.0" in text


def test_fleets_and_stragglers_are_listed():
    text = _text(sample_run())
    assert any(line.split()[:3] == ["policy", "3", "6"] for line in text.splitlines())
    assert "step 4: policy/2 rl.train.policy 7.00s vs median 4.00s (+75%" in text


def _crawling_run(steps: int = 8) -> RunBuilder:
    """Three policy ranks; rank 2 takes three times as long in every step (a drill's crawl)."""
    run = RunBuilder()
    d = run.process()
    ranks = [run.process("policy", r) for r in range(3)]
    for n in range(steps):
        t = 10 * n
        step = d.step(n + 1, t, t + 8)
        for r, w in enumerate(ranks):
            fb = w.span("rl.train.policy", t, t + (6 if r == 2 else 2), parent=step,
                        bucket="productive", group="training")
            w.span("rl.train.forward_backward", t, t + (5.9 if r == 2 else 1.9), parent=fb,
                   group="training")
    return run


def test_a_rank_slow_in_every_step_is_one_line_that_names_it_with_its_share_of_steps():
    """A crawling rank read as one line per step ("step 1: policy/2 ...", "step 2: policy/2
    ...", "... 10 more"); it is one line saying in how many steps, and how much slower."""
    lines = [x for x in _text(_crawling_run()).splitlines() if x.startswith(("stragglers", "    "))]
    straggler_lines = [x for x in lines if "policy/2" in x]
    assert straggler_lines == [
        "stragglers   policy/2 slower in 8/8 step(s): rl.train.policy 6.00s vs median 2.00s "
        "(+200%) and 1 more span name(s)"]


def test_a_straggler_line_shows_milliseconds_apart():
    """Two durations 0.1 s apart print distinguishably, not as "0.1s vs median 0.1s" (#9.6)."""
    from rlsight.render._format import short_time

    assert (short_time(0.1234e9), short_time(0.0541e9)) == ("123ms", "54.1ms")


def test_markup_in_names_is_printed_literally():
    """A worker group named like rich markup must not restyle or vanish."""
    run = RunBuilder()
    run.process().step(1, 0, 10)
    run.process("[bold]odd[/bold]", 0).span("x", 0, 1, bucket="productive")
    assert "[bold]odd[/bold]" in _text(run)


def test_skipped_records_and_notes_are_reported():
    run = RunBuilder()
    run.process().span("train", 0, 1, bucket="productive")
    text = _text(run)
    assert "0 record(s) skipped" in text
    assert "note         no rl.step spans" in text


def test_the_engine_line_shows_preemptions_and_finish_reasons():
    from rlsight.analysis.model import Engine, EngineStep
    from rlsight.render._format import engine_outcomes

    engine = Engine("rl.engine.generation_tokens", [EngineStep(0, 1, 100.0, 10.0)],
                    preemptions=0.0, finished={"stop": 93.0, "length": 7.0})
    assert engine_outcomes(engine) == ", preemptions 0, finish: stop 93% length 7%"
    assert engine_outcomes(Engine("rl.engine.generation_tokens", [])) == ""


def test_wasted_work_under_a_second_is_not_printed_as_zero():
    """40 ms wasted in 0.1 s steps printed as "0.0s of wasted work" (reviewer r1)."""
    run = RunBuilder()
    driver = run.process()
    step = driver.step(1, 0, 0.1)
    driver.span("rl.efficiency.wasted.stale", 0.02, 0.06, parent=step, bucket="wasted")
    assert "wasted       0.040s of wasted work on all ranks" in _text(run)


def test_a_run_that_hung_then_was_killed_says_so_on_its_first_line():
    """The hang drill: 5 steps in 0m06s, then step 6 hung 0m58s until a SIGKILL; the first line
    read 'wall 0m06s  steps 5' as if the run had been six seconds long and ended."""
    import dataclasses

    from _build import SEC

    from rlsight.analysis.model import OpenSpan, PostMortem, ProcessState

    report = analyze(sample_run())
    end = report.summary.end_unix_ns

    def opened(name: str, chain: list[str], step: int | None = None) -> OpenSpan:
        return OpenSpan(name=name, group=None, trace_id="t", span_id=name, parent_span_id=None,
                        thread=1, start_unix_ns=end, age_ns=58 * SEC, chain=chain, step=step,
                        median_ns=None, threshold_ns=0.0, stalled=False)

    step = opened("rl.step", ["rl.job"], step=6)
    driver = ProcessState("p", "driver", 0, 1, None, False, [opened("rl.job", []), step], step,
                          False, None, None, last_heard_unix_ns=end + 58 * SEC)
    pm = PostMortem(as_of_unix_ns=end + 58 * SEC, open_spans=2, processes=[driver], unclean=1)
    out = io.StringIO()
    render_report(dataclasses.replace(report, postmortem=pm), Console(file=out, width=200, highlight=False))
    first = out.getvalue().splitlines()[0]
    assert first.endswith("(driver timeline); then step 6 open 0m58s, never ended (see open at end)")


def test_the_first_line_says_when_a_silent_drivers_step_started_and_skips_steps_that_ended():
    """A driver frozen (GIL held) 0.15 s into step 6 and killed 8 s later: its step is aged to
    its last heartbeat (nothing), so the line says when it started (it read 'open 0.00s'). A
    step number that finished in another attempt, or one a replaced process held, never hung."""
    import dataclasses

    from _build import SEC

    from rlsight.analysis.model import OpenSpan, PostMortem, ProcessState

    report = analyze(sample_run())
    end = report.summary.end_unix_ns
    last = max(s.step for s in report.steps)

    def step_open(n: int) -> OpenSpan:
        return OpenSpan(name="rl.step", group=None, trace_id="t", span_id=f"s{n}", parent_span_id=None,
                        thread=1, start_unix_ns=end, age_ns=0, chain=["rl.job"], step=n,
                        median_ns=None, threshold_ns=0.0, stalled=False)

    def first_line(*procs: ProcessState) -> str:
        pm = PostMortem(as_of_unix_ns=end + 8 * SEC, open_spans=1, processes=list(procs), unclean=1)
        out = io.StringIO()
        console = Console(file=out, width=200, highlight=False)
        render_report(dataclasses.replace(report, postmortem=pm), console)
        return out.getvalue().splitlines()[0]

    frozen = ProcessState("p", "driver", 0, 1, None, False, [step_open(last + 1)], step_open(last + 1),
                          False, None, None, silent=True, last_heard_unix_ns=end)
    assert first_line(frozen).endswith(f"; then step {last + 1} started 0m08s before the end, never "
                                       "ended (see open at end)")
    ended = dataclasses.replace(frozen, open=[step_open(last)], innermost=step_open(last))
    replaced = dataclasses.replace(frozen, replaced_by_pid=2)
    for proc in (ended, replaced):
        assert "then step" not in first_line(proc)
