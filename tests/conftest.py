"""Shared fixtures: a run folder per test and an in-memory capture of what rlsight emits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlsight.testing import Capture, capture_telemetry


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A fresh, not yet created run folder (rlsight creates it on setup)."""
    return tmp_path / "run"


@pytest.fixture
def capture(run_dir: Path) -> Iterator[Capture]:
    """Telemetry set up with every span group on, recording into memory and ``run_dir``."""
    with capture_telemetry(run_dir=run_dir) as cap:
        yield cap
