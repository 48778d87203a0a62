"""`rlsight diff` end to end on two real runs written by the store: a known delay is found."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rlsight import RL, job_span, span, step_span
from rlsight.cli import EXIT_INPUT, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, main
from rlsight.testing import FakeClock, capture_telemetry

DELAY_S = 0.3
STEPS = 5


def _real_run(run_dir: Path, run_id: str, *, refit_delay: float, groups: tuple[str, ...]) -> Path:
    """A driver loop through the real SDK and local store, timed by a fake clock; the refit
    phase takes ``refit_delay`` more."""
    clock = FakeClock()
    with capture_telemetry(run_dir=run_dir, run_id=run_id, span_groups=groups, algorithm="grpo",
                           clock=clock), job_span():
        # A real job starts before its first step: with a fake clock the two would start on
        # the same nanosecond, and the job would count as a span of step 1.
        clock.advance(0.01)
        for step in range(1, STEPS + 1):
            with step_span(step):
                with span(RL.GENERATION, "rl.rollout.generate"):
                    clock.advance(0.05)
                with span(RL.TRAINING, "rl.train.policy"):
                    clock.advance(0.05)
                with span(RL.REFIT, "rl.refit.push_weights"):
                    clock.advance(0.02 + refit_delay)
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("diff")
    a = _real_run(root / "a", "base", refit_delay=0.0, groups=("per_step",))
    b = _real_run(root / "b", "slow", refit_delay=DELAY_S, groups=("per_step",))
    return a, b


def _diff_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["diff", *argv, "--json"]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


class TestKnownDelay:
    def test_the_delayed_phase_is_the_change_with_its_sign_and_size(self, runs, capsys):
        doc = _diff_json(capsys, str(runs[0]), str(runs[1]))
        top = doc["spans"][0]
        assert top["name"] == "rl.refit.push_weights"
        assert top["change_ns"] == pytest.approx(DELAY_S * 1e9)
        assert doc["step_change_pct"] > 0

    def test_swapping_the_runs_flips_the_sign(self, runs, capsys):
        doc = _diff_json(capsys, str(runs[1]), str(runs[0]))
        assert doc["spans"][0]["name"] == "rl.refit.push_weights"
        assert doc["spans"][0]["change_ns"] == pytest.approx(-DELAY_S * 1e9)

    @pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
    def test_a_saved_report_json_is_a_valid_side(self, runs, capsys, tmp_path, encoding):
        # utf-16: what PowerShell's `>` writes
        assert main(["report", str(runs[0]), "--json"]) == EXIT_OK
        saved = tmp_path / "base.json"
        saved.write_text(capsys.readouterr().out, encoding=encoding)
        doc = _diff_json(capsys, str(saved), str(runs[1]))
        assert doc["a"]["run_id"] == "base" and doc["spans"][0]["name"] == "rl.refit.push_weights"


class TestGate:
    def test_fail_if_slower_exits_1_when_b_is_slower_by_more(self, runs, capsys):
        assert main(["diff", str(runs[0]), str(runs[1]), "--fail-if-slower", "10"]) == EXIT_PROBLEMS
        assert "more than --fail-if-slower 10%" in capsys.readouterr().err

    def test_fail_if_slower_passes_when_b_is_faster(self, runs, capsys):
        assert main(["diff", str(runs[1]), str(runs[0]), "--fail-if-slower", "0"]) == EXIT_OK

    def test_a_negative_threshold_is_a_usage_error(self, runs, capsys):
        assert main(["diff", str(runs[0]), str(runs[1]), "--fail-if-slower", "-5"]) == EXIT_USAGE

    @pytest.mark.parametrize("pct", ["nan", "inf"])
    def test_a_threshold_no_change_can_pass_is_a_usage_error(self, runs, capsys, pct):
        """NaN compares false with every change, so the gate could never fail: a CI job that
        got `nan` from an unset variable would pass every regression."""
        assert main(["diff", str(runs[0]), str(runs[1]), "--fail-if-slower", pct]) == EXIT_USAGE
        assert "--fail-if-slower" in capsys.readouterr().err


class TestOutput:
    def test_the_terminal_diff_heads_with_both_runs_and_the_step_change(self, runs, capsys):
        assert main(["diff", str(runs[0]), str(runs[1])]) == EXIT_OK
        out, err = capsys.readouterr()
        first = out.splitlines()[0]
        assert first.startswith("A base (grpo)  vs  B slow (grpo)      median step ")
        assert "rl.refit.push_weights" in out and err == ""

    def test_html_writes_a_page_whose_tables_hold_the_change(self, runs, capsys, tmp_path):
        page = tmp_path / "diff.html"
        assert main(["diff", str(runs[0]), str(runs[1]), "--html", str(page)]) == EXIT_OK
        cells: list[str] = []

        class Cells(HTMLParser):
            def handle_data(self, data: str) -> None:
                cells.append(data)

        Cells().feed(page.read_text())
        assert "rl.refit.push_weights" in cells
        assert any(c.startswith("+0.") for c in cells)


class TestInput:
    def test_a_missing_run_exits_3_naming_it(self, runs, capsys, tmp_path):
        assert main(["diff", str(runs[0]), str(tmp_path / "nope")]) == EXIT_INPUT
        assert f"no run folder or report file at {tmp_path / 'nope'}" in capsys.readouterr().err

    def test_a_file_that_is_not_a_report_exits_3(self, runs, capsys, tmp_path):
        bad = tmp_path / "bad.json"
        bad.write_text('{"schema_version": 99}')
        assert main(["diff", str(bad), str(runs[0])]) == EXIT_INPUT
        assert "schema_version 99" in capsys.readouterr().err

    def test_another_commands_json_is_refused_naming_the_file_and_what_it_lacks(
            self, runs, capsys, tmp_path):
        """`rlsight watch --json` output has a schema_version too; it is not a report."""
        assert main(["watch", str(runs[0]), "--json"]) in (EXIT_OK, 3)
        watch = tmp_path / "watch.json"
        watch.write_text(capsys.readouterr().out)
        assert main(["diff", str(watch), str(runs[1])]) == EXIT_INPUT
        err = capsys.readouterr().err
        assert err.startswith(f"rlsight diff: {watch} is not a `rlsight report --json` document: ")
        assert "lacks summary" in err and "`rlsight watch --json` output" in err

    @pytest.mark.parametrize(("edit", "named"), [
        (lambda d: d["summary"]["buckets"].update(wall_ns="5"),
         'summary.buckets.wall_ns: is "5" (a string), expected an integer'),
        (lambda d: d["steps"][1].pop("buckets"), "steps[1]: lacks buckets"),
        (lambda d: d.update(step_summary=[1]), "step_summary: is an array, expected an object or null"),
        (lambda d: d["summary"]["buckets"].update(wall_ns=d["summary"]["buckets"]["wall_ns"] + 1),
         "summary.buckets: the buckets sum to"),
    ])
    def test_a_damaged_saved_report_names_the_field_at_fault(self, runs, capsys, tmp_path, edit, named):
        assert main(["report", str(runs[0]), "--json"]) == EXIT_OK
        doc = json.loads(capsys.readouterr().out)
        edit(doc)
        saved = tmp_path / "base.json"
        saved.write_text(json.dumps(doc))
        assert main(["diff", str(saved), str(runs[1])]) == EXIT_INPUT
        err = capsys.readouterr().err
        assert err.startswith(f"rlsight diff: {saved} is not a `rlsight report --json` document: ")
        assert named in err and "bug" not in err

    def test_collector_files_holding_two_runs_are_a_usage_error(self, runs, capsys, tmp_path):
        """cli.md's exit-code table: several runs and no --run-id is 2, for diff too (reviewer r1)."""
        both = tmp_path / "otel.json"
        both.write_text("".join(f.read_text() for run in runs for f in (run / "traces").glob("*.jsonl")))
        assert main(["diff", str(runs[0]), str(both)]) == EXIT_USAGE
        assert "hold 2 runs" in capsys.readouterr().err


def _steps(run_dir: Path, run_id: str, seconds: float, *, fail_in: int | None = None) -> None:
    import time

    with capture_telemetry(run_dir=run_dir, run_id=run_id), job_span():
        for n in (1, 2, 3):
            with step_span(n), span(RL.TRAINING, "rl.train.policy"):
                time.sleep(seconds)
                if n == fail_in:
                    raise RuntimeError("loss is NaN")


def test_a_run_that_hung_or_failed_is_not_faster_and_fails_the_gate(tmp_path: Path, capsys) -> None:
    """Drill: a run that hung in step 5 and was killed read 'median step 2.21s -> 0.508s (-77%)'
    against a healthy one (its median covers the four short steps that ended) and passed
    --fail-if-slower 5; one that crashed in step 5 read the same."""
    import time

    from rlsight.store._live import read_live

    healthy, failed, hung = tmp_path / "healthy", tmp_path / "failed", tmp_path / "hung"
    _steps(healthy, "healthy", 0.05)
    with pytest.raises(RuntimeError):
        _steps(failed, "failed", 0.001, fail_in=3)
    assert main(["diff", str(healthy), str(failed), "--fail-if-slower", "5"]) == EXIT_PROBLEMS
    out, err = capsys.readouterr()
    assert "B did not finish: failed in step 3: RuntimeError: loss is NaN" in out
    assert "B did not finish: failed in step 3" in err
    assert main(["diff", str(healthy), str(healthy), "--fail-if-slower", "5"]) == EXIT_OK
    assert "did not finish" not in capsys.readouterr().out
    with capture_telemetry(run_dir=hung, run_id="hung"), job_span():
        with step_span(1), span(RL.TRAINING, "rl.train.policy"):
            pass
        with step_span(2), span(RL.TRAINING, "rl.train.policy"):
            deadline = time.monotonic() + 5
            while "rl.train.policy" not in {s.name for s in read_live(hung).starts}:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            gate = ["diff", str(healthy), str(hung), "--fail-if-slower", "5", "--json"]
            assert main(gate) == EXIT_PROBLEMS
    doc = json.loads(capsys.readouterr().out)
    assert doc["b"]["unfinished"].startswith("step 2 never ended") and doc["a"]["unfinished"] is None


def test_a_failed_run_without_start_records_still_reads_failed(tmp_path: Path, capsys) -> None:
    """Review: the post-mortem was None without ``live/`` (Collector files), and the error
    fields lived in it: the report did not say 'failed' and ``diff --fail-if-slower`` passed a
    run whose job raised (rc 0; 1 with ``live/``)."""
    import shutil

    healthy, failed = tmp_path / "healthy", tmp_path / "failed"
    _steps(healthy, "healthy", 0.05)
    with pytest.raises(RuntimeError):
        _steps(failed, "failed", 0.001, fail_in=3)
    shutil.rmtree(failed / "live")
    assert main(["report", str(failed)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "; failed in step 3: RuntimeError: loss is NaN (see errors)" in out.splitlines()[0]
    assert "open at end  not recorded (no start records in this run folder)" in out
    assert main(["diff", str(healthy), str(failed), "--fail-if-slower", "5"]) == EXIT_PROBLEMS
    assert "B did not finish: failed in step 3" in capsys.readouterr().err
    assert main(["report", str(failed), "--json"]) == EXIT_OK
    pm = json.loads(capsys.readouterr().out)["postmortem"]
    assert pm["start_records"] is False and pm["processes"] == [] and pm["errors"] == 3
