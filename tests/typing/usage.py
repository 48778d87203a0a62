"""Realistic calls to the public API, type-checked by ``mypy --strict`` (not collected by pytest).

If a signature change breaks how users call rlsight, ``make test`` fails here first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import rlsight
from rlsight import (
    RL,
    Bucket,
    MetricSpec,
    ShutdownReport,
    SpanContextManager,
    SpanGroup,
    Telemetry,
    TelemetryConfig,
    accepts_trace_context,
    attach_trace_carrier,
    bucket_scope,
    current_trace_carrier,
    efficiency_span,
    per_prompt_scope,
    record_metrics,
    register_metric_group,
    span,
    tee_step_metrics,
    trace_context_kwargs,
    traced,
)
from rlsight.dashboards import grafana_dashboard
from rlsight.engines import EngineMetricsReader, record_engine_deltas


class Trainer:
    @accepts_trace_context
    def train(self, batch: list[float]) -> float:
        return sum(batch)

    @accepts_trace_context
    async def score(self, texts: list[str]) -> list[float]:
        return [float(len(t)) for t in texts]


def validation_phase(step: int) -> SpanContextManager:
    """A helper that picks a span for its caller, typed without naming a private class."""
    return rlsight.setup_span("validation") if step == 0 else span(RL.VALIDATION, "rl.validate")


async def validate(step: int) -> None:
    async with validation_phase(step) as s:
        s.set_attribute("rl.step", step)


def collector_thread(carrier: dict[str, str] | None) -> None:
    with attach_trace_carrier(carrier), span(RL.DATA_PLANE, "rl.data_plane.collect"):
        pass



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


def page_oncall(record: rlsight.StallRecord) -> None:
    seconds: float = record.seconds_since_progress
    path: str | None = record.path
    print(seconds, path, record.describe(), record.to_dict()["schema_version"])


def run(config: TelemetryConfig) -> ShutdownReport:
    config = config.with_changes(stall_after_steps=5.0)
    telemetry: Telemetry = rlsight.setup_telemetry(config, on_stall=page_oncall)
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
            with efficiency_span("idle/refit_bubble", concurrent=True):
                pass
            with span(RL.GENERATION, "rl.rollout.generate", group_id=f"g{step}", bucket=Bucket.WASTED):
                pass
            rlsight.discard([f"g{step}", step], "stale")
            with per_prompt_scope():
                total: int = sum(stream(4))
                assert total == 6
    register_metric_group("trainer", [MetricSpec("rl.train.loss", "train/loss", "gauge", "1", "Loss.")])
    record_metrics("trainer", {"train/loss": 0.5})
    summary: dict[str, float] = rlsight.last_step_summary()
    tee_step_metrics(3, {"train/loss": 0.4, **summary}, denominator_s=1.5)
    address: tuple[str, int] | None = telemetry.prometheus_address
    assert address is None or address[1] > 0
    dashboard: dict[str, object] = grafana_dashboard()
    assert dashboard["panels"]
    kwargs = trace_context_kwargs()
    carrier = current_trace_carrier()
    collector_thread(carrier)
    reader = EngineMetricsReader.from_url("http://127.0.0.1:8000/metrics", flavor="vllm")
    record_engine_deltas(3, reader.read_delta(), engine="generation/0")
    assert Trainer().train([1.0], **kwargs) == 1.0
    seconds: dict[str, float] = telemetry.take_efficiency_seconds()
    assert isinstance(seconds, dict)
    rlsight.record_inference(0.5, 12, 4, model="m", operation="chat", side="server")
    flushed: bool = rlsight.flush_telemetry(timeout_ms=500)
    assert flushed in (True, False)
    return rlsight.shutdown_telemetry(timeout_ms=1000)


def adopt_existing_timers_logs_and_http(timing_raw: dict[str, float]) -> None:
    """The adoption helpers: timers, after-the-fact spans, logs, efficiency seconds, HTTP hops."""
    import time
    from contextlib import AbstractContextManager

    from rlsight import TimerBridge, instrument_logging, record_efficiency_seconds, record_span
    from rlsight.http import instrument_fastapi, instrument_httpx, instrument_requests

    def marked_timer(
        name: str, timings: dict[str, float], color: str | None = None
    ) -> AbstractContextManager[None]:
        raise NotImplementedError

    bridge = TimerBridge({"gen": RL.GENERATION, "update_actor": (RL.TRAINING, "rl.train.policy")})
    with bridge.time("gen", timing_raw):
        pass
    wrapped = bridge.wrap(marked_timer)
    with wrapped("update_actor", timing_raw, color="red"):
        pass
    t0 = time.time()
    record_span(RL.REWARD, "rl.reward.score", t0, time.time(), prompts=4)
    record_efficiency_seconds("idle/refit_bubble", 1.5)
    instrument_logging()
    instrument_httpx()
    import httpx

    one_client: httpx.AsyncClient = instrument_httpx(httpx.AsyncClient())
    assert one_client is not None
    instrument_requests()
    from fastapi import FastAPI

    app: FastAPI = instrument_fastapi(FastAPI())
    assert app is not None
