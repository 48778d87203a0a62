"""Guard ``carriers``: trace carriers are sent exactly where they are accepted.

Ray does not carry OpenTelemetry context across an actor call, so the two halves must be
wired by hand: ``@accepts_trace_context`` on the callee and a carrier at the call site
(``dispatch_with_trace_context(h.method, ...)``, ``h.method.remote(..., **trace_context_kwargs())``,
a ``traced_handle``, or a worker-group fan-out that names the method as a string and passes
the carrier). A decorated method nobody sends a carrier to starts a new trace on every call;
a carrier sent to an undecorated method is rejected by Ray's signature check (rlsight then
retries without it and warns, and the callee's spans still start a new trace).

Matching is by method name, the only link static reading has between a handle and a class;
two classes with a method of the same name share one verdict.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TypeVar

from rlsight.check._context import CheckContext, closest, nothing_to_check
from rlsight.check._facts import CarrierDispatch, CarrierMethod
from rlsight.check._model import GuardResult, Violation

__all__ = ["GUARD", "TITLE", "check"]

_T = TypeVar("_T")

GUARD = "carriers"
TITLE = "trace carriers"


def check(ctx: CheckContext) -> GuardResult:
    """Decorated methods are dispatched with a carrier; carriers go to decorated methods."""
    violations: list[Violation] = []
    accepted: dict[str, list[CarrierMethod]] = defaultdict(list)
    for method in ctx.facts.carrier_methods:
        if not ctx.suppressed(method.module, method.line, GUARD):
            accepted[method.name].append(method)
    sent: dict[str, list[CarrierDispatch]] = defaultdict(list)
    for dispatch in ctx.facts.dispatches:
        if not ctx.suppressed(dispatch.module, dispatch.line, GUARD):
            sent[dispatch.target].append(dispatch)
    if not accepted and not sent and ctx.config.guards_named:  # unnamed: a project without Ray hops
        violations.append(
            nothing_to_check(
                GUARD, ctx.paths_display,
                "no @accepts_trace_context method and no call that sends a trace carrier",
                "decorate the actor methods that should join the caller's trace and dispatch "
                "them with dispatch_with_trace_context(handle.method, ...), or drop this guard "
                "from `guards`",
            )
        )
    # One side alone is not "nothing to check": name every method or call site on it, so the
    # message says what to fix rather than that the guard saw nothing.
    unseen = "" if sent else (
        f"; no call in {ctx.paths_display} sends a carrier in a shape the check recognises "
        "(docs/check.md, 'Carriers: matched by method name')"
    )
    for name, method in _unmatched(accepted, sent):
        violations.append(
            Violation(
                GUARD, method.module.display, method.line,
                f"{method.qualname} accepts a trace carrier ({method.via}) but no call "
                f"sends it one, so its spans start a new trace{unseen}",
                f"dispatch it with dispatch_with_trace_context(handle.{name}, ...) or "
                f"handle.{name}.remote(..., **trace_context_kwargs())",
            )
        )
    for name, dispatch in _unmatched(sent, accepted):
        violations.append(
            Violation(
                GUARD, dispatch.module.display, dispatch.line,
                f"a trace carrier is sent to {name!r} ({dispatch.via}), but no "
                f"@accepts_trace_context method has that name{closest(name, accepted)}",
                f"decorate the method {name!r} with @accepts_trace_context (Ray rejects "
                "the extra keyword otherwise), or stop sending it a carrier",
            )
        )
    counts = {"accepting": len(accepted), "dispatched": len(sent)}
    return GuardResult(GUARD, TITLE, counts, tuple(violations))


def _unmatched(side: Mapping[str, Sequence[_T]], other: Mapping[str, object]) -> list[tuple[str, _T]]:
    """Each site of ``side`` under a method name ``other`` lacks, by name: one side of a
    carrier hop without the other."""
    return [(name, site) for name, sites in sorted(side.items()) if name not in other for site in sites]
