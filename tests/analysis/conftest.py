"""Helpers shared by the analysis tests: build a run, analyse it, read seconds back."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _build import SEC, RunBuilder

from rlsight.analysis import RunReport, analyze_spans


def analyze(run: RunBuilder, **options: object) -> RunReport:
    """Analyse a hand-built run with the ``rl`` namespace's per_step membership."""
    return analyze_spans(run.records(), **options)  # type: ignore[arg-type]


@pytest.fixture
def run() -> RunBuilder:
    """An empty run to add processes and spans to."""
    return RunBuilder()


@pytest.fixture
def seconds() -> Callable[[int | float], float]:
    """Nanoseconds -> seconds, for asserting answers stated in seconds."""
    return lambda value: value / SEC
