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


def test_no_blocks_is_a_violation(minirl: FixtureProject) -> None:
    [violation] = minirl.violations("generated-docs")
    assert violation.problem.startswith("found nothing to check")


def test_configuration_table_lists_every_setting() -> None:
    from rlsight.config import SETTINGS

    table = generate("configuration")
    for setting in SETTINGS:
        assert f"| `{setting.name}` | `{setting.env}` |" in table
