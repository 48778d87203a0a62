"""The aiohttp hop: client sessions and ``web.Application`` servers (``rlsight[http]``)."""

from __future__ import annotations

import threading
import warnings
from typing import TYPE_CHECKING, Any, Final

from rlsight.http._gate import PROVIDER, needs_extra

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["instrument_aiohttp_client", "instrument_aiohttp_server"]

_EXTRA: Final = "http"
_LOCK: Final = threading.Lock()
#: The server middleware, built once per process: it holds no run state (the gated tracer it
#: uses follows the active runtime per request), and being one object is what lets
#: ``instrument_aiohttp_server`` see that an app is already instrumented.
_server_middleware: Any = None


def instrument_aiohttp_client() -> None:
    """Trace every ``aiohttp.ClientSession`` this process creates from now on.

    Each request gets a client span (group ``per_prompt``) and a ``traceparent`` header, so
    the server it reaches joins the caller's trace. Call it once per process, before the
    sessions are created (in an actor, from its ``__init__``); calling it again does nothing.

    Raises:
        ImportError: aiohttp or the instrumentation is missing (``pip install 'rlsight[http]'``).
        RuntimeError: the instrumentation refused this aiohttp version.
    """
    with needs_extra(_EXTRA):
        import aiohttp  # noqa: F401  (the library first: its absence is the likelier cause)
        from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
    with _LOCK:
        instrumentor = AioHttpClientInstrumentor()
        if instrumentor.is_instrumented_by_opentelemetry:
            return
        instrumentor.instrument(tracer_provider=PROVIDER)
        if not instrumentor.is_instrumented_by_opentelemetry:
            raise RuntimeError(
                "opentelemetry-instrumentation-aiohttp-client refused to instrument this aiohttp "
                "version (see the log); install matching versions with pip install 'rlsight[http]'"
            )


def instrument_aiohttp_server(app: web.Application, /) -> web.Application:
    """Trace the requests ``app`` serves and continue the trace their callers sent.

    Adds the OpenTelemetry aiohttp server middleware, outermost, on rlsight's gated tracer:
    a server span (group ``per_prompt``) per request, parented to the caller's span from the
    ``traceparent`` header. Call it before the app starts; calling it again does nothing.

    Returns:
        ``app`` itself.

    Raises:
        ImportError: aiohttp or the instrumentation is missing (``pip install 'rlsight[http]'``).
        RuntimeError: ``app`` already started (its middleware list is frozen).
    """
    middleware = _middleware()
    if middleware in app.middlewares:
        return app
    try:
        app.middlewares.insert(0, middleware)
    except RuntimeError as exc:
        raise RuntimeError(
            f"instrument_aiohttp_server({app!r}): the app already started and its middlewares are "
            "frozen; instrument it before runner.setup() / web.run_app()"
        ) from exc
    return app


def _middleware() -> Any:
    global _server_middleware
    with needs_extra(_EXTRA):
        import aiohttp  # noqa: F401  (the library first: its absence is the likelier cause)
        from opentelemetry.instrumentation import aiohttp_server as server
    with _LOCK:
        if _server_middleware is not None:
            return _server_middleware
        instrumentor = server.AioHttpServerInstrumentor()
        if not instrumentor.is_instrumented_by_opentelemetry:
            # The middleware reads module state (excluded URLs, semconv mode, instruments) that
            # only instrument() sets; instrument() also swaps web.Application for a subclass
            # that adds the middleware to every app, which uninstrument() undoes. We want one
            # app, not all of them. Defining that subclass trips aiohttp's inheritance warning.
            with warnings.catch_warnings():
                warnings.filterwarnings(
                    "ignore", message="Inheritance class .* from web.Application", category=DeprecationWarning
                )
                instrumentor.instrument(tracer_provider=PROVIDER)
            if not instrumentor.is_instrumented_by_opentelemetry:
                raise RuntimeError(
                    "opentelemetry-instrumentation-aiohttp-server refused to instrument this aiohttp "
                    "version (see the log); install matching versions with pip install 'rlsight[http]'"
                )
            instrumentor.uninstrument()
        _server_middleware = server.create_aiohttp_middleware(tracer_provider=PROVIDER)
        return _server_middleware
