"""Guard ``span-groups``: registered groups are emitted (registered ⊆ emitted), used ones exist.

A group registered with ``SpanGroup(...)`` that no call site emits is worse than missing: a
preset that lists it advertises spans it can never deliver. A group used at an emit site that
no namespace registers is a typo that the runtime only reports as a pending-name warning.

A group counts as emitted when a span helper opens a span under it (inside
``per_prompt_scope()`` that includes ``per_prompt``, the label it gets at run time), or when code tests
``is_span_group_enabled(group)`` to gate work rlsight does not open itself (an
instrumentation library's spans, an engine's native tracing); the summary counts such groups
as ``gated only``, so a group that rests on a gate alone stays visible. That gate is the
exemption for groups emitted outside the checked tree, and it is tied to code: remove the
code that turns the foreign emitter on and the group fails again. Groups rlsight registers are
visible to the second direction when another project is checked, but only the checked
project's own registrations must have emitters there.
"""

from __future__ import annotations

from collections import defaultdict

from rlsight.check._context import CheckContext, closest, nothing_to_check
from rlsight.check._helpers import PER_PROMPT
from rlsight.check._model import GuardResult, Violation
from rlsight.check._values import Resolved

__all__ = ["GUARD", "TITLE", "check"]

GUARD = "span-groups"
TITLE = "span groups"
_GATE_HELPER = "is_span_group_enabled()"
_PER_PROMPT_GROUP = Resolved(values=frozenset({PER_PROMPT}))


def check(ctx: CheckContext) -> GuardResult:
    """Registered groups must be emitted; emitted groups must be registered."""
    violations: list[Violation] = []
    visible: set[str] = set()
    own: dict[str, tuple[str, int]] = {}
    for decl in ctx.facts.groups:
        if not decl.name.is_known:
            if not decl.module.external and not ctx.suppressed(decl.module, decl.line, GUARD):
                violations.append(
                    Violation(
                        GUARD, decl.module.display, decl.line,
                        f"the SpanGroup name is {decl.name.describe()}; the check cannot tell "
                        "which group this registers",
                        "use a string literal or an UPPER_CASE constant for the name",
                    )
                )
            continue
        visible |= decl.name.values
        if not decl.module.external:
            for name in decl.name.values:
                own.setdefault(name, (decl.module.display, decl.line))

    used: dict[str, list[tuple[str, int]]] = defaultdict(list)
    opened: set[str] = set()  # groups a span helper opens spans under
    sites = [(e.module, e.line, e.group, f"{e.helper}()") for e in ctx.facts.spans]
    sites += [(g.module, g.line, g.group, _GATE_HELPER) for g in ctx.facts.gates]
    for emit in ctx.facts.spans:
        if emit.in_per_prompt_scope:  # relabelled per_prompt at run time
            sites.append((emit.module, emit.line, _PER_PROMPT_GROUP, "per_prompt_scope()"))
    for module, line, group, how in sites:
        if module.external or ctx.suppressed(module, line, GUARD):
            continue
        if group.is_known:
            for name in group.values:
                used[name].append((module.display, line))
            if how != _GATE_HELPER:
                opened |= group.values
        elif group.unknown is not None:
            violations.append(
                Violation(
                    GUARD, module.display, line,
                    f"the span group passed to {how} is {group.unknown}; the check cannot tell "
                    "which group it uses",
                    "pass a string literal or a group constant such as RL.GENERATION",
                )
            )

    if not visible:
        violations.append(
            nothing_to_check(
                GUARD, ctx.paths_display, "no SpanGroup(...) registration was found",
                "register groups with register_span_groups(namespace, [SpanGroup(...)]) in the "
                "checked sources (rlsight's own groups are read from its installed package)",
            )
        )
    if not used:
        violations.append(
            nothing_to_check(
                GUARD, ctx.paths_display, "no span helper or is_span_group_enabled() call names a group",
                "point `paths` at the instrumented code",
            )
        )
    if visible and used:
        for name, (path, line) in sorted(own.items()):
            if name not in used:
                violations.append(
                    Violation(
                        GUARD, path, line,
                        f"span group {name!r} is registered but nothing emits it",
                        "emit a span under it, or remove it from register_span_groups "
                        "(a preset listing it advertises spans that never arrive)",
                    )
                )
        for name, where in sorted(used.items()):
            if name in visible:
                continue
            for path, line in where:
                violations.append(
                    Violation(
                        GUARD, path, line,
                        f"span group {name!r} is not registered{closest(name, visible)}",
                        "register it with register_span_groups(namespace, [SpanGroup("
                        f"{name!r}, ...)]) or use a registered group",
                    )
                )
    # A group used only through a gate is emitted by something else (an engine's own tracing,
    # an instrumentation library); named in the summary so a group resting on that is seen.
    gated_only = tuple(sorted(set(used) - opened))
    counts = {"registered": len(visible), "emitted": len(used), "gated_only": len(gated_only)}
    return GuardResult(GUARD, TITLE, counts, tuple(violations), {"gated_only": gated_only})
