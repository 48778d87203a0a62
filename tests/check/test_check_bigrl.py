"""rlsight check on a project shaped like a large RL framework, outside this repo's layout."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _check_support import FixtureProject

GRPO = "bigrl/algorithms/grpo.py"
WORKER = "bigrl/models/policy/megatron_worker.py"
SC = "bigrl/algorithms/single_controller.py"


@pytest.fixture
def bigrl(fixture_project: Callable[[str], FixtureProject]) -> FixtureProject:
    return fixture_project("bigrl")


def test_framework_passes_every_guard(bigrl: FixtureProject) -> None:
    report = bigrl.check()
    assert report.violations == []
    assert [r.guard for r in report.results] == [
        "span-names", "span-groups", "efficiency-categories", "carriers", "logger-keys", "group-usage",
    ]


def test_every_guard_found_real_inputs(bigrl: FixtureProject) -> None:
    """Each guard's counts are non-zero: none of them passed on nothing."""
    for result in bigrl.check().results:
        assert all(n > 0 for n in result.counts.values()), result.summary


def test_helpers_imported_through_the_framework_facade_are_recognised(bigrl: FixtureProject) -> None:
    counts = {r.guard: r.counts for r in bigrl.check().results}
    assert counts["span-names"]["emitted"] == 33
    assert counts["carriers"] == {"accepting": 7, "dispatched": 7}


def test_dropped_decorator_on_a_presharded_entrypoint_fails_at_the_fan_out(bigrl: FixtureProject) -> None:
    method = "    def finish_train_step_presharded"
    bigrl.mutate(WORKER, "    @accepts_trace_context\n" + method, method)
    line = bigrl.line_of(GRPO, '"finish_train_step_presharded", **carrier')
    [violation] = bigrl.violations("carriers")
    assert (violation.path, violation.line) == (GRPO, line)


def test_fan_out_without_carrier_leaves_the_entrypoint_unreached(bigrl: FixtureProject) -> None:
    bigrl.mutate(GRPO, '"begin_train_step_presharded", **carrier)', '"begin_train_step_presharded")')
    line = bigrl.line_of(WORKER, "def begin_train_step_presharded")
    [violation] = bigrl.violations("carriers")
    assert (violation.path, violation.line) == (WORKER, line)


def test_renamed_span_constant_is_caught_in_the_docs(bigrl: FixtureProject) -> None:
    bigrl.mutate("bigrl/telemetry/names.py", '"rl.sc.value_training"', '"rl.sc.critic_training"')
    problems = [(v.path, v.problem) for v in bigrl.violations("span-names")]
    line = bigrl.line_of(SC, "@traced(RL.TRAINING, names.SC_VALUE_TRAINING)")
    assert (
        "docs/observability/span-groups.md",
        f"span 'rl.sc.critic_training' emitted at {SC}:{line} is not documented",
    ) in problems


def test_metrics_table_key_no_longer_logged_fails(bigrl: FixtureProject) -> None:
    bigrl.mutate(SC, 'stats["rollout/gen_tokens"] = 0.0', 'stats["rollout/generated_tokens"] = 0.0')
    [violation] = bigrl.violations("logger-keys")
    assert violation.path == "bigrl/telemetry/metrics.py"
    assert "'rollout/gen_tokens'" in violation.problem


def test_excluded_vendored_code_is_not_checked(bigrl: FixtureProject) -> None:
    bigrl.mutate("pyproject.toml", 'exclude = ["bigrl/third_party/*"]', "exclude = []")
    problems = [v.problem for v in bigrl.check().violations]
    assert any("'legacy.undocumented'" in p for p in problems)
    assert any("'legacy' is not registered" in p for p in problems)
