"""The demo's Ray actors: generation workers, data-parallel policy ranks and a reference worker.

Each actor process sets up its own telemetry through the runtime_env's setup hook
(:func:`rlsight.ray_runtime_env`) and gets its identity from
:func:`rlsight.ray.worker_options`, so its spans carry its own ``rl.worker_group``, ``rl.rank``
and ``process.pid``. Every method the driver calls during the run is decorated with
:func:`rlsight.accepts_trace_context` and dispatched with
:func:`rlsight.dispatch_with_trace_context`, so the spans it opens join the driver's trace
under the span that made the call.

Each phase does its real numpy work, then waits the time the same work costs on an LLM-sized
run (:mod:`rlsight.demo.costs`): a worker's spans last as long as its tokens, bytes and
decode rate say.
"""

from __future__ import annotations

import asyncio
import os
import time
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
from rlsight.demo.costs import Costs, shaped_wait
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

__all__ = ["GenerationWorker", "PolicyWorker", "ReferenceWorker", "WorkerInfo", "engine_name"]

WorkerInfo = dict[str, Any]
#: HTTP status the environment answers a failed (injected) request with.
_UNAVAILABLE: Final = 503


def engine_name(rank: int) -> str:
    """``rl.engine.name`` of generation worker ``rank``'s engine deltas."""
    return f"generation/{rank}"


def _worker_info(**extra: Any) -> WorkerInfo:
    """What the driver checks after a model load: this process and whether it has telemetry."""
    telemetry = active_runtime()
    return {
        "pid": os.getpid(),
        "telemetry": telemetry is not None,
        "worker_group": None if telemetry is None else telemetry.worker_group,
        **extra,
    }


async def _request_rewards(
    url: str, groups: list[tuple[int, list[list[int]]]]
) -> tuple[list[list[float]], int]:
    """Score each prompt's completions, one request at a time, retrying failed requests.

    Returns the rewards and the number of failed attempts. A failed attempt's span is moved
    to ``wasted``: its time bought nothing. (A module function: an ``async`` method would
    make Ray run the whole actor on an event loop.)
    """
    import aiohttp

    failures = 0
    rewards: list[list[float]] = []
    async with aiohttp.ClientSession() as session:
        for prompt, completions in groups:
            payload = {"prompt": prompt, "completions": completions}
            for attempt in range(1, 100):
                # One request per prompt: per-prompt volume, so it is labelled as such and
                # emitted only when the per_prompt group is on.
                with per_prompt_scope():
                    async with span(RL.REWARD, "rl.reward.env_request", attempt=attempt) as s:
                        async with session.post(url, json=payload) as response:
                            if response.status == _UNAVAILABLE:
                                s.set_attribute("rl.bucket", Bucket.WASTED.value)
                                failures += 1
                                continue
                            response.raise_for_status()
                            body = await response.json()
                rewards.append([float(r) for r in body["rewards"]])
                break
            else:
                raise RuntimeError(f"environment at {url} failed 99 attempts for prompt {prompt}")
    return rewards, failures


@ray.remote(concurrency_groups={"metrics": 1})  # type: ignore[call-overload]
class GenerationWorker:
    """Samples completions (the inference engine's job) and has them scored by the environment.

    Decoding costs ``tokens / decode_tps`` seconds. The engine's vLLM-named counters are read
    in this process through the registry (``serve_metrics=False``), or served on
    ``127.0.0.1`` for the driver to scrape with ``EngineMetricsReader.from_url``.

    Args:
        rank: This worker's rank in the generation fleet.
        seed: Seeds sampling.
        decode_tps: Tokens per second this worker decodes.
        costs: The run's cost model (refit bandwidth, parameter bytes).
        serve_metrics: Serve ``/metrics`` instead of reading the registry here.
    """

    def __init__(self, rank: int, seed: int, decode_tps: float, costs: Costs, serve_metrics: bool) -> None:
        from rlsight.http import instrument_aiohttp_client

        # Before any ClientSession exists: sessions created later carry the trace header.
        instrument_aiohttp_client()
        self._rank = rank
        self._decode_tps = decode_tps
        self._costs = costs
        self._env_url = ""
        self._rng = np.random.default_rng([seed, rank])
        self._weights: F64 | None = None
        self._engine = VllmStyleMetrics()
        self._reader: EngineMetricsReader | None = None
        self._metrics_url: str | None = None
        if serve_metrics:
            from prometheus_client import start_http_server

            server, _ = start_http_server(0, addr="127.0.0.1", registry=self._engine.registry)
            self._metrics_url = f"http://127.0.0.1:{server.server_port}/metrics"
        else:
            self._reader = EngineMetricsReader.from_registry(self._engine.registry, flavor="vllm")

    @accepts_trace_context
    def load_model(self, seed: int, env_url: str) -> WorkerInfo:
        """Load the initial policy weights and note where the environment scores.

        The first engine read is the baseline the per-step deltas start from.
        """
        self._env_url = env_url
        with load_model_span("numpy"):
            self._weights = init_weights(seed)
            if self._reader is not None:
                self._reader.read_delta()
        return _worker_info(metrics_url=self._metrics_url)

    def _sample(self, prompts: I64, *, greedy: bool, **group: str) -> Rollout:
        assert self._weights is not None, "load_model() first"
        with span(RL.GENERATION, "rl.generation.sample", sequences=len(prompts), **group) as s:
            rollout = sample(self._weights, prompts, self._rng, greedy=greedy)
            tokens = int(rollout.lengths.sum())
            s.set_attribute("rl.tokens", tokens)
            shaped_wait(tokens / self._decode_tps)
            self._engine.observe(rollout)
        return rollout

    @accepts_trace_context
    def generate(self, prompts: I64, group_size: int) -> Rollout:
        """``group_size`` completions per prompt."""
        return self._sample(np.repeat(prompts, group_size), greedy=False)

    @accepts_trace_context
    def score(self, rollout: Rollout, group_size: int) -> tuple[F64, int]:
        """Rewards for every completion, one environment request per prompt, and the failed attempts."""
        with span(RL.REWARD, "rl.reward.score", sequences=len(rollout.prompts)):
            return self._score(rollout, group_size)

    @accepts_trace_context
    def rollout(self, prompts: I64, group_size: int, group_id: str) -> tuple[Rollout, F64, int]:
        """Generate and score in one call (the async controller's unit of work).

        Both spans carry ``group_id`` (``rl.group_id``, inherited by the environment requests
        under them), so :func:`rlsight.discard` can charge this work to waste if the trainer
        evicts it later.
        """
        rollout = self._sample(np.repeat(prompts, group_size), greedy=False, group_id=group_id)
        with span(RL.REWARD, "rl.reward.score", sequences=len(rollout.prompts), group_id=group_id):
            rewards, failures = self._score(rollout, group_size)
        return rollout, rewards, failures

    def _score(self, rollout: Rollout, group_size: int) -> tuple[F64, int]:
        groups = [
            (int(rollout.prompts[i]), rollout.tokens[i : i + group_size].tolist())
            for i in range(0, len(rollout.prompts), group_size)
        ]
        rewards, failures = asyncio.run(_request_rewards(self._env_url, groups))
        return np.asarray([r for group in rewards for r in group], dtype=np.float64), failures

    @accepts_trace_context
    def load_weights(self, weights: F64) -> None:
        """Take the trainer's new weights (the refit): parameter bytes / refit bandwidth."""
        with span(RL.REFIT, "rl.refit.load_weights"):
            self._weights = np.array(weights, copy=True)
            shaped_wait(self._costs.param_bytes / self._costs.refit_bytes_per_s)

    @accepts_trace_context
    def validate(self, prompts: I64, samples: int) -> tuple[float, int, int]:
        """Summed reward of ``samples`` completions per prompt, their count and tokens.

        The same generation code as a rollout, counted as overhead by ``bucket_scope``.
        """
        with span(RL.VALIDATION, "rl.validation.generate", sequences=len(prompts) * samples):
            with bucket_scope(Bucket.OVERHEAD):
                rollout = self._sample(np.repeat(prompts, samples), greedy=False)
                rewards, _ = self._score(rollout, samples)
        return float(rewards.sum()), len(rewards), int(rollout.lengths.sum())

    @ray.method(concurrency_group="metrics")
    def record_engine(self, step: int) -> None:
        """Record this step's engine deltas, read from the registry in this process.

        In a concurrency group of its own, so the controller can call it while a rollout
        runs; a worker whose metrics are scraped records nothing here.
        """
        if self._reader is not None:
            record_engine_deltas(step, self._reader.read_delta(), engine=engine_name(self._rank))

    def close(self) -> None:
        """Flush this process's telemetry before the actor is killed."""
        shutdown_telemetry()


@ray.remote
class ReferenceWorker:
    """The frozen reference policy: log-probabilities of every generated token.

    Args:
        costs: Scoring costs ``tokens / logprob_tps`` seconds.
    """

    def __init__(self, costs: Costs) -> None:
        self._costs = costs
        self._weights: F64 | None = None

    @accepts_trace_context
    def load_model(self, seed: int) -> WorkerInfo:
        """Load the initial policy, frozen."""
        with load_model_span("numpy"):
            self._weights = init_weights(seed)
        return _worker_info()

    @accepts_trace_context
    def compute_logprobs(self, batch_refs: list[ray.ObjectRef[Any]]) -> F64:
        """Fetch the step's batch from the object store and score it under the reference.

        The batch arrives as a reference inside a list, so Ray does not resolve it before
        the call: the fetch happens here, inside a data-plane span.
        """
        assert self._weights is not None, "load_model() first"
        with span(RL.DATA_PLANE, "rl.data_plane.get"):
            batch: dict[str, Any] = ray.get(batch_refs[0])
        rollout: Rollout = batch["rollout"]
        with span(RL.LOGPROB, "rl.logprob.compute", sequences=len(rollout.prompts)):
            logprobs = token_logprobs(self._weights, rollout)
            shaped_wait(int(rollout.lengths.sum()) / self._costs.logprob_tps)
        return logprobs

    def close(self) -> None:
        """Flush this process's telemetry before the actor is killed."""
        shutdown_telemetry()


def _shard(rollout: Rollout, rank: int, world_size: int) -> slice:
    """This rank's contiguous share of the batch's rows."""
    n = len(rollout.prompts)
    return slice(rank * n // world_size, (rank + 1) * n // world_size)


@ray.remote
class PolicyWorker:
    """One data-parallel rank of the policy: its shard's gradient, then the averaged update.

    Every rank holds the same weights and optimizer state; each computes the gradient of its
    shard of the batch (``tokens / train_tps`` seconds), then averages all ranks' gradients
    (the all-reduce) and takes the same Adam step, so the ranks stay identical.

    Args:
        rank: This rank.
        world_size: Ranks in the policy fleet.
        costs: The run's cost model.
        slowdown: This rank's training takes this factor longer (a straggler fault).
        hang: ``(step, seconds)``: stall that long inside training at that step.
    """

    def __init__(
        self, rank: int, world_size: int, costs: Costs, slowdown: float = 1.0,
        hang: tuple[int, float] | None = None,
    ) -> None:
        self._rank = rank
        self._world_size = world_size
        self._costs = costs
        self._slowdown = slowdown
        self._hang = hang
        self._weights: F64 | None = None
        self._optimizer: Adam | None = None

    @accepts_trace_context
    def load_model(self, seed: int, lr: float) -> WorkerInfo:
        """Initialise the policy and its optimizer (the same on every rank)."""
        with load_model_span("numpy"):
            self._weights = init_weights(seed)
            self._optimizer = Adam(self._weights.shape, lr=lr)
        return _worker_info()

    @accepts_trace_context
    def compute_gradient(
        self, batch_refs: list[ray.ObjectRef[Any]], reference_logprobs: F64, step: int
    ) -> tuple[F64, dict[str, float]]:
        """The gradient of this rank's shard and its scalars (loss, KL)."""
        assert self._weights is not None, "load_model() first"
        with span(RL.DATA_PLANE, "rl.data_plane.get"):
            batch: dict[str, Any] = ray.get(batch_refs[0])
        rollout: Rollout = batch["rollout"]
        rows = _shard(rollout, self._rank, self._world_size)
        mine = Rollout(rollout.prompts[rows], rollout.tokens[rows], rollout.mask[rows])
        with span(RL.TRAINING, "rl.train.forward_backward", sequences=len(mine.prompts),
                  batch_size=len(mine.prompts)):
            grad, stats = policy_gradient(
                self._weights, mine, batch["advantages"][rows], reference_logprobs[rows]
            )
            shaped_wait(self._slowdown * int(mine.lengths.sum()) / self._costs.train_tps)
            if self._hang is not None and self._hang[0] == step:
                time.sleep(self._hang[1])
        return grad, {"train/loss": stats.loss, "train/kl": stats.kl, "train/grad_norm": stats.grad_norm}

    @accepts_trace_context
    def apply_gradients(self, *grads: F64) -> None:
        """Average every rank's gradient (the all-reduce) and take the Adam step."""
        assert self._weights is not None and self._optimizer is not None, "load_model() first"
        with span(RL.OPTIMIZER, "rl.train.allreduce", ranks=len(grads)):
            grad = np.mean(np.stack(grads), axis=0)
        with span(RL.OPTIMIZER, "rl.train.optimizer_step"):
            self._weights = self._optimizer.step(self._weights, grad)

    @accepts_trace_context
    def export_weights(self) -> F64:
        """The current weights, for the generation workers."""
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
            shaped_wait(self._costs.param_bytes / self._costs.checkpoint_bytes_per_s)
        return str(target)

    def close(self) -> None:
        """Flush this process's telemetry before the actor is killed."""
        shutdown_telemetry()
