"""Control characters in run data never reach the terminal raw from `report`, `runs` or `timeline`.

docs/reliability.md names this test for "hostile names cannot drive your terminal".
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
from _build import RunBuilder

from rlsight.cli import EXIT_OK, main
from rlsight.render._format import terminal_safe

_EVIL = "\x1b]0;pwned\x07\x1b[2J\u202e"


def _hostile_run(folder: Path) -> Path:
    run = RunBuilder(run_id="run" + _EVIL, algorithm="grpo" + _EVIL)
    d = run.process()
    step = d.step(1, 0, 10)
    d.span("train" + _EVIL, 1, 5, parent=step, bucket="productive")
    w = run.process("policy" + _EVIL, 0)
    w.span("rl.train.policy", 1, 4, bucket="productive")
    run_dir = run.write(folder / "evil")
    (run_dir / "traces" / ("x" + _EVIL + ".jsonl")).write_text("broken\n")
    return run_dir


@pytest.mark.parametrize("command", ["report", "runs", "timeline"])
def test_no_control_character_reaches_stdout_or_stderr(command: str, tmp_path: Path, capsys) -> None:
    run_dir = _hostile_run(tmp_path)
    argv = {"report": ["report", str(run_dir)], "runs": ["runs", str(tmp_path)],
            "timeline": ["timeline", str(run_dir), "-o", str(tmp_path / "t.json")]}[command]
    assert main(argv) == EXIT_OK
    captured = capsys.readouterr()
    out = captured.out + captured.err
    for ch in ("\x1b", "\x07", "\u202e"):
        assert ch not in out
    assert "\\x1b" in out  # shown, escaped, so the reader still sees something odd is there


def test_terminal_safe_keeps_newlines_tabs_and_printable_text() -> None:
    assert terminal_safe("a\tb\nc ü 步") == "a\tb\nc ü 步"
    assert terminal_safe("\x1b[31m\x9b\u2066") == "\\x1b[31m\\x9b\\u2066"
