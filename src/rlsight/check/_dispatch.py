"""Recognising calls that send a trace carrier, and the method each one reaches.

A dispatch carries the caller's trace when it passes ``**trace_context_kwargs()`` (directly,
through ``dict(...)``/``{**...}`` or a local bound to one), goes through a handle wrapped by
``traced_handle``, or fans out by method name with a carrier (``run_all("train", **carrier)``).
The carriers guard matches these targets against the methods that accept a carrier.
"""

from __future__ import annotations

import ast

from rlsight.check._project import Project
from rlsight.check._scope import Scope
from rlsight.check._source import SourceModule

__all__ = ["DispatchReader"]


class DispatchReader:
    """Per module: which calls send a carrier, to which method, and how (for messages)."""

    __slots__ = ("handle_targets", "module", "project")

    def __init__(self, project: Project, module: SourceModule) -> None:
        self.project = project
        self.module = module
        self.handle_targets = self._traced_handle_targets()

    def _helper(self, func: ast.expr) -> str | None:
        return self.project.helper(self.module, func)

    def _traced_handle_targets(self) -> set[str]:
        targets: set[str] = set()
        if not any("traced_handle" in line for line in self.module.lines):
            return targets  # skip a second walk over the tree in the common case
        for node in ast.walk(self.module.tree):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and self._helper(node.value.func) == "traced_handle"
            ):
                targets.update(ast.unparse(t) for t in node.targets)
        return targets

    def dispatches(self, node: ast.Call, scope: Scope | None) -> list[tuple[str, str]]:
        """``(target method, via)`` for each method ``node`` sends a carrier to (often none)."""
        has_carrier = any(k.arg is None and self.is_carrier(k.value, scope) for k in node.keywords)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "remote":
            receiver = func.value
            via = "**trace_context_kwargs()"
            if not has_carrier and isinstance(receiver, ast.Attribute):
                handle = receiver.value
                traced = (
                    isinstance(handle, ast.Call) and self._helper(handle.func) == "traced_handle"
                ) or ast.unparse(handle) in self.handle_targets
                if not traced:
                    return []
                via = "traced_handle"
            elif not has_carrier:
                return []
            target = self.call_target(receiver, scope)
            return [] if target is None else [(target, via)]
        if has_carrier and node.args:
            # A worker-group fan-out that names the method as a string: run_all("train", ...).
            name = self.project.resolve(self.module, node.args[0], scope)
            if name.is_known:
                return [(value, "method name + carrier") for value in name.values]
        return []

    def is_carrier(self, expr: ast.expr, scope: Scope | None, seen: frozenset[int] = frozenset()) -> bool:
        """Whether ``expr`` is (or is built from) ``trace_context_kwargs()``."""
        if id(expr) in seen:
            return False
        seen = seen | {id(expr)}
        if isinstance(expr, ast.Call):
            if self._helper(expr.func) == "trace_context_kwargs":
                return True
            if isinstance(expr.func, ast.Name) and expr.func.id == "dict":
                return any(k.arg is None and self.is_carrier(k.value, scope, seen) for k in expr.keywords)
            return False
        if isinstance(expr, ast.Dict):
            return any(
                k is None and self.is_carrier(v, scope, seen)
                for k, v in zip(expr.keys, expr.values, strict=True)
            )
        if isinstance(expr, ast.Name):
            current = scope
            while current is not None:
                if expr.id in current.assigned:
                    return any(
                        v is not None and self.is_carrier(v, scope, seen) for v in current.assigned[expr.id]
                    )
                current = current.enclosing
            value = self.module.constants.get(expr.id)
            return value is not None and self.is_carrier(value, scope, seen)
        return False

    def call_target(self, expr: ast.expr, scope: Scope | None) -> str | None:
        """The method a dispatch goes to: ``h.method`` -> ``method``; a parameter -> None."""
        if isinstance(expr, ast.Attribute):
            return expr.attr
        if isinstance(expr, ast.Name):
            if scope is not None and expr.id in scope.params:
                return None  # a wrapper forwarding whatever it was given
            return expr.id
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Name)
            and expr.func.id == "getattr"
            and len(expr.args) >= 2
        ):
            name = self.project.resolve(self.module, expr.args[1], scope)
            if name.is_known and len(name.values) == 1:
                return next(iter(name.values))
        return None
