"""The batch commands' memory policy (``commands/_memory``): numpy's huge-page requests off
for `rlsight report`."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from rlsight.cli import EXIT_OK, main
from rlsight.commands._memory import avoid_huge_pages

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
from _build import RunBuilder


def _write_run(folder: Path) -> Path:
    run = RunBuilder(run_id="run1")
    d = run.process()
    step = d.step(1, 0, 10)
    d.span("train", 0, 5, parent=step, bucket="productive")
    run.process("policy", 0).span("rl.train.policy", 1, 4, bucket="productive")
    return run.write(folder / "run1")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux-only policy")
def test_avoid_huge_pages_turns_off_numpys_huge_page_requests() -> None:
    """After a cold read, faults in huge-page arrays compact memory on the spot (0.7-0.9 s
    of system time on the 1M-span benchmark); `rlsight report` opts out before one."""
    switch = np._core.multiarray._set_madvise_hugepage
    before = switch(True)  # returns the setting it replaces
    try:
        avoid_huge_pages()
        assert switch(True) is False
    finally:
        switch(before)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux-only policy")
def test_report_avoids_huge_pages_cold_and_warm(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Off for a cold read and for the warm one after it (which would otherwise compact the
    memory the cold one left in 4 KiB pages)."""
    run_dir = _write_run(tmp_path)
    switch = np._core.multiarray._set_madvise_hugepage
    before = switch(True)
    try:
        assert main(["report", str(run_dir), "--json"]) == EXIT_OK  # cold: writes the cache
        assert switch(True) is False
        assert main(["report", str(run_dir), "--json"]) == EXIT_OK  # warm
        assert switch(True) is False
    finally:
        switch(before)
    capsys.readouterr()
