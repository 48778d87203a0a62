"""Every logger key rlsight declares in a MetricSpec is emitted somewhere in its source.

This runs the real ``logger-keys`` guard of ``rlsight check`` over ``src/rlsight``, where the
demo declares its metric group (``rlsight.demo.metrics``) and builds the logged scalars. The
mutation tests add a small sample module that declares and emits keys of its own (prefixed
``sample/``, so nothing in the tree emits them) and break it on purpose, so the AST matcher
is shown to fail on the bugs it exists for (issue 4).
"""

from __future__ import annotations

from pathlib import Path

from rlsight.check import GuardResult, load_check_config, run_check

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "rlsight"

_SAMPLE = '''
from rlsight.metrics import MetricSpec, register_metric_group, tee_step_metrics

register_metric_group("sample", [
    MetricSpec("sample.loss", "sample/loss", "gauge", "1", "Loss."),
    MetricSpec("sample.tokens", logger_key="sample/tokens", kind="counter", unit="{token}",
               description="Tokens."),
])


def log_step(step: int, loss: float, tokens: int) -> None:
    metrics = {"sample/loss": loss}
    metrics["sample/tokens"] = tokens
    tee_step_metrics(step, metrics)
'''


def _logger_keys(*paths: Path) -> GuardResult:
    config = load_check_config(pyproject=REPO / "pyproject.toml").with_overrides(
        paths=[str(p) for p in paths], guards=["logger-keys"], cwd=REPO
    )
    (result,) = run_check(config).results
    return result


def test_every_declared_logger_key_is_emitted() -> None:
    result = _logger_keys(SRC)
    assert result.counts["declared"] > 0, "no MetricSpec declaration found: the matcher is stale"
    assert result.counts["emitted"] == result.counts["declared"]
    assert list(result.violations) == []


def test_a_renamed_emit_site_is_reported(tmp_path: Path) -> None:
    """The matcher must fail on the bug it exists for, or the test above proves nothing."""
    renamed = _SAMPLE.replace('metrics["sample/tokens"]', 'metrics["sample/n_tokens"]')
    (tmp_path / "sample_metrics.py").write_text(renamed)
    result = _logger_keys(SRC, tmp_path / "sample_metrics.py")
    problems = [v.problem for v in result.violations]
    assert any("'sample/tokens' is declared but never emitted" in p for p in problems), problems


def test_a_key_named_only_in_a_string_is_not_emitted(tmp_path: Path) -> None:
    docstring_only = _SAMPLE.replace(
        '    metrics = {"sample/loss": loss}\n', '    """Logs "sample/loss"."""\n    metrics = {}\n'
    )
    (tmp_path / "sample_metrics.py").write_text(docstring_only)
    result = _logger_keys(SRC, tmp_path / "sample_metrics.py")
    assert any("'sample/loss'" in v.problem for v in result.violations)
