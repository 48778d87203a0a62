"""Guard span-names: emitted names are documented, documented names are emitted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from _check_support import FixtureProject

TRAINER = "src/minirl/trainer.py"
DOC = "docs/spans.md"


def test_fixture_passes(minirl: FixtureProject) -> None:
    assert minirl.violations("span-names") == []


def test_renamed_emit_site_is_undocumented_and_names_file_and_line(minirl: FixtureProject) -> None:
    line = minirl.mutate(TRAINER, "setup_span(\"actors\")", "setup_span(\"actor_pool\")")
    problems = [v.problem for v in minirl.violations("span-names")]
    assert f"span 'rl.setup.actor_pool' emitted at {TRAINER}:{line} is not documented" in problems


def test_undocumented_span_is_reported_against_the_span_table(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, "setup_span(\"actors\")", "setup_span(\"actor_pool\")")
    undocumented = [v for v in minirl.violations("span-names") if "not documented" in v.problem]
    assert [(v.path, v.line) for v in undocumented] == [(DOC, None)]
    assert "add it to the table in docs/spans.md" in undocumented[0].fix


def test_renamed_emit_site_leaves_a_stale_row(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, "setup_span(\"actors\")", "setup_span(\"actor_pool\")")
    row = minirl.line_of(DOC, "`rl.setup.actors`")
    stale = [v for v in minirl.violations("span-names") if "documented but no checked source" in v.problem]
    assert [(v.path, v.line) for v in stale] == [(DOC, row)]


def test_removed_table_row_fails(minirl: FixtureProject) -> None:
    row = "| `minirl.sample` | `mini_sample` | productive | sampling in the `Sampler` actor |\n"
    minirl.mutate(DOC, row, "")
    problems = [v.problem for v in minirl.violations("span-names")]
    assert len(problems) == 1
    assert problems[0].startswith("span 'minirl.sample' emitted at src/minirl/actors.py:")


def test_renamed_constant_changes_every_site_using_it(minirl: FixtureProject) -> None:
    minirl.mutate("src/minirl/names.py", 'TRAIN = "minirl.train"', 'TRAIN = "minirl.update"')
    problems = [v.problem for v in minirl.violations("span-names")]
    assert any(p.startswith("span 'minirl.update' emitted at src/minirl/trainer.py:") for p in problems)


def test_traced_default_name_is_the_qualname(minirl: FixtureProject) -> None:
    minirl.mutate("src/minirl/actors.py", "def _score_one(", "def _score_single(")
    minirl.mutate("src/minirl/actors.py", "self._score_one(c)", "self._score_single(c)")
    problems = [v.problem for v in minirl.violations("span-names")]
    assert any("'Scorer._score_single'" in p and "not documented" in p for p in problems)


def test_group_column_mismatch_is_reported_at_the_emit_site(minirl: FixtureProject) -> None:
    line = minirl.mutate(TRAINER, "span(RL.TRAINING, Names.TRAIN)", "span(RL.OPTIMIZER, Names.TRAIN)")
    [violation] = minirl.violations("span-names")
    assert (violation.path, violation.line) == (TRAINER, line)
    assert "under group 'optimizer'" in violation.problem
    assert "documents it under 'training'" in violation.problem


def test_runtime_built_name_cannot_be_checked(minirl: FixtureProject) -> None:
    line = minirl.mutate(TRAINER, "span(RL.TRAINING, Names.TRAIN)", "span(RL.TRAINING, f\"minirl.{step}\")")
    violations = [v for v in minirl.violations("span-names") if v.line == line]
    assert len(violations) == 1
    assert "cannot tell which name" in violations[0].problem


def test_ignore_comment_silences_one_line(minirl: FixtureProject) -> None:
    minirl.mutate(
        TRAINER,
        "with span(RL.TRAINING, Names.TRAIN):",
        "with span(RL.TRAINING, f\"minirl.{step}\"):  # rlsight: ignore[span-names]",
    )
    minirl.mutate(DOC, "| `minirl.train` | `training` | productive | the policy update |\n", "")
    assert minirl.violations("span-names") == []


def test_placeholder_row_must_match_an_emitted_name(minirl: FixtureProject) -> None:
    text = (minirl.root / DOC).read_text()
    extra = "\n| span |\n|---|\n| `rl.setup.<phase>` |\n| `minirl.<gone>.x` |\n"
    (minirl.root / DOC).write_text(text + extra)
    [violation] = minirl.violations("span-names")
    assert "'minirl.<gone>.x'" in violation.problem


def test_table_inside_code_fence_is_not_documentation(minirl: FixtureProject) -> None:
    text = (minirl.root / DOC).read_text()
    (minirl.root / DOC).write_text("```\n" + text + "```\n")
    problems = [v.problem for v in minirl.violations("span-names")]
    assert problems == ["found nothing to check: no span table in the docs"]


def test_no_emit_sites_is_a_violation(fixture_project: Callable[[str], FixtureProject]) -> None:
    project = fixture_project("minirl")
    for name in ("trainer.py", "actors.py"):
        (project.root / "src/minirl" / name).unlink()
    problems = [v.problem for v in project.violations("span-names")]
    assert "found nothing to check: no span is emitted in the checked sources" in problems


def test_rlsight_fixed_names_need_no_row_in_a_foreign_project(minirl: FixtureProject) -> None:
    """rl.job/rl.step/rl.startup are documented by rlsight; a user table need not repeat them."""
    report = minirl.check(guards=("span-names",))
    assert report.ok
    assert "| `rl.step`" not in (minirl.root / DOC).read_text()


def test_helpers_imported_inside_a_function_are_followed(tmp_path: Path) -> None:
    """A lazy `from rlsight import span` in a worker method still emits a checked name (#9.11)."""
    from rlsight.check import load_check_config, run_check

    (tmp_path / "pyproject.toml").write_text('[tool.rlsight.check]\npaths = ["pkg"]\ndocs = "docs"\n')
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "worker.py").write_text(
        "def work():\n"
        "    from rlsight import RL, span\n"
        "    with span(RL.TRAINING, 'myrl.train.step'):\n"
        "        pass\n"
    )
    (tmp_path / "docs").mkdir()
    table = "| span | group |\n|---|---|\n| `myrl.other` | `training` |\n"
    (tmp_path / "docs" / "spans.md").write_text(table)
    config = load_check_config(pyproject=tmp_path / "pyproject.toml").with_overrides(
        guards=("span-names",), cwd=tmp_path)
    problems = [v.problem for v in run_check(config).violations]
    assert any("'myrl.train.step'" in p and "pkg/worker.py:3" in p for p in problems), problems


def _add_timer_sites(minirl: FixtureProject, table: str) -> int:
    path = minirl.root / TRAINER
    text = path.read_text(encoding="utf-8")
    line = text.count("\n") + 2
    path.write_text(
        text + "\nfrom rlsight import TimerBridge, record_span\n"
        f"BRIDGE = TimerBridge({table})\n"
        "def _recorded() -> None:\n"
        "    record_span(RL.TRAINING, 'minirl.recorded', 0.0, 1.0)\n",
        encoding="utf-8",
    )
    return line


def test_timer_bridge_rows_and_record_span_are_emit_sites(minirl: FixtureProject) -> None:
    _add_timer_sites(minirl, "{'gen': RL.GENERATION, 'update': (RL.TRAINING, 'minirl.update_actor')}")
    problems = [v.problem for v in minirl.violations("span-names")]
    undocumented = sorted(p.split("'")[1] for p in problems if "is not documented" in p)
    assert undocumented == ["minirl.recorded", "minirl.update_actor", "rl.timer.gen"]


def test_a_timer_bridge_table_the_check_cannot_read_is_reported(minirl: FixtureProject) -> None:
    line = _add_timer_sites(minirl, "dict(gen=RL.GENERATION)")
    violations = [v for v in minirl.violations("span-names") if "cannot tell which name" in v.problem]
    assert [(v.path, v.line) for v in violations] == [(TRAINER, line + 1)]


def test_a_timer_bridge_table_in_an_upper_case_constant_is_read(minirl: FixtureProject) -> None:
    path = minirl.root / TRAINER
    path.write_text(
        path.read_text(encoding="utf-8") + "\nfrom rlsight import TimerBridge\n"
        "TIMER_GROUPS = {'gen': RL.GENERATION}\n"
        "BRIDGE = TimerBridge(TIMER_GROUPS)\n",
        encoding="utf-8",
    )
    problems = [v.problem for v in minirl.violations("span-names")]
    assert [p.split("'")[1] for p in problems if "is not documented" in p] == ["rl.timer.gen"]
