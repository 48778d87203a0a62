"""Realistic calls to the public API, type-checked by ``mypy --strict`` (not collected by pytest).

If a signature change breaks how users call rlsight, ``make test`` fails here first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import rlsight
from rlsight import (
    RL,
    Bucket,
    ShutdownReport,
    SpanGroup,
    Telemetry,
    TelemetryConfig,
    bucket_scope,
    efficiency_span,
    per_prompt_scope,
    span,
    traced,
)


@traced(RL.GENERATION, "rl.rollout.generate")
def generate(prompts: list[str]) -> list[str]:
    return [p + "!" for p in prompts]


@traced(RL.REWARD)
async def score(completions: list[str]) -> list[float]:
    return [float(len(c)) for c in completions]


@traced(RL.DATA_PLANE, "rl.data_plane.stream")
def stream(n: int) -> Iterator[int]:
    yield from range(n)


@traced(RL.DATA_PLANE, "rl.data_plane.astream")
async def astream(n: int) -> AsyncIterator[int]:
    for i in range(n):
        yield i


def run(config: TelemetryConfig) -> ShutdownReport:
    telemetry: Telemetry = rlsight.setup_telemetry(config)
    rlsight.register_span_groups("mylib", [SpanGroup("mylib_io", "my library's I/O", Bucket.OVERHEAD)])
    with rlsight.job_span(), rlsight.startup_span(), rlsight.setup_span("workers"):
        pass
    for step in range(3):
        with rlsight.step_span(step, prompts=8):
            out: list[str] = generate(["a"])
            with bucket_scope(Bucket.OVERHEAD), span(RL.GENERATION, "rl.validate.generate") as s:
                s.set_attribute("rl.samples", len(out))
            with efficiency_span("idle/buffer_starvation"):
                pass
            with per_prompt_scope():
                total: int = sum(stream(4))
                assert total == 6
    seconds: dict[str, float] = telemetry.take_efficiency_seconds()
    assert isinstance(seconds, dict)
    return rlsight.shutdown_telemetry(timeout_ms=1000)
