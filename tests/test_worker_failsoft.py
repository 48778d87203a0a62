"""A worker whose telemetry cannot start keeps running, after one warning."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import rlsight
from rlsight import RL, RlsightWarning, init_worker, is_span_group_enabled, span
from rlsight.errors import reset_warn_once


def test_unwritable_run_dir_warns_once_and_later_spans_are_noops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    env = {"RLSIGHT_RUN_DIR": str(blocker / "run"), "RLSIGHT_SPAN_GROUPS": "all"}
    reset_warn_once()
    telemetry = init_worker(environ=env, deferred=True)
    assert telemetry is not None
    try:
        with caplog.at_level(logging.WARNING, logger="rlsight"):
            with pytest.warns(RlsightWarning, match="could not start"):
                with span(RL.TRAINING, "rl.train.first") as first:
                    pass
            for _ in range(3):
                with span(RL.TRAINING, "rl.train.later"):
                    pass
        assert not first.is_recording()
        assert not is_span_group_enabled(RL.TRAINING)
    finally:
        report = telemetry.shutdown()
        rlsight.shutdown_telemetry()
    assert report.internal_errors == {"span-start": 1}
