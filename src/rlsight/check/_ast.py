"""Read instrumented sources without importing them: names, constants and the facts guards need.

Every guard works on the same :class:`Facts`, collected in one pass over each module's AST.
A value at a call site (a span name, a group, a logger key) is *resolved* statically: a
string literal, an ``UPPER_CASE`` module constant or class constant (``RL.GENERATION``, also
imported from another checked module), an f-string or ``+`` of those, a conditional
expression over them, or a function-local variable whose every assignment is one of those.
A value the check cannot see is reported as such, never guessed: a guard that guesses turns
into a tautology. A value that is the enclosing function's own parameter is *forwarded*: the
function is a wrapper around the helper, and its callers are what the guards judge.

Calls are recognised by what their callee resolves to through the module's imports, so
``from rlsight import span as s; s(...)`` counts and an unrelated ``tracer.span(...)`` does
not. Helper roots (``rlsight`` by default, plus any package that re-exports rlsight's
helpers under the same names) are configurable.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from rlsight._semconv import (
    DISCARD_SPAN,
    EFFICIENCY_SPAN_PREFIX,
    JOB_SPAN,
    LOAD_MODEL_SPAN,
    SETUP_SPAN_PREFIX,
    STARTUP_SPAN,
    STEP_SPAN,
    TIMER_SPAN_PREFIX,
)
from rlsight.check._model import CheckInputError

__all__ = [
    "DECORATOR_HELPERS",
    "FIXED_SPANS",
    "GROUP_AND_NAME_HELPERS",
    "PER_PROMPT",
    "UMBRELLA_HELPERS",
    "CarrierDispatch",
    "CarrierMethod",
    "CategoryDeclaration",
    "CategoryUse",
    "Facts",
    "GroupDeclaration",
    "GroupGate",
    "KeyDeclaration",
    "KeyEmit",
    "Project",
    "Resolved",
    "SourceModule",
    "SpanEmit",
    "collect_facts",
    "load_project",
    "parse_module",
    "python_files",
]

#: Helpers that open a span, with the group and name they imply when those are fixed.
FIXED_SPANS: Final[dict[str, tuple[str, str]]] = {
    "job_span": ("job", JOB_SPAN),
    "step_span": ("step", STEP_SPAN),
    "startup_span": ("startup", STARTUP_SPAN),
    "load_model_span": ("setup", LOAD_MODEL_SPAN),
    "discard": ("efficiency", DISCARD_SPAN),
}
GROUP_AND_NAME_HELPERS: Final = frozenset({"span", "umbrella_span", "record_span"})
DECORATOR_HELPERS: Final = frozenset({"traced", "umbrella_traced"})
UMBRELLA_HELPERS: Final = frozenset({"umbrella_span", "umbrella_traced"})
_KNOWN_HELPERS: Final = frozenset(
    {
        *FIXED_SPANS,
        *GROUP_AND_NAME_HELPERS,
        *DECORATOR_HELPERS,
        "setup_span",
        "efficiency_span",
        "SpanGroup",
        "declare_efficiency_categories",
        "accepts_trace_context",
        "traced_actor",
        "dispatch_with_trace_context",
        "trace_context_kwargs",
        "traced_handle",
        "MetricSpec",
        "is_span_group_enabled",
        "per_prompt_scope",
        "TimerBridge",
    }
)
PER_PROMPT: Final = "per_prompt"
_MAX_VALUES: Final = 64
_CONSTANT_NAME: Final = re.compile(r"^_*[A-Z][A-Z0-9_]*$")
_SUPPRESS: Final = re.compile(r"#\s*rlsight:\s*ignore(?:\[([a-z0-9_,\s-]+)\])?")
_SKIP_DIRS: Final = frozenset(
    {".git", ".venv", "venv", "__pycache__", "node_modules", "build", "dist", ".tox", ".nox"}
)


# --------------------------------------------------------------------------------------------
# Resolved values


@dataclass(frozen=True, slots=True)
class Resolved:
    """What static reading could tell about a string value at a call site.

    Exactly one of three shapes: ``values`` (every string it can be), ``forwarded`` (it is
    the enclosing function's parameter of that name) or ``unknown`` (why it can't be read).
    """

    values: frozenset[str] = frozenset()
    forwarded: str | None = None
    unknown: str | None = None

    @property
    def is_known(self) -> bool:
        """Whether ``values`` holds every value this expression can take."""
        return self.forwarded is None and self.unknown is None

    def describe(self) -> str:
        """Short text for messages: the value(s), or why there are none."""
        if self.forwarded is not None:
            return f"parameter {self.forwarded!r}"
        if self.unknown is not None:
            return self.unknown
        return " or ".join(repr(v) for v in sorted(self.values))


def _known(*values: str) -> Resolved:
    return Resolved(values=frozenset(values))


def _unknown(reason: str) -> Resolved:
    return Resolved(unknown=reason)


def _union(parts: Sequence[Resolved]) -> Resolved:
    for p in parts:
        if p.unknown is not None:
            return p
    for p in parts:
        if p.forwarded is not None:
            return p
    values = frozenset(itertools.chain.from_iterable(p.values for p in parts))
    if len(values) > _MAX_VALUES:
        return _unknown(f"more than {_MAX_VALUES} possible values")
    return Resolved(values=values)


def _concat(parts: Sequence[Resolved]) -> Resolved:
    # A prefix glued onto a parameter is still a wrapper; anything unknown makes it unknown.
    for p in parts:
        if p.unknown is not None:
            return p
    for p in parts:
        if p.forwarded is not None:
            return p
    combos = 1
    for p in parts:
        combos *= max(1, len(p.values))
    if combos > _MAX_VALUES:
        return _unknown(f"more than {_MAX_VALUES} possible values")
    return Resolved(values=frozenset("".join(c) for c in itertools.product(*(p.values for p in parts))))


# --------------------------------------------------------------------------------------------
# Modules and the project index


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


class Project:
    """Every parsed module, and static resolution of names across them."""

    def __init__(self, modules: Sequence[SourceModule], helper_roots: Sequence[str]) -> None:
        self.modules = list(modules)
        self.by_name: dict[str, SourceModule] = {}
        for m in self.modules:
            # A checked module wins over rlsight's own copy of the same name.
            if m.name not in self.by_name or self.by_name[m.name].external:
                self.by_name[m.name] = m
        self.helper_roots = tuple(helper_roots)

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
            if attr not in _KNOWN_HELPERS:
                return None
            for root in self.helper_roots:
                if owner == root or owner.startswith(root + "."):
                    return attr
            # A checked module that re-exports the helper (``from rlsight import span``).
            reexporter = self.by_name.get(owner)
            qualified = None if reexporter is None else reexporter.imports.get(attr)
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

    def resolve(self, module: SourceModule, expr: ast.expr, scope: _Scope | None) -> Resolved:
        """Every string ``expr`` can evaluate to, as far as static reading can tell."""
        return self._resolve(module, expr, scope, frozenset())

    def _resolve(
        self, module: SourceModule, expr: ast.expr, scope: _Scope | None, seen: frozenset[int]
    ) -> Resolved:
        if id(expr) in seen:
            return _unknown("a value defined in terms of itself")
        seen = seen | {id(expr)}
        if isinstance(expr, ast.Constant):
            if isinstance(expr.value, str):
                return _known(expr.value)
            return _unknown(f"the non-string constant {expr.value!r}")
        if isinstance(expr, ast.JoinedStr):
            parts: list[Resolved] = []
            for piece in expr.values:
                if isinstance(piece, ast.FormattedValue):
                    if piece.format_spec is not None or piece.conversion != -1:
                        return _unknown("an f-string with a format spec or conversion")
                    parts.append(self._resolve(module, piece.value, scope, seen))
                else:
                    parts.append(self._resolve(module, piece, scope, seen))
            return _concat(parts)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return _concat(
                [self._resolve(module, expr.left, scope, seen),
                 self._resolve(module, expr.right, scope, seen)]
            )
        if isinstance(expr, ast.IfExp):
            return _union(
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
                return _unknown(f"{qualified}, which is not a constant in the checked sources")
            return _unknown(f"the expression {ast.unparse(expr)!r}")
        if isinstance(expr, ast.Call):
            return _unknown(f"the result of {ast.unparse(expr.func)}(...)")
        return _unknown(f"the expression {ast.unparse(expr)!r}")

    def _resolve_name(
        self, module: SourceModule, expr: ast.Name, scope: _Scope | None, seen: frozenset[int]
    ) -> Resolved:
        name = expr.id
        if scope is not None:
            if name in scope.params:
                return Resolved(forwarded=name)
            if name in scope.assigned:
                values = scope.assigned[name]
                if any(v is None for v in values):
                    return _unknown(f"the local {name!r}, which is not only assigned constants")
                return _union([self._resolve(module, v, scope, seen) for v in values if v is not None])
            if scope.enclosing is not None:
                return self._resolve_name(module, expr, scope.enclosing, seen)
        if name in module.constants:
            value = module.constants[name]
            if value is None:
                return _unknown(f"{name}, which is assigned more than once")
            return self._resolve(module, value, None, seen)
        qualified = self.qualify(module, expr)
        if qualified is not None and qualified != f"{module.name}.{name}":
            found = self.lookup(qualified)
            if found is not None:
                return self._resolve(found[0], found[1], None, seen)
            return _unknown(f"{qualified}, which is not a constant in the checked sources")
        return _unknown(
            f"{name!r}, which is not a literal, an UPPER_CASE constant or a local assigned one"
        )

    def resolve_sequence(
        self, module: SourceModule, expr: ast.expr, scope: _Scope | None
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
        return [_unknown(f"the sequence {ast.unparse(expr)!r}")]


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


def python_files(path: Path) -> list[Path]:
    """Every ``.py`` file under ``path`` (or ``path`` itself), skipping venvs and caches."""
    return list(_iter_python_files(path))


# --------------------------------------------------------------------------------------------
# Facts


@dataclass(frozen=True, slots=True)
class SpanEmit:
    """A call that opens a span (or a decorator that does, per call)."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    helper: str
    group: Resolved
    name: Resolved
    in_per_prompt_scope: bool = False
    per_prompt_gate: int | None = None

    @property
    def path(self) -> str:
        """The module's display path."""
        return self.module.display


@dataclass(frozen=True, slots=True)
class GroupDeclaration:
    """A ``SpanGroup(...)`` definition."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    name: Resolved
    umbrella: bool


@dataclass(frozen=True, slots=True)
class GroupGate:
    """An ``is_span_group_enabled(group)`` test: code gated on a group uses it."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    group: Resolved


@dataclass(frozen=True, slots=True)
class CategoryDeclaration:
    """One category passed to ``declare_efficiency_categories``."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    category: Resolved


@dataclass(frozen=True, slots=True)
class CategoryUse:
    """The category of an ``efficiency_span(...)`` call."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    category: Resolved


@dataclass(frozen=True, slots=True)
class CarrierMethod:
    """A function or method that accepts a trace carrier (``@accepts_trace_context``)."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    name: str
    qualname: str
    via: str


@dataclass(frozen=True, slots=True)
class CarrierDispatch:
    """A call that sends a trace carrier to the method named ``target``."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    target: str
    via: str


@dataclass(frozen=True, slots=True)
class KeyDeclaration:
    """The ``logger_key`` of a ``MetricSpec(...)``."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    key: Resolved


@dataclass(frozen=True, slots=True)
class KeyEmit:
    """A key produced into a dict: a dict-display key, ``d[k] = ...`` or ``dict(k=...)``."""

    module: SourceModule = field(repr=False, compare=False)
    line: int
    key: str


@dataclass(slots=True)
class Facts:
    """Everything the guards judge, from one pass over the project."""

    spans: list[SpanEmit] = field(default_factory=list)
    groups: list[GroupDeclaration] = field(default_factory=list)
    gates: list[GroupGate] = field(default_factory=list)
    categories_declared: list[CategoryDeclaration] = field(default_factory=list)
    categories_used: list[CategoryUse] = field(default_factory=list)
    carrier_methods: list[CarrierMethod] = field(default_factory=list)
    dispatches: list[CarrierDispatch] = field(default_factory=list)
    keys_declared: list[KeyDeclaration] = field(default_factory=list)
    keys_emitted: list[KeyEmit] = field(default_factory=list)


class _Scope:
    """A function's parameters and, computed on first use, what its body assigns to names.

    Most functions never need a name resolved, so the walk over the body is deferred.
    """

    __slots__ = ("_assigned", "class_name", "enclosing", "node", "params")

    def __init__(
        self,
        node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
        class_name: str | None,
        enclosing: _Scope | None,
    ) -> None:
        args = node.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        self.node = node
        self.params = frozenset(params)
        self.class_name = class_name
        self.enclosing = enclosing
        self._assigned: dict[str, list[ast.expr | None]] | None = None

    @property
    def assigned(self) -> dict[str, list[ast.expr | None]]:
        """Name -> every value assigned to it in the body (``None``: not a plain value)."""
        if self._assigned is None:
            self._assigned = _assignments(self.node)
        return self._assigned


def _assignments(
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
) -> dict[str, list[ast.expr | None]]:
    assigned: dict[str, list[ast.expr | None]] = {}
    stack: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
    while stack:
        current = stack.pop()
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            if not isinstance(current, ast.Lambda):
                assigned.setdefault(current.name, []).append(None)
            continue
        if isinstance(current, ast.Assign):
            for target in current.targets:
                _record_target(assigned, target, current.value)
        elif isinstance(current, ast.AnnAssign) and current.value is not None:
            _record_target(assigned, current.target, current.value)
        elif isinstance(current, (ast.AugAssign, ast.For, ast.AsyncFor)):
            _record_target(assigned, current.target, None)
        elif isinstance(current, ast.NamedExpr):
            _record_target(assigned, current.target, current.value)
        elif isinstance(current, (ast.With, ast.AsyncWith)):
            for item in current.items:
                if item.optional_vars is not None:
                    _record_target(assigned, item.optional_vars, None)
        stack.extend(ast.iter_child_nodes(current))
    return assigned


def _record_target(
    assigned: dict[str, list[ast.expr | None]], target: ast.expr, value: ast.expr | None
) -> None:
    if isinstance(target, ast.Name):
        assigned.setdefault(target.id, []).append(value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            _record_target(assigned, element, None)
    elif isinstance(target, ast.Starred):
        _record_target(assigned, target.value, None)


def _argument(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
        return call.args[index]
    return None


def _prefixed(prefix: str, value: Resolved, *, dots: bool = False) -> Resolved:
    if not value.is_known:
        return value
    return Resolved(
        values=frozenset(prefix + (v.replace("/", ".") if dots else v) for v in value.values)
    )


class _Collector(ast.NodeVisitor):
    """One pass over one module, appending to ``facts``."""

    def __init__(self, project: Project, module: SourceModule, facts: Facts) -> None:
        self.project = project
        self.module = module
        self.facts = facts
        self.scope: _Scope | None = None
        self.qualname: list[str] = []
        self.class_name: str | None = None
        self.per_prompt_depth = 0
        self.per_prompt_gates: list[int] = []
        self.decorator_calls: set[int] = set()
        self.handle_targets = self._traced_handle_targets()

    # -- helpers ------------------------------------------------------------------------------

    def helper(self, func: ast.expr) -> str | None:
        return self.project.helper(self.module, func)

    def resolve(self, expr: ast.expr | None) -> Resolved:
        if expr is None:
            return _unknown("a missing argument")
        return self.project.resolve(self.module, expr, self.scope)

    def _traced_handle_targets(self) -> set[str]:
        targets: set[str] = set()
        if not any("traced_handle" in line for line in self.module.lines):
            return targets  # skip a second walk over the tree in the common case
        for node in ast.walk(self.module.tree):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and self.helper(node.value.func) == "traced_handle"
            ):
                targets.update(ast.unparse(t) for t in node.targets)
        return targets

    def _is_carrier(self, expr: ast.expr, seen: frozenset[int] = frozenset()) -> bool:
        if id(expr) in seen:
            return False
        seen = seen | {id(expr)}
        if isinstance(expr, ast.Call):
            if self.helper(expr.func) == "trace_context_kwargs":
                return True
            if isinstance(expr.func, ast.Name) and expr.func.id == "dict":
                return any(k.arg is None and self._is_carrier(k.value, seen) for k in expr.keywords)
            return False
        if isinstance(expr, ast.Dict):
            return any(
                k is None and self._is_carrier(v, seen) for k, v in zip(expr.keys, expr.values, strict=True)
            )
        if isinstance(expr, ast.Name):
            scope = self.scope
            while scope is not None:
                if expr.id in scope.assigned:
                    return any(v is not None and self._is_carrier(v, seen) for v in scope.assigned[expr.id])
                scope = scope.enclosing
            value = self.module.constants.get(expr.id)
            return value is not None and self._is_carrier(value, seen)
        return False

    def _call_target(self, expr: ast.expr) -> str | None:
        """The method a dispatch goes to: ``h.method`` -> ``method``; a parameter -> None."""
        if isinstance(expr, ast.Attribute):
            return expr.attr
        if isinstance(expr, ast.Name):
            if self.scope is not None and expr.id in self.scope.params:
                return None  # a wrapper forwarding whatever it was given
            return expr.id
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Name)
            and expr.func.id == "getattr"
            and len(expr.args) >= 2
        ):
            name = self.resolve(expr.args[1])
            if name.is_known and len(name.values) == 1:
                return next(iter(name.values))
        return None

    # -- scopes -------------------------------------------------------------------------------

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            func = decorator.func if isinstance(decorator, ast.Call) else decorator
            if self.helper(func) == "traced_actor" and not self.module.external:
                for item in node.body:
                    public = not getattr(item, "name", "_").startswith("_")
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and public:
                        self.facts.carrier_methods.append(
                            CarrierMethod(
                                self.module, item.lineno, item.name,
                                ".".join([*self.qualname, node.name, item.name]), "@traced_actor",
                            )
                        )
            self.visit(decorator)
        for base in node.bases:
            self.visit(base)
        outer_class, outer_depth, outer_gates = self.class_name, self.per_prompt_depth, self.per_prompt_gates
        self.class_name, self.per_prompt_depth, self.per_prompt_gates = node.name, 0, []
        self.qualname.append(node.name)
        for stmt in node.body:
            self.visit(stmt)
        self.qualname.pop()
        self.class_name, self.per_prompt_depth, self.per_prompt_gates = outer_class, outer_depth, outer_gates

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        qualname = ".".join([*self.qualname, node.name])
        for decorator in node.decorator_list:
            self._decorator(node, decorator, qualname)
            self.visit(decorator)
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            self.visit(default)
        outer = (self.scope, self.class_name, self.per_prompt_depth, self.per_prompt_gates)
        self.scope = _Scope(node, self.class_name, self.scope)
        self.per_prompt_depth, self.per_prompt_gates = 0, []
        self.qualname.extend([node.name, "<locals>"])
        for stmt in node.body:
            self.visit(stmt)
        del self.qualname[-2:]
        self.scope, self.class_name, self.per_prompt_depth, self.per_prompt_gates = outer

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        outer = self.scope
        self.scope = _Scope(node, self.class_name, self.scope)
        self.visit(node.body)
        self.scope = outer

    def _decorator(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef, decorator: ast.expr, qualname: str
    ) -> None:
        call = decorator if isinstance(decorator, ast.Call) else None
        helper = self.helper(call.func if call is not None else decorator)
        if helper == "accepts_trace_context" and not self.module.external:
            self.facts.carrier_methods.append(
                CarrierMethod(self.module, node.lineno, node.name, qualname, "@accepts_trace_context")
            )
        if helper in DECORATOR_HELPERS and call is not None:
            self.decorator_calls.add(id(call))
            name_arg = _argument(call, 1, "name")
            if name_arg is None or (isinstance(name_arg, ast.Constant) and name_arg.value is None):
                name = _known(qualname)
            else:
                name = self.resolve(name_arg)
            self._emit(call, helper, self.resolve(_argument(call, 0, "group")), name)

    # -- statements ---------------------------------------------------------------------------

    def _visit_with(self, node: ast.With | ast.AsyncWith) -> None:
        entered = 0
        for item in node.items:
            self.visit(item)
            expr = item.context_expr
            # Later items of one ``with`` are entered inside the earlier ones.
            if isinstance(expr, ast.Call) and self.helper(expr.func) == "per_prompt_scope":
                entered += 1
                self.per_prompt_depth += 1
        for stmt in node.body:
            self.visit(stmt)
        self.per_prompt_depth -= entered

    visit_With = _visit_with
    visit_AsyncWith = _visit_with

    def _gates_per_prompt(self, test: ast.expr) -> bool:
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            return any(self._gates_per_prompt(v) for v in test.values)
        if isinstance(test, ast.Call) and self.helper(test.func) == "is_span_group_enabled" and test.args:
            group = self.resolve(test.args[0])
            return group.is_known and PER_PROMPT in group.values
        return False

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        gated = self._gates_per_prompt(node.test)
        if gated:
            self.per_prompt_gates.append(node.lineno)
        for stmt in node.body:
            self.visit(stmt)
        if gated:
            self.per_prompt_gates.pop()
        for stmt in node.orelse:
            self.visit(stmt)

    def _subscript_keys(self, target: ast.expr) -> None:
        if isinstance(target, ast.Subscript) and not self.module.external:
            key = self.resolve(target.slice)
            if key.is_known:
                for value in key.values:
                    self.facts.keys_emitted.append(KeyEmit(self.module, target.lineno, value))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._subscript_keys(element)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._subscript_keys(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._subscript_keys(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._subscript_keys(node.target)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        # A table of MetricSpecs keyed by logger key declares keys; it does not emit them.
        declares = any(
            isinstance(v, ast.Call) and self.helper(v.func) == "MetricSpec" for v in node.values
        )
        if not declares and not self.module.external:
            for key in node.keys:
                if key is None:
                    continue
                resolved = self.resolve(key)
                if resolved.is_known:
                    for value in resolved.values:
                        self.facts.keys_emitted.append(KeyEmit(self.module, key.lineno, value))
        self.generic_visit(node)

    # -- calls --------------------------------------------------------------------------------

    def _emit(self, call: ast.expr, helper: str, group: Resolved, name: Resolved) -> None:
        if self.module.external:
            return
        self.facts.spans.append(
            SpanEmit(
                self.module,
                call.lineno,
                helper,
                group,
                name,
                in_per_prompt_scope=self.per_prompt_depth > 0,
                per_prompt_gate=self.per_prompt_gates[-1] if self.per_prompt_gates else None,
            )
        )

    def visit_Compare(self, node: ast.Compare) -> None:
        # rlsight's own fast path: ``if RL.JOB not in _GATE.enabled`` gates like
        # ``is_span_group_enabled(RL.JOB)``.
        if (
            not self.module.external
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and self._is_gate_set(node.comparators[0])
        ):
            self.facts.gates.append(GroupGate(self.module, node.lineno, self.resolve(node.left)))
        self.generic_visit(node)

    def _is_gate_set(self, expr: ast.expr) -> bool:
        qualified = self.project.qualify(self.module, expr)
        if qualified is None or not qualified.endswith("._GATE.enabled"):
            return False
        owner = qualified.removesuffix("._GATE.enabled")
        return any(owner == r or owner.startswith(r + ".") for r in self.project.helper_roots)

    def visit_Call(self, node: ast.Call) -> None:
        helper = self.helper(node.func)
        if helper is not None:
            self._helper_call(node, helper)
        elif not self.module.external:
            self._maybe_dispatch(node)
            if isinstance(node.func, ast.Name) and node.func.id == "dict":
                for kw in node.keywords:
                    if kw.arg is not None:
                        self.facts.keys_emitted.append(KeyEmit(self.module, kw.value.lineno, kw.arg))
        self.generic_visit(node)

    def _helper_call(self, node: ast.Call, helper: str) -> None:
        module = self.module
        if helper in FIXED_SPANS:
            fixed_group, fixed_name = FIXED_SPANS[helper]
            self._emit(node, helper, _known(fixed_group), _known(fixed_name))
        elif helper in GROUP_AND_NAME_HELPERS:
            self._emit(
                node, helper,
                self.resolve(_argument(node, 0, "group")),
                self.resolve(_argument(node, 1, "name")),
            )
        elif helper in DECORATOR_HELPERS and id(node) not in self.decorator_calls:
            name_arg = _argument(node, 1, "name")
            name = (
                _unknown(f"the default name of {helper}(), the __qualname__ of whatever it wraps")
                if name_arg is None
                else self.resolve(name_arg)
            )
            self._emit(node, helper, self.resolve(_argument(node, 0, "group")), name)
        elif helper == "setup_span":
            phase = self.resolve(_argument(node, 0, "phase"))
            self._emit(node, helper, _known("setup"), _prefixed(SETUP_SPAN_PREFIX, phase))
        elif helper == "efficiency_span":
            category = self.resolve(_argument(node, 0, "category"))
            if not module.external:
                self.facts.categories_used.append(CategoryUse(module, node.lineno, category))
            self._emit(node, helper, _known("efficiency"),
                       _prefixed(EFFICIENCY_SPAN_PREFIX, category, dots=True))
        elif helper == "SpanGroup":
            self._span_group(node)
        elif helper == "TimerBridge":
            self._timer_bridge(node)
        elif helper == "declare_efficiency_categories":
            for arg in node.args:
                values = (
                    self.project.resolve_sequence(module, arg.value, self.scope)
                    if isinstance(arg, ast.Starred)
                    else [self.resolve(arg)]
                )
                for value in values:
                    self.facts.categories_declared.append(CategoryDeclaration(module, node.lineno, value))
        elif helper == "MetricSpec" and not module.external:
            key = _argument(node, 1, "logger_key")
            line = node.lineno if key is None else key.lineno
            self.facts.keys_declared.append(KeyDeclaration(module, line, self.resolve(key)))
        elif helper == "is_span_group_enabled" and not module.external and node.args:
            self.facts.gates.append(GroupGate(module, node.lineno, self.resolve(node.args[0])))
        elif helper == "dispatch_with_trace_context" and not module.external and node.args:
            target = self._call_target(node.args[0])
            if target is not None:
                self.facts.dispatches.append(
                    CarrierDispatch(module, node.lineno, target, "dispatch_with_trace_context")
                )

    def _timer_bridge(self, node: ast.Call) -> None:
        """Each row of a ``TimerBridge({...})`` table is a span emitted under its group."""
        table = _argument(node, 0, "labels")
        if isinstance(table, ast.Name):
            found = self.project.lookup(f"{self.module.name}.{table.id}")
            table = found[1] if found is not None and found[0] is self.module else table
        if not isinstance(table, ast.Dict) or any(k is None for k in table.keys):
            self._emit(node, "TimerBridge", _unknown("a TimerBridge table that is not a dict literal"),
                       _unknown("a TimerBridge table that is not a dict literal"))
            return
        for key, value in zip(table.keys, table.values, strict=True):
            label = self.resolve(key)
            if isinstance(value, ast.Tuple) and len(value.elts) == 2:
                group, name = self.resolve(value.elts[0]), self.resolve(value.elts[1])
            else:
                group, name = self.resolve(value), _prefixed(TIMER_SPAN_PREFIX, label)
            self._emit(key or node, "TimerBridge", group, name)

    def _span_group(self, node: ast.Call) -> None:
        umbrella_arg = _argument(node, 3, "umbrella")
        umbrella = isinstance(umbrella_arg, ast.Constant) and umbrella_arg.value is True
        name = self.resolve(_argument(node, 0, "name"))
        self.facts.groups.append(GroupDeclaration(self.module, node.lineno, name, umbrella))

    def _maybe_dispatch(self, node: ast.Call) -> None:
        has_carrier = any(k.arg is None and self._is_carrier(k.value) for k in node.keywords)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "remote":
            receiver = func.value
            via = "**trace_context_kwargs()"
            if not has_carrier and isinstance(receiver, ast.Attribute):
                handle = receiver.value
                traced = (
                    isinstance(handle, ast.Call) and self.helper(handle.func) == "traced_handle"
                ) or ast.unparse(handle) in self.handle_targets
                if not traced:
                    return
                via = "traced_handle"
            elif not has_carrier:
                return
            target = self._call_target(receiver)
            if target is not None:
                self.facts.dispatches.append(CarrierDispatch(self.module, node.lineno, target, via))
        elif has_carrier and node.args:
            # A worker-group fan-out that names the method as a string: run_all(\"train\", ...).
            name = self.resolve(node.args[0])
            if name.is_known:
                for value in name.values:
                    self.facts.dispatches.append(
                        CarrierDispatch(self.module, node.lineno, value, "method name + carrier")
                    )


def collect_facts(project: Project) -> Facts:
    """Walk every module once and gather the facts all guards use."""
    facts = Facts()
    for module in project.modules:
        _Collector(project, module, facts).visit(module.tree)
    return facts
