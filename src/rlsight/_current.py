"""Making a span current, and finding the current one, in one step each.

``context.attach(trace.set_span_in_context(span))`` and ``trace.get_current_span()`` each go
through several Python calls (get the current context, copy it, wrap it, set it) that, with
OpenTelemetry's default runtime context, come down to one ``ContextVar`` get or set. Every
enabled span pays them on its way in and out, so rlsight's own spans take the short way; the
result is the very same context the API would build, and foreign code reading it through the
API (instrumentations, ``inject``) cannot tell. Another runtime context (``OTEL_PYTHON_CONTEXT``)
keeps the API's path.
"""

from __future__ import annotations

import os
import threading
from contextvars import ContextVar, Token
from typing import Final

from opentelemetry import context as _context
from opentelemetry import trace as _trace
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import Span
from opentelemetry.trace.propagation import _SPAN_KEY

__all__ = ["attach_span", "current_span", "detach", "thread_id"]


def _context_var() -> ContextVar[Context] | None:
    runtime = getattr(_context, "_RUNTIME_CONTEXT", None)
    if type(runtime) is not ContextVarsRuntimeContext:
        return None
    var = getattr(runtime, "_current_context", None)
    return var if isinstance(var, ContextVar) else None


_VAR: Final = _context_var()
_INVALID: Final = _trace.INVALID_SPAN


def attach_span(span: Span) -> Token[Context]:
    """Make ``span`` current, as ``context.attach(trace.set_span_in_context(span))`` does."""
    var = _VAR
    if var is None:
        return _context.attach(_trace.set_span_in_context(span))
    current = var.get()
    if not current or (len(current) == 1 and _SPAN_KEY in current):
        # Nothing but a span in it (nearly always): the new context is the span alone.
        return var.set(Context({_SPAN_KEY: span}))
    return var.set(Context({**current, _SPAN_KEY: span}))  # same keys, same order, as the API's


def detach(token: Token[Context]) -> None:
    """Restore the context before :func:`attach_span`, as ``context.detach`` does.

    A token that cannot be reset here (made in another context) goes to the API, which logs
    the failure exactly as it would have.
    """
    var = _VAR
    if var is not None:
        try:
            var.reset(token)
            return
        except (ValueError, RuntimeError):
            pass
    _context.detach(token)


def current_span() -> Span:
    """``trace.get_current_span()``: the current span, or the invalid span when there is none."""
    var = _VAR
    if var is None:
        return _trace.get_current_span()
    span = var.get().get(_SPAN_KEY)
    if span is None:
        return _INVALID
    return span if isinstance(span, Span) else _INVALID


class _ThreadIds(threading.local):
    """This thread's native id, read once: ``threading.get_native_id()`` is a system call
    (``gettid``), about 0.1 µs on every enabled span; a thread-local read is a third of that."""

    native = 0


#: Replaced in a forked child, whose thread ids differ from the parent's (see below).
_IDS = _ThreadIds()


def thread_id() -> int:
    """``threading.get_native_id()`` of the calling thread (what ``thread.id`` records)."""
    ids = _IDS
    native = ids.native
    if not native:
        native = ids.native = threading.get_native_id()
    return native


def _after_fork() -> None:
    global _IDS
    _IDS = _ThreadIds()  # the child's main thread keeps its locals, not the parent's tid


os.register_at_fork(after_in_child=_after_fork)
