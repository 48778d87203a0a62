"""`rlsight watch`: the screen, --json, exit codes, --stacks, and the docs of its schema."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from rlsight import RL, span, step_span
from rlsight.cli import EXIT_OK, EXIT_USAGE, main
from rlsight.commands._exit import EXIT_STALLED
from rlsight.store._live import read_live
from rlsight.testing import capture_telemetry


def _wait_for(run_dir: Path, name: str) -> None:
    deadline = time.monotonic() + 5
    while name not in {s.name for s in read_live(run_dir).starts} and time.monotonic() < deadline:
        time.sleep(0.02)


def test_an_open_span_past_the_floor_is_stalled_and_exits_3(run_dir: Path, capsys) -> None:
    with capture_telemetry(run_dir=run_dir, run_id="watched"):
        for n in range(3):
            with step_span(n), span(RL.TRAINING, "rl.train.policy"):
                pass
        with step_span(3), span(RL.CHECKPOINT, "rl.checkpoint.save"):
            _wait_for(run_dir, "rl.checkpoint.save")
            time.sleep(0.05)
            assert main(["watch", str(run_dir), "--json", "--min-age", "0.01"]) == EXIT_STALLED
            doc = json.loads(capsys.readouterr().out)
            assert main(["watch", str(run_dir), "--once", "--min-age", "0.01"]) == EXIT_STALLED
            screen = capsys.readouterr().out
            assert main(["watch", str(run_dir), "--json"]) == EXIT_OK  # default floor: 300 s
            capsys.readouterr()
    assert doc["schema_version"] == 1 and doc["run_id"] == "watched"
    assert doc["steps"] == 3 and doc["last_step"] == 3 and doc["stalled"] is True
    (driver,) = doc["processes"]
    assert driver["pid"] == os.getpid() and driver["alive"] is True
    assert driver["innermost"]["name"] == "rl.checkpoint.save"
    assert driver["innermost"]["chain"] == ["rl.step 3"]
    assert "STALLED" in screen and "rl.checkpoint.save" in screen and "rl.step 3" in screen


def test_ctrl_c_leaves_the_live_view_with_the_last_screens_exit_code(
        run_dir: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal watch refreshes until Ctrl-C, which is how a user leaves it: the exit code
    is the last screen's verdict (docs/cli.md), not 130."""
    import types

    from rlsight.commands import watch

    monkeypatch.setattr(watch, "time", types.SimpleNamespace(sleep=_interrupt))
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    with capture_telemetry(run_dir=run_dir), step_span(1), span(RL.REFIT, "rl.refit.push"):
        _wait_for(run_dir, "rl.refit.push")
        assert main(["watch", str(run_dir), "--min-age", "0"]) == EXIT_STALLED
        assert main(["watch", str(run_dir)]) == EXIT_OK
    assert "rl.refit.push" in capsys.readouterr().out


def _interrupt(seconds: float) -> None:
    raise KeyboardInterrupt


def test_a_finished_run_is_not_stalled(run_dir: Path, capsys) -> None:
    with capture_telemetry(run_dir=run_dir), step_span(1):
        pass
    assert main(["watch", str(run_dir), "--json", "--min-age", "0"]) == EXIT_OK
    (driver,) = json.loads(capsys.readouterr().out)["processes"]
    assert driver["clean_shutdown"] is True and driver["open"] == []


def test_a_missing_run_folder_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["watch", str(tmp_path / "nope"), "--once"]) == EXIT_USAGE
    assert "no run folder" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--min-age=-1", "--k=0", "--interval=0", "--k=nan", "--interval=inf"])
def test_bad_numbers_are_usage_errors(run_dir: Path, flag: str, capsys) -> None:
    assert main(["watch", str(run_dir), "--once", flag]) == EXIT_USAGE
    assert flag.split("=")[0] in capsys.readouterr().err  # the flag at fault, not the folder


def test_a_bad_k_is_named_as_a_multiple_of_the_median_not_seconds(run_dir: Path, capsys) -> None:
    assert main(["watch", str(run_dir), "--once", "--k", "nan"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--k" in err and "seconds" not in err and "median" in err


def test_docs_live_md_describes_every_field_of_the_json_documents(run_dir: Path, capsys) -> None:
    """A field added to watch --json or the report's postmortem without a docs row fails here."""
    with capture_telemetry(run_dir=run_dir), step_span(1), span(RL.REFIT, "rl.refit.push"):
        _wait_for(run_dir, "rl.refit.push")
        main(["watch", str(run_dir), "--json", "--min-age", "0"])
    doc = json.loads(capsys.readouterr().out)
    text = (Path(__file__).resolve().parents[2] / "docs" / "live.md").read_text()
    (proc,) = doc["processes"]
    missing = [k for k in doc if f"`{k}" not in text]
    missing += [k for k in proc if not re.search(rf"`processes\[\]\.{k}[`\[]|, \.{k}[`,]|\.{k}`", text)]
    missing += [k for k in proc["open"][0] if k not in text.split("An **open span** is", 1)[1][:400]]
    assert missing == []


def test_stacks_skips_a_stalled_process_that_has_exited(run_dir: Path, capsys) -> None:
    """A killed rank has no stack to dump: --stacks must not run py-spy on its dead pid (which
    printed py-spy's error and Rust backtrace under the table)."""
    import subprocess
    import sys

    from rlsight.commands.watch import _py_spy

    if _py_spy() is None:
        pytest.skip("py-spy is not installed (pip install 'rlsight[stacks]')")
    code = (
        "import os, time\n"
        "from rlsight import RL, TelemetryConfig, setup_telemetry, span, step_span\n"
        f"setup_telemetry(TelemetryConfig(run_dir={str(run_dir)!r}))\n"
        "with step_span(1), span(RL.REFIT, 'rl.refit.push'):\n"
        "    time.sleep(0.3)\n"
        "    os._exit(0)\n"  # gone without a shutdown, its span open: a killed rank
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert main(["watch", str(run_dir), "--json", "--min-age", "0", "--stacks"]) == EXIT_STALLED
    (dead,) = json.loads(capsys.readouterr().out)["processes"]
    assert dead["stalled"] and dead["alive"] is False
    assert dead["stack"] is None


def test_stacks_adds_the_python_stack_of_a_stalled_process_on_this_host(run_dir: Path, capsys) -> None:
    """py-spy (the dev extra installs it) dumps this very test process while it is stalled."""
    from rlsight.commands.watch import _py_spy

    if _py_spy() is None:
        pytest.skip("py-spy is not installed (pip install 'rlsight[stacks]')")
    with capture_telemetry(run_dir=run_dir), step_span(1), span(RL.REFIT, "rl.refit.push"):
        _wait_for(run_dir, "rl.refit.push")
        code = main(["watch", str(run_dir), "--json", "--min-age", "0", "--stacks"])
    (driver,) = json.loads(capsys.readouterr().out)["processes"]
    assert code == EXIT_STALLED and driver["stalled"]
    assert "test_stacks_adds_the_python_stack" in driver["stack"]


_HANGING_WORKER = """
import sys, time
import rlsight.store._live as live
live.HEARTBEAT_S = 0.05
from rlsight import RL, TelemetryConfig, setup_telemetry, span
setup_telemetry(TelemetryConfig(run_dir=sys.argv[1]), worker_group="generation", rank=3)
with span(RL.GENERATION, "rl.generate.batch"):
    time.sleep(600)
"""


def test_a_killed_worker_goes_silent_once_its_heartbeat_stops(tmp_path: Path, capsys) -> None:
    import signal
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    worker = subprocess.Popen([sys.executable, "-c", _HANGING_WORKER, str(run_dir)])
    try:
        deadline = time.monotonic() + 60
        while worker.poll() is None and time.monotonic() < deadline and not (
                (run_dir / "live").is_dir() and any(p.alive_ns for p in read_live(run_dir).processes.values())
                and "rl.generate.batch" in {s.name for s in read_live(run_dir).starts}):
            time.sleep(0.05)
        assert main(["watch", str(run_dir), "--json"]) == EXIT_OK
        before = json.loads(capsys.readouterr().out)["processes"][0]
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=60)
    time.sleep(0.3)  # six heartbeats missed
    assert main(["watch", str(run_dir), "--json"]) == EXIT_OK
    after = json.loads(capsys.readouterr().out)["processes"][0]
    assert main(["watch", str(run_dir), "--once"]) == EXIT_OK
    screen = capsys.readouterr().out
    assert before["silent"] is False and before["last_heard_unix_ns"] is not None
    assert after["silent"] is True and after["alive"] is False
    assert after["innermost"]["name"] == "rl.generate.batch"
    assert "silent" in screen and "1 silent" in screen


def test_the_header_says_how_far_the_run_is_how_fast_it_goes_and_where_it_last_failed(
        run_dir: Path, capsys) -> None:
    from rlsight import job_span

    with capture_telemetry(run_dir=run_dir, run_id="far"), job_span(total_steps=12):
        for n in range(1, 5):
            with step_span(n):
                time.sleep(0.02)
                if n == 1:
                    with pytest.raises(TimeoutError), span(RL.REFIT, "rl.refit.push"):
                        raise TimeoutError("NCCL broadcast")
                if n == 3:
                    with pytest.raises(RuntimeError), span(RL.TRAINING, "rl.train.policy"):
                        raise RuntimeError("CUDA out of memory")
        with step_span(5):
            _wait_for(run_dir, "rl.step")
            deadline = time.monotonic() + 5
            while True:  # the finished steps reach traces/ within the store's write-through,
                # and step 5's start record live/ (an earlier step's may satisfy _wait_for)
                assert main(["watch", str(run_dir), "--json"]) == EXIT_OK
                doc = json.loads(capsys.readouterr().out)
                if (doc["steps"], doc["last_step"]) == (4, 5) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert main(["watch", str(run_dir), "--once"]) == EXIT_OK
            screen = capsys.readouterr().out
    assert doc["steps"] == 4 and doc["last_step"] == 5 and doc["total_steps"] == 12
    assert doc["errors"] == 2  # pytest.raises caught each inside its step, which went on
    assert doc["last_error"]["name"] == "rl.train.policy" and doc["last_error"]["worker_group"] == "driver"
    assert doc["last_error"]["message"] == "RuntimeError: CUDA out of memory"
    # four steps ~20 ms apart end to end: three gaps over the first to the last end
    assert 60e9 / 0.5e9 < doc["steps_per_min"] < 60e9 / 0.02e9
    assert "in step 5 of 12 (about" in screen and "to go)" in screen and "steps/min" in screen
    assert "last error: rl.train.policy on driver/0" in screen and "(2 span(s) ended in error)" in screen
    assert "ago: RuntimeError: CUDA out of memory (2" in screen


def _dead_worker_snapshot(*, silent: bool):
    """The die drill as watch saw it: step 6 of 12 open 0m46s (median step 0.41s), the driver
    in it waiting on generation/0, whose pid is gone (silent once 30 s pass without a beat)."""
    from rlsight.analysis.live import WatchSnapshot
    from rlsight.analysis.model import OpenSpan, ProcessState

    now, sec = 10_000 * 10**9, 10**9

    def opened(name: str, age_s: float, chain: list[str], step: int | None = None,
               median_s: float | None = None) -> OpenSpan:
        return OpenSpan(name=name, group=None, trace_id="t", span_id=name, parent_span_id=None,
                        thread=1, start_unix_ns=now - int(age_s * sec), age_ns=int(age_s * sec),
                        chain=chain, step=step, median_ns=median_s and median_s * sec,
                        threshold_ns=300 * sec, stalled=False)

    job = opened("rl.job", 60, [])
    step = opened("rl.step", 46, ["rl.job"], step=6, median_s=0.41)
    gen = opened("rl.rollout.generate", 46, ["rl.job", "rl.step 6"], median_s=0.2)
    driver = ProcessState("r/driver/0/1", "driver", 0, 1, "h", False, [job, step], step, False,
                          "rl.step", now - 46 * sec, waiting_on=["generation/0"], alive=True,
                          silent=False, last_heard_unix_ns=now - 2 * sec)
    worker = ProcessState("r/generation/0/2", "generation", 0, 2, "h", False, [gen], gen, False,
                          "rl.rollout.generate", now - 47 * sec, alive=False,
                          silent=silent, last_heard_unix_ns=now - 49 * sec)
    return WatchSnapshot(run_dir="r", run_id="r", now_unix_ns=now, steps=5, last_step=6,
                         total_steps=12, median_step_ns=0.41 * sec, steps_per_min=146.0,
                         last_step_end_unix_ns=now - 46 * sec, goodput_pct=10.9, stalled=False,
                         errors=0, last_error=None, processes=[driver, worker], k=5.0,
                         job_ended_unix_ns=None,
                         min_age_s=300.0, skipped=0)


def _screen_text(snapshot) -> str:
    import io

    from rich.console import Console

    from rlsight.commands.watch import _screen

    out = io.StringIO()
    Console(file=out, width=200, highlight=False).print(_screen(snapshot))
    return out.getvalue()


def test_a_worker_whose_pid_is_gone_reads_exited_not_running_and_its_waiter_says_so() -> None:
    """The die drill: before it went silent the dead worker's state read 'running', and the
    driver read 'waiting on generation/0' as if that rank were working."""
    rows = {line.split()[0]: line for line in _screen_text(_dead_worker_snapshot(silent=False)).splitlines()
            if line.startswith(("driver/", "generation/"))}
    assert rows["generation/0"].split()[1:3] == ["(exited)", "exited"]
    assert rows["driver/0"].rstrip().endswith("generation/0 (exited)")
    assert rows["driver/0"].split()[1:4] == ["running", "rl.step", "6"]  # which step it is in
    silent = {line.split()[0]: line for line in _screen_text(_dead_worker_snapshot(silent=True)).splitlines()
              if line.startswith(("driver/", "generation/"))}
    assert silent["driver/0"].rstrip().endswith("generation/0 (exited, silent)")


def test_a_step_open_far_past_its_median_gives_no_time_to_go_and_no_rate() -> None:
    """A hung step 6 of 12 read 'about 0m03s to go' and '146 steps/min' 46 s into the hang."""
    head = _screen_text(_dead_worker_snapshot(silent=False)).splitlines()[0]
    assert "to go" not in head and "steps/min" not in head
    assert "in step 6 of 12, open 0m46s (112x the median step 0.41s)" in head


def test_a_rank_ray_restarted_shows_both_processes_by_pid_and_which_replaced_which() -> None:
    """max_restarts=1: two rows both read 'generation/0 (exited)', the dead one's span ageing
    as if it still worked; each row now names its pid and the dead one its replacement."""
    import dataclasses

    snap = _dead_worker_snapshot(silent=False)
    driver, dead = snap.processes
    dead = dataclasses.replace(dead, replaced_by_pid=3)
    new = dataclasses.replace(dead, process="r/generation/0/3", pid=3, open=[], innermost=None,
                              alive=True, replaced_by_pid=None)
    text = _screen_text(dataclasses.replace(snap, processes=[driver, dead, new]))
    rows = [line for line in text.splitlines() if line.startswith("generation/")]
    assert rows[0].startswith("generation/0 pid 2 (exited)  replaced by pid 3  rl.rollout.generate")
    assert rows[1].startswith("generation/0 pid 3 ")


def test_a_finished_run_says_finished_and_its_workers_killed_at_shutdown_are_not_silent(
        run_dir: Path, capsys) -> None:
    """A healthy run after ray.shutdown read 'in step 15 of 15 (about 0.00s to go)' and
    '4 silent' in yellow: the actors Ray kills at shutdown write no shutdown line."""
    import dataclasses

    from rlsight import job_span
    from rlsight.analysis.live import watch_snapshot

    with capture_telemetry(run_dir=run_dir, run_id="done"), job_span(total_steps=2):
        for n in (1, 2):
            with step_span(n):
                pass
    assert main(["watch", str(run_dir), "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["job_ended_unix_ns"] is not None
    snap = watch_snapshot(run_dir)
    (driver,) = snap.processes
    # A worker Ray killed at shutdown: heard from 5 s before the job ended, silent since.
    worker = dataclasses.replace(driver, process="done/generation/0/2", worker_group="generation",
                                 clean_shutdown=False, silent=True, alive=False,
                                 last_heard_unix_ns=doc["job_ended_unix_ns"] - 5 * 10**9)
    head, *rows = _screen_text(dataclasses.replace(snap, processes=[driver, worker])).splitlines()
    assert "finished" in head and "to go" not in head and "silent" not in head
    (row,) = [r for r in rows if r.startswith("generation/")]
    assert "silent" not in row and "exited" in row


def test_a_short_step_a_few_medians_long_still_gets_a_time_to_go() -> None:
    """20 ms steps: one open 0.14 s (7 medians, under load) is not a hang."""
    import dataclasses

    snap = _dead_worker_snapshot(silent=False)
    driver, worker = snap.processes
    step = dataclasses.replace(driver.open[1], age_ns=140_000_000)
    driver = dataclasses.replace(driver, open=[driver.open[0], step], innermost=step)
    head = _screen_text(dataclasses.replace(snap, processes=[driver, worker],
                                            median_step_ns=20_000_000)).splitlines()[0]
    assert "to go" in head and "median step" in head


def test_time_to_go_counts_steps_left_by_number_so_a_resumed_run_is_not_overestimated() -> None:
    """A run resumed from a checkpoint at step 150 has 10 finished steps in its folder when it
    is in step 160 of 200: 40 steps are left, not 190."""
    import dataclasses

    snap = dataclasses.replace(_dead_worker_snapshot(silent=False), processes=[], steps=10,
                               last_step=160, total_steps=200, median_step_ns=1e9)
    head = _screen_text(snap).splitlines()[0]
    assert "10 step(s) done, in step 160 of 200 (about 0m41s to go)" in head  # 160 itself too
    ended = dataclasses.replace(snap, job_ended_unix_ns=snap.now_unix_ns - 12 * 10**9, last_step=200)
    assert "finished 0m12s ago: 10 step(s) done, last step 200 of 200" in _screen_text(ended)


_KILLED_DRIVER = """
import os, signal, sys, time
from rlsight import RL, TelemetryConfig, job_span, setup_telemetry, span, step_span
with setup_telemetry(TelemetryConfig(run_dir=sys.argv[1], run_id="resumed")), job_span(total_steps=4):
    for step in (1, 2, 3):
        with step_span(step), span(RL.TRAINING, "rl.train.policy"):
            if step == 3:
                time.sleep(0.5)  # the start records are written every 50 ms
                os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_resumed_after_its_driver_was_killed_reads_finished_once_the_new_driver_ends(
        run_dir: Path, capsys) -> None:
    """A driver SIGKILLed in step 3, then resumed from step 2 by a new process that finished
    the job, read 'in step 4 of 4 (about 0.00s to go)' forever: the dead driver's rl.job
    never ends, though its process was replaced and the replacement's job ended."""
    import subprocess
    import sys

    from rlsight import job_span

    killed = subprocess.run([sys.executable, "-c", _KILLED_DRIVER, str(run_dir)], timeout=120)
    assert killed.returncode == -9
    with capture_telemetry(run_dir=run_dir, run_id="resumed"), job_span(total_steps=4):
        for n in (2, 3, 4):
            with step_span(n):
                pass
    assert main(["watch", str(run_dir), "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    dead = [p for p in doc["processes"] if not p["clean_shutdown"]]
    assert len(dead) == 1 and dead[0]["replaced_by_pid"] is not None
    assert any(o["name"] == "rl.job" for o in dead[0]["open"])
    assert doc["job_ended_unix_ns"] is not None
    assert main(["watch", str(run_dir), "--once"]) == EXIT_OK
    head = capsys.readouterr().out.splitlines()[0]
    assert "finished" in head and "to go" not in head


def test_a_driver_that_raised_out_of_its_job_failed_in_watch_and_report(run_dir: Path, capsys) -> None:
    """Drill: a trainer bug raised in step 5 of 8; watch read 'finished 0m07s ago' and the
    report 'steps 5  goodput 99.9%' with no word of the exception."""
    from rlsight import job_span

    with pytest.raises(RuntimeError), capture_telemetry(run_dir=run_dir, run_id="crashed"), \
            job_span(total_steps=8):
        for n in (1, 2, 3):
            with step_span(n), span(RL.TRAINING, "rl.train.policy"):
                if n == 3:
                    raise RuntimeError("trainer bug: loss is NaN")
    assert main(["watch", str(run_dir), "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["job_failed"] is True and doc["last_error"]["name"] == "rl.job"
    assert main(["watch", str(run_dir), "--once"]) == EXIT_OK
    head = capsys.readouterr().out.splitlines()[0]
    assert "failed" in head and "finished" not in head
    assert main(["report", str(run_dir)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "; failed in step 3: RuntimeError: trainer bug: loss is NaN (see errors)" in out.splitlines()[0]
    assert re.search(r"^errors +3 span\(s\) ended in error; last: rl\.job on driver/0, .*: RuntimeError: "
                     r"trainer bug: loss is NaN$", out, re.M)
    assert main(["report", str(run_dir), "--json"]) == EXIT_OK
    pm = json.loads(capsys.readouterr().out)["postmortem"]
    assert pm["errors"] == 3 and pm["failed_step"] == 3
    assert pm["job_error"]["message"] == "RuntimeError: trainer bug: loss is NaN"


def test_a_run_that_ended_cleanly_says_finished_and_has_no_errors_line(run_dir: Path, capsys) -> None:
    from rlsight import job_span

    with capture_telemetry(run_dir=run_dir, run_id="fine"), job_span(total_steps=1), step_span(1):
        pass
    assert main(["report", str(run_dir)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "failed" not in out and "\nerrors " not in out
    assert main(["watch", str(run_dir), "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["job_failed"] is False


def test_a_rank_on_another_host_heard_last_at_the_end_of_a_finished_run_is_not_running() -> None:
    """Drill: a run through the Ray sink failed in step 6 with six ranks on another host in
    their training span; two minutes later watch still read them 'running' (their pid cannot be
    looked up there, and the end of a run suppresses 'silent')."""
    import dataclasses

    snap = _dead_worker_snapshot(silent=True)
    driver, worker = snap.processes
    far = dataclasses.replace(worker, host="node2", alive=None,
                              last_heard_unix_ns=snap.now_unix_ns - 120 * 10**9)
    ended = dataclasses.replace(snap, processes=[driver, far],
                                job_ended_unix_ns=snap.now_unix_ns - 119 * 10**9)
    (row,) = [r for r in _screen_text(ended).splitlines() if r.startswith("generation/")]
    assert "silent since the end" in row and "running" not in row
    # While the run goes (or within 30 s of a heartbeat) it runs, as far as anyone can tell.
    alive = dataclasses.replace(far, silent=False, last_heard_unix_ns=snap.now_unix_ns - 2 * 10**9)
    (row,) = [r for r in _screen_text(dataclasses.replace(snap, processes=[driver, alive])).splitlines()
              if r.startswith("generation/")]
    assert "running" in row


def test_the_timeline_of_a_hung_run_draws_the_spans_it_hung_in(run_dir: Path, tmp_path: Path, capsys) -> None:
    """Drill: a run hung in step 5 (driver -> policy/1 -> barrier/0) and was killed; its
    Perfetto trace held steps 1-4 and none of rl.job, rl.step 5 or the spans it hung in."""
    out = tmp_path / "trace.json"
    with capture_telemetry(run_dir=run_dir, run_id="hung"):
        with step_span(1), span(RL.TRAINING, "rl.train.policy"):
            pass
        with step_span(2), span(RL.REFIT, "rl.refit.push"):
            _wait_for(run_dir, "rl.refit.push")
            assert main(["timeline", str(run_dir), "-o", str(out)]) == EXIT_OK
            one_step = ["timeline", str(run_dir), "-o", str(tmp_path / "one.json"), "--steps", "1"]
            assert main(one_step) == EXIT_OK
            # --max-spans caps the open spans too, the earliest first (review: they were added
            # beyond the cap).
            capped = ["timeline", str(run_dir), "-o", str(tmp_path / "capped.json"), "--max-spans", "3"]
            assert main(capped) == EXIT_OK
    err = capsys.readouterr().err
    assert "2 of them never ended" in err
    assert "(3 spans, 1 of them never ended" in err
    assert "1 span(s) that never ended were left out by --max-spans" in err
    capped_events = json.loads((tmp_path / "capped.json").read_text())
    capped_events = capped_events["traceEvents"] if isinstance(capped_events, dict) else capped_events
    assert [e["name"] for e in capped_events if e.get("ph") == "X" and e.get("args", {}).get("rl.open")] == [
        "rl.step"]
    events = json.loads(out.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    opened = {e["name"] for e in events if e.get("ph") == "X" and e.get("args", {}).get("rl.open")}
    finished = {e["name"] for e in events if e.get("ph") == "X" and not e.get("args", {}).get("rl.open")}
    assert opened == {"rl.step", "rl.refit.push"} and {"rl.step", "rl.train.policy"} <= finished
    one = json.loads((tmp_path / "one.json").read_text())
    one = one["traceEvents"] if isinstance(one, dict) else one
    assert not any(e.get("args", {}).get("rl.open") for e in one)  # step 2 starts after step 1


@pytest.mark.parametrize("known", [True, False])
def test_an_error_naming_a_pid_of_the_run_names_its_rank(run_dir: Path, capsys, known: bool) -> None:
    """Drill: a policy rank SIGKILLed mid-step; the driver failed with Ray's ActorDiedError
    (its message lists the dead actor's pid) and six ranks sat open in the same span: the
    report could not say which of them had died."""
    from rlsight import job_span

    pid = os.getpid() if known else 2**22 + 7
    with pytest.raises(RuntimeError), capture_telemetry(run_dir=run_dir, run_id="died"), job_span(), \
            step_span(1):
        raise RuntimeError(f"The actor died unexpectedly.\n\tclass_name: Policy\n\tpid: {pid}\n")
    assert main(["report", str(run_dir)]) == EXIT_OK
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("errors")]
    assert (f"(in the message: pid {pid} is driver/0)" in line) == known
    assert main(["watch", str(run_dir), "--json"]) == EXIT_OK
    error = json.loads(capsys.readouterr().out)["last_error"]
    assert (error["named_pids"], error["named_processes"]) == (([pid], ["driver/0"]) if known else ([], []))


def test_a_ray_task_error_reads_as_the_exception_it_wraps_without_colour_codes() -> None:
    """Drill: a driver failed on policy/1's RayTaskError over a dead barrier actor; the report's
    first line read '\\x1b[36mray::Policy.train()\\x1b[39m (pid=22574, ip=..., actor_id=...,
    repr=<drill3.Policy object a...' and never said what was raised."""
    from rlsight.render._format import first_line

    message = (
        "RayTaskError(ActorDiedError): \x1b[36mray::Policy.train()\x1b[39m (pid=22574, ip=192.0.2.2, "
        "actor_id=397ed5199e7396eca9f2980201000000, repr=<drill3.Policy object at 0x7f88da379410>)\n"
        "  File \"/work/drills/d3/drill3.py\", line 57, in train\n"
        "    ray.get(dispatch_with_trace_context(self.barrier.wait, step))\n"
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: Barrier\n\tpid: 22377\n")
    assert first_line(message) == ("RayTaskError(ActorDiedError) in ray::Policy.train(): "
                                   "ActorDiedError: The actor died unexpectedly before finishing this task.")
    assert first_line("RuntimeError: loss is NaN\nmore") == "RuntimeError: loss is NaN"
    assert first_line("\x1b[31mValueError: red\x1b[0m") == "ValueError: red"


def test_stacks_leave_out_rlsights_own_idle_threads() -> None:
    """Drill (--stacks on a hung driver): 70 lines, five of its eight threads rlsight's own timer
    loops, and the one that mattered, MainThread in ray.get, first."""
    from rlsight.commands.watch import _without_own_threads

    dump = "\n".join([
        "Process 19940: python drill3.py", "",
        'Thread 19940 (idle): "MainThread"', "    get (ray/_private/worker.py:3009)",
        "    <module> (drill3.py:99)",
        'Thread 20041 (idle): "rlsight-store"', "    BatchingSpanProcessor._run (rlsight/_batching.py:258)",
        'Thread 20042 (idle): "rlsight-live"', "    StartRecordProcessor._run (_start_writer.py:128)",
        'Thread 20043 (active): "rlsight-busy-time"', "    StepRollupProcessor._cut_windows (x.py:339)",
        'Thread 20731 (idle): "ray_print_logs"', "    Worker.print_logs (ray/_private/worker.py:1091)",
    ])
    out = _without_own_threads(dump)
    assert "MainThread" in out and "ray_print_logs" in out and "<module> (drill3.py:99)" in out
    assert "rlsight-store" not in out and "_batching.py" not in out and "rlsight-live" not in out
    assert "rlsight-busy-time" in out  # busy: kept
    assert out.endswith("(2 idle rlsight thread(s) not shown)")
    plain = 'Process 1: x\nThread 1 (idle): "MainThread"\n    f (a.py:1)'
    assert _without_own_threads(plain) == plain


@pytest.mark.parametrize("raise_in", [None, 5])
def test_a_step_error_the_loop_caught_is_not_where_the_run_failed(run_dir: Path, capsys, raise_in) -> None:
    """Review: step 2 raised and the loop caught it outside step_span (a skipped batch); the
    job then raised after step 5 (a checkpoint write), and the report read 'failed in step 2'."""
    from rlsight import job_span

    with pytest.raises(RuntimeError), capture_telemetry(run_dir=run_dir, run_id="caught"), job_span():
        for n in range(1, 6):
            try:
                with step_span(n), span(RL.TRAINING, "rl.train.policy"):
                    if n in (2, raise_in):
                        raise ValueError(f"bad batch {n}")
            except ValueError:
                if n == raise_in:
                    raise RuntimeError("gave up") from None
        raise RuntimeError("checkpoint write failed")
    assert main(["report", str(run_dir), "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["postmortem"]["failed_step"] == raise_in
    assert main(["report", str(run_dir)]) == EXIT_OK
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith(f"; failed{'' if raise_in is None else f' in step {raise_in}'}: RuntimeError: "
                         f"{'checkpoint write failed' if raise_in is None else 'gave up'} (see errors)"), head


def test_the_watch_screen_shows_control_sequences_from_the_files_escaped() -> None:
    """Review: a status message with an OSC title sequence and a screen clear reached the
    terminal raw through `watch --once` (the report escapes them); a span name in Rich markup
    restyled the table."""
    import dataclasses

    from rlsight.analysis.model import ErrorSpan

    snap = _dead_worker_snapshot(silent=True)
    driver, worker = snap.processes
    renamed = dataclasses.replace(worker, worker_group="gen\x1b[31m", innermost=dataclasses.replace(
        worker.innermost, name="[bold]rl.x\x1b]0;t\x07"))
    error = ErrorSpan(name="rl.job", process=driver.process, worker_group="driver", rank=0,
                      end_unix_ns=snap.now_unix_ns, message="RuntimeError: boom \x1b]0;pwned\x07 \x1b[2J")
    text = _screen_text(dataclasses.replace(snap, processes=[driver, renamed], last_error=error,
                                            run_id="r\x1b[2J"))
    assert "\x1b" not in text and "\x07" not in text
    assert "RuntimeError: boom \\x1b]0;pwned\\x07 \\x1b[2J" in text
    assert "[bold]rl.x\\x1b]0;t\\x07" in text and "gen\\x1b[31m/" in text and "run r\\x1b[2J" in text


def test_a_driver_that_raised_then_was_resumed_is_not_failed_in_report_or_watch(
        run_dir: Path, capsys) -> None:
    """Review: the first driver raised out of its job, a new driver resumed the run and was
    SIGKILLed in step 3 with its job open: watch (which sees the open job) did not say failed,
    the report (the latest finished job) did. The job a later one resumed does not decide."""
    import subprocess
    import sys

    from rlsight import job_span

    with pytest.raises(RuntimeError), capture_telemetry(run_dir=run_dir, run_id="resumed"), \
            job_span(total_steps=4):
        with step_span(1), span(RL.TRAINING, "rl.train.policy"):
            raise RuntimeError("loss is NaN")
    killed = subprocess.run([sys.executable, "-c", _KILLED_DRIVER, str(run_dir)], timeout=120)
    assert killed.returncode == -9
    assert main(["watch", str(run_dir), "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["job_failed"] is False
    assert main(["report", str(run_dir), "--json"]) == EXIT_OK
    pm = json.loads(capsys.readouterr().out)["postmortem"]
    assert pm["job_error"] is None and pm["failed_step"] is None and pm["errors"] == 3
    assert main(["report", str(run_dir)]) == EXIT_OK
    head = capsys.readouterr().out.splitlines()[0]
    assert "failed" not in head and "then step 3" in head, head


def test_the_timeline_reads_the_runs_columns_once(run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """Review: with start records in live/ the timeline read every span's columns a second time
    for the spans that never ended, even for a --steps window."""
    import rlsight.analysis._read as read_module
    import rlsight.analysis.window as window_module

    with capture_telemetry(run_dir=run_dir, run_id="twice"):
        for n in (1, 2):
            with step_span(n), span(RL.TRAINING, "rl.train.policy"):
                if n == 1:
                    _wait_for(run_dir, "rl.train.policy")  # a start record on disk
    assert read_live(run_dir).starts
    reads = []
    real = read_module.read_span_columns

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        reads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(read_module, "read_span_columns", counted)
    monkeypatch.setattr(window_module, "read_span_columns", counted)
    assert main(["timeline", str(run_dir), "-o", str(tmp_path / "t.json"), "--steps", "2"]) == EXIT_OK
    assert len(reads) == 1


def test_steps_without_a_whole_number_leave_the_last_step_unknown(run_dir: Path, capsys) -> None:
    """A step_span(2.5) is recorded without rl.step (the columns hold the int64 placeholder):
    watch read that placeholder, -9223372036854775808, as the last step."""
    from rlsight.errors import RlsightWarning

    with capture_telemetry(run_dir=run_dir, run_id="fractional"), \
            pytest.warns(RlsightWarning, match="2.5"), step_span(2.5):  # type: ignore[arg-type]
        pass
    assert main(["watch", str(run_dir), "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"] == 1 and doc["last_step"] is None


@pytest.mark.parametrize("span_id", [None, "zz", "", 7, "00000000000000000"])
def test_a_start_record_with_a_bad_span_id_is_skipped_and_the_failed_run_still_reads(
        run_dir: Path, capsys, span_id: object) -> None:
    """A valid JSON start line whose spanId is no 16-hex id (null, 'zz') crashed report, timeline
    and diff with OverflowError in the failed-run check; it is one skipped record."""
    from rlsight import job_span

    with pytest.raises(RuntimeError), capture_telemetry(run_dir=run_dir, run_id="bad-id"), job_span():
        with step_span(1):
            pass
        raise RuntimeError("boom")
    live = sorted((run_dir / "live").glob("*.jsonl"))[0]
    with live.open("a") as f:  # a resumed driver's job whose start line is damaged
        f.write(json.dumps({"record": "start", "traceId": "0" * 32, "spanId": span_id,
                            "name": "rl.job", "startTimeUnixNano": time.time_ns() + 10**9}) + "\n")
    assert main(["report", str(run_dir), "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["postmortem"]["job_error"] is not None
    assert doc["summary"]["skipped"] == 1
    assert any("not a start record" in e for e in doc["summary"]["skipped_examples"])
    assert main(["timeline", str(run_dir), "-o", str(run_dir / "t.json")]) == EXIT_OK
