"""``rlsight check``: exit codes, the human report, --json and --write-docs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from _check_support import FixtureProject

from rlsight.check import load_check_config, run_check
from rlsight.commands import check as check_command


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch, cwd: Path) -> int:
    monkeypatch.chdir(cwd)
    parser = argparse.ArgumentParser(prog="rlsight check")
    check_command.add_arguments(parser)
    return check_command.run(parser.parse_args(argv))


def test_clean_project_exits_0_with_a_summary(
    minirl: FixtureProject, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run([], monkeypatch, minirl.root) == 0
    out = capsys.readouterr().out
    assert out.startswith("no problems (span names: 10 emitted, 7 documented; ")


def test_violation_exits_1_in_the_ux_format(
    minirl: FixtureProject, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line = minirl.mutate("src/minirl/trainer.py", 'setup_span("actors")', 'setup_span("pool")')
    assert _run(["--guard", "span-names"], monkeypatch, minirl.root) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"docs/spans.md: span 'rl.setup.pool' emitted at src/minirl/trainer.py:{line} is not documented"
    )
    assert out[1] == "  fix: add it to the table in docs/spans.md, or rename the emit site"
    assert out[-1] == "2 problems (span names: 10 emitted, 7 documented)"


def test_json_is_one_document_with_schema_version(
    minirl: FixtureProject, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    minirl.mutate("src/minirl/trainer.py", 'setup_span("actors")', 'setup_span("pool")')
    assert _run(["--json"], monkeypatch, minirl.root) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1
    assert doc["ok"] is False
    assert {g["guard"] for g in doc["guards"]} >= {"span-names", "carriers"}
    assert doc["problems"][0]["guard"] == "span-names"
    assert set(doc["problems"][0]) == {"guard", "path", "line", "problem", "fix"}


def test_missing_path_exits_2(
    minirl: FixtureProject, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["no/such/dir"], monkeypatch, minirl.root) == 2
    assert "rlsight check: path no/such/dir does not exist" in capsys.readouterr().err


def test_syntax_error_exits_2_naming_file_and_line(
    minirl: FixtureProject, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (minirl.root / "src/minirl/broken.py").write_text("x = 1\ndef (:\n")
    assert _run([], monkeypatch, minirl.root) == 2
    assert "src/minirl/broken.py:2: not valid Python" in capsys.readouterr().err


def test_missing_docs_folder_exits_2(
    minirl: FixtureProject, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["--docs", "nope"], monkeypatch, minirl.root) == 2
    assert "docs folder nope does not exist" in capsys.readouterr().err


def test_unknown_guard_exits_2(minirl: FixtureProject, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(["--guard", "everything"], monkeypatch, minirl.root) == 2


def test_paths_argument_overrides_the_config(
    minirl: FixtureProject, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["src/minirl/metrics.py", "--guard", "logger-keys"], monkeypatch, minirl.root) == 1
    assert "found nothing to check: no dict display" in capsys.readouterr().out


def test_installed_cli_runs_check_as_a_subprocess(minirl: FixtureProject) -> None:
    """The real entry point (argument parsing in rlsight.cli, exit code through sys.exit)."""
    import subprocess
    import sys

    ok = subprocess.run(
        [sys.executable, "-m", "rlsight.cli", "check", "--json"],
        cwd=minirl.root, capture_output=True, text=True, timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ok"] is True
    minirl.mutate("src/minirl/trainer.py", 'setup_span("actors")', 'setup_span("pool")')
    failing = subprocess.run(
        [sys.executable, "-m", "rlsight.cli", "check"],
        cwd=minirl.root, capture_output=True, text=True, timeout=120,
    )
    assert failing.returncode == 1
    assert "rl.setup.pool" in failing.stdout


def _tiny_project(root: Path, guards: str = "") -> Path:
    """A day-one user project: spans and a span table, no waits, no Ray hops, no teed scalars,
    no generated blocks."""
    (root / "src" / "tiny").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "pyproject.toml").write_text(f'[tool.rlsight.check]\npaths = ["src/tiny"]\n{guards}')
    (root / "src" / "tiny" / "__init__.py").write_text("")
    (root / "src" / "tiny" / "loop.py").write_text(
        "from rlsight import RL, job_span, span, step_span\n\n\n"
        "def main():\n    with job_span():\n        for step in range(3):\n"
        '            with step_span(step), span(RL.GENERATION, "tiny.generate"):\n'
        "                pass\n"
    )
    (root / "docs" / "spans.md").write_text("| span | group |\n|---|---|\n| `tiny.generate` | generation |\n")
    return root / "pyproject.toml"


def test_a_day_one_project_passes_the_default_guards_it_does_not_use(tmp_path: Path) -> None:
    """With `guards` left at its default, a feature the project does not use at all (waits,
    carriers, teed scalars, generated blocks) is not "found nothing to check"."""
    report = run_check(load_check_config(pyproject=_tiny_project(tmp_path)))
    assert report.ok, [v.problem for v in report.violations]
    assert len(report.results) == 7


def test_a_guard_named_in_guards_still_needs_something_to_check(tmp_path: Path) -> None:
    guards = 'guards = ["span-names", "efficiency-categories", "carriers", "logger-keys"]\n'
    report = run_check(load_check_config(pyproject=_tiny_project(tmp_path, guards)))
    nothing = {v.guard for v in report.violations if v.problem.startswith("found nothing to check")}
    assert nothing == {"efficiency-categories", "carriers", "logger-keys"}


def test_a_half_used_feature_still_fails_with_the_default_guards(tmp_path: Path) -> None:
    """A declared logger key that nothing produces is drift, named or not."""
    pyproject = _tiny_project(tmp_path)
    (tmp_path / "src" / "tiny" / "metrics.py").write_text(
        "from rlsight.metrics import MetricSpec, register_metric_group\n"
        'register_metric_group("tiny", [MetricSpec("tiny.loss", "train/loss", "gauge", "1", "loss")])\n'
    )
    report = run_check(load_check_config(pyproject=pyproject))
    assert [v.guard for v in report.violations] == ["logger-keys"]
