"""Actors and a task for the Ray propagation tests.

Workers cannot import a test folder, so the module registers itself to be pickled by value.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import ray

from rlsight import RL, load_model_span, span, umbrella_span
from rlsight.propagation import accepts_trace_context, dispatch_with_trace_context
from rlsight.ray import traced_actor
from rlsight.runtime import active_runtime


def _identity() -> dict[str, Any]:
    telemetry = active_runtime()
    return {
        "pid": os.getpid(),
        "telemetry": telemetry is not None,
        "worker_group": telemetry.worker_group if telemetry is not None else None,
    }


@ray.remote
class SyncWorker:
    """A plain actor: sync and streaming methods, the first hop of a chain, no decorator on some."""

    @accepts_trace_context
    def work(self, label: str) -> str:
        with span(RL.TRAINING, "rl.test.sync.work", label=label):
            return label

    @accepts_trace_context
    def stream(self, n: int) -> Iterator[int]:
        for i in range(n):
            with span(RL.GENERATION, "rl.test.sync.stream", index=i):
                pass
            yield i

    @accepts_trace_context
    def call_next(self, other: Any, label: str) -> str:
        with umbrella_span(RL.ROLLOUT, "rl.test.chain.first_hop"):
            return str(ray.get(dispatch_with_trace_context(other.work, label)))

    @accepts_trace_context
    def echo(self, value: object) -> object:
        return value

    def plain(self, x: int) -> int:
        return x

    def received(self, **kwargs: Any) -> list[str]:
        return sorted(kwargs)

    def identity(self) -> dict[str, Any]:
        return _identity()


@ray.remote
class AsyncEnv:
    """An async actor: coroutine and async-generator methods, and an aiohttp service."""

    def __init__(self) -> None:
        self._runner: Any = None

    @accepts_trace_context
    async def work(self, label: str) -> str:
        async with span(RL.REWARD, "rl.test.async.work", label=label):
            await asyncio.sleep(0)
            return label

    @accepts_trace_context
    async def stream(self, n: int) -> AsyncIterator[int]:
        for i in range(n):
            async with span(RL.GENERATION, "rl.test.async.stream", index=i):
                await asyncio.sleep(0)
            yield i

    async def serve(self) -> int:
        """Start an instrumented aiohttp service on 127.0.0.1 and return its port."""
        from aiohttp import web

        from rlsight.http import instrument_aiohttp_server

        async def score(request: web.Request) -> web.Response:
            async with span(RL.REWARD, "rl.test.env.score"):
                return web.json_response({"score": 1.0})

        app = web.Application()
        app.router.add_post("/score", score)
        instrument_aiohttp_server(app)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return int(self._runner.addresses[0][1])

    def identity(self) -> dict[str, Any]:
        return _identity()


@ray.remote(max_concurrency=4)
@traced_actor
class ThreadedWorker:
    """A threaded actor (max_concurrency > 1), wired by @traced_actor, that calls the service."""

    def __init__(self) -> None:
        from rlsight.http import instrument_aiohttp_client

        with load_model_span("numpy"):
            instrument_aiohttp_client()

    def work(self, label: str) -> int:
        with span(RL.TRAINING, "rl.test.threaded.work", label=label):
            return threading.get_native_id()

    def fetch(self, url: str) -> float:
        import aiohttp

        async def post() -> float:
            async with aiohttp.ClientSession() as session, session.post(url, json={}) as response:
                return float((await response.json())["score"])

        with span(RL.REWARD, "rl.test.threaded.fetch"):
            return asyncio.run(post())

    def identity(self) -> dict[str, Any]:
        return _identity()


@ray.remote
class UndecoratedWorker:
    """No decorated method at all: its first span comes from a plain method."""

    def work(self) -> dict[str, Any]:
        with span(RL.TRAINING, "rl.test.undecorated.work"):
            return _identity()


@ray.remote
class UndecoratedLoader:
    """No decorator and no worker_options: its first span comes from its constructor."""

    def __init__(self) -> None:
        with load_model_span("dtensor"):
            pass

    def identity(self) -> dict[str, Any]:
        return _identity()


@ray.remote
@accepts_trace_context
def traced_task(label: str) -> dict[str, Any]:
    with span(RL.REWARD, "rl.test.task", label=label):
        return _identity()


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
