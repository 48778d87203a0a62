"""The visitor: one pass over each module, turning rlsight helper calls into :class:`Facts`.

Every guard works on the same facts. Calls are recognised by what their callee resolves to
(:meth:`Project.helper`), the span-group gate by what an expression resolves to
(:mod:`._gate`), and carrier dispatches by :mod:`._dispatch`.
"""

from __future__ import annotations

import ast

from rlsight._rl_groups import RL
from rlsight._semconv import EFFICIENCY_SPAN_PREFIX, SETUP_SPAN_PREFIX, TIMER_SPAN_PREFIX
from rlsight.check._dispatch import DispatchReader
from rlsight.check._facts import (
    CarrierDispatch,
    CarrierMethod,
    CategoryDeclaration,
    CategoryUse,
    Facts,
    GroupDeclaration,
    GroupGate,
    KeyDeclaration,
    KeyEmit,
    SpanEmit,
)
from rlsight.check._gate import is_gate_set
from rlsight.check._helpers import (
    DECORATOR_HELPERS,
    FIXED_SPANS,
    GROUP_AND_NAME_HELPERS,
    PER_PROMPT,
)
from rlsight.check._project import Project
from rlsight.check._scope import Scope
from rlsight.check._source import SourceModule
from rlsight.check._values import Resolved, known, prefixed, unknown

__all__ = ["collect_facts"]


def _argument(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
        return call.args[index]
    return None


class _Collector(ast.NodeVisitor):
    """One pass over one module, appending to ``facts``."""

    def __init__(self, project: Project, module: SourceModule, facts: Facts) -> None:
        self.project = project
        self.module = module
        self.facts = facts
        self.scope: Scope | None = None
        self.qualname: list[str] = []
        self.class_name: str | None = None
        self.per_prompt_depth = 0
        self.per_prompt_gates: list[int] = []
        self.decorator_calls: set[int] = set()
        self.dispatch = DispatchReader(project, module)

    # -- helpers ------------------------------------------------------------------------------

    def helper(self, func: ast.expr) -> str | None:
        return self.project.helper(self.module, func)

    def resolve(self, expr: ast.expr | None) -> Resolved:
        if expr is None:
            return unknown("a missing argument")
        return self.project.resolve(self.module, expr, self.scope)

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
        self.scope = Scope(node, self.class_name, self.scope)
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
        self.scope = Scope(node, self.class_name, self.scope)
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
                name = known(qualname)
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
        # rlsight's own fast path: ``if RL.JOB not in GATE.enabled`` gates like
        # ``is_span_group_enabled(RL.JOB)``, under whatever name the gate is reached.
        if (
            not self.module.external
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and is_gate_set(self.project, self.module, self.scope, node.comparators[0])
        ):
            self.facts.gates.append(GroupGate(self.module, node.lineno, self.resolve(node.left)))
        self.generic_visit(node)

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
            self._emit(node, helper, known(fixed_group), known(fixed_name))
        elif helper in GROUP_AND_NAME_HELPERS:
            self._emit(
                node, helper,
                self.resolve(_argument(node, 0, "group")),
                self.resolve(_argument(node, 1, "name")),
            )
        elif helper in DECORATOR_HELPERS and id(node) not in self.decorator_calls:
            name_arg = _argument(node, 1, "name")
            name = (
                unknown(f"the default name of {helper}(), the __qualname__ of whatever it wraps")
                if name_arg is None
                else self.resolve(name_arg)
            )
            self._emit(node, helper, self.resolve(_argument(node, 0, "group")), name)
        elif helper == "setup_span":
            phase = self.resolve(_argument(node, 0, "phase"))
            self._emit(node, helper, known(RL.SETUP), prefixed(SETUP_SPAN_PREFIX, phase))
        elif helper == "efficiency_span":
            category = self.resolve(_argument(node, 0, "category"))
            if not module.external:
                self.facts.categories_used.append(CategoryUse(module, node.lineno, category))
            self._emit(node, helper, known(RL.EFFICIENCY),
                       prefixed(EFFICIENCY_SPAN_PREFIX, category, dots=True))
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
            target = self.dispatch.call_target(node.args[0], self.scope)
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
            self._emit(node, "TimerBridge", unknown("a TimerBridge table that is not a dict literal"),
                       unknown("a TimerBridge table that is not a dict literal"))
            return
        for key, value in zip(table.keys, table.values, strict=True):
            label = self.resolve(key)
            if isinstance(value, ast.Tuple) and len(value.elts) == 2:
                group, name = self.resolve(value.elts[0]), self.resolve(value.elts[1])
            else:
                group, name = self.resolve(value), prefixed(TIMER_SPAN_PREFIX, label)
            self._emit(key or node, "TimerBridge", group, name)

    def _span_group(self, node: ast.Call) -> None:
        umbrella_arg = _argument(node, 3, "umbrella")
        umbrella = isinstance(umbrella_arg, ast.Constant) and umbrella_arg.value is True
        name = self.resolve(_argument(node, 0, "name"))
        self.facts.groups.append(GroupDeclaration(self.module, node.lineno, name, umbrella))

    def _maybe_dispatch(self, node: ast.Call) -> None:
        for target, via in self.dispatch.dispatches(node, self.scope):
            self.facts.dispatches.append(CarrierDispatch(self.module, node.lineno, target, via))


def collect_facts(project: Project) -> Facts:
    """Walk every module once and gather the facts all guards use."""
    facts = Facts()
    for module in project.modules:
        _Collector(project, module, facts).visit(module.tree)
    return facts
