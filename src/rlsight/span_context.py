"""``SpanContextManager``: the public type of what the span helpers return.

``span()``, ``umbrella_span()``, ``job_span()``, ``step_span()``... hand back one of several
private classes (a live span, a shared no-op when the group is off, a setup span that also
records a histogram). Callers need none of them: they need a ``with`` (or ``async with``)
whose target is an OpenTelemetry ``Span``. This protocol names exactly that, so a signature
such as ``def phase() -> SpanContextManager`` type-checks without reaching into privates, and
the private classes stay free to change.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["SpanContextManager"]


@runtime_checkable
class SpanContextManager(Protocol):
    """A sync or async context manager that opens a span on entry and ends it on exit.

    The ``as`` target is the OpenTelemetry ``Span``: set attributes or events on it. When the
    span's group is disabled it is a non-recording span, so the same code runs either way.
    An ``Exception`` leaving the block is recorded on the span as its error status; none is
    swallowed.
    """

    def __enter__(self) -> Span: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def __aenter__(self) -> Span: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
