"""The demo's Ray actors: a generation worker and a policy (trainer) worker.

Each actor process sets up its own telemetry through the runtime_env's setup hook
(:func:`rlsight.ray_runtime_env`) and gets its identity from
:func:`rlsight.ray.worker_options`, so its spans carry its own ``rl.worker_group`` and
``process.pid``. Every method the driver calls during the run is decorated with
:func:`rlsight.accepts_trace_context` and dispatched with
:func:`rlsight.dispatch_with_trace_context`, so the spans it opens join the driver's trace
under the span that made the call.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Final

import numpy as np
import ray

from rlsight import (
    RL,
    Bucket,
    accepts_trace_context,
    bucket_scope,
    load_model_span,
    per_prompt_scope,
    shutdown_telemetry,
    span,
)
from rlsight.demo.engine_metrics import VllmStyleMetrics
from rlsight.demo.policy import (
    F64,
    I64,
    Adam,
    Rollout,
    init_weights,
    policy_gradient,
    sample,
    token_logprobs,
)
from rlsight.engines import EngineMetricsReader, record_engine_deltas
from rlsight.runtime import active_runtime

__all__ = ["ENGINE_NAME", "GenerationWorker", "PolicyWorker", "WorkerInfo"]

#: ``rl.engine.name`` of the generation worker's engine deltas.
ENGINE_NAME: Final = "generation/0"

WorkerInfo = dict[str, Any]


def _worker_info() -> WorkerInfo:
    """What the driver checks after a model load: this process and whether it has telemetry."""
    telemetry = active_runtime()
    return {
        "pid": os.getpid(),
        "telemetry": telemetry is not None,
        "worker_group": None if telemetry is None else telemetry.worker_group,
    }


async def _request_rewards(url: str, groups: list[tuple[int, list[list[int]]]]) -> list[list[float]]:
    """One scoring request per prompt, concurrently (a module function: an ``async`` method
    would make Ray run the whole actor on an event loop)."""
    import aiohttp

    async with aiohttp.ClientSession() as session:

        async def one(prompt: int, completions: list[list[int]]) -> list[float]:
            # One request per prompt: per-prompt volume, so it is labelled as such and
            # emitted only when the per_prompt group is on.
            with per_prompt_scope():
                async with span(RL.REWARD, "rl.reward.env_request", concurrent=True):
                    payload = {"prompt": prompt, "completions": completions}
                    async with session.post(url, json=payload) as response:
                        response.raise_for_status()
                        body = await response.json()
            return [float(r) for r in body["rewards"]]

        return list(await asyncio.gather(*(one(p, c) for p, c in groups)))


@ray.remote
class GenerationWorker:
    """Samples completions (the inference engine's job) and has them scored by the environment.

    Args:
        seed: Seeds sampling.
    """

    def __init__(self, seed: int) -> None:
        from rlsight.http import instrument_aiohttp_client

        # Before any ClientSession exists: sessions created later carry the trace header.
        instrument_aiohttp_client()
        self._env_url = ""
        self._rng = np.random.default_rng(seed)
        self._weights: F64 | None = None
        self._engine = VllmStyleMetrics()
        self._reader = EngineMetricsReader.from_registry(self._engine.registry, flavor="vllm")

    @accepts_trace_context
    def load_model(self, seed: int, env_url: str) -> WorkerInfo:
        """Load the initial policy weights and note where the environment scores.

        The first engine read is the baseline the per-step deltas start from.
        """
        self._env_url = env_url
        with load_model_span("numpy"):
            self._weights = init_weights(seed)
            self._reader.read_delta()
        return _worker_info()

    def _sample(self, prompts: I64, *, greedy: bool) -> Rollout:
        assert self._weights is not None, "load_model() first"
        with span(RL.GENERATION, "rl.generation.sample", sequences=len(prompts)):
            rollout = sample(self._weights, prompts, self._rng, greedy=greedy)
            self._engine.observe(rollout)
        return rollout

    @accepts_trace_context
    def generate(self, prompts: I64, group_size: int, step: int) -> Rollout:
        """``group_size`` completions per prompt, then this step's engine counters."""
        rollout = self._sample(np.repeat(prompts, group_size), greedy=False)
        record_engine_deltas(step, self._reader.read_delta(), engine=ENGINE_NAME)
        return rollout

    @accepts_trace_context
    def score(self, rollout: Rollout, group_size: int) -> F64:
        """Rewards for every completion, one environment request per prompt."""
        with span(RL.REWARD, "rl.reward.score", sequences=len(rollout.prompts)):
            return self._score(rollout, group_size)

    def _score(self, rollout: Rollout, group_size: int) -> F64:
        groups = [
            (int(rollout.prompts[i]), rollout.tokens[i : i + group_size].tolist())
            for i in range(0, len(rollout.prompts), group_size)
        ]
        rewards = asyncio.run(_request_rewards(self._env_url, groups))
        return np.asarray([r for group in rewards for r in group], dtype=np.float64)

    @accepts_trace_context
    def load_weights(self, weights: F64) -> None:
        """Take the trainer's new weights (the refit)."""
        with span(RL.REFIT, "rl.refit.load_weights"):
            self._weights = np.array(weights, copy=True)

    @accepts_trace_context
    def validate(self, prompts: I64, step: int) -> float:
        """Mean reward of greedy completions: the same generation code, counted as overhead."""
        with span(RL.VALIDATION, "rl.validation.generate", sequences=len(prompts)):
            with bucket_scope(Bucket.OVERHEAD):
                rollout = self._sample(prompts, greedy=True)
                rewards = self._score(rollout, 1)
        record_engine_deltas(step, self._reader.read_delta(), engine=ENGINE_NAME)
        return float(rewards.mean())

    def close(self) -> None:
        """Flush this process's telemetry before the actor is killed."""
        shutdown_telemetry()


@ray.remote
class PolicyWorker:
    """Holds the policy, its reference copy and the optimizer; trains on the driver's batches."""

    def __init__(self) -> None:
        self._weights: F64 | None = None
        self._reference: F64 | None = None
        self._optimizer: Adam | None = None
        self._batch: dict[str, Any] | None = None
        self._reference_logprobs: F64 | None = None

    @accepts_trace_context
    def load_model(self, seed: int) -> WorkerInfo:
        """Initialise the policy; the reference policy is a frozen copy of it."""
        with load_model_span("numpy"):
            self._weights = init_weights(seed)
            self._reference = self._weights.copy()
            self._optimizer = Adam(self._weights.shape)
        return _worker_info()

    @accepts_trace_context
    def compute_reference_logprobs(self, batch_refs: list[ray.ObjectRef[Any]]) -> None:
        """Fetch the step's batch from the object store and score it under the reference.

        The batch arrives as a reference inside a list, so Ray does not resolve it before
        the call: the fetch happens here, inside a data-plane span.
        """
        assert self._reference is not None, "load_model() first"
        with span(RL.DATA_PLANE, "rl.data_plane.get"):
            self._batch = ray.get(batch_refs[0])
        rollout: Rollout = self._batch["rollout"]
        with span(RL.LOGPROB, "rl.logprob.compute", sequences=len(rollout.prompts)):
            self._reference_logprobs = token_logprobs(self._reference, rollout)

    @accepts_trace_context
    def train(self) -> dict[str, float]:
        """One GRPO step on the fetched batch; returns the trainer's logged scalars."""
        assert self._weights is not None and self._optimizer is not None
        assert self._batch is not None and self._reference_logprobs is not None, "no batch"
        rollout: Rollout = self._batch["rollout"]
        with span(RL.TRAINING, "rl.train.forward_backward", sequences=len(rollout.prompts)):
            grad, stats = policy_gradient(
                self._weights, rollout, self._batch["advantages"], self._reference_logprobs
            )
        with span(RL.OPTIMIZER, "rl.train.optimizer_step"):
            self._weights = self._optimizer.step(self._weights, grad)
        return {"train/loss": stats.loss, "train/kl": stats.kl, "train/grad_norm": stats.grad_norm}

    @accepts_trace_context
    def export_weights(self) -> F64:
        """The current weights, for the generation worker."""
        assert self._weights is not None, "load_model() first"
        with span(RL.REFIT, "rl.refit.export_weights"):
            return self._weights.copy()

    @accepts_trace_context
    def save_checkpoint(self, path: str) -> str:
        """Write the weights and optimizer state to ``path`` (``.npz``); returns the path."""
        assert self._weights is not None and self._optimizer is not None
        with span(RL.CHECKPOINT, "rl.checkpoint.write"):
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                np.savez(out, weights=self._weights, adam_m=self._optimizer.m,
                         adam_v=self._optimizer.v, adam_steps=self._optimizer.steps)
        return str(target)

    def close(self) -> None:
        """Flush this process's telemetry before the actor is killed."""
        shutdown_telemetry()
