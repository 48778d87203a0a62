"""The driver: a short GRPO run on a local Ray cluster, instrumented end to end.

What it shows, in about fifteen seconds on two cores:

* one trace across processes: the driver's step spans, the actors' spans under the calls
  that caused them, and an HTTP hop from the generation worker into the environment service;
* startup phases (``ray``, ``workers``, ``initial_fill``) and the workers' model loads;
* every phase of a step in its span group (rollout, generation, reward, data plane, logprob,
  training, optimizer, refit, checkpoint, validation) and a real wait on the prompt loader as
  ``idle/buffer_starvation``;
* the trainer's logged scalars teed into metrics, and the generation engine's
  vLLM-named counters as per-step ``rl.engine.*`` deltas;
* then ``rlsight report`` on what the run wrote.

The driver is the single controller: it wraps each remote call in the span of its phase
(the controller's view of the step, which the goodput report partitions), and each worker
opens spans for the work it does itself (the fleet view).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import ray

from rlsight import (
    RL,
    RlsightWarning,
    TelemetryConfig,
    dispatch_with_trace_context,
    efficiency_span,
    job_span,
    ray_runtime_env,
    setup_span,
    setup_telemetry,
    shutdown_telemetry,
    span,
    startup_span,
    step_span,
    tee_step_metrics,
    umbrella_span,
)
from rlsight.demo import metrics as _metrics  # noqa: F401 - declares the metric group the tee records
from rlsight.demo.actors import GenerationWorker, PolicyWorker, WorkerInfo
from rlsight.demo.env_service import EnvService, score_path
from rlsight.demo.policy import F64, VOCAB, Rollout, group_advantages
from rlsight.demo.prompts import PromptLoader
from rlsight.ray import worker_options

__all__ = ["DEFAULT_SPAN_GROUPS", "DEFAULT_STEPS", "main", "run_demo"]

DEFAULT_STEPS: Final = 6
#: ``per_prompt`` is on so the HTTP hop into the environment shows in the trace.
DEFAULT_SPAN_GROUPS: Final = ("per_step", "per_prompt")
_PROMPTS_PER_STEP: Final = 8
_GROUP_SIZE: Final = 4
_VALIDATE_EVERY: Final = 2
_CHECKPOINT_EVERY: Final = 3
#: Two batches per shard, read in 0.5 s: every other step waits for the next shard.
_SHARD_BATCHES: Final = 2
_SHARD_READ_S: Final = 0.5
_VALIDATION_PROMPTS: Final = np.arange(1, VOCAB, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class _Workers:
    generation: Any
    policy: Any
    env: Any

    @property
    def all(self) -> tuple[Any, ...]:
        return (self.generation, self.policy, self.env)


def _config(run_dir: Path | None, span_groups: Sequence[str]) -> TelemetryConfig:
    config = TelemetryConfig(span_groups=tuple(span_groups), algorithm="grpo")
    # Absolute, so every worker writes into this folder whatever its working directory.
    path = (run_dir if run_dir is not None else config.run_path).resolve()
    return dataclasses.replace(config, run_dir=str(path))


def _start_ray(config: TelemetryConfig) -> bool:
    """Start a local cluster whose workers set up rlsight; False when Ray already runs."""
    if ray.is_initialized():
        return False
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level=logging.ERROR,
        runtime_env=ray_runtime_env(config),
    )
    return True


def _start_workers(config: TelemetryConfig, seed: int) -> _Workers:
    """Start the three actors; all their processes start at once."""

    def start(actor_class: Any, worker_group: str, *args: Any) -> Any:
        # The run's RLSIGHT_* variables on each actor too: on a cluster another run
        # initialised, they point the workers' telemetry at this run, not that one.
        options = worker_options(
            worker_group=worker_group, rank=0, world_size=1,
            runtime_env={"env_vars": config.to_env()},
        )
        return actor_class.options(**options).remote(*args)

    return _Workers(
        generation=start(GenerationWorker, "generation", seed),
        policy=start(PolicyWorker, "policy"),
        env=start(EnvService, "env"),
    )


def _load_models(workers: _Workers, seed: int) -> None:
    """Serve the environment, then load both models (the generation worker learns the URL)."""
    url = score_path(ray.get(workers.env.serve.remote()))
    infos: list[WorkerInfo] = ray.get([
        dispatch_with_trace_context(workers.generation.load_model, seed, url),
        dispatch_with_trace_context(workers.policy.load_model, seed),
    ])
    if not all(info["telemetry"] for info in infos):
        warnings.warn(
            "rlsight demo: a worker has no telemetry, so its spans are missing from the run. "
            "Ray was initialised without rlsight's setup hook: start it with "
            "ray.init(runtime_env=rlsight.ray_runtime_env(config)), or let the demo start it",
            RlsightWarning,
            stacklevel=3,
        )


def _stop_workers(workers: _Workers) -> None:
    """Flush every worker's telemetry, then end the actors (also on a cluster we did not start)."""
    try:
        ray.get([w.close.remote() for w in workers.all], timeout=30)
    finally:
        for worker in workers.all:
            ray.kill(worker)


def _run_step(step: int, workers: _Workers, loader: PromptLoader, run_dir: Path) -> dict[str, float]:
    """One GRPO step; returns the step's logged scalars."""
    with efficiency_span("idle/buffer_starvation"):
        prompts = loader.next_batch()
    with umbrella_span(RL.ROLLOUT, "rl.rollout", prompts=len(prompts)):
        with span(RL.GENERATION, "rl.rollout.generate", batch_size=len(prompts) * _GROUP_SIZE):
            rollout: Rollout = ray.get(
                dispatch_with_trace_context(workers.generation.generate, prompts, _GROUP_SIZE, step)
            )
        with span(RL.REWARD, "rl.rollout.reward"):
            rewards: F64 = ray.get(
                dispatch_with_trace_context(workers.generation.score, rollout, _GROUP_SIZE)
            )
            advantages = group_advantages(rewards, _GROUP_SIZE)
    with span(RL.DATA_PLANE, "rl.data_plane.put"):
        batch_ref = ray.put({"rollout": rollout, "advantages": advantages})
    with span(RL.LOGPROB, "rl.logprob.reference"):
        ray.get(dispatch_with_trace_context(workers.policy.compute_reference_logprobs, [batch_ref]))
    with span(RL.TRAINING, "rl.train.policy", batch_size=len(rollout.prompts)):
        train_stats: dict[str, float] = ray.get(dispatch_with_trace_context(workers.policy.train))
    with span(RL.REFIT, "rl.refit.push_weights"):
        weights = dispatch_with_trace_context(workers.policy.export_weights)
        ray.get(dispatch_with_trace_context(workers.generation.load_weights, weights))
    scalars = {
        **train_stats,
        "rollout/reward_mean": float(rewards.mean()),
        "rollout/generated_tokens": float(rollout.lengths.sum()),
    }
    if step % _CHECKPOINT_EVERY == 0:
        with span(RL.CHECKPOINT, "rl.checkpoint.save"):
            path = str(run_dir / "checkpoints" / f"step_{step:06d}.npz")
            ray.get(dispatch_with_trace_context(workers.policy.save_checkpoint, path))
    if step % _VALIDATE_EVERY == 0:
        with span(RL.VALIDATION, "rl.validate", prompts=len(_VALIDATION_PROMPTS)):
            scalars["val/reward_mean"] = ray.get(
                dispatch_with_trace_context(workers.generation.validate, _VALIDATION_PROMPTS, step)
            )
    return scalars


def run_demo(
    run_dir: Path | None = None,
    *,
    steps: int = DEFAULT_STEPS,
    span_groups: Sequence[str] = DEFAULT_SPAN_GROUPS,
    seed: int = 0,
) -> Path:
    """Run the instrumented GRPO demo and return its run folder.

    Starts a local Ray cluster (2 CPUs) unless Ray is already initialised in this process;
    then it uses that cluster, leaves it running, and only ends the actors it created. That
    cluster must have been started with ``runtime_env=rlsight.ray_runtime_env(...)`` (any
    config): its setup hook is what gives worker processes telemetry, and the demo points
    them at its own run through each actor's env vars.

    Args:
        run_dir: Where to write the run; default ``./rlsight-runs/<run_id>``.
        steps: Training steps.
        span_groups: The span-group spec (drop ``per_prompt`` to see per-step volume only).
        seed: Seeds the policy, sampling and the prompts.

    Raises:
        ValueError: ``steps`` is below 1.
    """
    if steps < 1:
        raise ValueError(f"run_demo(steps={steps}): run at least one step")
    config = _config(run_dir, span_groups)
    setup_telemetry(config)
    started_ray = False
    workers: _Workers | None = None
    loader = PromptLoader(
        prompts_per_step=_PROMPTS_PER_STEP, shard_batches=_SHARD_BATCHES,
        shard_read_s=_SHARD_READ_S, seed=seed,
    )
    try:
        with job_span(steps=steps, prompts_per_step=_PROMPTS_PER_STEP, group_size=_GROUP_SIZE):
            with startup_span():
                with setup_span("ray"):
                    started_ray = _start_ray(config)
                with setup_span("workers"):
                    workers = _start_workers(config, seed)
                    _load_models(workers, seed)
                with setup_span("initial_fill"):
                    loader.start()
                    loader.wait_until_ready()
            for step in range(1, steps + 1):
                t0 = time.perf_counter()
                with step_span(step, prompts=_PROMPTS_PER_STEP):
                    scalars = _run_step(step, workers, loader, config.run_path)
                wall_s = time.perf_counter() - t0
                tee_step_metrics(step, scalars, denominator_s=wall_s)
                print(_progress(step, steps, scalars, wall_s), flush=True)
    finally:
        loader.stop()
        try:
            if workers is not None:
                _stop_workers(workers)
        finally:
            shutdown_telemetry()
            if started_ray:
                ray.shutdown()
    return config.run_path


def _progress(step: int, steps: int, scalars: dict[str, float], wall_s: float) -> str:
    line = (
        f"step {step}/{steps}  {wall_s:5.2f} s  reward {scalars['rollout/reward_mean']:.3f}  "
        f"loss {scalars['train/loss']:+.3f}  kl {scalars['train/kl']:.4f}"
    )
    if "val/reward_mean" in scalars:
        line += f"  validation reward {scalars['val/reward_mean']:.3f}"
    return line


def _summarise(run_dir: Path) -> str:
    from rlsight.store import read_metrics, read_spans

    spans = read_spans(run_dir)
    metrics = read_metrics(run_dir)
    counts = collections.Counter(s.name for s in spans.spans)
    processes = {s.resource.get("service.instance.id") for s in spans.spans}
    traces = {s.trace_id for s in spans.spans}
    lines = [f"run folder: {run_dir}"]
    for path in sorted(run_dir.rglob("*")):
        if path.is_file():
            lines.append(f"  {path.relative_to(run_dir)}  ({path.stat().st_size} bytes)")
    lines.append(
        f"{len(spans.spans)} spans from {len(processes)} processes in {len(traces)} "
        f"trace{'s' if len(traces) != 1 else ''}, {len(metrics.points)} metric points, "
        f"{len(spans.skipped) + len(metrics.skipped)} unreadable lines"
    )
    for name, n in sorted(counts.items()):
        lines.append(f"  {n:4d}  {name}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m rlsight.demo`` (``make demo``, ``rlsight demo``)."""
    parser = argparse.ArgumentParser(
        prog="python -m rlsight.demo", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--run-dir", type=Path, default=None, help="where to write the run")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="training steps to run")
    parser.add_argument(
        "--span-groups", default=",".join(DEFAULT_SPAN_GROUPS),
        help="span-group spec, comma-separated (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps {args.steps}: run at least one step")
    groups = [g.strip() for g in args.span_groups.split(",") if g.strip()]
    t0 = time.perf_counter()
    run_dir = run_demo(args.run_dir, steps=args.steps, span_groups=groups)
    print(f"demo finished in {time.perf_counter() - t0:.1f} s")
    print(_summarise(run_dir))
    try:
        from rlsight.cli import main as cli_main
    except ImportError:
        return 0
    print()
    return cli_main(["report", str(run_dir)])
