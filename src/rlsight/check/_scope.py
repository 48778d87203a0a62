"""A function scope for static resolution: its parameters and what its body assigns."""

from __future__ import annotations

import ast

__all__ = ["Scope"]


class Scope:
    """A function's parameters and, computed on first use, what its body assigns to names.

    Most functions never need a name resolved, so the walk over the body is deferred.
    """

    __slots__ = ("_assigned", "class_name", "enclosing", "node", "params")

    def __init__(
        self,
        node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
        class_name: str | None,
        enclosing: Scope | None,
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
