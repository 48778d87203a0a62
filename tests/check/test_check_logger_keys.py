"""Guard logger-keys: declared keys are emitted as dict-display keys or subscript assignments."""

from __future__ import annotations

from _check_support import FixtureProject

METRICS = "src/minirl/metrics.py"
TRAINER = "src/minirl/trainer.py"


def test_fixture_passes(minirl: FixtureProject) -> None:
    assert minirl.violations("logger-keys") == []


def test_renamed_subscript_key_fails_at_the_declaration(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, 'metrics["rollout/reward_mean"]', 'metrics["rollout/reward_avg"]')
    line = minirl.line_of(METRICS, 'logger_key="rollout/reward_mean"')
    [violation] = minirl.violations("logger-keys")
    assert (violation.path, violation.line) == (METRICS, line)
    assert violation.problem.startswith("logger key 'rollout/reward_mean' is declared but never emitted")
    assert "(did you mean 'rollout/reward_avg'?)" in violation.problem


def test_renamed_dict_display_key_fails(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, 'metrics = {"train/loss": loss}', 'metrics = {"train/loss_mean": loss}')
    line = minirl.line_of(METRICS, '"train/loss"')
    [violation] = minirl.violations("logger-keys")
    assert (violation.path, violation.line) == (METRICS, line)


def test_key_only_in_a_docstring_does_not_count(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, 'metrics = {"train/loss": loss}', 'metrics = {"loss": loss}')
    minirl.mutate(
        TRAINER,
        '"""Run ``steps`` steps and return the last step\'s logged scalars."""',
        '"""Run steps; logs "train/loss" and friends."""\n    note = "train/loss"',
    )
    [violation] = minirl.violations("logger-keys")
    assert "'train/loss'" in violation.problem


def test_constant_key_counts_through_the_constant(minirl: FixtureProject) -> None:
    assert "metrics[KL_KEY]" in (minirl.root / TRAINER).read_text()
    minirl.mutate("src/minirl/names.py", 'KL_KEY = "train/kl"', 'KL_KEY = "train/kl_div"')
    assert minirl.violations("logger-keys") == []


def test_removed_emit_site_of_constant_key_fails(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, "                metrics[KL_KEY] = 0.0\n", "")
    [violation] = minirl.violations("logger-keys")
    assert "'train/kl'" in violation.problem


def test_dict_keyword_counts_as_a_dict_display(minirl: FixtureProject) -> None:
    minirl.mutate(METRICS, '"train/loss", "gauge"', '"loss", "gauge"')
    minirl.mutate(TRAINER, 'metrics = {"train/loss": loss}', "metrics = dict(loss=loss)")
    assert minirl.violations("logger-keys") == []


def test_metric_spec_table_keyed_by_logger_key_is_not_an_emit_site(minirl: FixtureProject) -> None:
    minirl.mutate(TRAINER, "                metrics[KL_KEY] = 0.0\n", "")
    text = (minirl.root / METRICS).read_text()
    (minirl.root / METRICS).write_text(
        text + '\nBY_KEY = {"train/kl": MetricSpec("minirl.loss2", "train/loss", "gauge", "1", "x")}\n'
    )
    [violation] = minirl.violations("logger-keys")
    assert violation.problem.startswith("logger key 'train/kl' is declared but never emitted")


def test_no_declaration_is_a_violation(minirl: FixtureProject) -> None:
    (minirl.root / METRICS).unlink()
    [violation] = minirl.violations("logger-keys")
    assert violation.problem.startswith("found nothing to check: no MetricSpec")
