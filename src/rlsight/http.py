"""HTTP hops that keep the run's trace: aiohttp client and server instrumentation.

An environment service, a reward server or a tool call is reached over HTTP. The OpenTelemetry
aiohttp instrumentations carry the W3C ``traceparent`` header across that hop; rlsight runs
them on its own tracer, gated on the ``per_prompt`` span group, because their volume is
prompts x turns x tool calls, which is exactly what ``per_step`` must not scale with.

With ``per_prompt`` off the hops emit no spans but still carry the caller's context, so spans
the service opens itself (a ``reward`` span in the handler) stay in the run's trace,
parented to the caller's span.

aiohttp and the instrumentations are imported when a function here is called; without them
the call raises an ``ImportError`` that names the ``rlsight[http]`` extra.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import trace as _trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanKind, Tracer, TracerProvider
from opentelemetry.util.types import Attributes

from rlsight import runtime as _runtime
from rlsight.groups import _GATE, RL

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["instrument_aiohttp_client", "instrument_aiohttp_server"]

_PER_PROMPT: Final = RL.PER_PROMPT
_EXTRA: Final = (
    "rlsight.http needs aiohttp and the OpenTelemetry aiohttp instrumentations: "
    "pip install 'rlsight[http]'"
)


class _GatedTracer(Tracer):
    """rlsight's tracer while ``per_prompt`` is on; a pass-through of the parent otherwise.

    The pass-through span is a non-recording span with the parent's context, so the
    instrumentation still injects (client) or re-parents under (server) the caller's span.
    """

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        telemetry = _runtime._ACTIVE
        if telemetry is None or _PER_PROMPT not in _GATE.enabled:
            return NonRecordingSpan(_trace.get_current_span(context).get_span_context())
        attrs: dict[str, Any] = dict(attributes) if attributes else {}
        attrs["rl.span_group"] = _PER_PROMPT
        attrs["thread.id"] = threading.get_native_id()
        try:
            return telemetry.tracer.start_span(
                name, context, kind, attrs, links, start_time, record_exception, set_status_on_exception
            )
        except Exception as exc:
            telemetry.report_internal_error("http-span-start", exc)
            return NonRecordingSpan(_trace.get_current_span(context).get_span_context())

    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(
            name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
        )
        with _trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


class _GatedTracerProvider(TracerProvider):
    """Hands the instrumentations the gated tracer, whatever scope they ask for."""

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> Tracer:
        return _TRACER


_TRACER: Final = _GatedTracer()
_PROVIDER: Final = _GatedTracerProvider()
_LOCK: Final = threading.Lock()
_server_middleware: Any = None


def _import(module: str) -> ModuleType:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{_EXTRA} ({exc})") from exc


def instrument_aiohttp_client() -> None:
    """Trace every ``aiohttp.ClientSession`` this process creates from now on.

    Each request gets a client span (group ``per_prompt``) and a ``traceparent`` header, so
    the server it reaches joins the caller's trace. Call it once per process, before the
    sessions are created (in an actor, from its ``__init__``); calling it again does nothing.

    Raises:
        ImportError: aiohttp or the instrumentation is missing (``pip install 'rlsight[http]'``).
        RuntimeError: the instrumentation refused this aiohttp version.
    """
    _import("aiohttp")
    client = _import("opentelemetry.instrumentation.aiohttp_client")
    with _LOCK:
        instrumentor = client.AioHttpClientInstrumentor()
        if instrumentor.is_instrumented_by_opentelemetry:
            return
        instrumentor.instrument(tracer_provider=_PROVIDER)
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
    _import("aiohttp")
    server = _import("opentelemetry.instrumentation.aiohttp_server")
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
                instrumentor.instrument(tracer_provider=_PROVIDER)
            if not instrumentor.is_instrumented_by_opentelemetry:
                raise RuntimeError(
                    "opentelemetry-instrumentation-aiohttp-server refused to instrument this aiohttp "
                    "version (see the log); install matching versions with pip install 'rlsight[http]'"
                )
            instrumentor.uninstrument()
        _server_middleware = server.create_aiohttp_middleware(tracer_provider=_PROVIDER)
        return _server_middleware
