"""Guard carriers: decorated methods get carriers, carriers go to decorated methods."""

from __future__ import annotations

from _check_support import FixtureProject

ACTORS = "src/minirl/actors.py"
TRAINER = "src/minirl/trainer.py"


def test_fixture_passes(minirl: FixtureProject) -> None:
    assert minirl.violations("carriers") == []


def test_dropped_decorator_fails_at_the_dispatch(minirl: FixtureProject) -> None:
    minirl.mutate(ACTORS, "    @accepts_trace_context\n    def sample(", "    def sample(")
    line = minirl.line_of(TRAINER, "dispatch_with_trace_context(sampler.sample")
    [violation] = minirl.violations("carriers")
    assert (violation.path, violation.line) == (TRAINER, line)
    assert "a trace carrier is sent to 'sample'" in violation.problem


def test_dispatch_without_carrier_fails_at_the_decorated_method(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, "scorer.score.remote(completions, **carrier)", "scorer.score.remote(completions)")
    line = minirl.line_of(ACTORS, "async def score(")
    [violation] = minirl.violations("carriers")
    assert (violation.path, violation.line) == (ACTORS, line)
    assert violation.problem.startswith("Scorer.score accepts a trace carrier")


def test_carrier_built_once_and_reused_counts(minirl: FixtureProject) -> None:
    """``carrier = trace_context_kwargs()`` then ``**carrier`` is the fan-out idiom."""
    assert "**carrier" in (minirl.root / TRAINER).read_text()
    assert minirl.violations("carriers") == []


def test_traced_handle_dispatches_with_a_carrier(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, "scorer.score.remote(completions, **carrier)", "scored.score.remote(completions)")
    minirl.mutate(TRAINER, "carrier = trace_context_kwargs()", "scored = traced_handle(scorer)")
    minirl.mutate(
        TRAINER,
        "from rlsight.propagation import dispatch_with_trace_context, trace_context_kwargs",
        "from rlsight.propagation import dispatch_with_trace_context\nfrom rlsight.ray import traced_handle",
    )
    assert minirl.violations("carriers") == []


def test_method_name_fan_out_counts(minirl: FixtureProject) -> None:
    minirl.mutate(
        TRAINER,
        "scorer.score.remote(completions, **carrier)",
        'group.run_all("score", completions, **carrier)',
    )
    assert minirl.violations("carriers") == []


def test_wrapper_forwarding_a_method_is_not_a_dispatch(minirl: FixtureProject) -> None:
    text = (minirl.root / TRAINER).read_text()
    wrapper = (
        "\n\ndef call(method, *args):\n"
        "    return method.remote(*args, **trace_context_kwargs())\n"
    )
    (minirl.root / TRAINER).write_text(text + wrapper)
    assert minirl.violations("carriers") == []


def test_traced_actor_decorates_every_public_method(minirl: FixtureProject) -> None:
    minirl.mutate(ACTORS, "    @accepts_trace_context\n    async def score(", "    async def score(")
    minirl.mutate(ACTORS, "@ray.remote\nclass Scorer:", "@ray.remote\n@traced_actor\nclass Scorer:")
    minirl.mutate(
        ACTORS,
        "from rlsight.propagation import accepts_trace_context",
        "from rlsight.propagation import accepts_trace_context\nfrom rlsight.ray import traced_actor",
    )
    assert minirl.violations("carriers") == []


def test_no_decorated_method_names_each_dispatch(minirl: FixtureProject) -> None:
    """Carriers sent but no method decorated: each call site is named, not "nothing to check"."""
    minirl.mutate(ACTORS, "    @accepts_trace_context\n    def sample(", "    def sample(")
    minirl.mutate(ACTORS, "    @accepts_trace_context\n    async def score(", "    async def score(")
    violations = minirl.violations("carriers")
    assert violations
    assert not any("found nothing to check" in v.problem for v in violations)
    sample = minirl.line_of(TRAINER, "dispatch_with_trace_context(sampler.sample")
    assert any(
        (v.path, v.line) == (TRAINER, sample) and "a trace carrier is sent to 'sample'" in v.problem
        and "@accepts_trace_context" in v.fix
        for v in violations
    )


def test_no_dispatch_at_all_names_each_decorated_method(minirl: FixtureProject) -> None:
    """Methods decorated but no carrier sent anywhere: each method is named, with the fix."""
    minirl.mutate(TRAINER, "scorer.score.remote(completions, **carrier)", "scorer.score.remote(completions)")
    minirl.mutate(TRAINER, "dispatch_with_trace_context(sampler.sample, ", "sampler.sample.remote(")
    violations = minirl.violations("carriers")
    assert not any("found nothing to check" in v.problem for v in violations)
    score = minirl.line_of(ACTORS, "async def score(")
    [at_score] = [v for v in violations if (v.path, v.line) == (ACTORS, score)]
    assert at_score.problem.startswith("Scorer.score accepts a trace carrier")
    assert "no call in src/minirl sends a carrier" in at_score.problem
    assert "dispatch_with_trace_context(handle.score, ...)" in at_score.fix


def test_a_project_without_carriers_is_nothing_to_check(minirl: FixtureProject) -> None:
    minirl.mutate(ACTORS, "    @accepts_trace_context\n    def sample(", "    def sample(")
    minirl.mutate(ACTORS, "    @accepts_trace_context\n    async def score(", "    async def score(")
    minirl.mutate(TRAINER, "scorer.score.remote(completions, **carrier)", "scorer.score.remote(completions)")
    minirl.mutate(TRAINER, "dispatch_with_trace_context(sampler.sample, ", "sampler.sample.remote(")
    [violation] = minirl.violations("carriers")
    assert violation.problem.startswith("found nothing to check")
    assert "drop this guard" in violation.fix
