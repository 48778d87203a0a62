"""What a guard reports: violations with a fix, and the counts behind its summary line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CheckInputError", "GuardResult", "Violation"]


class CheckInputError(Exception):
    """The check cannot run faithfully: a path is missing, a file does not parse, bad config.

    ``rlsight check`` turns it into exit code 2, because a guard that silently skips an
    unreadable file would pass for the wrong reason.
    """


@dataclass(frozen=True, slots=True)
class Violation:
    """One problem: where it is, what is wrong, and what to do about it.

    ``path``/``line`` point at what the reader must edit first (a docs table for an
    undocumented span, the source line otherwise); ``line`` is ``None`` for a whole file.
    """

    guard: str
    path: str
    line: int | None
    problem: str
    fix: str

    @property
    def location(self) -> str:
        """``path:line`` (or just ``path``), as editors and terminals link it."""
        return self.path if self.line is None else f"{self.path}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        """The violation as the ``--json`` document lists it."""
        return {
            "guard": self.guard,
            "path": self.path,
            "line": self.line,
            "problem": self.problem,
            "fix": self.fix,
        }


@dataclass(frozen=True, slots=True)
class GuardResult:
    """One guard's outcome.

    ``counts`` are what the guard looked at (e.g. ``{"emitted": 48, "documented": 47}``);
    they go into the summary line so a reader can tell a guard that checked 48 names from one
    that checked none. ``names`` lists, for a few counts, what was counted, where the names
    matter more than the number (the groups that rest on a gate alone).
    """

    guard: str
    title: str
    counts: dict[str, int]
    violations: tuple[Violation, ...] = field(default=())
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """``span names: 48 emitted, 47 documented``; named counts add ``(a, b)``."""
        parts = ", ".join(
            f"{n} {k.replace('_', ' ')}" + (f" ({', '.join(self.names[k])})" if self.names.get(k) else "")
            for k, n in self.counts.items()
        )
        return f"{self.title}: {parts}"
