"""`rlsight export` into a real collector (rotel on 127.0.0.1): every span once, resumable.

docs/reliability.md names these tests for "a run whose collector was down is never lost".
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "analysis"))
from _build import RunBuilder, otlp_request

from _rotel import Collector
from rlsight.cli import EXIT_OK, EXIT_PROBLEMS, main

pytest.importorskip("rotel")

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def _run(tmp_path: Path, names: list[str]) -> tuple[Path, RunBuilder]:
    run = RunBuilder(run_id="exported")
    d = run.process()
    for i, name in enumerate(names):
        d.span(name, i, i + 0.5, group="training", bucket="productive")
    return run.write(tmp_path / "run", per_line=1), run


def _counts(collector: Collector, names: list[str], settle_s: float = 1.5) -> dict[str, int]:
    """How often each name reached the collector, once the log stops growing."""
    deadline, last = time.monotonic() + 20, -1
    while time.monotonic() < deadline:
        text = collector.log.read_text(errors="replace")
        if len(text) == last and all(n in text for n in names):
            break
        last = len(text)
        time.sleep(settle_s)
    text = collector.log.read_text(errors="replace")
    return {n: text.count(n) for n in names}




@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_every_span_once_and_a_second_export_sends_nothing(
        collector: Collector, tmp_path: Path, protocol: str, capsys) -> None:
    tag = uuid.uuid4().hex[:8]
    names = [f"rl.test.export_{tag}_{i}" for i in range(6)]
    run_dir, run = _run(tmp_path, names)
    endpoint = collector.grpc if protocol == "grpc" else collector.http
    argv = ["export", str(run_dir), "--otlp-endpoint", endpoint, "--protocol", protocol]
    assert main(argv) == EXIT_OK
    assert main(argv) == EXIT_OK  # idempotent: nothing left to send
    assert "sent 0 spans in 0 request(s)" in capsys.readouterr().err
    # Lines a still-running process appends later go out on the next export, and only they.
    later = [f"rl.test.export_{tag}_late{i}" for i in range(2)]
    proc = run.procs[0]
    (path,) = (run_dir / "traces").glob("*.jsonl")
    before = len(proc.spans)
    for i, name in enumerate(later):
        proc.span(name, 10 + i, 10.5 + i, group="training", bucket="productive")
    with path.open("a") as fh:
        for record in proc.spans[before:]:
            fh.write(json.dumps(otlp_request(proc.resource, [record])) + "\n")
    assert main(argv) == EXIT_OK
    assert "sent 2 spans in 2 request(s)" in capsys.readouterr().err
    assert set(_counts(collector, names + later).values()) == {1}


class _FlakyProxy:
    """A real HTTP server on 127.0.0.1 that forwards to the collector until told to fail."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.budget: int | None = None  # requests still forwarded; None: all
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        from aiohttp import ClientSession, web

        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            if self.budget is not None:
                if self.budget <= 0:
                    return web.Response(status=503, text="collector overloaded")
                self.budget -= 1
            async with ClientSession() as session, session.post(
                    self.upstream + request.path, data=body,
                    headers={"Content-Type": request.headers["Content-Type"]}) as resp:
                return web.Response(status=resp.status, body=await resp.read())

        async def start() -> web.AppRunner:
            app = web.Application()
            app.router.add_post("/{tail:.*}", handle)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            return runner

        asyncio.set_event_loop(self._loop)
        self._runner = self._loop.run_until_complete(start())
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> _FlakyProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        # Collect the server's garbage now: finalizers that run later, inside a compile() of
        # pytest's assertion rewriter, trip CPython 3.11's AST recursion-depth check.
        gc.collect()


@pytest.fixture
def flaky(collector: Collector) -> Iterator[_FlakyProxy]:
    with _FlakyProxy(collector.http) as proxy:
        yield proxy


def test_an_interrupted_export_resumes_where_it_stopped(
        collector: Collector, flaky: _FlakyProxy, tmp_path: Path, capsys) -> None:
    """The collector fails after 3 requests: exit 1, then the rerun sends the rest, each span once."""
    tag = uuid.uuid4().hex[:8]
    names = [f"rl.test.resume_{tag}_{i}" for i in range(8)]
    run_dir, _ = _run(tmp_path, names)
    argv = ["export", str(run_dir), "--otlp-endpoint", f"http://127.0.0.1:{flaky.port}"]
    flaky.budget = 3
    assert main(argv) == EXIT_PROBLEMS
    assert "rerun the same command to resume" in capsys.readouterr().err
    flaky.budget = None
    assert main(argv) == EXIT_OK
    assert "sent 5 spans in 5 request(s)" in capsys.readouterr().err
    assert set(_counts(collector, names).values()) == {1}


def test_export_runs_in_the_core_install_without_the_analysis_extra(
        collector: Collector, tmp_path: Path) -> None:
    """The quickstart lists no extra for ``export``: with numpy (the analysis extra) absent it
    still sends the run, instead of failing as "a bug in rlsight" on an import it never uses."""
    import subprocess

    tag = uuid.uuid4().hex[:8]
    names = [f"rl.test.export_core_{tag}_{i}" for i in range(3)]
    run_dir, _ = _run(tmp_path, names)
    program = (
        "import sys\n"
        "sys.modules['numpy'] = None  # as if the analysis extra were not installed\n"
        "from rlsight.cli import main\n"
        f"sys.exit(main(['export', {str(run_dir)!r}, '--otlp-endpoint', {collector.http!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_OK, done.stderr
    assert "sent 3 spans in 3 request(s)" in done.stderr
    assert set(_counts(collector, names).values()) == {1}
