"""Run the configured guards over a project and render what they found.

The runner parses every file once, collects facts once, reads the docs once, and hands the
same context to each guard. rlsight's own installed sources are read as *external* modules
when another project is checked, so the groups and efficiency categories rlsight declares
are visible to the project's guards without the project re-declaring them; when rlsight
itself is checked, nothing is external and every declaration must stand on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rlsight.check import (
    carriers,
    efficiency,
    generated_docs,
    group_usage,
    logger_keys,
    span_groups,
    span_names,
)
from rlsight.check._collector import collect_facts
from rlsight.check._context import CheckContext
from rlsight.check._docs import DocsIndex, read_docs
from rlsight.check._model import CheckInputError, GuardResult, Violation
from rlsight.check._project import load_project
from rlsight.check._source import python_files
from rlsight.check.config import CheckConfig

__all__ = ["SCHEMA_VERSION", "CheckReport", "run_check"]

#: Version of the ``--json`` document; bumped on any incompatible change.
SCHEMA_VERSION: Final = 1

_GUARDS: Final[dict[str, Callable[[CheckContext], GuardResult]]] = {
    span_names.GUARD: span_names.check,
    span_groups.GUARD: span_groups.check,
    efficiency.GUARD: efficiency.check,
    carriers.GUARD: carriers.check,
    logger_keys.GUARD: logger_keys.check,
    group_usage.GUARD: group_usage.check,
    generated_docs.GUARD: generated_docs.check,
}
_NEEDS_DOCS: Final = frozenset({span_names.GUARD, generated_docs.GUARD})
# Parts of rlsight that declare nothing a checked project relies on.
_NOT_EXTERNAL: Final = frozenset({"check", "commands", "demo"})
_PACKAGE: Final = Path(__file__).resolve().parents[1]
_DECLARING: Final = ("register_span_groups(", "declare_efficiency_categories(")
#: Always read: the re-exporting ``__init__`` and the pure vocabulary its names resolve to
#: (``RL.GENERATION`` is defined in ``_rl_groups.py`` and re-exported by ``groups``).
_ALWAYS_EXTERNAL: Final = frozenset({"__init__.py", "_rl_groups.py"})


@dataclass(frozen=True, slots=True)
class CheckReport:
    """Every guard's result for one run of the check."""

    config: CheckConfig
    results: tuple[GuardResult, ...]
    files: int
    docs_written: tuple[str, ...] = ()

    @property
    def violations(self) -> list[Violation]:
        """All violations, guard by guard, in the order found."""
        return [v for r in self.results for v in r.violations]

    @property
    def ok(self) -> bool:
        """Whether no guard reported anything."""
        return not self.violations

    def render(self) -> str:
        """The terminal output: ``path:line: problem``, ``  fix: ...``, then a summary line."""
        lines: list[str] = []
        for v in self.violations:
            lines.append(f"{v.location}: {v.problem}")
            lines.append(f"  fix: {v.fix}")
        n = len(self.violations)
        summaries = "; ".join(r.summary for r in self.results)
        head = "no problems" if n == 0 else f"{n} problem{'s' if n != 1 else ''}"
        lines.append(f"{head} ({summaries})")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document (``schema_version`` first)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "ok": self.ok,
            "root": str(self.config.root),
            "paths": [self.config.display(p) for p in self.config.paths],
            "docs": None if self.config.docs is None else self.config.display(self.config.docs),
            "files": self.files,
            "docs_written": list(self.docs_written),
            "guards": [
                {
                    "guard": r.guard,
                    "title": r.title,
                    "ok": not r.violations,
                    "counts": dict(r.counts),
                    "names": {k: list(v) for k, v in r.names.items()},
                    "problems": len(r.violations),
                }
                for r in self.results
            ],
            "problems": [v.to_json() for v in self.violations],
        }


def _checked_files(config: CheckConfig) -> list[tuple[Path, str]]:
    seen: set[Path] = set()
    files: list[tuple[Path, str]] = []
    for path in config.paths:
        if not path.exists():
            raise CheckInputError(
                f"path {config.display(path)} does not exist; fix `paths` in "
                "[tool.rlsight.check] or the command line"
            )
        for file in python_files(path):
            resolved = file.resolve()
            if resolved in seen or config.excluded(resolved):
                continue
            seen.add(resolved)
            files.append((resolved, config.display(resolved)))
    if not files:
        raise CheckInputError(
            f"no Python files under {', '.join(config.display(p) for p in config.paths)} "
            "(after excludes); point `paths` at the instrumented sources"
        )
    return files


def _external_files(checked: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """rlsight's modules that declare groups or categories, plus :data:`_ALWAYS_EXTERNAL`.

    Parsing the whole package would cost more than checking a typical project; a text scan
    picks the few modules whose declarations a checked project can rely on.
    """
    if any(p.is_relative_to(_PACKAGE) for p, _ in checked):
        return []  # rlsight is the checked project: its declarations must stand on their own
    out = []
    for file in python_files(_PACKAGE):
        rel = file.relative_to(_PACKAGE)
        if rel.parts[0] in _NOT_EXTERNAL:
            continue
        if rel.as_posix() not in _ALWAYS_EXTERNAL and not any(
            marker in file.read_text(encoding="utf-8") for marker in _DECLARING
        ):
            continue
        out.append((file, f"<rlsight>/{rel.as_posix()}"))
    return out


def _load_docs(config: CheckConfig) -> DocsIndex | None:
    if not _NEEDS_DOCS & set(config.guards):
        return None
    if config.docs is None or not config.docs.is_dir():
        shown = "none" if config.docs is None else config.display(config.docs)
        raise CheckInputError(
            f"docs folder {shown} does not exist; pass --docs DIR, set `docs` in "
            f"[tool.rlsight.check], or leave {', '.join(sorted(_NEEDS_DOCS))} out of `guards`"
        )
    return read_docs(config.docs, config.display(config.docs))


def run_check(config: CheckConfig, *, write_docs: bool = False) -> CheckReport:
    """Run ``config.guards`` over ``config.paths`` and the docs.

    Args:
        config: What to check.
        write_docs: Rewrite the docs' generated blocks from the live registries first.

    Raises:
        CheckInputError: a path is missing, a file does not parse, or the docs folder is
            needed and missing.
    """
    checked = _checked_files(config)
    project = load_project(checked, _external_files(checked), config.helper_modules)
    facts = collect_facts(project)
    docs = _load_docs(config)
    written: list[str] = []
    if write_docs and docs is not None:
        written = [config.display(p) for p in generated_docs.write_blocks(docs)]
        docs = _load_docs(config)
    ctx = CheckContext(config=config, project=project, facts=facts, docs=docs)
    results = tuple(_GUARDS[g](ctx) for g in config.guards)
    return CheckReport(config=config, results=results, files=len(checked), docs_written=tuple(written))
