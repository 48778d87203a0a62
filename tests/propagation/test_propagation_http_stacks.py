"""rlsight.http over FastAPI / ASGI under uvicorn, called with httpx and requests: one trace."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import requests
import uvicorn
from fastapi import FastAPI
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rlsight import RL, span, umbrella_span
from rlsight.http import instrument_asgi_app, instrument_fastapi, instrument_httpx, instrument_requests
from rlsight.testing import Capture, capture_telemetry


def _serve(app: Any) -> Iterator[str]:
    """Serve ``app`` under uvicorn on 127.0.0.1 (a free port) on its own thread; yield its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def _fastapi_app() -> FastAPI:
    app = FastAPI()

    @app.post("/score")
    async def score() -> dict[str, int]:
        with span(RL.REWARD, "rl.test.env.score"):
            return {"score": 1}

    return instrument_fastapi(app)


@pytest.fixture(scope="module")
def fastapi_url() -> Iterator[str]:
    yield from _serve(_fastapi_app())


@pytest.fixture(scope="module")
def starlette_url() -> Iterator[str]:
    async def score(request: Request) -> JSONResponse:
        with span(RL.REWARD, "rl.test.env.score"):
            return JSONResponse({"score": 1})

    yield from _serve(instrument_asgi_app(Starlette(routes=[Route("/score", score, methods=["POST"])])))


@pytest.fixture
def traced_clients() -> Iterator[None]:
    """httpx and requests instrumented for one test: both patch the whole process."""
    instrument_httpx()
    instrument_requests()
    yield
    HTTPXClientInstrumentor().uninstrument()
    RequestsInstrumentor().uninstrument()


def _with_httpx(url: str) -> int:
    with httpx.Client() as client:
        return int(client.post(url, json={}).json()["score"])


def _with_async_httpx(url: str) -> int:
    import asyncio

    async def go() -> int:
        async with httpx.AsyncClient() as client:
            return int((await client.post(url, json={})).json()["score"])

    return asyncio.run(go())


def _with_requests(url: str) -> int:
    return int(requests.post(url, json={}, timeout=10).json()["score"])


CLIENTS: dict[str, Callable[[str], int]] = {
    "httpx": _with_httpx,
    "httpx-async": _with_async_httpx,
    "requests": _with_requests,
}


def _spans_once_servers_end(cap: Capture, servers: int) -> list[ReadableSpan]:
    """The captured spans once ``servers`` server spans ended: ASGI ends its span after the reply."""
    deadline = time.monotonic() + 10
    while len({s.context.span_id for s in cap.spans() if s.kind is SpanKind.SERVER}) < servers:
        assert time.monotonic() < deadline, cap.span_names()
        time.sleep(0.01)
    return list(cap.spans())


def _describe(spans: list[ReadableSpan]) -> list[tuple[str, str, str, str]]:
    """Name, kind, id and parent id of each span, for a failure message."""
    return [
        (s.name, s.kind.name, f"{s.context.span_id:x}", f"{s.parent.span_id:x}" if s.parent else "-")
        for s in spans
    ]


def _one(spans: list[ReadableSpan], kind: SpanKind | None = None, name: str | None = None) -> ReadableSpan:
    found = [s for s in spans if (kind is None or s.kind is kind) and (name is None or s.name == name)]
    assert len(found) == 1, [(s.name, s.kind) for s in spans]
    return found[0]


def _parent_id(s: ReadableSpan) -> int:
    assert s.parent is not None, s.name
    return s.parent.span_id


def test_fastapi_called_through_httpx_and_requests_is_one_trace_with_the_driver(
    fastapi_url: str, traced_clients: None
) -> None:
    """Driver step -> client span -> server span -> handler span, for every client, one trace."""
    with capture_telemetry() as cap:
        with umbrella_span(RL.ROLLOUT, "rl.test.caller") as caller:
            for call in CLIENTS.values():
                assert call(fastapi_url + "/score") == 1
        spans = _spans_once_servers_end(cap, len(CLIENTS))
    assert len({s.context.trace_id for s in spans}) == 1
    clients = [s for s in spans if s.kind is SpanKind.CLIENT]
    servers = {s.context.span_id: s for s in spans if s.kind is SpanKind.SERVER}
    handlers = [s for s in spans if s.name == "rl.test.env.score"]
    assert len(clients) == len(servers) == len(handlers) == len(CLIENTS), _describe(spans)
    for client in clients:
        assert _parent_id(client) == caller.get_span_context().span_id
    assert sorted(_parent_id(s) for s in servers.values()) == sorted(c.context.span_id for c in clients)
    assert {_parent_id(h) for h in handlers} == set(servers)
    assert {s.name for s in servers.values()} == {"POST /score"}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_http_spans_of_every_stack_belong_to_per_prompt(
    fastapi_url: str, traced_clients: None, client: str
) -> None:
    with capture_telemetry() as cap:
        with umbrella_span(RL.ROLLOUT, "rl.test.caller"):
            CLIENTS[client](fastapi_url + "/score")
        http = [s for s in _spans_once_servers_end(cap, 1) if s.kind in (SpanKind.CLIENT, SpanKind.SERVER)]
    assert sorted(s.kind.name for s in http) == ["CLIENT", "SERVER"]
    for s in http:
        assert s.attributes is not None
        assert s.attributes["rl.span_group"] == "per_prompt"
        assert isinstance(s.attributes["thread.id"], int)


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("server", ["fastapi_url", "starlette_url"])
def test_a_secret_in_the_query_string_stays_out_of_both_spans(
    request: pytest.FixtureRequest, traced_clients: None, client: str, server: str
) -> None:
    """An environment service called with ``?api_key=...``: the client and server spans keep
    the URL, scrubbed as exception messages are (ASGI sets its attributes again after the span
    started; that write is scrubbed too)."""
    secret = "sk-" + "a1b2c3d4" * 3
    with capture_telemetry() as cap:
        CLIENTS[client](f"{request.getfixturevalue(server)}/score?api_key={secret}&n=1")
        http = [s for s in _spans_once_servers_end(cap, 1) if s.kind in (SpanKind.CLIENT, SpanKind.SERVER)]
    assert sorted(s.kind.name for s in http) == ["CLIENT", "SERVER"]
    texts = [str(v) for s in http for v in (s.attributes or {}).values()]
    assert [t for t in texts if secret in t] == []
    for s in http:
        assert "api_key=<redacted>&n=1" in str((s.attributes or {}).get("http.url")), s.attributes


def test_a_url_a_response_hook_sets_is_scrubbed_too(fastapi_url: str) -> None:
    """A hook that writes the URL after the span started (an instrumentation's response hook, a
    redirect's final URL, a handler's own ``set_attribute``) goes through the same scrub as the
    URL at the span's start."""
    from rlsight.http._gate import PROVIDER

    secret = "hf_" + "Q1w2E3r4" * 4

    def response_hook(span: Any, request: Any, response: Any) -> None:
        span.set_attribute("url.full", f"{fastapi_url}/score?token={secret}")
        span.set_attributes({"http.url": f"{fastapi_url}/score?api_key={secret}&n=2"})

    with capture_telemetry() as cap, httpx.Client() as client:
        HTTPXClientInstrumentor.instrument_client(
            client, tracer_provider=PROVIDER, response_hook=response_hook)
        client.post(fastapi_url + "/score", json={})
        [hop] = [s for s in _spans_once_servers_end(cap, 1) if s.kind is SpanKind.CLIENT]
    attributes = dict(hop.attributes or {})
    assert [v for v in attributes.values() if secret in str(v)] == [], attributes
    assert attributes["url.full"].endswith("/score?token=<redacted>")
    assert attributes["http.url"].endswith("/score?api_key=<redacted>&n=2")


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_secret_in_a_failed_requests_url_stays_out_of_its_span(traced_clients: None, client: str) -> None:
    """A request that fails: its error message may name the URL (requests: "Max retries
    exceeded with url: /score?api_key=..."), and the exception event and the status
    description must not keep the key."""
    secret = "sk-" + "e5f6a7b8" * 3
    with capture_telemetry() as cap:
        with pytest.raises(Exception) as raised:  # each client raises its own error
            CLIENTS[client](f"http://127.0.0.1:{_closed_port()}/score?api_key={secret}")
        http = [s for s in cap.spans() if s.kind is SpanKind.CLIENT]
    assert len(http) == 1
    (failed,) = http
    assert failed.status.status_code is StatusCode.ERROR
    texts = [str(failed.status.description)]
    texts += [str(v) for e in failed.events for v in (e.attributes or {}).values()]
    texts += [str(v) for v in (failed.attributes or {}).values()]
    assert [t for t in texts if secret in t] == [], f"{raised.value!r} left in {texts}"


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_asgi_server_span_opens_no_per_message_spans(fastapi_url: str, traced_clients: None) -> None:
    with capture_telemetry() as cap:
        _with_httpx(fastapi_url + "/score")
        names = [s.name for s in _spans_once_servers_end(cap, 1)]
    assert not [n for n in names if n.endswith((" http send", " http receive"))], names


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_with_per_prompt_off_the_hop_has_no_spans_but_keeps_the_trace(
    fastapi_url: str, traced_clients: None, client: str
) -> None:
    with capture_telemetry(span_groups=("per_step",)) as cap:
        with umbrella_span(RL.ROLLOUT, "rl.test.caller") as caller:
            CLIENTS[client](fastapi_url + "/score")
        spans = list(cap.spans())
    assert sorted(s.name for s in spans) == ["rl.test.caller", "rl.test.env.score"]
    handler = _one(spans, name="rl.test.env.score")
    assert _parent_id(handler) == caller.get_span_context().span_id


def test_a_plain_asgi_app_keeps_the_trace(starlette_url: str, traced_clients: None) -> None:
    with capture_telemetry() as cap:
        with umbrella_span(RL.ROLLOUT, "rl.test.caller"):
            assert _with_requests(starlette_url + "/score") == 1
        spans = _spans_once_servers_end(cap, 1)
    server = _one(spans, kind=SpanKind.SERVER)
    assert _parent_id(server) == _one(spans, kind=SpanKind.CLIENT).context.span_id
    assert _parent_id(_one(spans, name="rl.test.env.score")) == server.context.span_id


def test_one_httpx_client_alone_can_be_instrumented(fastapi_url: str) -> None:
    with capture_telemetry() as cap, httpx.Client() as traced, httpx.Client() as plain:
        assert instrument_httpx(traced) is traced  # so `client = instrument_httpx(httpx.Client())` works
        assert instrument_httpx(traced) is traced
        with umbrella_span(RL.ROLLOUT, "rl.test.caller"):
            traced.post(fastapi_url + "/score", json={})
            plain.post(fastapi_url + "/score", json={})
        clients = [s for s in _spans_once_servers_end(cap, 2) if s.kind is SpanKind.CLIENT]
    assert len(clients) == 1


def test_without_telemetry_instrumented_hops_still_work(fastapi_url: str, traced_clients: None) -> None:
    for call in CLIENTS.values():
        assert call(fastapi_url + "/score") == 1


def test_instrumenting_twice_is_a_no_op(traced_clients: None) -> None:
    instrument_httpx()
    instrument_requests()
    app = _fastapi_app()
    stack = list(app.user_middleware)
    assert instrument_fastapi(app) is app
    assert app.user_middleware == stack


@pytest.mark.parametrize(
    ("module", "call", "extra"),
    [
        ("fastapi", "instrument_fastapi(None)", "fastapi"),
        ("opentelemetry.instrumentation.asgi", "instrument_asgi_app(None)", "asgi"),
        ("httpx", "instrument_httpx()", "httpx"),
        ("requests", "instrument_requests()", "requests"),
    ],
)
def test_a_missing_package_names_the_extra_to_install(module: str, call: str, extra: str) -> None:
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from rlsight.http import *\n"
        f"try:\n    {call}\nexcept ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"pip install 'rlsight[{extra}]'" in out.stdout


@pytest.mark.parametrize(
    ("blocked", "call", "extra"),
    [
        ("httpx", instrument_httpx, "httpx"),
        ("requests", instrument_requests, "requests"),
        ("opentelemetry.instrumentation.asgi", lambda: instrument_asgi_app(object()), "asgi"),
    ],
)
def test_a_missing_dependency_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, blocked: str, call: Callable[[], object], extra: str
) -> None:
    """A library the extra brings that cannot be imported gives an ImportError naming the extra."""
    monkeypatch.setitem(sys.modules, blocked, None)  # how Python itself blocks an import
    with pytest.raises(ImportError, match=rf"rlsight.http needs {blocked}: pip install 'rlsight\[{extra}\]'"):
        call()
