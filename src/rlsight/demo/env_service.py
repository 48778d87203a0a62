"""The environment service: an aiohttp app that scores completions, in its own Ray actor.

Environments, reward servers and tool sandboxes are usually reached over HTTP. This one
serves ``POST /score`` on 127.0.0.1 (a free port) from an async actor; the server is
instrumented with :func:`rlsight.http.instrument_aiohttp_server`, so each request continues
the caller's trace. One request scores one prompt's completions, so its spans are
per-prompt volume: they are opened inside ``per_prompt_scope()`` and appear only when the
``per_prompt`` group is on.

Scoring costs ``env_s_per_completion`` per completion (:mod:`rlsight.demo.costs`). With an
error rate (``--inject env-errors=0.1``) that share of requests does the work and then fails
with 503, as an overloaded sandbox would; the caller retries, and both sides count the failed
attempt ``wasted``.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

import ray

from rlsight import RL, Bucket, per_prompt_scope, shutdown_telemetry, span
from rlsight.demo.policy import count_up_reward

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["EnvService", "score_path"]


def score_path(port: int) -> str:
    """The scoring endpoint's URL on this host."""
    return f"http://127.0.0.1:{port}/score"


def _score_handler(s_per_completion: float, error_rate: float, seed: int) -> Any:
    from aiohttp import web

    rng = random.Random(seed)

    async def score(request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        prompt = int(body["prompt"])
        completions: list[list[int]] = body["completions"]
        with per_prompt_scope():
            async with span(RL.REWARD, "rl.env.score", completions=len(completions)) as s:
                rewards = [count_up_reward(prompt, completion) for completion in completions]
                await asyncio.sleep(s_per_completion * len(completions))
                if rng.random() < error_rate:
                    s.set_attribute("rl.bucket", Bucket.WASTED.value)
                    return web.json_response({"error": "injected failure"}, status=503)
        return web.json_response({"rewards": rewards})

    return score


@ray.remote
class EnvService:
    """Hosts the scoring app on the actor's event loop.

    Args:
        s_per_completion: Seconds spent scoring one completion.
        error_rate: Share of requests that fail after doing their work.
        seed: Seeds which requests fail.
    """

    def __init__(self, s_per_completion: float = 0.0, error_rate: float = 0.0, seed: int = 0) -> None:
        self._runner: Any = None
        self._handler = _score_handler(s_per_completion, error_rate, seed)

    async def serve(self) -> int:
        """Start the app on 127.0.0.1 and return its port."""
        from aiohttp import web

        from rlsight.http import instrument_aiohttp_server

        app = web.Application()
        app.router.add_post("/score", self._handler)
        instrument_aiohttp_server(app)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return int(self._runner.addresses[0][1])

    async def close(self) -> None:
        """Stop serving and flush this process's telemetry before the actor is killed."""
        if self._runner is not None:
            await self._runner.cleanup()
        shutdown_telemetry()
