"""The server side of FastAPI, Starlette and any other ASGI app (``rlsight[fastapi]``, ``rlsight[asgi]``).

NeMo-Gym's environment services and most reward servers are FastAPI apps under uvicorn.
OpenTelemetry's FastAPI and ASGI instrumentations read ``traceparent`` from the request and
open the server span; rlsight runs them on its gated tracer. The per-message ``http receive``
/ ``http send`` spans the ASGI middleware can open are left out: they double the span count of
every hop and say nothing about where a step's time went.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypeVar

from rlsight.http._gate import PROVIDER, needs_extra

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["instrument_asgi_app", "instrument_fastapi"]

_NO_MESSAGE_SPANS: Final[list[Any]] = ["receive", "send"]

_App = TypeVar("_App", bound="FastAPI")


def instrument_fastapi(app: _App, /) -> _App:
    """Trace the requests a FastAPI ``app`` serves and continue the trace their callers sent.

    Each request gets a server span (group ``per_prompt``) parented to the caller's span from
    its ``traceparent`` header; spans the handlers open sit under it. Call it before the app
    serves its first request; calling it again does nothing.

    Returns:
        ``app`` itself.

    Raises:
        ImportError: FastAPI or the instrumentation is missing (``pip install 'rlsight[fastapi]'``).
    """
    with needs_extra("fastapi"):
        import fastapi  # noqa: F401  (the library first: its absence is the likelier cause)
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    if getattr(app, "_is_instrumented_by_opentelemetry", False):
        return app
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=PROVIDER, exclude_spans=_NO_MESSAGE_SPANS,
    )
    return app


def instrument_asgi_app(app: Any, /) -> Any:
    """Wrap any ASGI application (Starlette, Quart, a bare callable) so it keeps the trace.

    Use it for ASGI apps that are not FastAPI (for FastAPI, :func:`instrument_fastapi` also
    names spans after the route). Serve what it returns instead of ``app``.

    Returns:
        A new ASGI app: OpenTelemetry's ``OpenTelemetryMiddleware`` around ``app``.

    Raises:
        ImportError: the ASGI instrumentation is missing (``pip install 'rlsight[asgi]'``).
    """
    with needs_extra("asgi"):
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    return OpenTelemetryMiddleware(app, tracer_provider=PROVIDER, exclude_spans=_NO_MESSAGE_SPANS)
