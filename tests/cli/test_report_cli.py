"""`rlsight report`, `rlsight timeline` and `rlsight runs` end to end: exit codes, stdout, files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
from _build import RunBuilder

from rlsight.cli import EXIT_INPUT, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, main


def _write_run(folder: Path, *, run_id: str = "run1") -> Path:
    """Goodput 50%: job [0,20]; two steps of 10 s with 5 s of training each."""
    run = RunBuilder(run_id=run_id)
    d = run.process()
    job = d.span("rl.job", 0, 20, group="job")
    for n in range(2):
        step = d.step(n + 1, 10 * n, 10 * n + 10, parent=job)
        d.span("train", 10 * n, 10 * n + 5, parent=step, bucket="productive")
    w = run.process("policy", 0)
    w.span("rl.train.policy", 1, 4, bucket="productive")
    return run.write(folder / run_id)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return _write_run(tmp_path)


class TestReport:
    def test_json_prints_one_document_with_the_schema_version(self, run_dir, capsys):
        assert main(["report", str(run_dir), "--json"]) == EXIT_OK
        doc = json.loads(capsys.readouterr().out)
        assert doc["schema_version"] == 1
        assert doc["summary"]["goodput_pct"] == 50.0 and doc["summary"]["run_id"] == "run1"

    def test_the_text_report_goes_to_stdout_and_nothing_to_stderr(self, run_dir, capsys):
        assert main(["report", str(run_dir)]) == EXIT_OK
        out, err = capsys.readouterr()
        assert out.startswith("run run1  grpo  wall 0m20s  steps 2  goodput 50.0%")
        assert "0 record(s) skipped" in out and err == ""

    def test_fail_under_exits_1_when_goodput_is_lower(self, run_dir, capsys):
        assert main(["report", str(run_dir), "--fail-under", "60"]) == EXIT_PROBLEMS
        assert "goodput 50.0% is below --fail-under 60%" in capsys.readouterr().err

    def test_fail_under_passes_when_goodput_is_at_least_the_threshold(self, run_dir):
        assert main(["report", str(run_dir), "--fail-under", "50", "--json"]) == EXIT_OK

    def test_fail_under_outside_0_to_100_is_a_usage_error(self, run_dir, capsys):
        assert main(["report", str(run_dir), "--fail-under", "150"]) == EXIT_USAGE
        assert "not a percentage" in capsys.readouterr().err

    def test_a_missing_run_folder_exits_3(self, tmp_path, capsys):
        assert main(["report", str(tmp_path / "nope")]) == EXIT_INPUT
        err = capsys.readouterr().err
        assert err.startswith("rlsight report: no run folder at") and "rlsight runs" in err

    def test_a_run_folder_without_spans_exits_3(self, tmp_path, capsys):
        (tmp_path / "empty" / "traces").mkdir(parents=True)
        assert main(["report", str(tmp_path / "empty")]) == EXIT_INPUT
        assert "no spans in" in capsys.readouterr().err

    def test_a_run_whose_spans_all_are_still_open_says_so_and_points_at_watch(self, tmp_path, capsys):
        """A driver hung (or killed) in startup has start records and no ended span: the error
        asked whether the run enabled telemetry, which it had."""
        import time

        from rlsight import TelemetryConfig, job_span, setup_span, setup_telemetry, startup_span
        from rlsight.store._live import read_live

        run = tmp_path / "hung"
        with setup_telemetry(TelemetryConfig(run_dir=str(run))), job_span(), startup_span():
            with setup_span("workers"):
                deadline = time.monotonic() + 30
                while len(read_live(run).starts) < 3 and time.monotonic() < deadline:
                    time.sleep(0.02)  # the start records are written every 50 ms
                assert main(["report", str(run)]) == EXIT_INPUT
                (err,) = capsys.readouterr().err.splitlines()
                assert "3 span(s) started and none ended" in err and "rl.setup.workers" in err
                assert f"rlsight watch {run}" in err and "enable telemetry" not in err
                # The timeline draws what it found open (review: it exited 3 with them in hand).
                assert main(["timeline", str(run), "-o", str(tmp_path / "t.json")]) == EXIT_OK
                err = capsys.readouterr().err
                assert f"no span of {run} has ended; drawing the 3 that started" in err
                assert f"rlsight watch {run}" in err and "3 spans, 3 of them never ended" in err
        events = json.loads((tmp_path / "t.json").read_text())
        events = events["traceEvents"] if isinstance(events, dict) else events
        drawn = {e["name"] for e in events if e.get("ph") == "X"}
        assert drawn == {"rl.job", "rl.startup", "rl.setup.workers"}

    def test_a_saved_report_is_named_as_one_not_read_as_collector_files(self, run_dir, tmp_path, capsys):
        assert main(["report", str(run_dir), "--json"]) == EXIT_OK
        saved = tmp_path / "saved.json"
        saved.write_text(capsys.readouterr().out)
        for command, code in (("report", EXIT_INPUT), ("timeline", EXIT_INPUT), ("watch", EXIT_USAGE)):
            assert main([command, str(saved), *(["--once"] if command == "watch" else [])]) == code
            err = capsys.readouterr().err
            assert err.startswith(f"rlsight {command}: {saved} is a saved `rlsight report --json` "
                                  "document, not a run; pass the run folder")

    def test_a_folder_holding_nothing_readable_says_what_to_pass(self, tmp_path, capsys):
        (tmp_path / "notes").mkdir()
        assert main(["report", str(tmp_path / "notes")]) == EXIT_INPUT
        err = capsys.readouterr().err
        assert "holds neither a run" in err and err.rstrip().endswith("(`rlsight runs` lists ./rlsight-runs)")

    def test_skipped_records_are_counted_on_stdout_and_stderr(self, run_dir, capsys):
        with next((run_dir / "traces").glob("driver-*.jsonl")).open("a") as fh:
            fh.write('{"resourceSpans": [')
        assert main(["report", str(run_dir)]) == EXIT_OK
        out, err = capsys.readouterr()
        assert "1 record(s) skipped" in out and "truncated line" in out
        assert "skipped 1 unreadable record(s)" in err

    def test_html_writes_a_page(self, run_dir, tmp_path, capsys):
        page = tmp_path / "report.html"
        assert main(["report", str(run_dir), "--json", "--html", str(page)]) == EXIT_OK
        assert page.read_text().startswith("<!DOCTYPE html>")
        json.loads(capsys.readouterr().out)

    def test_without_the_analysis_extra_it_says_what_to_install(self, run_dir, capsys, monkeypatch):
        import importlib.util

        real = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: None if name == "numpy" else real(name, *a))
        assert main(["report", str(run_dir)]) == EXIT_USAGE
        assert "pip install 'rlsight[analysis]'" in capsys.readouterr().err

    def test_html_into_a_folder_is_a_usage_error(self, run_dir, tmp_path):
        assert main(["report", str(run_dir), "--html", str(tmp_path)]) == EXIT_USAGE

    def test_the_installed_command_runs_without_a_progress_bar_in_a_pipe(self, run_dir):
        proc = subprocess.run([sys.executable, "-m", "rlsight.cli", "report", str(run_dir), "--json"],
                              capture_output=True, text=True, check=False, timeout=120)
        assert proc.returncode == EXIT_OK and proc.stderr == ""
        assert json.loads(proc.stdout)["summary"]["steps"] == 2

    def test_python_dash_m_rlsight_runs_the_command(self, run_dir):
        """``python -m rlsight`` is the CLI where the entry point is not on PATH (#9.11)."""
        proc = subprocess.run([sys.executable, "-m", "rlsight", "report", str(run_dir), "--json"],
                              capture_output=True, text=True, check=False, timeout=120)
        assert proc.returncode == EXIT_OK, proc.stderr
        assert json.loads(proc.stdout)["summary"]["steps"] == 2


class TestTimeline:
    def test_writes_a_trace_event_file(self, run_dir, tmp_path, capsys):
        out = tmp_path / "trace.json"
        assert main(["timeline", str(run_dir), "-o", str(out)]) == EXIT_OK
        events = json.loads(out.read_text())["traceEvents"]
        assert sum(e["ph"] == "X" for e in events) == 6
        assert "ui.perfetto.dev" in capsys.readouterr().err

    def test_a_missing_run_folder_exits_3(self, tmp_path):
        assert main(["timeline", str(tmp_path / "nope"), "-o", str(tmp_path / "t.json")]) == EXIT_INPUT

    def test_output_into_a_folder_is_a_usage_error(self, run_dir, tmp_path):
        assert main(["timeline", str(run_dir), "-o", str(tmp_path)]) == EXIT_USAGE

    @staticmethod
    def _slices(out: Path) -> list[str]:
        return sorted(e["name"] for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X")

    def test_steps_keeps_the_spans_that_overlap_those_steps(self, run_dir, tmp_path):
        out = tmp_path / "trace.json"
        assert main(["timeline", str(run_dir), "-o", str(out), "--steps", "2"]) == EXIT_OK
        # Step 2 is [10 s, 20 s]: the job around it, the step and its training; not step 1's
        # spans nor the policy's span at [1 s, 4 s].
        assert self._slices(out) == ["rl.job", "rl.step", "train"]
        assert main(["timeline", str(run_dir), "-o", str(out), "--steps", ":1"]) == EXIT_OK
        assert self._slices(out) == ["rl.job", "rl.step", "rl.train.policy", "train"]

    def test_steps_without_such_a_step_is_a_usage_error(self, run_dir, tmp_path, capsys):
        out = tmp_path / "trace.json"
        assert main(["timeline", str(run_dir), "-o", str(out), "--steps", "5:9"]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert "--steps 5:9" in err and err.rstrip().endswith("; the run's steps are numbered 1 to 2")
        assert not out.exists()

    def test_max_spans_writes_the_earliest_and_says_so(self, run_dir, tmp_path, capsys):
        out = tmp_path / "trace.json"
        assert main(["timeline", str(run_dir), "-o", str(out), "--max-spans", "2"]) == EXIT_OK
        # Earliest starts: the job and step 1 at 0 s (train also starts at 0 s, one of them).
        names = self._slices(out)
        assert len(names) == 2 and "rl.job" in names
        assert "--steps" in capsys.readouterr().err
        # Three spans start at 0 s, the next at 1 s: the cut is told where Perfetto shows it.
        assert main(["timeline", str(run_dir), "-o", str(out), "--max-spans", "3"]) == EXIT_OK
        assert "(those starting before 1.000 s on the trace's time axis, " in capsys.readouterr().err


class TestRuns:
    def test_lists_runs_oldest_first_as_json(self, tmp_path, capsys):
        _write_run(tmp_path, run_id="b")
        _write_run(tmp_path, run_id="a")
        (tmp_path / "not-a-run").mkdir()
        assert main(["runs", str(tmp_path), "--json"]) == EXIT_OK
        doc = json.loads(capsys.readouterr().out)
        assert [r["run_id"] for r in doc["runs"]] == ["a", "b"]
        assert doc["runs"][0]["trace_files"] == 2 and doc["runs"][0]["algorithm"] == "grpo"

    def test_the_table_names_each_run(self, tmp_path, capsys):
        _write_run(tmp_path, run_id="[red]x")
        assert main(["runs", str(tmp_path)]) == EXIT_OK
        assert "[red]x" in capsys.readouterr().out

    def test_a_run_folder_given_as_dir_says_which_folder_lists_it(self, run_dir, tmp_path, capsys):
        assert main(["runs", str(run_dir)]) == EXIT_OK
        assert capsys.readouterr().err.strip() == (
            f"rlsight runs: no runs in {run_dir}; {run_dir} is a run itself: "
            f"`rlsight runs {tmp_path}` lists it")
        (tmp_path / "none").mkdir()
        assert main(["runs", str(tmp_path / "none")]) == EXIT_OK
        assert capsys.readouterr().err.strip() == f"rlsight runs: no runs in {tmp_path / 'none'}"

    def test_a_missing_folder_exits_3(self, tmp_path, capsys):
        assert main(["runs", str(tmp_path / "nope")]) == EXIT_INPUT
        assert "no folder at" in capsys.readouterr().err
