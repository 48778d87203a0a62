"""The client side over httpx and requests (``rlsight[httpx]``, ``rlsight[requests]``).

Rollout workers reach environment and reward services with httpx (sync or async) or with
requests. OpenTelemetry's instrumentations for both inject ``traceparent`` and open a client
span; rlsight runs them on its gated tracer.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final, TypeVar, overload

from rlsight.http._gate import PROVIDER, needs_extra

if TYPE_CHECKING:
    import httpx

__all__ = ["instrument_httpx", "instrument_requests"]

_LOCK: Final = threading.Lock()
_Client = TypeVar("_Client", "httpx.Client", "httpx.AsyncClient")


@overload
def instrument_httpx(client: None = None, /) -> None: ...
@overload
def instrument_httpx(client: _Client, /) -> _Client: ...
def instrument_httpx(client: _Client | None = None, /) -> _Client | None:
    """Trace the requests of one httpx ``client``, or of every httpx client when none is given.

    Each request gets a client span (group ``per_prompt``) and a ``traceparent`` header. With no
    argument every ``httpx.Client`` and ``httpx.AsyncClient`` created from now on is traced; call
    it once per process (in an actor, from its ``__init__``). Calling it again does nothing.

    Returns:
        The ``client`` given, instrumented in place (so ``client = instrument_httpx(httpx.
        Client())`` reads like the server helpers), or ``None`` when called without one.

    Raises:
        ImportError: httpx or the instrumentation is missing (``pip install 'rlsight[httpx]'``).
        RuntimeError: the instrumentation refused this httpx version.
    """
    with needs_extra("httpx"):
        import httpx  # noqa: F401  (the library first: its absence is the likelier cause)
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    instrumentor = HTTPXClientInstrumentor
    if client is not None:
        if not getattr(client, "_is_instrumented_by_opentelemetry", False):
            instrumentor.instrument_client(client, tracer_provider=PROVIDER)
        return client
    with _LOCK:
        _instrument_globally(instrumentor(), "httpx")
    return None


def instrument_requests() -> None:
    """Trace every request this process makes with ``requests`` from now on.

    Each request gets a client span (group ``per_prompt``) and a ``traceparent`` header. Call it
    once per process; calling it again does nothing.

    Raises:
        ImportError: requests or the instrumentation is missing (``pip install 'rlsight[requests]'``).
        RuntimeError: the instrumentation refused this requests version.
    """
    with needs_extra("requests"):
        import requests  # noqa: F401  (the library first: its absence is the likelier cause)
        from opentelemetry.instrumentation.requests import RequestsInstrumentor
    with _LOCK:
        _instrument_globally(RequestsInstrumentor(), "requests")


def _instrument_globally(instrumentor: object, extra: str) -> None:
    if instrumentor.is_instrumented_by_opentelemetry:  # type: ignore[attr-defined]
        return
    instrumentor.instrument(tracer_provider=PROVIDER)  # type: ignore[attr-defined]
    if not instrumentor.is_instrumented_by_opentelemetry:  # type: ignore[attr-defined]
        raise RuntimeError(
            f"opentelemetry-instrumentation-{extra} refused to instrument this {extra} version "
            f"(see the log); install matching versions with pip install 'rlsight[{extra}]'"
        )
