"""Value resolution across modules: what a name refers to and every string it can be.

A value at a call site (a span name, a group, a logger key) is resolved statically: a
string literal, an ``UPPER_CASE`` module constant or class constant (``RL.GENERATION``, also
imported from another checked module), an f-string or ``+`` of those, a conditional
expression over them, or a function-local variable whose every assignment is one of those.
A value that is the enclosing function's own parameter is *forwarded* (see :mod:`._values`).

Calls are recognised by what their callee resolves to through the module's imports, so
``from rlsight import span as s; s(...)`` counts and an unrelated ``tracer.span(...)`` does
not. Helper roots (``rlsight`` by default, plus any package that re-exports rlsight's
helpers under the same names) are configurable.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

from rlsight.check._helpers import KNOWN_HELPERS
from rlsight.check._model import CheckInputError
from rlsight.check._scope import Scope
from rlsight.check._source import SourceModule, parse_module
from rlsight.check._values import Resolved, concat, known, union, unknown

__all__ = ["Project", "load_project"]


class Project:
    """Every parsed module, and static resolution of names across them."""

    def __init__(self, modules: Sequence[SourceModule], helper_roots: Sequence[str]) -> None:
        self.modules = list(modules)
        self.by_name: dict[str, SourceModule] = {}
        for m in self.modules:
            # A checked module wins over rlsight's own copy of the same name.
            if m.name not in self.by_name or self.by_name[m.name].external:
                self.by_name[m.name] = m
        self._name_namespace_packages()
        self.helper_roots = tuple(helper_roots)

    def _name_namespace_packages(self) -> None:
        """Also know a module in a namespace package (a folder without ``__init__.py``) by the
        dotted paths of the folders above it.

        Its own name stops at the first folder without ``__init__.py``, so ``src/pkg/telemetry.py``
        is ``telemetry``, and ``from pkg.telemetry import span`` elsewhere would name nothing
        parsed: the helpers it re-exports and the constants it holds would not be followed. Which
        folder is the import root cannot be read from the files, so every suffix of the path
        (``pkg.telemetry``, ``src.pkg.telemetry``) names it, unless a module already has that
        name or two modules would share it.
        """
        aliases: dict[str, list[SourceModule]] = {}
        for m in self.modules:
            if m.external:
                continue
            folders = m.path.resolve().parent.parts
            covered = m.name.count(".") + (1 if m.is_package else 0)  # folders its name spells
            outside = folders[: len(folders) - covered]
            for n in range(1, len(outside)):
                alias = ".".join([*outside[len(outside) - n:], m.name])
                aliases.setdefault(alias, []).append(m)
        for alias, modules in aliases.items():
            if alias not in self.by_name and len(modules) == 1:
                self.by_name[alias] = modules[0]

    @property
    def checked(self) -> list[SourceModule]:
        """The modules the guards report on (not external)."""
        return [m for m in self.modules if not m.external]

    # -- qualification ------------------------------------------------------------------------

    def qualify(self, module: SourceModule, expr: ast.expr) -> str | None:
        """The dotted name ``expr`` refers to (``rlsight.spans.span``), or ``None``."""
        if isinstance(expr, ast.Name):
            name = expr.id
            if name in module.imports:
                return module.imports[name]
            if name in module.definitions or name in module.constants:
                return f"{module.name}.{name}"
            for star in module.star_imports:
                target = self.by_name.get(star)
                if target is None or name in target.definitions or name in target.constants:
                    return f"{star}.{name}"
            return None
        if isinstance(expr, ast.Attribute):
            base = self.qualify(module, expr.value)
            return None if base is None else f"{base}.{expr.attr}"
        return None

    def helper(self, module: SourceModule, func: ast.expr) -> str | None:
        """Which rlsight helper ``func`` is (``"span"``, ``"MetricSpec"``...), or ``None``."""
        qualified = self.qualify(module, func)
        for _ in range(8):
            if qualified is None or "." not in qualified:
                return None
            owner, _, attr = qualified.rpartition(".")
            if attr not in KNOWN_HELPERS:
                return None
            for root in self.helper_roots:
                if owner == root or owner.startswith(root + "."):
                    return attr
            # A checked module that re-exports the helper (``from rlsight import span``).
            reexporter = self.by_name.get(owner)
            qualified = None if reexporter is None else reexporter.imports.get(attr)
        return None

    def origin(self, qualified: str | None) -> str | None:
        """Where the object ``qualified`` names is defined, following re-exports and aliases.

        ``pkg.api._G`` with ``from rlsight.groups import GATE as _G`` in ``pkg.api`` (or
        ``_G = GATE`` there) is ``rlsight.groups.GATE``: what a name means, not how the code
        at hand spells it. A name in no parsed module is taken as it is qualified.
        """
        for _ in range(8):
            if qualified is None:
                return None
            parts = qualified.split(".")
            following: str | None = qualified
            for cut in range(len(parts) - 1, 0, -1):
                module = self.by_name.get(".".join(parts[:cut]))
                if module is None:
                    continue
                head, rest = parts[cut], parts[cut + 1 :]
                value = module.constants.get(head)
                if head in module.imports:
                    following = ".".join([module.imports[head], *rest])
                elif isinstance(value, (ast.Name, ast.Attribute)):
                    base = self.qualify(module, value)
                    following = None if base is None else ".".join([base, *rest])
                break
            if following == qualified:
                return qualified
            qualified = following
        return None

    def lookup(self, qualified: str, depth: int = 0) -> tuple[SourceModule, ast.expr] | None:
        """The defining expression of the constant ``qualified`` names, following re-exports."""
        if depth > 8:
            return None
        parts = qualified.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = self.by_name.get(".".join(parts[:cut]))
            if module is None:
                continue
            rest = parts[cut:]
            head = rest[0]
            if head in module.constants and len(rest) == 1:
                value = module.constants[head]
                return None if value is None else (module, value)
            if head in module.classes and len(rest) >= 2:
                if len(rest) > 3 or (len(rest) == 3 and rest[2] != "value"):
                    return None
                value = module.classes[head].constants.get(rest[1])
                return None if value is None else (module, value)
            if head in module.imports:
                return self.lookup(".".join([module.imports[head], *rest[1:]]), depth + 1)
            for star in module.star_imports:
                found = self.lookup(".".join([star, *rest]), depth + 1)
                if found is not None:
                    return found
            return None
        return None

    # -- resolution ---------------------------------------------------------------------------

    def resolve(self, module: SourceModule, expr: ast.expr, scope: Scope | None) -> Resolved:
        """Every string ``expr`` can evaluate to, as far as static reading can tell."""
        return self._resolve(module, expr, scope, frozenset())

    def _resolve(
        self, module: SourceModule, expr: ast.expr, scope: Scope | None, seen: frozenset[int]
    ) -> Resolved:
        if id(expr) in seen:
            return unknown("a value defined in terms of itself")
        seen = seen | {id(expr)}
        if isinstance(expr, ast.Constant):
            if isinstance(expr.value, str):
                return known(expr.value)
            return unknown(f"the non-string constant {expr.value!r}")
        if isinstance(expr, ast.JoinedStr):
            parts: list[Resolved] = []
            for piece in expr.values:
                if isinstance(piece, ast.FormattedValue):
                    if piece.format_spec is not None or piece.conversion != -1:
                        return unknown("an f-string with a format spec or conversion")
                    parts.append(self._resolve(module, piece.value, scope, seen))
                else:
                    parts.append(self._resolve(module, piece, scope, seen))
            return concat(parts)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return concat(
                [self._resolve(module, expr.left, scope, seen),
                 self._resolve(module, expr.right, scope, seen)]
            )
        if isinstance(expr, ast.IfExp):
            return union(
                [self._resolve(module, expr.body, scope, seen),
                 self._resolve(module, expr.orelse, scope, seen)]
            )
        if isinstance(expr, ast.Name):
            return self._resolve_name(module, expr, scope, seen)
        if isinstance(expr, ast.Attribute):
            if (
                scope is not None
                and scope.class_name is not None
                and isinstance(expr.value, ast.Name)
                and expr.value.id in ("self", "cls")
            ):
                info = module.classes.get(scope.class_name)
                value = info.constants.get(expr.attr) if info else None
                if value is not None:
                    return self._resolve(module, value, None, seen)
            qualified = self.qualify(module, expr)
            if qualified is not None:
                found = self.lookup(qualified)
                if found is not None:
                    return self._resolve(found[0], found[1], None, seen)
                return unknown(f"{qualified}, which is not a constant in the checked sources")
            return unknown(f"the expression {ast.unparse(expr)!r}")
        if isinstance(expr, ast.Call):
            return unknown(f"the result of {ast.unparse(expr.func)}(...)")
        return unknown(f"the expression {ast.unparse(expr)!r}")

    def _resolve_name(
        self, module: SourceModule, expr: ast.Name, scope: Scope | None, seen: frozenset[int]
    ) -> Resolved:
        name = expr.id
        if scope is not None:
            if name in scope.params:
                return Resolved(forwarded=name)
            if name in scope.assigned:
                values = scope.assigned[name]
                if any(v is None for v in values):
                    return unknown(f"the local {name!r}, which is not only assigned constants")
                return union([self._resolve(module, v, scope, seen) for v in values if v is not None])
            if scope.enclosing is not None:
                return self._resolve_name(module, expr, scope.enclosing, seen)
        if name in module.constants:
            value = module.constants[name]
            if value is None:
                return unknown(f"{name}, which is assigned more than once")
            return self._resolve(module, value, None, seen)
        qualified = self.qualify(module, expr)
        if qualified is not None and qualified != f"{module.name}.{name}":
            found = self.lookup(qualified)
            if found is not None:
                return self._resolve(found[0], found[1], None, seen)
            return unknown(f"{qualified}, which is not a constant in the checked sources")
        return unknown(
            f"{name!r}, which is not a literal, an UPPER_CASE constant or a local assigned one"
        )

    def resolve_sequence(
        self, module: SourceModule, expr: ast.expr, scope: Scope | None
    ) -> list[Resolved]:
        """The elements of a literal tuple/list, directly or through a constant."""
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            return [self.resolve(module, e, scope) for e in expr.elts]
        target: tuple[SourceModule, ast.expr] | None = None
        if isinstance(expr, ast.Name) and expr.id in module.constants:
            value = module.constants[expr.id]
            target = None if value is None else (module, value)
        else:
            qualified = self.qualify(module, expr)
            target = None if qualified is None else self.lookup(qualified)
        if target is not None and isinstance(target[1], (ast.Tuple, ast.List, ast.Set)):
            return [self.resolve(target[0], e, None) for e in target[1].elts]
        return [unknown(f"the sequence {ast.unparse(expr)!r}")]


def load_project(
    files: Sequence[tuple[Path, str]],
    external: Sequence[tuple[Path, str]],
    helper_roots: Sequence[str],
) -> Project:
    """Parse ``files`` (checked) and ``external`` (declarations only) into a :class:`Project`.

    Raises:
        CheckInputError: a checked file does not parse.
    """
    modules = [parse_module(p, d) for p, d in files]
    for p, d in external:
        try:
            modules.append(parse_module(p, d, external=True))
        except CheckInputError:
            continue  # rlsight's own sources always parse; a stray file is not the user's fault
    return Project(modules, helper_roots)
