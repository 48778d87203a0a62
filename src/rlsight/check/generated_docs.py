"""Guard ``generated-docs``: every generated block in the docs matches its live registry.

A block is the text between ``<!-- rlsight:begin NAME -->`` and ``<!-- rlsight:end NAME -->``.
The guard regenerates it (see :mod:`rlsight.check.tables`) and reports any difference, so a
group, preset or setting added in code but not in the docs fails the build instead of
drifting. ``rlsight check --write-docs`` rewrites the blocks in place.

Docs without any block fail only when the guard was asked for by name (see
:class:`~rlsight.check.config.CheckConfig`): the blocks publish rlsight's own vocabulary, so a
user project usually has none. rlsight's own configuration names the guard, so there losing
every block still fails.
"""

from __future__ import annotations

from pathlib import Path

from rlsight.check._context import CheckContext, nothing_to_check
from rlsight.check._docs import DocsIndex, GeneratedBlock
from rlsight.check._model import GuardResult, Violation
from rlsight.check.tables import GENERATORS, generate

__all__ = ["GUARD", "TITLE", "check", "write_blocks"]

GUARD = "generated-docs"
TITLE = "generated docs"


def _expected(block: GeneratedBlock) -> str:
    return generate(block.name).rstrip("\n")


def _first_difference(actual: str, expected: str) -> str:
    got, want = actual.splitlines(), expected.splitlines()
    for n, (a, b) in enumerate(zip(got, want, strict=False), start=1):
        if a != b:
            return f"line {n} of the block reads {a.strip()[:60]!r}, the registry gives {b.strip()[:60]!r}"
    if len(got) != len(want):
        return f"the block has {len(got)} lines, the registry gives {len(want)}"
    return "whitespace differs"


def check(ctx: CheckContext) -> GuardResult:
    """Regenerate every block and compare."""
    docs = ctx.docs
    if docs is None:
        return GuardResult(GUARD, TITLE, {}, (nothing_to_check(
            GUARD, ".", "no docs folder", "pass --docs DIR or set docs in [tool.rlsight.check]"),))
    violations = [
        Violation(GUARD, path, line, problem, "pair every `<!-- rlsight:begin NAME -->` with "
                  "`<!-- rlsight:end NAME -->`")
        for path, line, problem in docs.marker_errors
    ]
    current = 0
    for block in docs.blocks:
        if block.name not in GENERATORS:
            violations.append(
                Violation(
                    GUARD, block.display, block.begin_line,
                    f"generated block {block.name!r} has no generator",
                    f"use one of: {', '.join(sorted(GENERATORS))}",
                )
            )
            continue
        expected = _expected(block)
        if block.content.strip("\n") == expected:
            current += 1
            continue
        violations.append(
            Violation(
                GUARD, block.display, block.begin_line,
                f"generated block {block.name!r} is out of date with rlsight's registry "
                f"({_first_difference(block.content.strip(chr(10)), expected)})",
                "run `rlsight check --write-docs` and commit the result (never edit inside the "
                "markers by hand)",
            )
        )
    if not docs.blocks and ctx.config.guards_named:
        violations.append(
            nothing_to_check(
                GUARD, docs.display, "no `<!-- rlsight:begin NAME -->` block in the docs",
                "add generated blocks for the tables you publish, or drop this guard from `guards` "
                "(with `guards` left at its default, docs without blocks pass)",
            )
        )
    counts = {"blocks": len(docs.blocks), "current": current}
    return GuardResult(GUARD, TITLE, counts, tuple(violations))


def write_blocks(docs: DocsIndex) -> list[Path]:
    """Rewrite every block with a generator in place; return the files that changed."""
    by_file: dict[Path, list[GeneratedBlock]] = {}
    for block in docs.blocks:
        if block.name in GENERATORS:
            by_file.setdefault(block.path, []).append(block)
    changed: list[Path] = []
    for path, blocks in by_file.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        # Bottom-up, so earlier line numbers stay valid while later blocks change length.
        for block in sorted(blocks, key=lambda b: b.begin_line, reverse=True):
            lines[block.begin_line:block.end_line - 1] = _expected(block).splitlines()
        text = "\n".join(lines) + "\n"
        if text != path.read_text(encoding="utf-8"):
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed
