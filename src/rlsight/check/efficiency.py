"""Guard ``efficiency-categories``: every ``efficiency_span`` category is declared.

Categories (``idle/buffer_starvation``, ``wasted/stale_discard``...) are declared up front
with ``declare_efficiency_categories`` so the report and the metrics know the full set before
the first wait happens; rlsight declares its built-in ones itself. An undeclared category is
a typo the runtime can only warn about once the span is already open.
"""

from __future__ import annotations

from rlsight.check._context import CheckContext, closest, nothing_to_check
from rlsight.check._model import GuardResult, Violation

__all__ = ["GUARD", "TITLE", "check"]

GUARD = "efficiency-categories"
TITLE = "efficiency categories"


def check(ctx: CheckContext) -> GuardResult:
    """Every category used is declared (in the checked sources or by rlsight)."""
    violations: list[Violation] = []
    declared: set[str] = set()
    for decl in ctx.facts.categories_declared:
        if decl.category.is_known:
            declared |= decl.category.values
        elif not decl.module.external and not ctx.suppressed(decl.module, decl.line, GUARD):
            violations.append(
                Violation(
                    GUARD, decl.module.display, decl.line,
                    f"a declared efficiency category is {decl.category.describe()}; the check "
                    "cannot tell which category this declares",
                    "pass string literals or UPPER_CASE constants",
                )
            )
    used: dict[str, list[tuple[str, int]]] = {}
    for use in ctx.facts.categories_used:
        if use.module.external or ctx.suppressed(use.module, use.line, GUARD):
            continue
        if use.category.is_known:
            for category in use.category.values:
                used.setdefault(category, []).append((use.module.display, use.line))
        elif use.category.unknown is not None:
            violations.append(
                Violation(
                    GUARD, use.module.display, use.line,
                    f"the efficiency category is {use.category.unknown}; the check cannot tell "
                    "whether it is declared",
                    "pass a string literal or an UPPER_CASE constant",
                )
            )
    if not declared:
        violations.append(
            nothing_to_check(
                GUARD, ctx.paths_display, "no declare_efficiency_categories(...) call was found",
                "declare categories with declare_efficiency_categories('idle/...') at import time",
            )
        )
    if not used and ctx.config.guards_named:  # unnamed: a project that declares no waits
        violations.append(
            nothing_to_check(
                GUARD, ctx.paths_display, "no efficiency_span(...) call in the checked sources",
                "point `paths` at the code that waits, or drop this guard from `guards`",
            )
        )
    if declared:
        for category, sites in sorted(used.items()):
            if category in declared:
                continue
            for path, line in sites:
                violations.append(
                    Violation(
                        GUARD, path, line,
                        f"efficiency category {category!r} is not declared{closest(category, declared)}",
                        f"declare it with declare_efficiency_categories({category!r}) at import "
                        "time, or use a declared category",
                    )
                )
    counts = {"declared": len(declared), "used": len(used)}
    return GuardResult(GUARD, TITLE, counts, tuple(violations))
