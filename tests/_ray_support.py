"""Helpers for tests that use the session's Ray cluster (a module: conftest is not importable)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlsight import TelemetryConfig
from rlsight.store import SpanRecord, read_spans


@dataclass(frozen=True)
class RayCluster:
    """The session's cluster: the config its workers run with and where they write."""

    config: TelemetryConfig

    @property
    def run_dir(self) -> Path:
        return self.config.run_path


def wait_for_spans(
    run_dir: Path,
    done: Callable[[Sequence[SpanRecord]], bool],
    *,
    timeout_s: float = 20.0,
) -> list[SpanRecord]:
    """Read the store until ``done(spans)`` holds (stores write through every 100 ms).

    Returns the last read either way, so the caller's assertions show what was missing.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        spans = read_spans(run_dir).spans
        if done(spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.1)
