"""Guard ``logger-keys``: every declared ``MetricSpec`` logger key is emitted somewhere.

The metrics tee reads each declared key from the trainer's logged scalars with ``.get``, so a
key that stopped being produced is indistinguishable from a step that did not report it: the
dashboard shows a gap or a flat line, never an error. Only the two shapes scalars are really
produced in count as emitting a key: a literal (or constant) key in a dict display
(``{"train/loss": loss}``), and a subscript assignment onto a dict (``metrics["train/loss"]
= loss``, also ``+=``); ``dict(loss=...)`` keywords count as a dict display. Any other string
constant does not: a key named only in a docstring or a comment must not keep the guard
green. A dict whose values are ``MetricSpec(...)`` declarations is a table, not an emit site.
"""

from __future__ import annotations

from collections import defaultdict

from rlsight.check._context import CheckContext, closest, nothing_to_check
from rlsight.check._model import GuardResult, Violation

__all__ = ["GUARD", "TITLE", "check"]

GUARD = "logger-keys"
TITLE = "logger keys"


def check(ctx: CheckContext) -> GuardResult:
    """Declared keys ⊆ emitted keys."""
    violations: list[Violation] = []
    declared: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for decl in ctx.facts.keys_declared:
        if ctx.suppressed(decl.module, decl.line, GUARD):
            continue
        if decl.key.is_known:
            for key in decl.key.values:
                declared[key].append((decl.module.display, decl.line))
        else:
            violations.append(
                Violation(
                    GUARD, decl.module.display, decl.line,
                    f"the MetricSpec logger_key is {decl.key.describe()}; the check cannot "
                    "tell which key it declares",
                    "pass the logger key as a string literal or an UPPER_CASE constant",
                )
            )
    emitted = {e.key for e in ctx.facts.keys_emitted}
    # A project that declares no MetricSpec does not tee scalars: with `guards` left at its
    # default that passes; named, the guard must find a declaration.
    if not declared and ctx.config.guards_named:
        violations.append(
            nothing_to_check(
                GUARD, ctx.paths_display, "no MetricSpec(..., logger_key=...) declaration",
                "point `paths` at the module that declares the metric specs, or drop this "
                "guard from `guards`",
            )
        )
    if not emitted and (declared or ctx.config.guards_named):
        violations.append(
            nothing_to_check(
                GUARD, ctx.paths_display, "no dict display or subscript assignment produces a key",
                "point `paths` at the code that builds the logged scalars",
            )
        )
    if declared and emitted:
        for key, where in sorted(declared.items()):
            if key in emitted:
                continue
            for path, line in where:
                violations.append(
                    Violation(
                        GUARD, path, line,
                        f"logger key {key!r} is declared but never emitted: no dict display or "
                        f"subscript assignment produces it{closest(key, emitted)}",
                        "emit it where the logged scalars are built (metrics[key] = value), or "
                        "rename the MetricSpec's logger_key to the key the code emits",
                    )
                )
    counts = {"declared": len(declared), "emitted": len(set(declared) & emitted)}
    return GuardResult(GUARD, TITLE, counts, tuple(violations))
