"""Guard ``span-names``: every span name the code emits is in a docs span table, and back.

Emitted names come from ``span`` / ``umbrella_span`` (second argument), ``traced`` /
``umbrella_traced`` (``name=``, else the decorated function's ``__qualname__``), the fixed
helpers (``job_span`` -> ``rl.job``, ``step_span`` -> ``rl.step``, ``startup_span`` ->
``rl.startup``, ``load_model_span`` -> ``rl.worker.load_model``), ``setup_span("x")`` ->
``rl.setup.x`` and ``efficiency_span("idle/x")`` -> ``rl.efficiency.idle.x``. Both
directions are enforced: a documented name nothing emits is stale (a rename that updated the
code but not the table), which a one-way check misses. When the table has a ``group``
column, the emit site's group must match it.

When another project is checked, names whose spelling rlsight itself fixes (``rl.job``,
``rl.step``, ``rl.startup``, ``rl.worker.load_model``, the built-in efficiency categories)
are documented by rlsight's docs and need no row in the project's own.
"""

from __future__ import annotations

import ast
from collections import defaultdict

from rlsight._semconv import EFFICIENCY_SPAN_PREFIX
from rlsight.check._context import CheckContext, nothing_to_check
from rlsight.check._facts import SpanEmit
from rlsight.check._helpers import FIXED_SPANS
from rlsight.check._model import GuardResult, Violation
from rlsight.check._values import Resolved

__all__ = ["GUARD", "TITLE", "check"]

GUARD = "span-names"
TITLE = "span names"


def _provided(ctx: CheckContext) -> list[SpanEmit]:
    """Names rlsight's own helpers produce, with the line that produces them.

    ``job_span`` emits ``rl.job`` whoever calls it, and every built-in efficiency category
    becomes an ``rl.efficiency.*`` span: these names belong to rlsight's vocabulary. When
    rlsight itself is checked they must be in its docs like any other emitted name; when
    another project is checked (rlsight's modules are external) rlsight's docs cover them.
    """
    out: list[SpanEmit] = []
    for module in ctx.project.modules:
        if module.name != "rlsight" and not module.name.startswith("rlsight."):
            continue
        for stmt in module.tree.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name in FIXED_SPANS:
                group, name = FIXED_SPANS[stmt.name]
                out.append(SpanEmit(module, stmt.lineno, stmt.name, _one(group), _one(name)))
    for declared in ctx.facts.categories_declared:
        module = declared.module
        if (module.name.startswith("rlsight.") or module.external) and declared.category.is_known:
            names = frozenset(EFFICIENCY_SPAN_PREFIX + c.replace("/", ".") for c in declared.category.values)
            out.append(
                SpanEmit(module, declared.line, "declare_efficiency_categories", _one("efficiency"),
                         Resolved(values=names))
            )
    out += [e for e in ctx.facts.spans if e.module.external and e.name.is_known]
    return out


def _one(value: str) -> Resolved:
    return Resolved(values=frozenset({value}))


def check(ctx: CheckContext) -> GuardResult:
    """Compare emitted span names with the docs' span tables."""
    docs = ctx.docs
    if docs is None:  # the runner refuses to start without a docs folder; stay total anyway
        return GuardResult(GUARD, TITLE, {}, (nothing_to_check(
            GUARD, ".", "no docs folder", "pass --docs DIR or set docs in [tool.rlsight.check]"),))
    violations: list[Violation] = []
    emitted: dict[str, list[SpanEmit]] = defaultdict(list)
    covered: set[str] = set()
    for provided in _provided(ctx):
        if provided.module.external:
            covered |= provided.name.values
        else:
            for name in provided.name.values:
                emitted[name].append(provided)
    for emit in ctx.facts.spans:
        if emit.module.external or ctx.suppressed(emit.module, emit.line, GUARD):
            continue
        if emit.name.is_known:
            for name in emit.name.values:
                emitted[name].append(emit)
        elif emit.name.unknown is not None:
            violations.append(
                Violation(
                    GUARD, emit.path, emit.line,
                    f"the span name passed to {emit.helper}() is {emit.name.unknown}; "
                    "the check cannot tell which name this emits",
                    "use a string literal or an UPPER_CASE constant (span names are "
                    "low-cardinality by design; put IDs in attributes), or add "
                    "`# rlsight: ignore[span-names]` to the line and document its names by hand",
                )
            )
    exact = {d.name: d for d in docs.spans if not d.is_pattern}
    patterns = [d for d in docs.spans if d.is_pattern]
    table = docs.span_table_files[0] if docs.span_table_files else docs.display

    if not emitted:
        violations.append(
            nothing_to_check(
                GUARD, ctx.paths_display, "no span is emitted in the checked sources",
                "point `paths` at the instrumented code; helpers must be imported from rlsight "
                "(or from a module listed in helper_modules)",
            )
        )
    if not docs.spans:
        violations.append(
            nothing_to_check(
                GUARD, docs.display, "no span table in the docs",
                "add a Markdown table with a `span` column listing each span name in backticks",
            )
        )
    counts = {"emitted": len(emitted), "documented": len(exact)}
    if not emitted or not docs.spans:
        return GuardResult(GUARD, TITLE, counts, tuple(violations))

    for name in sorted(emitted):
        sites = emitted[name]
        first = sites[0]
        if name not in exact:
            if name in covered:
                continue
            more = f" (and {len(sites) - 1} more)" if len(sites) > 1 else ""
            violations.append(
                Violation(
                    GUARD, table, None,
                    f"span {name!r} emitted at {first.path}:{first.line}{more} is not documented",
                    f"add it to the table in {table}, or rename the emit site",
                )
            )
            continue
        documented = [d for d in docs.spans if d.name == name and d.groups]
        allowed = frozenset().union(*(d.groups or frozenset() for d in documented))
        for site in sites:
            if not documented or not site.group.is_known or site.group.values <= allowed:
                continue
            row = documented[0]
            violations.append(
                Violation(
                    GUARD, site.path, site.line,
                    f"span {name!r} is emitted under group "
                    f"{' or '.join(map(repr, sorted(site.group.values)))}, but "
                    f"{row.path}:{row.line} documents it under {', '.join(map(repr, sorted(allowed)))}",
                    f"emit it under the documented group, or correct the group in {row.path}:{row.line}",
                )
            )
    everything = set(emitted) | covered
    for name, row in sorted(exact.items()):
        if name not in everything:
            violations.append(
                Violation(
                    GUARD, row.path, row.line,
                    f"span {name!r} is documented but no checked source emits it",
                    "remove the row, or restore the emit site (a rename must update both)",
                )
            )
    for row in patterns:
        if not any(row.matches(n) for n in everything):
            violations.append(
                Violation(
                    GUARD, row.path, row.line,
                    f"span pattern {row.name!r} is documented but no emitted name matches it",
                    "remove the row, or list the names that replaced it",
                )
            )
    return GuardResult(GUARD, TITLE, counts, tuple(violations))
