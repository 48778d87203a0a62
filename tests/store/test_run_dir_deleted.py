"""A run folder deleted or replaced while the run writes: detected, warned once, recreated, counted."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import pytest

from rlsight import TelemetryConfig, setup_telemetry
from rlsight.spans import span
from rlsight.store import read_spans


def _wait_written(telemetry: object, n: int) -> None:
    store = next(p for p in telemetry._processors if p.name == "store")  # type: ignore[attr-defined]
    deadline = time.monotonic() + 5
    while store.exported < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.exported >= n


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_deleted_run_folder_is_recreated_and_the_loss_reported(
        how: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Spans after the deletion land in a new folder; the ShutdownReport counts the lost ones."""
    run_dir = tmp_path / "run"
    telemetry = setup_telemetry(TelemetryConfig(run_dir=str(run_dir), span_groups=("all",)))
    try:
        for i in range(3):
            with span("generation", "rl.test.before", seq=i):
                pass
        _wait_written(telemetry, 3)
        shutil.rmtree(run_dir)
        if how == "replaced":
            (run_dir / "traces").mkdir(parents=True)
        with caplog.at_level(logging.WARNING, logger="rlsight"):
            for i in range(2):
                with span("generation", "rl.test.after", seq=i):
                    pass
            _wait_written(telemetry, 5)
    finally:
        report = telemetry.shutdown()
    assert sorted(s.name for s in read_spans(run_dir).spans) == ["rl.test.after"] * 2
    assert report.dropped.get("store/run_dir_deleted") == 3
    # One warning per store file (the metrics file may warn too, with what it lost).
    warnings = [r.getMessage() for r in caplog.records if "deleted or replaced" in r.getMessage()
                and "/traces/" in r.getMessage()]
    assert len(warnings) == 1 and "3 record(s)" in warnings[0]
