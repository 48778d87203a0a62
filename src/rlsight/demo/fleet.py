"""The demo's workers as one object: starting them, the phases every controller shares, stopping.

The controllers (:mod:`rlsight.demo.controllers`) decide *when* each phase runs; the fleet
knows *how*: which actor does it, inside which driver span, and what it returns.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray

from rlsight import RL, RlsightWarning, TelemetryConfig, dispatch_with_trace_context, span
from rlsight.demo.actors import GenerationWorker, PolicyWorker, ReferenceWorker, WorkerInfo, engine_name
from rlsight.demo.costs import Costs
from rlsight.demo.env_service import EnvService, score_path
from rlsight.demo.faults import Faults
from rlsight.demo.policy import F64, I64, Rollout, group_advantages
from rlsight.engines import EngineMetricsReader, record_engine_deltas
from rlsight.ray import worker_options

__all__ = ["Fleet", "concat_rollouts"]


def concat_rollouts(rollouts: list[Rollout]) -> Rollout:
    """One rollout of every row of ``rollouts``, in order."""
    return Rollout(
        np.concatenate([r.prompts for r in rollouts]),
        np.concatenate([r.tokens for r in rollouts]),
        np.concatenate([r.mask for r in rollouts]),
    )


@dataclass
class Fleet:
    """Handles to every actor of the run, and the generation workers still alive."""

    generation: dict[int, Any]
    policy: list[Any]
    reference: Any
    env: Any
    scraped: dict[int, EngineMetricsReader] = field(default_factory=dict)

    @classmethod
    def start(
        cls, config: TelemetryConfig, *, generation_workers: int, policy_ranks: int, costs: Costs,
        faults: Faults, seed: int,
    ) -> Fleet:
        """Start every actor; all their processes start at once."""

        def start(actor_class: Any, worker_group: str, rank: int, world_size: int, *args: Any) -> Any:
            # The run's RLSIGHT_* variables on each actor too: on a cluster another run
            # initialised, they point the workers' telemetry at this run, not that one.
            options = worker_options(
                worker_group=worker_group, rank=rank, world_size=world_size,
                runtime_env={"env_vars": config.to_env()},
            )
            return actor_class.options(**options).remote(*args)

        generation = {
            rank: start(
                GenerationWorker, "generation", rank, generation_workers, rank, seed,
                costs.decode_rate(rank) / faults.slowdown.get(("generation", rank), 1.0), costs,
                rank % 2 == 1,  # odd ranks serve /metrics for the driver to scrape
            )
            for rank in range(generation_workers)
        }
        policy = [
            start(PolicyWorker, "policy", rank, policy_ranks, rank, policy_ranks, costs,
                  faults.slowdown.get(("policy", rank), 1.0), faults.hangs.get(("policy", rank)))
            for rank in range(policy_ranks)
        ]
        return cls(
            generation=generation,
            policy=policy,
            reference=start(ReferenceWorker, "reference", 0, 1, costs),
            env=start(EnvService, "env", 0, 1, costs.env_s_per_completion, faults.env_error_rate, seed),
        )

    @property
    def all(self) -> list[Any]:
        return [*self.generation.values(), *self.policy, self.reference, self.env]

    def load_models(self, seed: int, lr: float) -> None:
        """Serve the environment, then load every model (generation workers learn the URL)."""
        url = score_path(ray.get(self.env.serve.remote()))
        generation = {
            rank: dispatch_with_trace_context(w.load_model, seed, url) for rank, w in self.generation.items()
        }
        others = [dispatch_with_trace_context(p.load_model, seed, lr) for p in self.policy]
        others.append(dispatch_with_trace_context(self.reference.load_model, seed))
        infos: list[WorkerInfo] = ray.get([*generation.values(), *others])
        for rank, info in zip(generation, infos, strict=False):
            if info["metrics_url"] is not None:
                self.scraped[rank] = EngineMetricsReader.from_url(info["metrics_url"], flavor="vllm")
                self.scraped[rank].read_delta()  # the baseline
        if not all(info["telemetry"] for info in infos):
            warnings.warn(
                "rlsight demo: a worker has no telemetry, so its spans are missing from the run. "
                "Ray was initialised without rlsight's setup hook: start it with "
                "ray.init(runtime_env=rlsight.ray_runtime_env(config)), or let the demo start it",
                RlsightWarning,
                stacklevel=3,
            )

    def kill_generation(self, rank: int) -> None:
        """``ray.kill`` one generation worker (a fault); the run goes on with the others."""
        worker = self.generation.pop(rank, None)
        self.scraped.pop(rank, None)
        if worker is not None:
            ray.kill(worker, no_restart=True)

    def train(self, step: int, rollout: Rollout, rewards: F64, group_size: int) -> dict[str, float]:
        """Reference log-probabilities, then one data-parallel GRPO step; the trainer's scalars."""
        advantages = group_advantages(rewards, group_size)
        with span(RL.DATA_PLANE, "rl.data_plane.put"):
            batch_ref = ray.put({"rollout": rollout, "advantages": advantages})
        with span(RL.LOGPROB, "rl.logprob.reference"):
            reference: F64 = ray.get(
                dispatch_with_trace_context(self.reference.compute_logprobs, [batch_ref])
            )
        with span(RL.TRAINING, "rl.train.policy", batch_size=len(rollout.prompts)):
            results: list[tuple[F64, dict[str, float]]] = ray.get([
                dispatch_with_trace_context(p.compute_gradient, [batch_ref], reference, step)
                for p in self.policy
            ])
            grads = [grad for grad, _ in results]
            ray.get([dispatch_with_trace_context(p.apply_gradients, *grads) for p in self.policy])
        return {key: float(np.mean([stats[key] for _, stats in results])) for key in results[0][1]}

    def push_weights(self) -> None:
        """Rank 0's new weights to every live generation worker (they are all equal)."""
        with span(RL.REFIT, "rl.refit.push_weights"):
            weights = dispatch_with_trace_context(self.policy[0].export_weights)
            ray.get([dispatch_with_trace_context(w.load_weights, weights) for w in self.generation.values()])

    def save_checkpoint(self, run_dir: Path, step: int) -> None:
        with span(RL.CHECKPOINT, "rl.checkpoint.save"):
            path = str(run_dir / "checkpoints" / f"step_{step:06d}.npz")
            ray.get(dispatch_with_trace_context(self.policy[0].save_checkpoint, path))

    def validate(self, prompts: I64, samples: int) -> tuple[float, int]:
        """Mean reward of ``samples`` sampled completions per validation prompt, and their tokens.

        The prompts are split over the live generation workers, as a rollout's are.
        """
        workers = list(self.generation.values())
        with span(RL.VALIDATION, "rl.validate", prompts=len(prompts)):
            results: list[tuple[float, int, int]] = ray.get([
                dispatch_with_trace_context(w.validate, shard, samples)
                for w, shard in zip(workers, np.array_split(prompts, len(workers)), strict=True)
            ])
        total, count, tokens = (sum(column) for column in zip(*results, strict=True))
        return total / count, int(tokens)

    def record_engines(self, step: int) -> None:
        """This step's engine deltas: workers reading their own registry, and the scraped ones."""
        refs = [w.record_engine.remote(step) for w in self.generation.values()]
        for rank, reader in self.scraped.items():
            record_engine_deltas(step, reader.read_delta(), engine=engine_name(rank))
        ray.get(refs)

    def stop(self) -> None:
        """Flush every worker's telemetry, then end the actors (also on a cluster we did not start)."""
        try:
            ray.get([w.close.remote() for w in self.all], timeout=30)
        finally:
            for worker in self.all:
                ray.kill(worker)
