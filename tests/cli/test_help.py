"""``rlsight COMMAND --help`` is read in a terminal: plain text, every command listed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlsight.cli import _COMMANDS, main


@pytest.mark.parametrize("command", sorted(_COMMANDS))
def test_each_commands_help_is_plain_text(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"usage: rlsight {command}" in out
    assert "``" not in out, "reStructuredText markers leaked into the terminal help"


def test_the_top_level_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in _COMMANDS:
        assert command in out
    assert "``" not in out


def test_a_bad_demo_flag_names_the_command_the_user_typed():
    pytest.importorskip("ray")
    # In a child: importing the demo registers its metric group for the rest of a session.
    done = subprocess.run([sys.executable, "-m", "rlsight.cli", "demo", "--mode", "fast"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "rlsight demo: error: argument --mode" in done.stderr
    assert "python -m" not in done.stderr


def test_version_prints_what_the_package_says_on_stdout(capsys):
    import rlsight

    assert main(["--version"]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"rlsight {rlsight.__version__}\n"
    assert captured.err == ""
