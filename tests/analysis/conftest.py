"""Fixtures shared by the analysis tests."""

from __future__ import annotations

import pytest
from _build import RunBuilder


@pytest.fixture
def run() -> RunBuilder:
    """An empty run to add processes and spans to."""
    return RunBuilder()
