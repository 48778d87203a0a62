"""An asyncio controller on the shared Ray cluster: background rollouts, waits, discards (#9.7-9).

Written as the docs' async recipe says: a background producer task re-attaches the current
step's carrier each iteration, pauses in a concurrent efficiency span during weight sync, and
the trainer discards a stale group. The report must keep the trainer's time productive and
charge the discarded group's generation to waste, in the step that discarded it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray

from _ray_support import RayCluster, wait_for_spans
from rlsight import (
    RL,
    attach_trace_carrier,
    current_trace_carrier,
    discard,
    dispatch_with_trace_context,
    efficiency_span,
    job_span,
    span,
    step_span,
    umbrella_span,
)
from rlsight.analysis import analyze_spans
from rlsight.ray import worker_options
from rlsight.testing import capture_telemetry

pytestmark = pytest.mark.ray

_GENERATE_S = 0.15
_TRAIN_S = 0.3


async def _controller(worker: Any) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    refit_done = asyncio.Event()
    refit_done.set()
    step_carrier: dict[str, Any] = {}

    async def producer() -> None:
        for i in range(3):
            if not refit_done.is_set():
                # Deeper than the trainer's own spans: without concurrent=True this wait
                # would take the controller's seconds away from training.
                with umbrella_span(RL.ROLLOUT, "rl.test.async.producer"), \
                        efficiency_span("idle/refit_bubble", concurrent=True):
                    await refit_done.wait()
            # The recipe: attach the carrier of the step current now, each iteration; the
            # task's own context is the step that was current when it was created.
            with attach_trace_carrier(step_carrier["carrier"]):
                await dispatch_with_trace_context(worker.generate, f"g{i}", _GENERATE_S)
            await queue.put(f"g{i}")

    with job_span():
        task: asyncio.Task[None] | None = None
        for step in (1, 2):
            with step_span(step):
                step_carrier["carrier"] = current_trace_carrier()
                if task is None:
                    task = asyncio.create_task(producer())
                group = await queue.get()
                if step == 2:
                    stale = await queue.get()  # a group from the old policy: thrown away
                    discard([stale], "stale")
                refit_done.clear()  # the producer pauses while weights move
                with span(RL.TRAINING, "rl.test.async.train", group_id=group):
                    await asyncio.sleep(_TRAIN_S)
                await dispatch_with_trace_context(worker.refit, 0.05)
                refit_done.set()
        assert task is not None
        await task


def test_async_controller_report(ray_cluster: RayCluster) -> None:
    worker = _rollout_worker()
    try:
        ray.get(worker.refit.remote(0.0))  # the actor is up before the run starts
        with capture_telemetry(run_dir=ray_cluster.run_dir, run_id=ray_cluster.config.run_id) as cap:
            asyncio.run(_controller(worker))
            (job,) = [s for s in cap.spans() if s.name == "rl.job"]
        trace_id = f"{job.context.trace_id:032x}"
        spans = wait_for_spans(ray_cluster.run_dir, lambda s: len(
            [x for x in s if x.trace_id == trace_id and x.name == "rl.test.async.generate"]) >= 3)
    finally:
        ray.kill(worker)
    mine = [s for s in spans if s.trace_id == trace_id]
    report = analyze_spans(mine)
    step1, step2 = report.steps
    # The producer's concurrent wait never takes the trainer's seconds (#9.8).
    assert step1.buckets.idle_ns == 0 and step2.buckets.idle_ns == 0
    assert step1.buckets.productive_ns >= _TRAIN_S * 1e9
    waits = [s for s in mine if s.name == "rl.efficiency.idle.refit_bubble"]
    assert waits and all(w.attributes["rl.concurrent"] is True for w in waits)
    # The stale group's generation is wasted, in step 2, with its reason (#9.7).
    (call,) = report.wasted.discarded
    assert (call.step, call.reason, call.groups_found) == (2, "stale", 1)
    assert call.work_ns >= _GENERATE_S * 1e9 * 0.9
    assert report.steps[1].wasted_fleet_ns >= call.work_ns
    (gen,) = [r for r in report.fleets.ranks if r.worker_group == "rollout"]
    assert gen.buckets.wasted_ns == call.work_ns
    # Each rollout hangs under the step current when it was dispatched (g0, g1 in step 1; g2,
    # dispatched after step 1's refit, in step 2), not the step that created the task (#9.9).
    by_id = {s.span_id: s for s in mine}
    parents = {g.attributes["rl.group_id"]: by_id[g.parent_span_id].attributes["rl.step"]
               for g in mine if g.name == "rl.test.async.generate"}
    assert parents == {"g0": 1, "g1": 1, "g2": 2}

def _rollout_worker() -> Any:
    from _trap_actors import RolloutWorker

    return RolloutWorker.options(**worker_options(worker_group="rollout", rank=0)).remote()
