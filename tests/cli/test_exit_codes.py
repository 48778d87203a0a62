"""One exit-code table for every command: bugs, unusable outputs and missing extras (#15.7)."""

from __future__ import annotations

import sys

import pytest

from rlsight.cli import EXIT_BROKEN_PIPE, EXIT_BUG, EXIT_INPUT, EXIT_USAGE, main
from rlsight.commands import runs as runs_command
from rlsight.errors import ConfigError


def _explode(*_args: object) -> None:
    raise RuntimeError("boom")


class TestUnexpectedException:
    def test_is_exit_1_and_says_it_is_a_bug(self, tmp_path, monkeypatch, capsys):
        monkeypatch.setattr(runs_command, "list_runs", _explode)
        assert main(["runs", str(tmp_path), "--json"]) == EXIT_BUG
        err = capsys.readouterr().err
        assert "rlsight runs: unexpected RuntimeError: boom; this is a bug" in err
        assert "--debug" in err and "Traceback" not in err

    def test_debug_prints_the_traceback_and_keeps_the_code(self, tmp_path, monkeypatch, capsys):
        monkeypatch.setattr(runs_command, "list_runs", _explode)
        assert main(["--debug", "runs", str(tmp_path), "--json"]) == EXIT_BUG
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "_explode" in err
        assert "this is a bug" in err


def test_a_documented_rlsight_error_is_its_message_not_a_bug(tmp_path, monkeypatch, capsys):
    def refuse(*_args: object) -> None:
        raise ConfigError("TelemetryConfig.run_dir='x' is bad; pick another")

    monkeypatch.setattr(runs_command, "list_runs", refuse)
    assert main(["runs", str(tmp_path), "--json"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == "rlsight runs: TelemetryConfig.run_dir='x' is bad; pick another\n"


@pytest.mark.parametrize(("argv", "flag"), [
    (["report", "{missing}", "--html", "{nodir}/x.html"], "--html"),
    (["diff", "{missing}", "{missing}", "--html", "{nodir}/x.html"], "--html"),
    (["timeline", "{missing}", "-o", "{nodir}/t.json"], "-o"),
])
def test_an_output_in_a_missing_folder_fails_before_the_input_is_read(argv, flag, tmp_path, capsys):
    args = [a.format(missing=tmp_path / "no-run", nodir=tmp_path / "nodir") for a in argv]
    assert main(args) == EXIT_USAGE  # not 3: the missing run folder is never looked at
    err = capsys.readouterr().err
    assert f"{flag} {tmp_path / 'nodir'}" in err and "does not exist" in err


_COMMANDS = [
    (["report", "RUN"], "report", "analysis"),
    (["watch", "RUN", "--once"], "watch", "analysis"),
    (["timeline", "RUN"], "timeline", "analysis"),
    (["diff", "RUN", "RUN"], "diff", "analysis"),
    (["runs", "RUN"], "runs", "analysis"),
    (["demo", "--steps", "1"], "demo", "demo"),
    (["export", "RUN", "--otlp-endpoint", "http://127.0.0.1:9", "--protocol", "grpc"], "export", "grpc"),
]


@pytest.mark.parametrize(("argv", "command", "extra"), _COMMANDS)
def test_a_missing_extra_is_one_message_and_code_for_every_command(
    argv, command, extra, tmp_path, monkeypatch, capsys
):
    # A None entry is how Python blocks an import: find_spec then reports the module missing.
    monkeypatch.setitem(sys.modules, "orjson", None)
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "grpc", None)
    args = [str(tmp_path) if a == "RUN" else a for a in argv]
    assert main(args) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rlsight {command}: needs ")
    assert err.endswith(f"from the {extra} extra; install it with: pip install 'rlsight[{extra}]'")


@pytest.mark.parametrize("url", ["localhost:4318", "ftp://collector:4318", "not a url"])
def test_export_to_a_malformed_endpoint_is_a_usage_error(url, tmp_path, capsys):
    # docs/cli.md: a bad flag value is exit 2; 3 is for a RUN_DIR missing or not writable.
    (tmp_path / "traces").mkdir()
    assert main(["export", str(tmp_path), "--otlp-endpoint", url]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith(f"rlsight export: --otlp-endpoint {url!r}: ")
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("layout", ["runs root", "no run"])
def test_export_of_a_folder_holding_no_run_is_exit_3_and_writes_nothing(layout, tmp_path, capsys):
    """`rlsight export rlsight-runs ...` once sent nothing, exited 0 and left an export/ folder."""
    if layout == "runs root":
        (tmp_path / "run-a" / "traces").mkdir(parents=True)
    assert main(["export", str(tmp_path), "--otlp-endpoint", "http://127.0.0.1:9"]) == EXIT_INPUT
    err = capsys.readouterr().err
    expected = "is a folder of runs (run-a), not a run" if layout == "runs root" else "holds no run"
    assert err.startswith(f"rlsight export: {tmp_path} {expected}") and "; pass " in err
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("json_flag", [["--json"], []], ids=["print", "rich"])
def test_a_closed_pipe_ends_the_command_quietly(json_flag, tmp_path, monkeypatch, capsys):
    """`rlsight runs --json | head`: exit 141 as other tools, no 'Broken pipe' error line."""
    import os

    (tmp_path / "run-a" / "traces").mkdir(parents=True)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone: every write to the pipe fails with EPIPE
    with os.fdopen(write_end, "w") as closed_pipe:
        monkeypatch.setattr(sys, "stdout", closed_pipe)
        assert main(["runs", str(tmp_path), *json_flag]) == EXIT_BROKEN_PIPE
        monkeypatch.undo()
    assert capsys.readouterr().err == ""
