"""Loading: one Python file parsed and indexed (imports, constants, classes, definitions).

Nothing here imports the checked code; a file is read as text and its top-level bindings
are indexed so that names can later be resolved across modules (:mod:`._project`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from rlsight.check._model import CheckInputError

__all__ = ["SourceModule", "parse_module", "python_files"]

_CONSTANT_NAME: Final = re.compile(r"^_*[A-Z][A-Z0-9_]*$")
_SUPPRESS: Final = re.compile(r"#\s*rlsight:\s*ignore(?:\[([a-z0-9_,\s-]+)\])?")
_SKIP_DIRS: Final = frozenset(
    {".git", ".venv", "venv", "__pycache__", "node_modules", "build", "dist", ".tox", ".nox"}
)


@dataclass(slots=True)
class _ClassInfo:
    constants: dict[str, ast.expr | None] = field(default_factory=dict)


@dataclass(slots=True)
class SourceModule:
    """One parsed file with its top-level bindings.

    ``external`` modules (rlsight's own package when another project is checked) are read
    only for declarations (span groups, efficiency categories): their emit sites are not the
    checked project's, and nothing is reported against them.
    """

    path: Path
    display: str
    name: str
    is_package: bool
    tree: ast.Module
    lines: tuple[str, ...]
    external: bool = False
    imports: dict[str, str] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    constants: dict[str, ast.expr | None] = field(default_factory=dict)
    classes: dict[str, _ClassInfo] = field(default_factory=dict)
    definitions: set[str] = field(default_factory=set)

    def suppressed(self, line: int, guard: str) -> bool:
        """Whether ``line`` carries ``# rlsight: ignore`` (for all guards or for ``guard``)."""
        if not 1 <= line <= len(self.lines):
            return False
        match = _SUPPRESS.search(self.lines[line - 1])
        if match is None:
            return False
        listed = match.group(1)
        return listed is None or guard in {g.strip() for g in listed.split(",")}


def _module_name(path: Path) -> tuple[str, bool]:
    is_package = path.name == "__init__.py"
    parts = [] if is_package else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.append(folder.name)
        folder = folder.parent
    return ".".join(reversed(parts)), is_package


def _top_level_statements(body: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    """Module statements, looking into ``if``/``try`` blocks (``TYPE_CHECKING``, fallbacks)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from _top_level_statements(stmt.body)
            yield from _top_level_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody):
                yield from _top_level_statements(block)
            for handler in stmt.handlers:
                yield from _top_level_statements(handler.body)
        else:
            yield stmt


def _assigned_constant(stmt: ast.stmt) -> tuple[str, ast.expr] | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target, value = stmt.targets[0], stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        target, value = stmt.target, stmt.value
    else:
        return None
    if isinstance(target, ast.Name) and _CONSTANT_NAME.match(target.id):
        return target.id, value
    return None


def _bindings(stmt: ast.Import | ast.ImportFrom, package: str) -> Iterator[tuple[str, str]]:
    """(local name, what it refers to) for each name an import binds; ``*`` for a star import."""
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            if alias.asname:
                yield alias.asname, alias.name
            else:
                head = alias.name.split(".")[0]
                yield head, head
        return
    base = stmt.module or ""
    if stmt.level:
        anchor = package.split(".") if package else []
        anchor = anchor[: len(anchor) - (stmt.level - 1)] if stmt.level > 1 else anchor
        base = ".".join([*anchor, *([stmt.module] if stmt.module else [])])
    for alias in stmt.names:
        if alias.name == "*":
            yield "*", base
        else:
            yield alias.asname or alias.name, f"{base}.{alias.name}"


def _index(module: SourceModule) -> None:
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    top: set[int] = set()
    for stmt in _top_level_statements(module.tree.body):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            top.add(id(stmt))
            for local, target in _bindings(stmt, package):
                if local == "*":
                    module.star_imports.append(target)
                else:
                    module.imports[local] = target
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.definitions.add(stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            module.definitions.add(stmt.name)
            info = module.classes.setdefault(stmt.name, _ClassInfo())
            for inner in stmt.body:
                found = _assigned_constant(inner)
                if found is not None:
                    name, value = found
                    # A name bound twice is not a constant: refuse to pick one.
                    info.constants[name] = None if name in info.constants else value
        else:
            found = _assigned_constant(stmt)
            if found is not None:
                name, value = found
                module.constants[name] = None if name in module.constants else value
    # Imports inside functions (a lazy `from rlsight import span` in a worker method, #9.11):
    # read module-wide, never replacing a top-level binding of the same name.
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            for local, target in _bindings(node, package):
                if local != "*":
                    module.imports.setdefault(local, target)


def _iter_python_files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    for child in sorted(path.iterdir()):
        if child.is_dir():
            if child.name in _SKIP_DIRS or child.name.startswith("."):
                continue
            yield from _iter_python_files(child)
        elif child.suffix == ".py":
            yield child


def parse_module(path: Path, display: str, *, external: bool = False) -> SourceModule:
    """Parse one file and index its top-level bindings.

    Raises:
        CheckInputError: the file cannot be read or is not valid Python.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckInputError(f"cannot read {display}: {exc}") from exc
    try:
        tree = ast.parse(text, filename=display)
    except SyntaxError as exc:
        raise CheckInputError(
            f"{display}:{exc.lineno}: not valid Python ({exc.msg}); fix the syntax or exclude "
            "the file in [tool.rlsight.check] exclude"
        ) from exc
    name, is_package = _module_name(path)
    module = SourceModule(
        path=path,
        display=display,
        name=name,
        is_package=is_package,
        tree=tree,
        lines=tuple(text.splitlines()),
        external=external,
    )
    _index(module)
    return module


def python_files(path: Path) -> list[Path]:
    """Every ``.py`` file under ``path`` (or ``path`` itself), skipping venvs and caches."""
    return list(_iter_python_files(path))

