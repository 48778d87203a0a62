"""Helpers for the drift-guard tests: a writable copy of a fixture project."""

from __future__ import annotations

from pathlib import Path

from rlsight.check import CheckReport, Violation, load_check_config, run_check

FIXTURES = Path(__file__).parent / "fixtures"


class FixtureProject:
    """A writable copy of one fixture project, with helpers to break it on purpose."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mutate(self, relpath: str, old: str, new: str) -> int:
        """Replace the one occurrence of ``old`` in ``relpath``; return its 1-based line."""
        path = self.root / relpath
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {relpath}"
        line = text[: text.index(old)].count("\n") + 1
        path.write_text(text.replace(old, new), encoding="utf-8")
        return line

    def line_of(self, relpath: str, needle: str) -> int:
        """The 1-based line holding the one occurrence of ``needle``."""
        text = (self.root / relpath).read_text(encoding="utf-8")
        assert text.count(needle) == 1, f"{needle!r} occurs {text.count(needle)} times in {relpath}"
        return text[: text.index(needle)].count("\n") + 1

    def check(self, *, guards: tuple[str, ...] | None = None, write_docs: bool = False) -> CheckReport:
        """Run the check as ``rlsight check`` would from the project root."""
        config = load_check_config(pyproject=self.root / "pyproject.toml")
        if guards is not None:
            config = config.with_overrides(guards=guards, cwd=self.root)
        return run_check(config, write_docs=write_docs)

    def violations(self, guard: str) -> list[Violation]:
        """Only ``guard``'s violations, from a run of that guard alone."""
        return list(self.check(guards=(guard,)).violations)
