"""Guard group-usage: umbrella groups via umbrella helpers; per-prompt work labelled per_prompt."""

from __future__ import annotations

from _check_support import FixtureProject

TRAINER = "src/minirl/trainer.py"


def test_fixture_passes(minirl: FixtureProject) -> None:
    assert minirl.violations("group-usage") == []


def test_umbrella_group_opened_with_span_fails(minirl: FixtureProject) -> None:
    line = minirl.mutate(TRAINER, "umbrella_span(EPISODE, EPISODE_SPAN)", "span(EPISODE, EPISODE_SPAN)")
    [violation] = minirl.violations("group-usage")
    assert (violation.path, violation.line) == (TRAINER, line)
    assert violation.problem.startswith("umbrella group 'mini_episode' is opened with span()")
    assert "umbrella_span('mini_episode', ...)" in violation.fix


def test_bucketed_group_opened_with_umbrella_span_fails(minirl: FixtureProject) -> None:
    line = minirl.mutate(TRAINER, "span(RL.TRAINING, Names.TRAIN)", "umbrella_span(RL.TRAINING, Names.TRAIN)")
    [violation] = minirl.violations("group-usage")
    assert (violation.path, violation.line) == (TRAINER, line)
    assert "opens the bucketed group 'training'" in violation.problem


def test_per_prompt_gated_span_under_a_per_step_group_fails(minirl: FixtureProject) -> None:
    gate = minirl.line_of(TRAINER, "if is_span_group_enabled(RL.PER_PROMPT):")
    line = minirl.mutate(TRAINER, "span(RL.PER_PROMPT, Names.PROMPT", "span(RL.DATA_PLANE, Names.PROMPT")
    [violation] = minirl.violations("group-usage")
    assert (violation.path, violation.line) == (TRAINER, line)
    assert f"gated on per_prompt at line {gate}" in violation.problem


def test_per_prompt_scope_relabels_so_the_span_passes(minirl: FixtureProject) -> None:
    minirl.mutate(
        TRAINER,
        "with span(RL.PER_PROMPT, Names.PROMPT, length=len(prompt)):",
        "with per_prompt_scope(), span(RL.DATA_PLANE, Names.PROMPT, length=len(prompt)):",
    )
    minirl.mutate(TRAINER, "    efficiency_span,\n", "    efficiency_span,\n    per_prompt_scope,\n")
    assert minirl.violations("group-usage") == []
