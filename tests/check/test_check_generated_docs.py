"""Guard generated-docs: blocks between markers match the live registries; --write-docs fixes."""

from __future__ import annotations

from pathlib import Path

import pytest
from _check_support import FixtureProject

from rlsight.check.tables import GENERATORS, generate

DOC = "docs/generated.md"


@pytest.fixture
def with_blocks(minirl: FixtureProject) -> FixtureProject:
    text = "# Tables\n\n" + "".join(
        f"<!-- rlsight:begin {name} -->\n{generate(name)}\n<!-- rlsight:end {name} -->\n\n"
        for name in sorted(GENERATORS)
    )
    (minirl.root / DOC).write_text(text)
    return minirl


def test_current_blocks_pass(with_blocks: FixtureProject) -> None:
    assert with_blocks.violations("generated-docs") == []


def test_edited_block_fails_at_its_begin_marker(with_blocks: FixtureProject) -> None:
    with_blocks.mutate(DOC, "| `per_prompt` |", "| `per_promt` |")
    begin = with_blocks.line_of(DOC, "<!-- rlsight:begin span-groups -->")
    [violation] = with_blocks.violations("generated-docs")
    assert (violation.path, violation.line) == (DOC, begin)
    assert "out of date" in violation.problem
    assert "rlsight check --write-docs" in violation.fix


def test_write_docs_restores_the_block(with_blocks: FixtureProject) -> None:
    with_blocks.mutate(DOC, "| `per_prompt` |", "| `per_promt` |")
    report = with_blocks.check(guards=("generated-docs",), write_docs=True)
    assert report.ok
    assert report.docs_written == (DOC,)
    assert "`per_promt`" not in (with_blocks.root / DOC).read_text()


def test_write_docs_keeps_the_text_around_blocks(with_blocks: FixtureProject) -> None:
    path = with_blocks.root / DOC
    path.write_text(path.read_text().replace("# Tables", "# Tables\n\nHand-written intro."))
    with_blocks.mutate(DOC, "| `per_prompt` |", "| `per_promt` |")
    with_blocks.check(guards=("generated-docs",), write_docs=True)
    assert "Hand-written intro." in path.read_text()


def test_unknown_block_name_fails(with_blocks: FixtureProject) -> None:
    path: Path = with_blocks.root / DOC
    path.write_text(path.read_text() + "<!-- rlsight:begin spans -->\n<!-- rlsight:end spans -->\n")
    [violation] = with_blocks.violations("generated-docs")
    assert violation.problem == "generated block 'spans' has no generator"


def test_unclosed_block_fails(with_blocks: FixtureProject) -> None:
    path: Path = with_blocks.root / DOC
    path.write_text(path.read_text() + "<!-- rlsight:begin presets -->\n")
    problems = [v.problem for v in with_blocks.violations("generated-docs")]
    assert "generated block 'presets' is never closed" in problems


def test_no_blocks_is_a_violation_when_the_guard_is_named(minirl: FixtureProject) -> None:
    [violation] = minirl.violations("generated-docs")
    assert violation.problem.startswith("found nothing to check")


def test_a_new_project_with_default_guards_passes_without_blocks(minirl: FixtureProject) -> None:
    """A user project's first ``rlsight check``: no `guards` key, docs of its own, no block.

    The blocks publish rlsight's tables, which a user's docs have no reason to carry, so
    with the default guards a docs folder without any block is not a failure.
    """
    minirl.mutate("pyproject.toml", 'guards = [', '# guards = [')
    report = minirl.check()
    assert "generated-docs" in report.config.guards
    assert [v for v in report.violations if v.guard == "generated-docs"] == []
    assert report.ok, [v.problem for v in report.violations]


def test_default_guards_still_judge_the_blocks_a_project_has(minirl: FixtureProject) -> None:
    minirl.mutate("pyproject.toml", 'guards = [', '# guards = [')
    (minirl.root / DOC).write_text("<!-- rlsight:begin presets -->\nstale\n<!-- rlsight:end presets -->\n")
    [violation] = [v for v in minirl.check().violations if v.guard == "generated-docs"]
    assert "out of date" in violation.problem


def test_configuration_table_lists_every_setting() -> None:
    from rlsight.config import SETTINGS

    table = generate("configuration")
    for setting in SETTINGS:
        assert f"| `{setting.name}` | `{setting.env}` |" in table
