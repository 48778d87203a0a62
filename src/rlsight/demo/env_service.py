"""The environment service: an aiohttp app that scores completions, in its own Ray actor.

Environments, reward servers and tool sandboxes are usually reached over HTTP. This one
serves ``POST /score`` on 127.0.0.1 (a free port) from an async actor; the server is
instrumented with :func:`rlsight.http.instrument_aiohttp_server`, so each request continues
the caller's trace. One request scores one prompt's completions, so its spans are
per-prompt volume: they are opened inside ``per_prompt_scope()`` and appear only when the
``per_prompt`` group is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ray

from rlsight import RL, per_prompt_scope, shutdown_telemetry, span
from rlsight.demo.policy import count_up_reward

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["EnvService", "score_path"]


def score_path(port: int) -> str:
    """The scoring endpoint's URL on this host."""
    return f"http://127.0.0.1:{port}/score"


async def _score(request: web.Request) -> web.Response:
    from aiohttp import web

    body: dict[str, Any] = await request.json()
    prompt = int(body["prompt"])
    completions: list[list[int]] = body["completions"]
    with per_prompt_scope():
        async with span(RL.REWARD, "rl.env.score", completions=len(completions)):
            rewards = [count_up_reward(prompt, completion) for completion in completions]
    return web.json_response({"rewards": rewards})


@ray.remote
class EnvService:
    """Hosts the scoring app on the actor's event loop."""

    def __init__(self) -> None:
        self._runner: Any = None

    async def serve(self) -> int:
        """Start the app on 127.0.0.1 and return its port."""
        from aiohttp import web

        from rlsight.http import instrument_aiohttp_server

        app = web.Application()
        app.router.add_post("/score", _score)
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
