"""The post-mortem: spans never ended and processes without a clean shutdown, after the fact."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.analysis.columns import span_columns_from_records
from rlsight.analysis.live import post_mortem, process_states
from rlsight.analysis.model import PostMortem
from rlsight.cli import EXIT_OK, main
from rlsight.render._format import postmortem_rows
from rlsight.store import SpanRecord
from rlsight.store._live import LiveProcess, LiveReadResult, StartRecord

_KILLED_DRIVER = textwrap.dedent("""
    import os, signal, sys, time
    from rlsight import RL, TelemetryConfig, job_span, setup_telemetry, span, startup_span, step_span
    setup_telemetry(TelemetryConfig(run_dir=sys.argv[1], span_groups=("all",)))
    with job_span():
        with startup_span():
            time.sleep(0.02)
        for i in range(1, 4):
            with step_span(i):
                with span(RL.TRAINING, "rl.train.policy"):
                    time.sleep(0.02)
                if i == 3:
                    with span(RL.REFIT, "rl.refit.push"):
                        time.sleep(0.3)  # six store intervals: the start records are on disk
                        os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_sigkilled_driver_still_gets_a_full_report_with_its_open_step(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", _KILLED_DRIVER, str(run_dir)], check=False, timeout=120)
    assert done.returncode == -signal.SIGKILL
    assert main(["report", str(run_dir), "--json", "--html", str(tmp_path / "r.html")]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["steps"] == 2  # the two finished steps are analysed as usual
    pm = doc["postmortem"]
    assert pm["unclean"] == 1
    (driver,) = pm["processes"]
    assert driver["worker_group"] == "driver" and driver["clean_shutdown"] is False
    open_spans = {o["name"]: o for o in driver["open"]}
    assert set(open_spans) == {"rl.job", "rl.step", "rl.refit.push"}
    assert open_spans["rl.step"]["step"] == 3
    assert driver["innermost"]["name"] == "rl.refit.push"
    assert driver["innermost"]["chain"] == ["rl.job", "rl.step 3"]
    html = (tmp_path / "r.html").read_text()
    assert "<h2>Open at end</h2>" in html and "rl.refit.push" in html
    assert main(["report", str(run_dir)]) == EXIT_OK
    text = capsys.readouterr().out
    assert "open at end  3 span(s) never ended on 1 process(es)" in text
    assert "driver/0" in text and "in rl.refit.push open" in text and "< rl.step 3 < rl.job" in text


def test_a_driver_that_hung_then_was_killed_shows_how_long_it_hung(tmp_path: Path, capsys) -> None:
    """The heartbeat is the last thing a hung process writes: the post-mortem ages its open span
    to it, not to the span's own start record (which read ``open 0.00s`` before heartbeats)."""
    run_dir = tmp_path / "run"
    script = _KILLED_DRIVER.replace("time.sleep(0.3)", "time.sleep(1.5)").replace(
        "import os, signal, sys, time\n",
        "import os, signal, sys, time\nimport rlsight.store._live as live\nlive.HEARTBEAT_S = 0.1\n")
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script, str(run_dir)], check=False, timeout=120)
    lived_ns = (time.monotonic() - began) * 1e9
    assert done.returncode == -signal.SIGKILL
    assert main(["report", str(run_dir), "--json"]) == EXIT_OK
    pm = json.loads(capsys.readouterr().out)["postmortem"]
    (driver,) = pm["processes"]
    assert driver["innermost"]["name"] == "rl.refit.push"
    assert 1.0e9 <= driver["innermost"]["age_ns"] <= lived_ns  # 1.5 s, less one heartbeat
    assert driver["silent"] is False  # it ran until the kill
    assert pm["as_of_unix_ns"] == driver["last_heard_unix_ns"]


def _dead_worker_post_mortem(dispatch: StartRecord, name: str, *, rank: int, started_s: int,
                             driver_heard_s: int) -> PostMortem | None:
    """The driver in ``dispatch`` heard until ``driver_heard_s``; a generation worker running
    ``name`` (started at ``started_s``, from ``dispatch``) last heard at 70 s."""
    worker = f"run/generation/{rank}/9"
    work = StartRecord(worker, "t", "0000000000000002", dispatch.span_id, name, "generation",
                       started_s * 10**9, 2)
    live = _live(dispatch, work)
    live.processes[_PROCESS] = dataclasses.replace(live.processes[_PROCESS], heartbeat_s=10.0,
                                                   alive_ns=driver_heard_s * 10**9)
    live.processes[worker] = LiveProcess(worker, {"service.instance.id": worker,
                                                  "rl.worker_group": "generation", "rl.rank": rank},
                                         opened_ns=0, heartbeat_s=10.0, alive_ns=70 * 10**9)
    return post_mortem(span_columns_from_records([]), live)


def test_a_worker_that_went_silent_mid_run_is_aged_to_its_last_heartbeat() -> None:
    """A worker killed while the driver kept waiting: its span is aged to its own last
    heartbeat and it is marked silent; the driver's to the end of the run."""
    dispatch = StartRecord(_PROCESS, "t", "0000000000000001", None, "rl.rollout", "rollout", 0, 1)
    pm = _dead_worker_post_mortem(dispatch, "rl.gen", rank=3, started_s=10, driver_heard_s=600)
    assert pm is not None and pm.as_of_unix_ns == 600 * 10**9
    states = {p.worker_group: p for p in pm.processes}
    gen, drv = states["generation"], states["trainer"]
    assert gen.silent and not drv.silent
    assert gen.innermost is not None and gen.innermost.age_ns == 60 * 10**9
    assert drv.innermost is not None and drv.innermost.age_ns == 600 * 10**9
    assert drv.waiting_on == ["generation/3"]
    rows = {p.worker_group: ended for p, ended, _ in postmortem_rows(pm)}
    assert rows["generation"] == "no clean shutdown, silent for the last 8m50s"
    assert rows["trainer"] == "no clean shutdown"


def test_a_worker_killed_after_its_last_heartbeat_says_when_its_span_started() -> None:
    """A worker that died between heartbeats, inside a span it started after the last one: its
    age to that heartbeat is nothing, so the row says when the span started instead of the
    ``open 0.00s`` it read (a drill: a generation worker os._exit-ed mid-step)."""
    dispatch = StartRecord(_PROCESS, "t", "0000000000000001", None, "rl.step", "step", 0, 1, step=6)
    pm = _dead_worker_post_mortem(dispatch, "rl.rollout.generate", rank=0, started_s=73,
                                  driver_heard_s=130)
    assert pm is not None
    rows = {p.worker_group: doing for p, _, doing in postmortem_rows(pm)}
    assert rows["generation"] == ("in rl.rollout.generate, started 0m57s before the end, "
                                  "after its last heartbeat < trainer/0: rl.step 6")
    assert rows["trainer"] == "in rl.step 6 open 2m10s; waiting on generation/0 (silent)"


def test_a_rank_that_ray_restarted_ages_the_dead_processs_span_to_its_replacement() -> None:
    """max_restarts=1: the first process of generation/0 died 0.3 s into a span, Ray started a
    second; the post-mortem read 'open 0m07s' for the dead one (aged to the end of the run,
    not yet silent), as if it had worked on until then beside its replacement."""
    sec = 10**9
    old, new = "run/generation/0/9", "run/generation/0/10"
    step = StartRecord(_PROCESS, "t", "0000000000000001", None, "rl.step", "step", 50 * sec, 1, step=6)
    work = StartRecord(old, "t", "0000000000000002", step.span_id, "rl.rollout.generate",
                       "generation", 52 * sec, 2)
    live = _live(step, work)
    driver = live.processes[_PROCESS]
    live.processes[_PROCESS] = dataclasses.replace(driver, heartbeat_s=10.0, alive_ns=70 * sec)
    identity = {"rl.worker_group": "generation", "rl.rank": 0}
    live.processes[old] = LiveProcess(old, {"service.instance.id": old, "process.pid": 9, **identity},
                                      opened_ns=0, heartbeat_s=10.0, alive_ns=50 * sec)
    live.processes[new] = LiveProcess(new, {"service.instance.id": new, "process.pid": 10, **identity},
                                      opened_ns=55 * sec, heartbeat_s=10.0, alive_ns=65 * sec)
    pm = post_mortem(span_columns_from_records([]), live)
    assert pm is not None
    states = {p.process: p for p in pm.processes}
    assert states[old].replaced_by_pid == 10 and states[new].replaced_by_pid is None
    assert states[old].innermost is not None and states[old].innermost.age_ns == 3 * sec
    rows = {p.process: (ended, doing) for p, ended, doing in postmortem_rows(pm)}
    assert rows[old] == ("no clean shutdown, replaced by pid 10",
                         "in rl.rollout.generate open 0m03s until its replacement started"
                         " < trainer/0: rl.step 6")
    # A dead process's span is not a stall, however low the floor: its replacement does the work.
    watched = {p.process: p for p in process_states(span_columns_from_records([]), live,
                                                    now_ns=70 * sec, min_age_s=0)}
    assert not watched[old].stalled and watched[old].replaced_by_pid == 10


def test_a_parent_in_another_process_is_named_with_its_rank_where_the_chain_crosses() -> None:
    """The hang drill: policy/1's parents read 'rl.train.policy < rl.train.policy < rl.step 6',
    two spans of one name with nothing to say the outer one is the driver's dispatch."""
    sec = 10**9
    worker = "run/policy/1/9"
    step = StartRecord(_PROCESS, "t", "0000000000000001", None, "rl.step", "step", 0, 1, step=6)
    outer = StartRecord(_PROCESS, "t", "0000000000000002", step.span_id, "rl.train.policy",
                        "training", 1 * sec, 1)
    inner = StartRecord(worker, "t", "0000000000000003", outer.span_id, "rl.train.policy",
                        "training", 2 * sec, 2)
    fb = StartRecord(worker, "t", "0000000000000004", inner.span_id, "rl.train.forward_backward",
                     "training", 2 * sec, 2)
    live = _live(step, outer, inner, fb)
    live.processes[_PROCESS] = dataclasses.replace(live.processes[_PROCESS], heartbeat_s=10.0,
                                                   alive_ns=60 * sec)
    live.processes[worker] = LiveProcess(worker, {"service.instance.id": worker,
                                                  "rl.worker_group": "policy", "rl.rank": 1},
                                         opened_ns=0)
    pm = post_mortem(span_columns_from_records([]), live)
    assert pm is not None
    (policy,) = [p for p in pm.processes if p.worker_group == "policy"]
    assert policy.innermost is not None
    assert policy.innermost.chain_ranks == ["trainer/0", "trainer/0", "policy/1"]
    rows = {p.worker_group: doing for p, _, doing in postmortem_rows(pm)}
    assert rows["policy"] == ("in rl.train.forward_backward open 0m58s < rl.train.policy"
                              " < trainer/0: rl.train.policy < rl.step 6")
    assert rows["trainer"] == "in rl.train.policy open 0m59s < rl.step 6; waiting on policy/1"


def test_a_clean_run_reports_nothing_open(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    script = _KILLED_DRIVER.replace("os.kill(os.getpid(), signal.SIGKILL)", "pass")
    script += "\nfrom rlsight import shutdown_telemetry; shutdown_telemetry()\n"
    subprocess.run([sys.executable, "-c", script, str(run_dir)], check=True, timeout=120)
    assert main(["report", str(run_dir)]) == EXIT_OK
    assert "open at end  none" in capsys.readouterr().out


_PROCESS = "run/trainer/0/1"


def _live(*starts: StartRecord) -> LiveReadResult:
    proc = LiveProcess(_PROCESS, {"service.instance.id": _PROCESS, "rl.worker_group": "trainer",
                                  "rl.rank": 0}, opened_ns=0)
    return LiveReadResult(processes={_PROCESS: proc}, starts=list(starts))


def _finished(name: str, durations: list[int]) -> list[SpanRecord]:
    resource = {"service.instance.id": _PROCESS}
    return [SpanRecord("t", f"aa{i + 1:014x}", None, name, 0, d, {"thread.id": 1}, resource)
            for i, d in enumerate(durations)]


@settings(max_examples=60, deadline=None)
@given(durations=st.lists(st.integers(1, 10**10), min_size=0, max_size=6),
       age=st.integers(0, 10**12), k=st.floats(1, 10), floor_s=st.floats(0, 100))
def test_a_span_is_stalled_exactly_past_the_floor_and_k_medians(durations, age, k, floor_s) -> None:
    """stalled <=> age > max(floor, k * median); with no finished peer, age > k * floor."""
    start = StartRecord(_PROCESS, "t", "ff00000000000001", None, "rl.train", "training", 0, 1)
    cols = span_columns_from_records(_finished("rl.train", durations))
    (state,) = process_states(cols, _live(start), now_ns=age, k=k, min_age_s=floor_s)
    ordered = sorted(durations)
    n = len(ordered)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2 if n else None
    limit = max(floor_s * 1e9, k * median) if median is not None else k * floor_s * 1e9
    assert state.stalled == (age > limit)
    assert state.innermost is not None and state.innermost.age_ns == age


def test_the_run_root_and_a_parent_with_an_open_child_are_never_stalled() -> None:
    job = StartRecord(_PROCESS, "t", "0000000000000001", None, "rl.job", "job", 0, 1)
    step = StartRecord(_PROCESS, "t", "0000000000000002", job.span_id, "rl.step", "step", 0, 1, step=7)
    cols = span_columns_from_records(_finished("rl.step", [10]))
    (state,) = process_states(cols, _live(job, step), now_ns=10**12, k=2, min_age_s=1)
    assert state.stalled and state.innermost is not None
    assert state.innermost.name == "rl.step" and state.innermost.chain == ["rl.job"]
    assert [o.stalled for o in state.open] == [False, True]
    (alone,) = process_states(cols, _live(job), now_ns=10**15, k=2, min_age_s=1)
    assert not alone.stalled


def test_a_driver_waiting_on_actors_is_in_its_dispatching_span_and_names_them() -> None:
    """An open span whose open children run in other processes is where that process is."""
    actor = "run/policy/1/2"
    dispatch = StartRecord(_PROCESS, "t", "0000000000000001", None, "rl.train.policy", "training", 0, 1)
    work = StartRecord(actor, "t", "0000000000000002", dispatch.span_id, "rl.train.fb", "training", 0, 2)
    live = _live(dispatch, work)
    live.processes[actor] = LiveProcess(actor, {"service.instance.id": actor, "rl.worker_group": "policy",
                                                "rl.rank": 1}, opened_ns=0)
    cols = span_columns_from_records([])
    states = {p.worker_group: p for p in process_states(cols, live, now_ns=10**9, k=2, min_age_s=1)}
    driver, policy = states["trainer"], states["policy"]
    assert driver.innermost is not None and driver.innermost.name == "rl.train.policy"
    assert driver.waiting_on == ["policy/1"]
    assert policy.innermost is not None and policy.innermost.chain == ["rl.train.policy"]
    assert policy.waiting_on == []


def test_of_spans_ending_together_the_one_read_last_is_a_process_last(tmp_path: Path) -> None:
    """The read sorts each file's spans (a parent before the child that ends with it); the
    span a process finished last is still the last read of those that ended together."""
    from rlsight.analysis._read import read_span_columns
    from rlsight.analysis.live import _last_spans

    resource = {"service.instance.id": "run/driver/0/1", "rl.worker_group": "driver", "rl.rank": 0}
    child = SpanRecord(trace_id="1" * 32, span_id="2" * 16, parent_span_id="1" * 16, name="child",
                       start_ns=5, end_ns=9, attributes={}, resource=resource)
    parent = SpanRecord(trace_id="1" * 32, span_id="1" * 16, parent_span_id=None, name="parent",
                        start_ns=1, end_ns=9, attributes={}, resource=resource)
    (tmp_path / "traces").mkdir()
    with (tmp_path / "traces" / "driver-0-1.jsonl").open("w") as fh:
        for s in (child, parent):  # as the SDK ends them: the child, then its parent
            fh.write(json.dumps({"resourceSpans": [{"resource": {"attributes": [
                {"key": k, "value": {"stringValue": str(v)}} for k, v in resource.items()]},
                "scopeSpans": [{"spans": [{
                    "traceId": s.trace_id, "spanId": s.span_id, "parentSpanId": s.parent_span_id or "",
                    "name": s.name, "startTimeUnixNano": str(s.start_ns), "endTimeUnixNano": str(s.end_ns),
                }]}]}]}) + "\n")
    for cache in (False, True, True):
        cols = read_span_columns(tmp_path, workers=1, cache=cache)[0]
        assert _last_spans(cols) == {"run/driver/0/1": ("parent", 9)}
    assert _last_spans(span_columns_from_records([child, parent])) == {"run/driver/0/1": ("parent", 9)}


def test_a_run_with_nothing_open_does_not_count_zero_spans_on_zero_processes() -> None:
    """A healthy Ray run (ray.shutdown kills actors without a shutdown line) read 'open at end
    0 span(s) never ended on 0 process(es); 4 process(es) without a clean shutdown'."""
    from rlsight.render._format import postmortem_summary

    live = _live()
    pm = post_mortem(span_columns_from_records([]), live)
    assert pm is not None and pm.open_spans == 0 and pm.unclean == 1
    assert postmortem_summary(pm) == "nothing open; 1 process(es) without a clean shutdown"


def test_two_processes_of_one_rank_running_side_by_side_are_not_a_restart() -> None:
    """The actors of an unnamed pool share their class name and rank 0: one that still beats
    after the other opened, or whose pid runs on this host, is not 'replaced', and its hung span
    is still judged (it read 'replaced by pid N', aged to the other's start, never stalled)."""
    sec = 10**9
    first, second = "run/RolloutWorker/0/1", "run/RolloutWorker/0/2"
    identity = {"rl.worker_group": "RolloutWorker", "rl.rank": 0}
    hung = StartRecord(first, "t", "0000000000000001", None, "rl.generate.batch", "generation", 1 * sec, 1)
    live = LiveReadResult(processes={
        first: LiveProcess(first, {"service.instance.id": first, "process.pid": 1, **identity},
                           opened_ns=0, heartbeat_s=10.0, alive_ns=40 * sec),
        second: LiveProcess(second, {"service.instance.id": second, "process.pid": 2, **identity},
                            opened_ns=4 * sec, heartbeat_s=10.0, alive_ns=40 * sec),
    }, starts=[hung])
    pm = post_mortem(span_columns_from_records([]), live)
    assert pm is not None
    (state,) = [p for p in pm.processes if p.process == first]
    assert state.replaced_by_pid is None and state.innermost is not None
    assert state.innermost.age_ns == 39 * sec
    # Before its next heartbeat nothing of it is later than the other's opening; its pid runs.
    early = dataclasses.replace(live.processes[first], alive_ns=None)
    live.processes[first] = early
    states = {p.process: p for p in process_states(span_columns_from_records([]), live, now_ns=8 * sec,
                                                   min_age_s=1, running=[first])}
    assert states[first].replaced_by_pid is None and states[first].stalled
    gone = {p.process: p for p in process_states(span_columns_from_records([]), live, now_ns=8 * sec,
                                                 min_age_s=1)}
    assert gone[first].replaced_by_pid == 2  # pid not known to run: taken for a restart


def test_a_span_no_peer_finished_is_stalled_past_the_floor_when_a_stalled_caller_waits_on_it() -> None:
    """Drill: the driver waited on policy/1, which waited on a barrier actor whose first
    allreduce never returned; watch called the driver and policy/1 STALLED and the barrier, the
    end of the chain, 'running' (an unseen name waits k floors: 25 min at the defaults)."""
    sec = 10**9
    policy, barrier = "run/policy/1/2", "run/barrier/0/3"
    dispatch = StartRecord(_PROCESS, "t", "0000000000000001", None, "rl.train.policy", "training", 0, 1)
    work = StartRecord(policy, "t", "0000000000000002", dispatch.span_id, "rl.train.fb", "training", 0, 2)
    wait = StartRecord(barrier, "t", "0000000000000003", work.span_id, "rl.train.allreduce", "training",
                       15 * sec, 3)
    live = _live(dispatch, work, wait)
    for key, group in ((policy, "policy"), (barrier, "barrier")):
        live.processes[key] = LiveProcess(key, {"service.instance.id": key, "rl.worker_group": group,
                                                "rl.rank": 0}, opened_ns=0)
    medians = [SpanRecord("t", f"bb{i:014x}", None, name, 0, sec, {"thread.id": 1},
                          {"service.instance.id": key})
               for i, (name, key) in enumerate((("rl.train.policy", _PROCESS), ("rl.train.fb", policy)))]
    cols = span_columns_from_records(medians)
    states = {p.worker_group: p for p in process_states(cols, live, now_ns=60 * sec, k=5, min_age_s=30)}
    assert states["trainer"].stalled and states["policy"].stalled
    assert states["barrier"].stalled  # 45 s > the 30 s floor, though < 5 floors
    assert states["barrier"].innermost is not None and states["barrier"].innermost.threshold_ns == 30 * sec
    assert [o.stalled for o in states["barrier"].open] == [True]
    # Under the floor it is not; nor when its callers are not stalled (a long first phase).
    early = {p.worker_group: p for p in process_states(cols, live, now_ns=20 * sec, k=5, min_age_s=10)}
    assert early["trainer"].stalled and not early["barrier"].stalled
    calm = {p.worker_group: p for p in process_states(span_columns_from_records([]), live,
                                                      now_ns=60 * sec, k=5, min_age_s=30)}
    assert not any(p.stalled for p in calm.values())
