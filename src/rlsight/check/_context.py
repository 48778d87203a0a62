"""What every guard receives: the config, the parsed project, its facts and the docs index."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from rlsight.check._docs import DocsIndex
from rlsight.check._facts import Facts
from rlsight.check._model import Violation
from rlsight.check._project import Project
from rlsight.check._source import SourceModule
from rlsight.check.config import CheckConfig

__all__ = ["CheckContext", "closest", "nothing_to_check"]


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Inputs shared by all guards, built once per run."""

    config: CheckConfig
    project: Project
    facts: Facts
    docs: DocsIndex | None

    @property
    def paths_display(self) -> str:
        """The checked paths, as one string for messages."""
        return ", ".join(self.config.display(p) for p in self.config.paths)

    def suppressed(self, module: SourceModule, line: int, guard: str) -> bool:
        """Whether the line opts out with ``# rlsight: ignore[guard]``."""
        return module.suppressed(line, guard)


def nothing_to_check(guard: str, where: str, what: str, fix: str) -> Violation:
    """The violation a guard reports when one of its inputs is empty.

    An empty input is a failure, not a pass: a moved file or a matcher that no longer
    matches would otherwise turn the guard into a tautology that passes forever.
    """
    return Violation(guard, where, None, f"found nothing to check: {what}", fix)


def closest(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest candidate, or an empty string."""
    match = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""
