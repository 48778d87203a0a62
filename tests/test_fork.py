"""A forked child gets telemetry of its own: its spans reach the store under its own pid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import rlsight
from rlsight import RL, TelemetryConfig, span
from rlsight.store import read_spans


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_spans_ended_in_a_forked_child_are_stored_with_the_childs_identity(tmp_path: Path) -> None:
    rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=("all",)))
    try:
        with span(RL.TRAINING, "rl.test.before_fork"):
            pass
        pid = os.fork()
        if pid == 0:  # the child: emit, shut down, leave without running pytest's teardown
            code = 0
            try:
                with span(RL.TRAINING, "rl.test.in_child"):
                    pass
                rlsight.shutdown_telemetry(timeout_ms=5000)
            except BaseException:
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        with span(RL.TRAINING, "rl.test.after_fork"):
            pass
    finally:
        rlsight.shutdown_telemetry()
    spans = {s.name: s for s in read_spans(tmp_path).spans}
    assert set(spans) >= {"rl.test.before_fork", "rl.test.in_child", "rl.test.after_fork"}
    child, parent = spans["rl.test.in_child"], spans["rl.test.after_fork"]
    assert child.resource["process.pid"] == pid
    assert parent.resource["process.pid"] == os.getpid()
    assert child.resource["service.instance.id"] != parent.resource["service.instance.id"]
    assert child.resource["rl.worker_group"] == parent.resource["rl.worker_group"]
    assert any(str(pid) in p.name for p in (tmp_path / "traces").iterdir())
