"""Guard ``group-usage``: umbrella groups through umbrella helpers; per-prompt work labelled so.

Umbrella groups (job, step, startup, setup, rollout) structure the trace and carry no bucket.
Opening one with ``span``/``traced`` hides that at the call site, and opening a bucketed
group with ``umbrella_span`` drops its bucket from the goodput rollup; both are reported.

Per-prompt volume scales with the dataset, so it must never ride in a per-step group. Code
that tests ``is_span_group_enabled("per_prompt")`` declares that it runs per prompt; a span
it opens under any group other than ``per_prompt`` (outside a ``per_prompt_scope()``, which
relabels spans at runtime) is per-prompt volume counted as per-step.
"""

from __future__ import annotations

from rlsight.check._context import CheckContext, nothing_to_check
from rlsight.check._helpers import DECORATOR_HELPERS, GROUP_AND_NAME_HELPERS, PER_PROMPT, UMBRELLA_HELPERS
from rlsight.check._model import GuardResult, Violation

__all__ = ["GUARD", "TITLE", "check"]

GUARD = "group-usage"
TITLE = "group usage"
_PLAIN = (GROUP_AND_NAME_HELPERS | DECORATOR_HELPERS) - UMBRELLA_HELPERS


def check(ctx: CheckContext) -> GuardResult:
    """Umbrella helpers match umbrella groups; per-prompt-gated spans use per_prompt."""
    violations: list[Violation] = []
    umbrella: set[str] = set()
    bucketed: set[str] = set()
    for decl in ctx.facts.groups:
        if decl.name.is_known:
            (umbrella if decl.umbrella else bucketed).update(decl.name.values)
    checked = 0
    per_prompt = 0
    for emit in ctx.facts.spans:
        if emit.module.external or not emit.group.is_known or ctx.suppressed(emit.module, emit.line, GUARD):
            continue
        checked += 1
        groups = emit.group.values
        if emit.helper in _PLAIN and groups & umbrella:
            name = sorted(groups & umbrella)[0]
            fixed = "umbrella_span" if emit.helper == "span" else "umbrella_traced"
            violations.append(
                Violation(
                    GUARD, emit.path, emit.line,
                    f"umbrella group {name!r} is opened with {emit.helper}(); umbrella spans "
                    "structure the trace and carry no bucket",
                    f"use {fixed}({name!r}, ...) so the call site says so",
                )
            )
        if emit.helper in UMBRELLA_HELPERS and groups & bucketed:
            name = sorted(groups & bucketed)[0]
            plain = "span" if emit.helper == "umbrella_span" else "traced"
            violations.append(
                Violation(
                    GUARD, emit.path, emit.line,
                    f"{emit.helper}() opens the bucketed group {name!r}; its time would drop "
                    "out of the goodput rollup",
                    f"use {plain}({name!r}, ...), or an umbrella group",
                )
            )
        if PER_PROMPT in groups or emit.in_per_prompt_scope:
            per_prompt += 1
        elif emit.per_prompt_gate is not None:
            per_prompt += 1
            violations.append(
                Violation(
                    GUARD, emit.path, emit.line,
                    f"this span runs per prompt (gated on per_prompt at line {emit.per_prompt_gate}) "
                    f"but is emitted under {emit.group.describe()}, so per_step's volume scales "
                    "with the dataset",
                    "emit it under the per_prompt group, or open it inside `with per_prompt_scope():`",
                )
            )
    if not checked:
        violations.append(
            nothing_to_check(
                GUARD, ctx.paths_display, "no span emit site with a known group",
                "point `paths` at the instrumented code",
            )
        )
    if not umbrella:
        violations.append(
            nothing_to_check(
                GUARD, ctx.paths_display, "no umbrella group is registered",
                "rlsight registers job/step/startup/setup/rollout; check that rlsight's "
                "sources (or your own groups) are readable",
            )
        )
    counts = {"emit_sites": checked, "per_prompt": per_prompt}
    return GuardResult(GUARD, TITLE, counts, tuple(violations))
