"""Guard efficiency-categories: every category used is declared."""

from __future__ import annotations

from _check_support import FixtureProject

TRAINER = "src/minirl/trainer.py"


def test_fixture_passes(minirl: FixtureProject) -> None:
    assert minirl.violations("efficiency-categories") == []


def test_removed_declaration_fails_at_the_use(minirl: FixtureProject) -> None:
    minirl.mutate("src/minirl/groups.py", "declare_efficiency_categories(ENV_WAIT)\n", "")
    line = minirl.line_of(TRAINER, "efficiency_span(ENV_WAIT)")
    [violation] = minirl.violations("efficiency-categories")
    assert (violation.path, violation.line) == (TRAINER, line)
    assert violation.problem.startswith("efficiency category 'idle/env_wait' is not declared")


def test_misspelt_category_suggests_the_declared_one(minirl: FixtureProject) -> None:
    line = minirl.mutate(TRAINER, "efficiency_span(ENV_WAIT)", 'efficiency_span("idle/env_wiat")')
    [violation] = minirl.violations("efficiency-categories")
    assert violation.line == line
    assert "(did you mean 'idle/env_wait'?)" in violation.problem


def test_rlsight_builtin_categories_count_as_declared(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, "efficiency_span(ENV_WAIT)", 'efficiency_span("idle/buffer_starvation")')
    assert minirl.violations("efficiency-categories") == []


def test_no_use_is_a_violation(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, "with efficiency_span(ENV_WAIT):", "if True:")
    [violation] = minirl.violations("efficiency-categories")
    assert violation.problem == "found nothing to check: no efficiency_span(...) call in the checked sources"
