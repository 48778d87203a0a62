"""docs/propagation.md: its runnable example runs, and every other block says why it does not."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

_PAGE = Path(__file__).resolve().parents[2] / "docs" / "propagation.md"
_BLOCK = re.compile(r"(<!-- not run: [^>]+ -->\s*)?```(\w+)\n(.*?)```", re.DOTALL)


def _python_blocks() -> list[tuple[bool, str]]:
    """(runs, code) for each python block of the page."""
    blocks = _BLOCK.finditer(_PAGE.read_text())
    return [(not m.group(1), m.group(3)) for m in blocks if m.group(2) == "python"]


def test_the_page_has_exactly_one_runnable_example() -> None:
    assert [runs for runs, _ in _python_blocks()].count(True) == 1


@pytest.mark.ray
def test_the_runnable_example_prints_one_trace_across_three_processes(tmp_path: Path) -> None:
    """Runs in its own process: it starts (and stops) a Ray instance of its own."""
    (code,) = [code for runs, code in _python_blocks() if runs]
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("rl.")]
    assert [(name, group) for name, group, _ in lines] == [
        ("rl.step", "driver"), ("rl.rollout.generate", "generation"), ("rl.reward.score", "Reward"),
    ]
    assert len({pid for _, _, pid in lines}) == 3
