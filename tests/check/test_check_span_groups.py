"""Guard span-groups: registered ⊆ emitted, and every group used is registered."""

from __future__ import annotations

from _check_support import FixtureProject

GROUPS = "src/minirl/groups.py"
ACTORS = "src/minirl/actors.py"
TRAINER = "src/minirl/trainer.py"


def test_fixture_passes(minirl: FixtureProject) -> None:
    assert minirl.violations("span-groups") == []


def test_group_without_emitter_fails_at_its_registration(minirl: FixtureProject) -> None:
    minirl.mutate(ACTORS, "    @traced(SCORE)\n", "")
    line = minirl.line_of(GROUPS, "SpanGroup(SCORE,")
    [violation] = minirl.violations("span-groups")
    assert (violation.path, violation.line) == (GROUPS, line)
    assert violation.problem == "span group 'mini_score' is registered but nothing emits it"


def test_unregistered_group_at_emit_site_fails_there(minirl: FixtureProject) -> None:
    line = minirl.mutate(ACTORS, "with span(SAMPLE, SAMPLE_SPAN", 'with span("mini_sampel", SAMPLE_SPAN')
    problems = [(v.path, v.line, v.problem) for v in minirl.violations("span-groups")]
    expected = "span group 'mini_sampel' is not registered (did you mean 'mini_sample'?)"
    assert (ACTORS, line, expected) in problems


def test_removed_registration_fails_at_every_emit_site(minirl: FixtureProject) -> None:
    registration = (
        '        SpanGroup(SAMPLE, "sampling completions from the toy policy", Bucket.PRODUCTIVE),\n'
    )
    minirl.mutate(GROUPS, registration, "")
    minirl.mutate(GROUPS, "[SAMPLE, SCORE, EPISODE]", "[SCORE, EPISODE]")
    line = minirl.line_of(ACTORS, "with span(SAMPLE, SAMPLE_SPAN")
    [violation] = minirl.violations("span-groups")
    assert (violation.path, violation.line) == (ACTORS, line)
    assert "'mini_sample' is not registered" in violation.problem


def test_is_span_group_enabled_counts_as_using_a_group(minirl: FixtureProject) -> None:
    """A gate on a group (engine tracing, HTTP instrumentation) is how foreign spans get emitted."""
    _gate_score_instead_of_tracing_it(minirl)
    assert minirl.violations("span-groups") == []


def test_runtime_group_is_reported(minirl: FixtureProject) -> None:
    line = minirl.mutate(ACTORS, "with span(SAMPLE, SAMPLE_SPAN", "with span(self.group(), SAMPLE_SPAN")
    [violation] = [v for v in minirl.violations("span-groups") if v.line == line]
    assert "cannot tell which group" in violation.problem


def test_conditional_group_counts_both_branches(minirl: FixtureProject) -> None:
    """The shared data-plane pattern: group chosen per call from two constants."""
    conditional = "with span(SAMPLE if prompts else SCORE, SAMPLE_SPAN"
    minirl.mutate(ACTORS, "with span(SAMPLE, SAMPLE_SPAN", conditional)
    minirl.mutate(ACTORS, "    @traced(SCORE)\n", "")
    assert minirl.violations("span-groups") == []


def test_no_emit_sites_is_a_violation(minirl: FixtureProject) -> None:
    for name in ("trainer.py", "actors.py"):
        (minirl.root / "src/minirl" / name).unlink()
    problems = [v.problem for v in minirl.violations("span-groups")]
    assert any(p.startswith("found nothing to check: no span helper") for p in problems)


def _gate_score_instead_of_tracing_it(minirl: FixtureProject) -> None:
    minirl.mutate(ACTORS, "    @traced(SCORE)\n", "    @staticmethod\n")
    minirl.mutate(ACTORS, "def _score_one(self, completion: str)", "def _score_one(completion: str)")
    minirl.mutate(
        ACTORS,
        "return float(len(completion))",
        "return float(len(completion)) if is_span_group_enabled(SCORE) else 0.0",
    )
    minirl.mutate(
        ACTORS, "from rlsight import span, traced", "from rlsight import is_span_group_enabled, span"
    )


def test_a_group_used_only_through_a_gate_is_named_in_the_summary(minirl: FixtureProject) -> None:
    """The gate is how a group emitted elsewhere (an engine's tracing) passes: never silently."""
    _gate_score_instead_of_tracing_it(minirl)
    (result,) = minirl.check(guards=("span-groups",)).results
    assert result.violations == ()
    assert result.counts["gated_only"] == 1
    assert result.summary.endswith(", 1 gated only (mini_score)")


def test_a_group_with_a_span_is_not_gated_only(minirl: FixtureProject) -> None:
    (result,) = minirl.check(guards=("span-groups",)).results
    assert (result.counts["gated_only"], result.names["gated_only"]) == (0, ())
    assert result.summary.endswith(", 0 gated only")


def test_a_span_inside_per_prompt_scope_emits_per_prompt(minirl: FixtureProject) -> None:
    """per_prompt_scope relabels its spans per_prompt at run time, so that group is emitted."""
    gated = (
        "                    if is_span_group_enabled(RL.PER_PROMPT):\n"
        "                        with span(RL.PER_PROMPT, Names.PROMPT, length=len(prompt)):\n"
    )
    scoped = (
        "                    with per_prompt_scope():\n"
        "                        with span(RL.TRAINING, Names.PROMPT, length=len(prompt)):\n"
    )
    before = minirl.check(guards=("span-groups",)).results[0].counts
    minirl.mutate(TRAINER, gated, scoped)
    minirl.mutate(TRAINER, "    is_span_group_enabled,\n", "    per_prompt_scope,\n")
    (result,) = minirl.check(guards=("span-groups",)).results
    assert result.violations == ()
    assert result.counts == before
