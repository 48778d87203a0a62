"""Every logger key rlsight declares in a MetricSpec is emitted somewhere in its source.

This runs the real ``logger-keys`` guard of ``rlsight check`` over ``src/rlsight``. rlsight's
own tree declares no MetricSpec yet (the demo's ``rl`` group is to be declared next to the code
that emits its keys), and the guard rightly refuses to pass on nothing; until then the check
runs over the tree plus a small sample that declares and emits, so the AST matcher is still
exercised end to end. Once the tree declares a key, the sample drops out by itself and the
non-empty assertions hold on the tree alone (issue 4).
"""

from __future__ import annotations

from pathlib import Path

from rlsight.check import GuardResult, load_check_config, run_check

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "rlsight"

_SAMPLE = '''
from rlsight.metrics import MetricSpec, register_metric_group, tee_step_metrics

register_metric_group("sample", [
    MetricSpec("sample.loss", "train/loss", "gauge", "1", "Loss."),
    MetricSpec("sample.tokens", logger_key="rollout/tokens", kind="counter", unit="{token}",
               description="Tokens."),
])


def log_step(step: int, loss: float, tokens: int) -> None:
    metrics = {"train/loss": loss}
    metrics["rollout/tokens"] = tokens
    tee_step_metrics(step, metrics)
'''


def _logger_keys(*paths: Path) -> GuardResult:
    config = load_check_config(pyproject=REPO / "pyproject.toml").with_overrides(
        paths=[str(p) for p in paths], guards=["logger-keys"], cwd=REPO
    )
    (result,) = run_check(config).results
    return result


def _tree_or_sample(tmp_path: Path) -> GuardResult:
    result = _logger_keys(SRC)
    if result.counts["declared"] == 0:  # nothing declared in the tree yet: see the module doc
        (tmp_path / "sample_metrics.py").write_text(_SAMPLE)
        result = _logger_keys(SRC, tmp_path / "sample_metrics.py")
    return result


def test_every_declared_logger_key_is_emitted(tmp_path: Path) -> None:
    result = _tree_or_sample(tmp_path)
    assert result.counts["declared"] > 0, "no MetricSpec declaration found: the matcher is stale"
    assert result.counts["emitted"] == result.counts["declared"]
    assert list(result.violations) == []


def test_a_renamed_emit_site_is_reported(tmp_path: Path) -> None:
    """The matcher must fail on the bug it exists for, or the test above proves nothing."""
    renamed = _SAMPLE.replace('metrics["rollout/tokens"]', 'metrics["rollout/n_tokens"]')
    (tmp_path / "sample_metrics.py").write_text(renamed)
    result = _logger_keys(SRC, tmp_path / "sample_metrics.py")
    problems = [v.problem for v in result.violations]
    assert any("'rollout/tokens' is declared but never emitted" in p for p in problems), problems


def test_a_key_named_only_in_a_string_is_not_emitted(tmp_path: Path) -> None:
    docstring_only = _SAMPLE.replace(
        '    metrics = {"train/loss": loss}\n', '    """Logs "train/loss"."""\n    metrics = {}\n'
    )
    (tmp_path / "sample_metrics.py").write_text(docstring_only)
    result = _logger_keys(SRC, tmp_path / "sample_metrics.py")
    assert any("'train/loss'" in v.problem for v in result.violations)
