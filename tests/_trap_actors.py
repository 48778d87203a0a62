"""Ray actors for the trust-trap tests (issue #9): seeded ranks, setup timing, lost carriers.

Workers cannot import a test folder, so the module registers itself to be pickled by value.
"""

from __future__ import annotations

import random
import sys
import time
import warnings
from typing import Any

import ray

from rlsight import RL, accepts_trace_context, span
from rlsight.propagation import TRACE_CONTEXT_KWARG
from rlsight.runtime import active_runtime


@ray.remote
class SeededRank:
    """One "rank" of a run: ``random.seed(0)`` first, like ``set_seed(seed)`` in a trainer."""

    def emit(self, label: str) -> tuple[str, str]:
        random.seed(0)
        with span(RL.TRAINING, "rl.test.seeded", label=label) as s:
            ctx = s.get_span_context()
        return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


@ray.remote
class SetupProbe:
    """Reports how far telemetry got before the actor's first call (no span opened yet)."""

    def state(self) -> dict[str, Any]:
        telemetry = active_runtime()
        return {
            "telemetry": telemetry is not None,
            "materialized": telemetry is not None and telemetry.materialized,
            "store_imported": "rlsight.store._exporters" in sys.modules,
        }

    @accepts_trace_context
    def ping(self) -> int:
        return 1

    def receive(self, carrier: bytes | dict[str, str]) -> list[str]:
        """Hand ``carrier`` to a decorated function here, as a Ray dispatch would."""

        @accepts_trace_context
        def work() -> None:
            return None

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            work(**{TRACE_CONTEXT_KWARG: carrier})
        return [str(w.message) for w in caught]


@ray.remote
class RolloutWorker:
    """Generates one rollout group per call, tagged with its group id; receives weights."""

    @accepts_trace_context
    def generate(self, group_id: str, seconds: float) -> str:
        with span(RL.GENERATION, "rl.test.async.generate", group_id=group_id):
            time.sleep(seconds)
        return group_id

    @accepts_trace_context
    def refit(self, seconds: float) -> None:
        with span(RL.REFIT, "rl.test.async.refit"):
            time.sleep(seconds)


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@ray.remote
class BusyRank:
    """A worker that computes, then waits, then closes its busy-time window (issue #17)."""

    def work(self, compute_s: float, wait_s: float) -> dict[str, Any]:
        import rlsight

        with span(RL.GENERATION, "rl.rollout.generate"):
            time.sleep(compute_s)
        with rlsight.efficiency_span("idle/buffer_starvation"):
            time.sleep(wait_s)
        rlsight.flush_telemetry()
        telemetry = active_runtime()
        assert telemetry is not None
        return dict(telemetry.resource_attributes)
