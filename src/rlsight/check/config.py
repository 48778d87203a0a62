"""``[tool.rlsight.check]``: what ``rlsight check`` reads, where the docs are, which guards run.

::

    [tool.rlsight.check]
    paths = ["src/mypkg"]          # files or folders, relative to this pyproject.toml
    docs = "docs"                  # folder with the span tables and generated blocks
    exclude = ["src/mypkg/vendored/*"]   # globs on paths relative to this file
    guards = ["span-names", "span-groups", "efficiency-categories",
              "carriers", "logger-keys", "group-usage", "generated-docs"]
    helper_modules = ["mypkg.telemetry"] # modules that re-export rlsight's helpers

Every guard that runs must find something to check; a project that does not use a feature
(no logger keys, say) leaves that guard out of ``guards`` rather than letting it pass on
nothing. That holds for the guards named in ``guards`` or ``--guard``: with ``guards`` left at
its default, a guard whose feature the project does not use at all (no waits, no carriers, no
metric specs, no generated blocks) passes, so a new project's first run is green.
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from rlsight.check._model import CheckInputError

__all__ = ["ALL_GUARDS", "CheckConfig", "find_pyproject", "load_check_config"]

#: Every guard, in the order they run and report.
ALL_GUARDS: Final[tuple[str, ...]] = (
    "span-names",
    "span-groups",
    "efficiency-categories",
    "carriers",
    "logger-keys",
    "group-usage",
    "generated-docs",
)
_KEYS: Final = frozenset({"paths", "docs", "exclude", "guards", "helper_modules"})


@dataclass(frozen=True, slots=True)
class CheckConfig:
    """A resolved check configuration; every path is absolute.

    Attributes:
        root: Where relative paths, excludes and displayed paths start (the pyproject's
            folder, or the working directory without one).
        paths: Files and folders to read.
        docs: The docs folder, or ``None`` when no guard needs one.
        exclude: Globs over root-relative POSIX paths; a folder that matches excludes all
            below it.
        guards: Guard names to run, in :data:`ALL_GUARDS` order.
        helper_modules: Module prefixes whose helpers count as rlsight's (``rlsight`` always).
        pyproject: The file the settings came from, if any.
        guards_named: Whether ``guards`` was named (in the file or with ``--guard``) rather
            than left at its default; only then must a guard whose feature the project does
            not use find something (docs/check.md, "The guards").
    """

    root: Path
    paths: tuple[Path, ...]
    docs: Path | None
    exclude: tuple[str, ...] = ()
    guards: tuple[str, ...] = ALL_GUARDS
    helper_modules: tuple[str, ...] = ("rlsight",)
    pyproject: Path | None = None
    guards_named: bool = False

    def display(self, path: Path) -> str:
        """``path`` as messages show it: relative to the root when below it."""
        try:
            return path.resolve().relative_to(self.root).as_posix() or "."
        except ValueError:
            return str(path)

    def excluded(self, path: Path) -> bool:
        """Whether ``path`` or a folder above it (below the root) matches an exclude glob."""
        if not self.exclude:
            return False
        try:
            rel = path.resolve().relative_to(self.root)
        except ValueError:
            return False
        candidates = [rel.as_posix()] + [p.as_posix() for p in rel.parents if p.as_posix() != "."]
        return any(fnmatch.fnmatchcase(c, glob) for c in candidates for glob in self.exclude)

    def with_overrides(
        self,
        *,
        paths: Sequence[str] | None = None,
        docs: str | None = None,
        guards: Sequence[str] | None = None,
        cwd: Path | None = None,
    ) -> CheckConfig:
        """Apply command-line values (relative to ``cwd``) over the file's.

        Raises:
            CheckInputError: an unknown guard name.
        """
        base = (cwd or Path.cwd()).resolve()
        changes: dict[str, Any] = {}
        if paths:
            changes["paths"] = tuple((base / p).resolve() for p in paths)
        if docs is not None:
            changes["docs"] = (base / docs).resolve()
        if guards:
            changes["guards"] = _guards(list(guards), "--guard")
            changes["guards_named"] = True
        return replace(self, **changes) if changes else self


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` that has ``[tool.rlsight.check]``."""
    for folder in [start.resolve(), *start.resolve().parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _section(candidate) is not None:
            return candidate
    return None


def _section(pyproject: Path) -> Mapping[str, Any] | None:
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CheckInputError(f"cannot read {pyproject}: {exc}") from exc
    section = data.get("tool", {}).get("rlsight", {}).get("check")
    if section is not None and not isinstance(section, Mapping):
        raise CheckInputError(f"{pyproject}: [tool.rlsight.check] must be a table")
    return section


def _strings(value: object, key: str, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise CheckInputError(f"{where}: {key} = {value!r}; expected a string or a list of strings")


def _guards(names: list[str], where: str) -> tuple[str, ...]:
    unknown = [n for n in names if n not in ALL_GUARDS]
    if unknown:
        raise CheckInputError(
            f"{where}: unknown guard(s) {', '.join(map(repr, unknown))}; "
            f"known guards: {', '.join(ALL_GUARDS)}"
        )
    return tuple(g for g in ALL_GUARDS if g in names)


def load_check_config(start: Path | None = None, pyproject: Path | None = None) -> CheckConfig:
    """Load ``[tool.rlsight.check]`` from ``pyproject`` or the nearest one above ``start``.

    Without a file the defaults apply, rooted at ``start``: read ``.``, docs in ``docs/``,
    every guard.

    Raises:
        CheckInputError: the file cannot be parsed, a key is unknown or has the wrong type.
    """
    start = (start or Path.cwd()).resolve()
    if pyproject is None:
        pyproject = find_pyproject(start)
        section: Mapping[str, Any] = {} if pyproject is None else (_section(pyproject) or {})
    else:
        if not pyproject.is_file():
            raise CheckInputError(f"config file {pyproject} does not exist")
        section = _section(pyproject) or {}
    root = pyproject.parent.resolve() if pyproject is not None else start
    where = f"{pyproject} [tool.rlsight.check]" if pyproject is not None else "defaults"
    unknown = sorted(set(section) - _KEYS)
    if unknown:
        raise CheckInputError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(_KEYS))}"
        )
    paths = _strings(section.get("paths", ["."]), "paths", where)
    docs_value = section.get("docs", "docs")
    if not isinstance(docs_value, str):
        raise CheckInputError(f"{where}: docs = {docs_value!r}; expected a folder path string")
    helpers = _strings(section.get("helper_modules", []), "helper_modules", where)
    return CheckConfig(
        root=root,
        paths=tuple((root / p).resolve() for p in paths),
        docs=(root / docs_value).resolve(),
        exclude=tuple(_strings(section.get("exclude", []), "exclude", where)),
        guards=_guards(_strings(section.get("guards", list(ALL_GUARDS)), "guards", where), where),
        helper_modules=("rlsight", *[h for h in helpers if h != "rlsight"]),
        pyproject=pyproject,
        guards_named="guards" in section,
    )
