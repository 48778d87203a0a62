"""What telemetry costs a real training step, as a share of the step's time (issue #16).

The step is the demo's GRPO step (``rlsight.demo``) with its work run in this process: the
same numpy policy, sampling, per-prompt scoring, reference log-probs, gradient and optimizer
step, refit copy and checkpoint write, under the same spans the demo's driver and workers
open (the driver's phase spans, the workers' own spans, a per-prompt span per scoring
request inside ``per_prompt_scope``), plus ``tee_step_metrics``. Ray's round trips and the
prompt loader's sleep are left out: they add wall time but no spans, so the share measured
here is an upper bound on what the demo's step pays.

Three variants run interleaved, steps alternating, in one process: telemetry off (never set
up), ``per_step`` and ``per_step,per_prompt`` with the local store and the driver's step
roll-up. The table prints median step times (the training thread's CPU time) and what each
preset adds per step, as a share of that compute-only step (a toy model's step lasts about a
millisecond, so this share is an upper bound no real step reaches) and of the same step paced
by the demo's prompt loader, as the demo's driver runs it (targets: <= 1% with ``per_step``,
<= 3% with ``per_prompt`` too).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
from _harness import emit_json, parse_args

import rlsight
from rlsight import (
    RL,
    TelemetryConfig,
    efficiency_span,
    per_prompt_scope,
    span,
    step_span,
    tee_step_metrics,
    umbrella_span,
)
from rlsight.demo.policy import (
    Adam,
    count_up_reward,
    group_advantages,
    init_weights,
    policy_gradient,
    sample,
    token_logprobs,
)
from rlsight.demo.prompts import PromptLoader

PROMPTS, GROUP = 8, 4  # the demo's _PROMPTS_PER_STEP and _GROUP_SIZE


class _Demo:
    """The demo's model state, held in one process."""

    def __init__(self, run_dir: Path) -> None:
        self.weights = init_weights(0)
        self.reference = self.weights.copy()
        self.gen_weights = self.weights.copy()
        self.optimizer = Adam(self.weights.shape)
        self.rng = np.random.default_rng(0)
        self.run_dir = run_dir

    def step(self, step: int, loader: PromptLoader | None = None) -> None:
        t0 = time.perf_counter()
        with step_span(step, prompts=PROMPTS):
            with efficiency_span("idle/buffer_starvation"):
                prompts = (self.rng.integers(1, 16, size=PROMPTS) if loader is None
                           else loader.next_batch())
            with umbrella_span(RL.ROLLOUT, "rl.rollout", prompts=PROMPTS):
                with span(RL.GENERATION, "rl.rollout.generate", batch_size=PROMPTS * GROUP):
                    with span(RL.GENERATION, "rl.generation.sample", sequences=PROMPTS * GROUP):
                        rollout = sample(self.gen_weights, np.repeat(prompts, GROUP), self.rng)
                with span(RL.REWARD, "rl.rollout.reward"):
                    with span(RL.REWARD, "rl.reward.score", sequences=len(rollout.prompts)):
                        rewards = []
                        for i in range(0, len(rollout.prompts), GROUP):
                            prompt = int(rollout.prompts[i])
                            with per_prompt_scope(), span(RL.REWARD, "rl.reward.env_request",
                                                          concurrent=True):
                                with span(RL.REWARD, "rl.env.score", completions=GROUP):
                                    rewards += [count_up_reward(prompt, c) for c in
                                                rollout.tokens[i:i + GROUP].tolist()]
                    advantages = group_advantages(np.asarray(rewards, dtype=np.float64), GROUP)
            with span(RL.DATA_PLANE, "rl.data_plane.put"):
                batch = {"rollout": rollout, "advantages": advantages}
            with span(RL.LOGPROB, "rl.logprob.reference"):
                with span(RL.DATA_PLANE, "rl.data_plane.get"):
                    rollout = batch["rollout"]
                with span(RL.LOGPROB, "rl.logprob.compute", sequences=len(rollout.prompts)):
                    ref = token_logprobs(self.reference, rollout)
            with span(RL.TRAINING, "rl.train.policy", batch_size=len(rollout.prompts)):
                with span(RL.TRAINING, "rl.train.forward_backward", sequences=len(rollout.prompts)):
                    grad, stats = policy_gradient(self.weights, rollout, advantages, ref)
                with span(RL.OPTIMIZER, "rl.train.optimizer_step"):
                    self.weights = self.optimizer.step(self.weights, grad)
            with span(RL.REFIT, "rl.refit.push_weights"):
                with span(RL.REFIT, "rl.refit.export_weights"):
                    exported = self.weights.copy()
                with span(RL.REFIT, "rl.refit.load_weights"):
                    self.gen_weights = np.array(exported, copy=True)
            if step % 3 == 0:
                with span(RL.CHECKPOINT, "rl.checkpoint.save"), \
                        span(RL.CHECKPOINT, "rl.checkpoint.write"):
                    with (self.run_dir / "ckpt.npz").open("wb") as out:
                        np.savez(out, weights=self.weights, adam_m=self.optimizer.m)
        scalars = {"train/loss": stats.loss, "train/kl": stats.kl,
                   "rollout/reward_mean": float(np.mean(rewards))}
        tee_step_metrics(step, scalars, denominator_s=time.perf_counter() - t0)


def _timed(groups: tuple[str, ...] | None, steps: int, step0: int) -> float:
    """Median CPU seconds of the training thread per step with ``groups`` on (``None``: off).

    The thread's CPU clock, not wall time: on a shared machine other processes' time would
    swamp a difference of milliseconds. The store's writer thread is not counted; it runs
    beside the step (on another core where there is one).
    """
    run_dir = Path(tempfile.mkdtemp(prefix="rlsight-bench-step-"))
    if groups is not None:
        rlsight.setup_telemetry(TelemetryConfig(run_dir=str(run_dir), span_groups=list(groups)))
    try:
        demo = _Demo(run_dir)
        demo.step(step0)  # warm: first-call imports and allocations
        times = []
        for i in range(1, steps + 1):
            t0 = time.thread_time()
            demo.step(step0 + i)
            times.append(time.thread_time() - t0)
        return statistics.median(times)
    finally:
        if groups is not None:
            rlsight.shutdown_telemetry()


def _paced_step_s(steps: int) -> float:
    """Mean seconds of the step, telemetry off, fed by the demo's prompt loader.

    The loader reads a shard of two batches in 0.5 s, as in the demo, so every other step
    waits for it: the step's wall time as the demo's driver sees it, Ray aside.
    """
    loader = PromptLoader(prompts_per_step=PROMPTS, shard_batches=2, shard_read_s=0.5, seed=0)
    loader.start()
    loader.wait_until_ready()
    try:
        demo = _Demo(Path(tempfile.mkdtemp(prefix="rlsight-bench-step-")))
        t0 = time.perf_counter()
        for i in range(1, steps + 1):
            demo.step(i, loader)
        return (time.perf_counter() - t0) / steps
    finally:
        loader.stop()


def main() -> None:
    args = parse_args()
    rounds, steps = (3, 10) if args.quick else (9, 30)
    variants: dict[str, Callable[[int], float]] = {
        "telemetry off": lambda s0: _timed(None, steps, s0),
        "per_step": lambda s0: _timed(("per_step",), steps, s0),
        "per_step,per_prompt": lambda s0: _timed(("per_step", "per_prompt"), steps, s0),
    }
    names = list(variants)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % 3:] + names[:r % 3]:
            samples[name].append(variants[name](1 + r * (steps + 1)))
    paced = _paced_step_s(4 if args.quick else 8)
    med = {n: statistics.median(v) for n, v in samples.items()}
    off = med["telemetry off"]
    print("## the demo's step in one process, compute only: telemetry off vs on "
          "(median CPU of the training thread)")
    for name in names:
        print(f"  {name:40s} {med[name] * 1e3:9.3f} ms/step")
    print(f"  the same step paced by the demo's loader  {paced * 1e3:9.3f} ms/step (mean, off)")
    shares: dict[str, dict[str, float]] = {}
    for name, target in (("per_step", 1.0), ("per_step,per_prompt", 3.0)):
        added = med[name] - off
        shares[name] = {"added_ms": added * 1e3, "pct_of_compute_step": added / off * 100,
                        "pct_of_paced_step": added / paced * 100}
        print(f"  {name}: +{added * 1e3:.3f} ms/step = {added / off * 100:+.1f} % of the "
              f"compute-only step, {added / paced * 100:+.2f} % of the paced step "
              f"(target <= {target:g} %)")
    if args.json:
        emit_json({"title": "telemetry cost in the demo's step", "step_s": med,
                   "paced_step_s": paced, "overhead": shares})


if __name__ == "__main__":
    main()
