"""rlsight.http: an aiohttp hop on 127.0.0.1 keeps the trace, and its spans obey per_prompt."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from aiohttp import ClientSession, web
from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from rlsight import RL, span, umbrella_span
from rlsight.http import instrument_aiohttp_client, instrument_aiohttp_server
from rlsight.testing import capture_telemetry


@dataclass
class Service:
    url: str
    app: web.Application


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    """An instrumented aiohttp service on its own thread and loop, started outside any span."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, object] = {}

    async def score(request: web.Request) -> web.Response:
        with span(RL.REWARD, "rl.test.env.score"):
            return web.json_response({"score": 1})

    async def start() -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/score", score)
        instrument_aiohttp_server(app)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        box["app"] = app
        box["port"] = runner.addresses[0][1]
        return runner

    def run() -> None:
        asyncio.set_event_loop(loop)
        box["runner"] = loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    yield Service(f"http://127.0.0.1:{box['port']}/score", box["app"])  # type: ignore[arg-type]
    runner: web.AppRunner = box["runner"]  # type: ignore[assignment]
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@pytest.fixture
def instrumented_client() -> Iterator[None]:
    """Client instrumentation for one test: it patches every new ClientSession in the process."""
    instrument_aiohttp_client()
    yield
    AioHttpClientInstrumentor().uninstrument()


def _post(url: str) -> int:
    async def go() -> int:
        async with ClientSession() as session, session.post(url, json={}) as response:
            return int((await response.json())["score"])

    return asyncio.run(go())


def _one(spans: list[ReadableSpan], predicate: object) -> ReadableSpan:
    found = [s for s in spans if predicate(s)]  # type: ignore[operator]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def test_an_http_hop_stays_in_the_callers_trace(service: Service, instrumented_client: None) -> None:
    with capture_telemetry() as cap:
        with umbrella_span(RL.ROLLOUT, "rl.test.caller") as caller:
            assert _post(service.url) == 1
        spans = list(cap.spans())
    client = _one(spans, lambda s: s.kind is SpanKind.CLIENT)
    server = _one(spans, lambda s: s.kind is SpanKind.SERVER)
    handler = _one(spans, lambda s: s.name == "rl.test.env.score")
    assert client.parent is not None and client.parent.span_id == caller.get_span_context().span_id
    assert server.parent is not None and server.parent.span_id == client.context.span_id
    assert handler.parent is not None and handler.parent.span_id == server.context.span_id
    assert len({s.context.trace_id for s in spans}) == 1


def test_http_spans_belong_to_the_per_prompt_group(service: Service, instrumented_client: None) -> None:
    with capture_telemetry() as cap:
        with umbrella_span(RL.ROLLOUT, "rl.test.caller"):
            _post(service.url)
        http = [s for s in cap.spans() if s.kind in (SpanKind.CLIENT, SpanKind.SERVER)]
    assert len(http) == 2
    for s in http:
        assert s.attributes is not None
        assert s.attributes["rl.span_group"] == "per_prompt"
        assert isinstance(s.attributes["thread.id"], int)


def test_a_secret_in_the_query_string_stays_out_of_both_spans(
        service: Service, instrumented_client: None) -> None:
    secret = "sk-" + "a1b2c3d4" * 3
    with capture_telemetry() as cap:
        _post(f"{service.url}?token={secret}&n=1")
        http = [s for s in cap.spans() if s.kind in (SpanKind.CLIENT, SpanKind.SERVER)]
    assert len(http) == 2
    assert [v for s in http for v in (s.attributes or {}).values() if secret in str(v)] == []
    assert all("token=<redacted>&n=1" in str((s.attributes or {}).get("http.url")) for s in http)


def test_with_per_prompt_off_the_hop_has_no_spans_but_keeps_the_trace(
    service: Service, instrumented_client: None
) -> None:
    with capture_telemetry(span_groups=("per_step",)) as cap:
        with umbrella_span(RL.ROLLOUT, "rl.test.caller") as caller:
            _post(service.url)
        spans = list(cap.spans())
    assert sorted(s.name for s in spans) == ["rl.test.caller", "rl.test.env.score"]
    handler = _one(spans, lambda s: s.name == "rl.test.env.score")
    assert handler.parent is not None and handler.parent.span_id == caller.get_span_context().span_id


def test_without_telemetry_an_instrumented_hop_still_works(
    service: Service, instrumented_client: None
) -> None:
    assert _post(service.url) == 1


def test_instrumenting_the_client_twice_is_a_no_op(instrumented_client: None) -> None:
    instrument_aiohttp_client()
    assert AioHttpClientInstrumentor().is_instrumented_by_opentelemetry


def test_instrumenting_a_server_twice_adds_one_middleware(service: Service) -> None:
    before = len(service.app.middlewares)
    instrument_aiohttp_server(service.app)
    assert len(service.app.middlewares) == before


def test_instrumenting_a_started_server_says_to_do_it_before_start(service: Service) -> None:
    app = web.Application()
    app.freeze()
    with pytest.raises(RuntimeError, match=r"before runner\.setup"):
        instrument_aiohttp_server(app)


def test_instrumenting_does_not_instrument_other_apps(service: Service) -> None:
    assert len(web.Application().middlewares) == 0


@pytest.mark.parametrize("call", ["instrument_aiohttp_client()", "instrument_aiohttp_server(None)"])
def test_a_missing_aiohttp_names_the_extra_to_install(call: str) -> None:
    code = (
        "import sys; sys.modules['aiohttp'] = None\n"
        "from rlsight.http import instrument_aiohttp_client, instrument_aiohttp_server\n"
        f"try:\n    {call}\nexcept ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'rlsight[http]'" in out.stdout
