"""Recognising the span-group gate by what an expression resolves to, never by its spelling.

rlsight's emit helpers test ``group in GATE.enabled`` directly (the fast path of
``is_span_group_enabled``). A test against the gate's ``enabled`` set gates on ``group``
whatever the gate is called where it is read: an ``as`` import, a re-export, an UPPER_CASE
module alias, or a function local bound to it. An unrelated object that happens to be named
``GATE`` is not the gate.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from rlsight.check._helpers import GATE
from rlsight.check._project import Project
from rlsight.check._scope import Scope
from rlsight.check._source import SourceModule

__all__ = ["is_gate_set"]

_Test = Callable[[ast.expr, frozenset[int]], bool]


def is_gate_set(project: Project, module: SourceModule, scope: Scope | None, expr: ast.expr) -> bool:
    """Whether ``expr`` is the gate's ``enabled`` set (``<gate>.enabled`` or a local bound to it)."""

    def gate_set(e: ast.expr, seen: frozenset[int]) -> bool:
        if isinstance(e, ast.Attribute) and e.attr == "enabled":
            return gate(e.value, seen)
        return _local_alias_of(scope, e, gate_set, seen)

    def gate(e: ast.expr, seen: frozenset[int]) -> bool:
        if isinstance(e, ast.Name) and _is_local(scope, e.id):
            return _local_alias_of(scope, e, gate, seen)
        return project.origin(project.qualify(module, e)) == GATE

    return gate_set(expr, frozenset())


def _is_local(scope: Scope | None, name: str) -> bool:
    while scope is not None:
        if name in scope.params or name in scope.assigned:
            return True
        scope = scope.enclosing
    return False


def _local_alias_of(scope: Scope | None, expr: ast.expr, test: _Test, seen: frozenset[int]) -> bool:
    """Whether ``expr`` is a function-local name whose every assignment passes ``test``."""
    if not isinstance(expr, ast.Name) or id(expr) in seen:
        return False
    while scope is not None:
        if expr.id in scope.params:
            return False  # a parameter: whatever the caller passes
        if expr.id in scope.assigned:
            values = scope.assigned[expr.id]
            return all(v is not None and test(v, seen | {id(expr)}) for v in values)
        scope = scope.enclosing
    return False
