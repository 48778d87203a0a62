"""Fixture projects for the drift guards, copied to a temp folder so tests can mutate them."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from _check_support import FIXTURES, FixtureProject


@pytest.fixture
def fixture_project(tmp_path: Path) -> Callable[[str], FixtureProject]:
    """``fixture_project("minirl")``: a fresh copy of ``tests/check/fixtures/minirl``."""

    def make(name: str) -> FixtureProject:
        dest = tmp_path / name
        shutil.copytree(FIXTURES / name, dest)
        return FixtureProject(dest)

    return make


@pytest.fixture
def minirl(fixture_project: Callable[[str], FixtureProject]) -> FixtureProject:
    """The small fixture project that exercises every guard."""
    return fixture_project("minirl")
