"""HTTP hops that keep the run's trace: aiohttp, FastAPI / ASGI servers, httpx and requests clients.

An environment service, a reward server or a tool call is reached over HTTP. OpenTelemetry's
own instrumentations carry the W3C ``traceparent`` header across that hop; rlsight runs them on
its own tracer, gated on the ``per_prompt`` span group, because their volume is
prompts x turns x tool calls, which is exactly what ``per_step`` must not scale with.

With ``per_prompt`` off the hops emit no spans but still carry the caller's context, so spans
the service opens itself (a ``reward`` span in the handler) stay in the run's trace,
parented to the caller's span.

Each stack is an extra (``rlsight[http]`` for aiohttp, ``rlsight[fastapi]``, ``rlsight[asgi]``,
``rlsight[httpx]``, ``rlsight[requests]``); its packages are imported when its function is
called, and a missing one raises an ``ImportError`` that names the extra.
"""

from __future__ import annotations

from rlsight.http._aiohttp import instrument_aiohttp_client, instrument_aiohttp_server
from rlsight.http._asgi import instrument_asgi_app, instrument_fastapi
from rlsight.http._clients import instrument_httpx, instrument_requests

__all__ = [
    "instrument_aiohttp_client",
    "instrument_aiohttp_server",
    "instrument_asgi_app",
    "instrument_fastapi",
    "instrument_httpx",
    "instrument_requests",
]
