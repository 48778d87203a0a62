"""The stall watchdog: fires once on a stalled run, naming the open span; never on a healthy one."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from rlsight import (
    RL,
    StallRecord,
    TelemetryConfig,
    job_span,
    setup_telemetry,
    shutdown_telemetry,
    span,
    step_span,
)
from rlsight.cli import main
from rlsight.errors import ConfigError


def _config(run_dir: Path, **stall: float) -> TelemetryConfig:
    return TelemetryConfig(run_dir=str(run_dir), span_groups=("all",), strict=True, **stall)


def test_it_fires_once_on_a_stalled_run_and_names_the_open_span(run_dir: Path, caplog) -> None:
    fired: list[StallRecord] = []
    caplog.set_level(logging.WARNING, logger="rlsight")
    setup_telemetry(_config(run_dir, stall_after_s=0.6), on_stall=fired.append)
    try:
        for n in range(3):
            with step_span(n), span(RL.TRAINING, "rl.train.policy"):
                time.sleep(0.01)
        with step_span(3), span(RL.REFIT, "rl.test.stuck_refit"):
            deadline = time.monotonic() + 10
            while not fired and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.5)  # more than twice the threshold: it must not fire again
    finally:
        shutdown_telemetry()
    assert len(fired) == 1
    record = fired[0]
    assert record.last_step == 3 and record.steps_ended == 3
    assert record.seconds_since_progress > record.threshold_s == 0.6
    (driver,) = record.processes
    assert driver.innermost is not None and driver.innermost.name == "rl.test.stuck_refit"
    assert driver.stalled
    assert record.path is not None
    written = json.loads(Path(record.path).read_text())
    assert written["processes"][0]["innermost"]["name"] == "rl.test.stuck_refit"
    warnings = [r.getMessage() for r in caplog.records if "stall" in r.getMessage()]
    assert len(warnings) == 1 and "rl.test.stuck_refit" in warnings[0] and record.path in warnings[0]
    assert "in step 3)" in warnings[0]


def test_a_stall_in_a_step_with_no_whole_number_says_so(run_dir: Path, caplog) -> None:
    """``step_span(2.5)`` runs without ``rl.step``: the warning read 'in step None'."""
    from rlsight.errors import RlsightWarning

    fired: list[StallRecord] = []
    caplog.set_level(logging.WARNING, logger="rlsight")
    setup_telemetry(_config(run_dir, stall_after_s=0.3), on_stall=fired.append)
    try:
        with pytest.warns(RlsightWarning), step_span(2.5):  # type: ignore[arg-type]
            deadline = time.monotonic() + 10
            while not fired and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        shutdown_telemetry()
    assert len(fired) == 1 and fired[0].last_step is None
    (warning,) = [r.getMessage() for r in caplog.records if "stall:" in r.getMessage()]
    assert "in a step with no whole number" in warning and "None" not in warning.split(":")[2]


def test_the_report_lists_the_stall_records(run_dir: Path, capsys) -> None:
    fired: list[StallRecord] = []
    setup_telemetry(_config(run_dir, stall_after_s=0.3), on_stall=fired.append)
    try:
        with step_span(0):
            pass
        _stuck_in_step(1, fired)
    finally:
        shutdown_telemetry()
    assert main(["report", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["postmortem"]["stall_records"] == [fired[0].path]
    assert main(["report", str(run_dir)]) == 0
    expected = f"stalls       the watchdog fired 1 time(s); last record: {fired[0].path}"
    assert expected in capsys.readouterr().out


def test_it_does_not_fire_on_a_healthy_run_with_uneven_steps(run_dir: Path) -> None:
    """Steps of 20 ms with a 300 ms one every seventh: uneven, but always progressing."""
    fired: list[StallRecord] = []
    setup_telemetry(_config(run_dir, stall_after_steps=20), on_stall=fired.append)
    try:
        for n in range(28):
            with step_span(n), span(RL.TRAINING, "rl.train.policy"):
                time.sleep(0.3 if n % 7 == 6 else 0.02)
    finally:
        shutdown_telemetry()
    assert fired == []
    assert not (run_dir / "stalls").exists()


def test_teardown_after_the_job_span_ended_is_never_a_stall(run_dir: Path) -> None:
    """After ``rl.job`` ends (ray.shutdown, a final upload), no step will end again: the
    watchdog stops judging, as it does not judge startup either. It used to fire a stall
    record, and call the hook that may abort the job, during a run's teardown."""
    fired: list[StallRecord] = []
    setup_telemetry(_config(run_dir, stall_after_s=0.2), on_stall=fired.append)
    try:
        with job_span():
            for n in range(2):
                with step_span(n), span(RL.TRAINING, "rl.train.policy"):
                    time.sleep(0.01)
        time.sleep(0.8)  # four thresholds of teardown; the watchdog polls every 50 ms
    finally:
        shutdown_telemetry()
    assert fired == []
    assert not (run_dir / "stalls").exists()


def _stuck_in_step(step: int, fired: list[StallRecord]) -> None:
    """Stay inside step ``step`` until the watchdog fires (at most 10 s)."""
    with step_span(step):
        deadline = time.monotonic() + 10
        while not fired and time.monotonic() < deadline:
            time.sleep(0.05)


def test_a_second_job_is_judged_again(run_dir: Path) -> None:
    """A sweep or a notebook opens ``rl.job`` twice under one setup: the second job's hang is
    a stall, though the first job's end stopped the judging for its teardown."""
    fired: list[StallRecord] = []
    setup_telemetry(_config(run_dir, stall_after_s=0.2), on_stall=fired.append)
    try:
        with job_span():
            with step_span(0):
                pass
        time.sleep(0.5)  # the first job's teardown, then the second job's startup: never judged
        assert fired == []
        with job_span():
            with step_span(0):
                pass
            _stuck_in_step(1, fired)
    finally:
        shutdown_telemetry()
    assert len(fired) == 1


def test_a_failing_hook_is_logged_and_the_run_goes_on(run_dir: Path, caplog) -> None:
    def hook(record: StallRecord) -> None:
        raise RuntimeError("pager down")

    setup_telemetry(_config(run_dir, stall_after_s=0.2), on_stall=hook)
    try:
        with step_span(0):
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any("on_stall hook raised" in r.getMessage()
                                                      for r in caplog.records):
            time.sleep(0.05)
    finally:
        shutdown_telemetry()
    assert any("on_stall hook raised" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), "5", True])
def test_a_bad_threshold_is_a_config_error_naming_the_field(value: object) -> None:
    with pytest.raises(ConfigError, match="stall_after_s"):
        TelemetryConfig(stall_after_s=value)  # type: ignore[arg-type]


_DYING_WORKER = """
import os, sys, time
from rlsight import RL, TelemetryConfig, setup_telemetry, span
setup_telemetry(TelemetryConfig(run_dir=sys.argv[1]), worker_group="generation", rank=0)
with span(RL.GENERATION, "rl.test.dead_generate"):
    time.sleep(0.3)  # the start record reaches the live file
    os._exit(1)
"""


def test_a_worker_dead_on_this_host_is_named_exited_in_the_stall_warning(run_dir: Path, caplog) -> None:
    """The die drill: 20 s after a generation worker os._exit-ed, the stall warning read
    'generation/0 (pid N) in rl.rollout.generate open 0m20s', as if it were still generating;
    it was not silent yet (30 s), but its pid was gone from the driver's own host."""
    import subprocess
    import sys

    fired: list[StallRecord] = []
    caplog.set_level(logging.WARNING, logger="rlsight")
    setup_telemetry(_config(run_dir, stall_after_s=0.6), on_stall=fired.append)
    try:
        subprocess.run([sys.executable, "-c", _DYING_WORKER, str(run_dir)], check=False, timeout=120)
        for n in range(3):
            with step_span(n), span(RL.TRAINING, "rl.train.policy"):
                time.sleep(0.01)
        with step_span(3):
            deadline = time.monotonic() + 10
            while not fired and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        shutdown_telemetry()
    (record,) = fired
    (worker,) = [p for p in record.processes if p.worker_group == "generation"]
    assert worker.alive is False
    assert f"generation/0 (pid {worker.pid}, exited) in rl.test.dead_generate open" in record.describe()
