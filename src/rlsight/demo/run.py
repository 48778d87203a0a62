"""The driver: a GRPO run on a local Ray cluster, shaped like a real one, instrumented end to end.

``python -m rlsight.demo`` (``make demo``) runs, with the defaults, 20 steps of a few seconds
each on two cores:

* fleets with several ranks: generation workers (even ranks read in-process through their
  registry, odd ranks scraped over ``/metrics`` with ``EngineMetricsReader.from_url``),
  data-parallel policy ranks whose gradients are averaged, a reference worker, an HTTP
  environment service and checkpoints;
* ``--mode sync`` (generate -> score -> logprobs -> train -> refit) or ``--mode async``
  (a replay buffer filled ahead of the trainer, ``--max-staleness``, evictions,
  ``idle/buffer_starvation`` and ``idle/refit_bubble``);
* each phase costs what its work would on an LLM run (:mod:`rlsight.demo.costs`):
  generation time is tokens / ``--decode-tps``, training time follows the tokens trained, a
  weight push follows parameter bytes;
* faults on demand (``--inject``, :mod:`rlsight.demo.faults`);
* a progress line per step, then ``rlsight report`` for the run, with ``report.html`` and
  ``trace.json`` written into the run folder.

Started as ``python -m rlsight.demo`` or ``rlsight demo``, the Ray cluster it starts listens on
127.0.0.1 only (:mod:`rlsight.demo._loopback`; ``docs/demo.md`` lists every listener), and its
own servers (the environment, the scraped ``/metrics``) bind to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, TextIO

import numpy as np
import ray

from rlsight import (
    RlsightWarning,
    TelemetryConfig,
    job_span,
    last_step_summary,
    ray_runtime_env,
    setup_span,
    setup_telemetry,
    shutdown_telemetry,
    startup_span,
    step_span,
    tee_step_metrics,
)
from rlsight.demo import metrics as _metrics  # noqa: F401 - declares the metric group the tee records
from rlsight.demo._loopback import LOOPBACK_ENV
from rlsight.demo.controllers import AsyncController, Controller, SyncController
from rlsight.demo.costs import DEFAULT_DECODE_TPS, Costs
from rlsight.demo.faults import Faults, parse_faults
from rlsight.demo.fleet import Fleet
from rlsight.demo.policy import VOCAB
from rlsight.demo.prompts import PromptLoader
from rlsight.groups import ALL, registered_groups, registered_presets, resolve_span_group_spec

__all__ = ["DEFAULT_SPAN_GROUPS", "DEFAULT_STEPS", "DemoSettings", "main", "run_demo"]

DEFAULT_STEPS: Final = 20
#: ``per_prompt`` is on so the HTTP hop into the environment shows in the trace.
DEFAULT_SPAN_GROUPS: Final = ("per_step", "per_prompt")
#: The node IP of a loopback-only cluster.
_LOOPBACK: Final = "127.0.0.1"
#: Every start token, each sampled twice: the mean reward of sampled completions is a smooth
#: learning curve (a greedy one sits at 0 until the argmax flips).
_VALIDATION_PROMPTS: Final = np.arange(1, VOCAB, dtype=np.int64)
_VALIDATION_SAMPLES: Final = 2
#: Two batches per shard, read in 0.5 s: a trainer faster than that waits for prompts.
_SHARD_BATCHES: Final = 2
_SHARD_READ_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """Everything a demo run is made of; the command line fills it in.

    Attributes:
        steps: Training steps.
        mode: ``sync`` or ``async`` (see :mod:`rlsight.demo.controllers`).
        generation_workers: Generation fleet size (at least 2 for a scraped engine).
        policy_ranks: Data-parallel policy ranks.
        prompts_per_step: Prompts (GRPO groups) in one training batch.
        group_size: Completions per prompt.
        max_staleness: Async only: oldest weights version a group may be trained on.
        validate_every: Validate on step 1 and every this many steps.
        checkpoint_every: Checkpoint every this many steps (and on the last).
        lr: Adam's learning rate.
        costs: What each phase's work costs (:mod:`rlsight.demo.costs`).
        faults: Injected faults (:mod:`rlsight.demo.faults`).
        seed: Seeds the policy, sampling, prompts and injected failures.
    """

    steps: int = DEFAULT_STEPS
    mode: Literal["sync", "async"] = "sync"
    generation_workers: int = 3
    policy_ranks: int = 2
    prompts_per_step: int = 24
    group_size: int = 4
    max_staleness: int = 1
    validate_every: int = 5
    checkpoint_every: int = 10
    lr: float = 0.1
    costs: Costs = field(default_factory=Costs)
    faults: Faults = field(default_factory=Faults)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"demo steps={self.steps}: run at least one step")
        if self.generation_workers < 1 or self.policy_ranks < 1:
            raise ValueError("demo: at least one generation worker and one policy rank")
        if self.prompts_per_step < self.generation_workers:
            raise ValueError(
                f"demo: prompts_per_step={self.prompts_per_step} must be at least "
                f"generation_workers={self.generation_workers} (each worker gets a share)"
            )
        sizes = {"generation": self.generation_workers, "policy": self.policy_ranks}
        targets = [*self.faults.slowdown, *self.faults.hangs, *self.faults.kills]
        for group, rank in targets:
            if rank >= sizes[group]:
                raise ValueError(
                    f"--inject: {group}/{rank} does not exist ({group} has {sizes[group]} ranks)"
                )
        for group, rank in self.faults.kills:
            if group != "generation":
                raise ValueError(f"--inject kill={group}/{rank}: only generation workers can be killed")
        if len(self.faults.kills) >= self.generation_workers:
            raise ValueError("--inject kill: at least one generation worker must survive")
        for group, rank in self.faults.hangs:
            if group != "policy":
                raise ValueError(f"--inject hang={group}/{rank}: hangs happen inside training (policy ranks)")


def _config(run_dir: Path | None, span_groups: Sequence[str]) -> TelemetryConfig:
    config = TelemetryConfig(span_groups=tuple(span_groups), algorithm="grpo")
    # Absolute, so every worker writes into this folder whatever its working directory.
    path = (run_dir if run_dir is not None else config.run_path).resolve()
    return dataclasses.replace(config, run_dir=str(path))


def _start_ray(config: TelemetryConfig) -> bool:
    """Start a local cluster whose workers set up rlsight; False when Ray already runs.

    It listens on 127.0.0.1 only when Ray was imported with its single-machine switch set
    (:mod:`rlsight.demo._loopback`; the demo's entry points set it); otherwise a warning says
    that the cluster listens on every interface and how to avoid it.
    """
    if ray.is_initialized():
        return False
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level=logging.ERROR,
        runtime_env=ray_runtime_env(config),
    )
    node_ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    if node_ip != _LOOPBACK:
        warnings.warn(
            f"rlsight demo: the Ray cluster listens on {node_ip} and every interface; set "
            f"{LOOPBACK_ENV}=0 before Ray is imported (python -m rlsight.demo does) for a "
            "cluster on 127.0.0.1 only",
            RlsightWarning,
            stacklevel=3,
        )
    return True


@dataclass
class _Progress:
    """The numbers behind the per-step progress line.

    Goodput comes from :func:`rlsight.last_step_summary`, the driver's online roll-up of each
    step by the report's own rule, so the line and ``rlsight report`` agree on every step.
    """

    steps: int
    started: float = field(default_factory=time.perf_counter)
    productive_s: float = 0.0

    def line(self, step: int, wall_s: float, scalars: dict[str, float]) -> str:
        summary = last_step_summary()
        text = (
            f"step {step:>3}/{self.steps}  {wall_s:5.2f} s/step  "
            f"reward {scalars['rollout/reward_mean']:.3f}  "
        )
        if summary.get("rlsight/step") == step:
            self.productive_s += summary["rlsight/productive_s"]
            elapsed = time.perf_counter() - self.started
            text += (f"goodput {summary['rlsight/goodput_pct'] / 100:4.0%} "
                     f"(so far {self.productive_s / elapsed:4.0%})")
            starved = summary.get("rlsight/idle/buffer_starvation_s")
            if starved is not None and starved >= 0.005:  # async: the trainer waited on data
                text += f"  starved {starved:.2f}s"
        else:  # telemetry off, or the step group disabled: no roll-up to quote
            text += "goodput —"
        if "val/reward_mean" in scalars:
            text += f"  validation reward {scalars['val/reward_mean']:.3f}"
        if scalars.get("buffer/evicted_groups"):
            text += f"  evicted {scalars['buffer/evicted_groups']:.0f} stale groups"
        return text


def _run_step(
    step: int, settings: DemoSettings, fleet: Fleet, controller: Controller, run_dir: Path,
) -> dict[str, float]:
    """One GRPO step; returns the step's logged scalars."""
    for (_, rank), at in settings.faults.kills.items():
        if at == step:
            fleet.kill_generation(rank)
    result = controller.rollout(step)
    scalars = fleet.train(step, result.rollout, result.rewards, settings.group_size)
    scalars["rollout/reward_mean"] = float(result.rewards.mean())
    scalars["rollout/generated_tokens"] = float(result.rollout.lengths.sum())
    scalars["reward/env_failures"] = float(result.env_failures)
    if settings.mode == "async":
        scalars["buffer/evicted_groups"] = float(result.evicted_groups)
        scalars["buffer/staleness"] = result.staleness

    def while_paused() -> None:
        # Validation and checkpoints run while no rollout is in flight.
        if step == settings.steps or step % settings.checkpoint_every == 0:
            fleet.save_checkpoint(run_dir, step)
        if step == 1 or step == settings.steps or step % settings.validate_every == 0:
            reward, tokens = fleet.validate(_VALIDATION_PROMPTS, _VALIDATION_SAMPLES)
            scalars["val/reward_mean"] = reward
            scalars["val/generated_tokens"] = float(tokens)
        fleet.record_engines(step)

    controller.refit(while_paused)
    return scalars


def run_demo(
    run_dir: Path | None = None,
    *,
    settings: DemoSettings | None = None,
    span_groups: Sequence[str] = DEFAULT_SPAN_GROUPS,
    steps: int | None = None,
    seed: int | None = None,
    out: TextIO | None = None,
) -> Path:
    """Run the instrumented GRPO demo and return its run folder.

    Starts a local Ray cluster (2 CPUs, on 127.0.0.1) unless Ray is already initialised in
    this process; then it uses that cluster, leaves it running, and only ends the actors it
    created. That cluster must have been started with
    ``runtime_env=rlsight.ray_runtime_env(...)`` (any config): its setup hook is what gives
    worker processes telemetry, and the demo points them at its own run through each
    actor's env vars.

    Args:
        run_dir: Where to write the run; default ``./rlsight-runs/<run_id>``.
        settings: The run's shape, costs and faults (default :class:`DemoSettings`).
        span_groups: The span-group spec (drop ``per_prompt`` to see per-step volume only).
        steps: Overrides ``settings.steps``.
        seed: Overrides ``settings.seed``.
        out: Where progress lines go (a file object; default stdout).

    Raises:
        ValueError: the settings are inconsistent (the message names the setting).
    """
    settings = settings or DemoSettings()
    if steps is not None:
        settings = dataclasses.replace(settings, steps=steps)
    if seed is not None:
        settings = dataclasses.replace(settings, seed=seed)
    stream = out if out is not None else sys.stdout
    config = _config(run_dir, span_groups)
    setup_telemetry(config)
    started_ray = False
    fleet: Fleet | None = None
    controller: Controller | None = None
    loader = PromptLoader(
        prompts_per_step=settings.prompts_per_step, shard_batches=_SHARD_BATCHES,
        shard_read_s=_SHARD_READ_S, seed=settings.seed,
    )
    progress = _Progress(settings.steps)
    try:
        with job_span(total_steps=settings.steps, mode=settings.mode,
                      prompts_per_step=settings.prompts_per_step, group_size=settings.group_size):
            with startup_span():
                with setup_span("ray"):
                    started_ray = _start_ray(config)
                with setup_span("workers"):
                    fleet = Fleet.start(
                        config, generation_workers=settings.generation_workers,
                        policy_ranks=settings.policy_ranks, costs=settings.costs,
                        faults=settings.faults, seed=settings.seed,
                    )
                    fleet.load_models(settings.seed, settings.lr)
                with setup_span("initial_fill"):
                    loader.start()
                    loader.wait_until_ready()
                    if settings.mode == "sync":
                        controller = SyncController(fleet, loader, settings.group_size)
                    else:
                        controller = AsyncController(
                            fleet, loader, group_size=settings.group_size,
                            prompts_per_step=settings.prompts_per_step,
                            max_staleness=settings.max_staleness,
                        )
            for step in range(1, settings.steps + 1):
                t0 = time.perf_counter()
                with step_span(step, prompts=settings.prompts_per_step):
                    scalars = _run_step(step, settings, fleet, controller, config.run_path)
                wall_s = time.perf_counter() - t0
                tee_step_metrics(step, scalars, denominator_s=wall_s)
                print(progress.line(step, wall_s, scalars), file=stream, flush=True)
    finally:
        loader.stop()
        try:
            if controller is not None:
                controller.close()
        finally:
            try:
                if fleet is not None:
                    fleet.stop()
            finally:
                shutdown_telemetry()
                if started_ray:
                    ray.shutdown()
    return config.run_path


def _decode_rates(text: str | None) -> tuple[float, ...]:
    if text is None:
        return (DEFAULT_DECODE_TPS,)
    try:
        rates = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--decode-tps {text!r}: expected tokens/s, one number or one per worker") from None
    if not all(0 < r < float("inf") for r in rates):
        raise ValueError(f"--decode-tps {text!r}: every rate must be a number of tokens/s > 0")
    return rates


def build_parser(prog: str = "python -m rlsight.demo") -> argparse.ArgumentParser:
    """The demo's command line (``rlsight demo`` forwards to it, under its own name)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = DemoSettings()
    parser.add_argument("--run-dir", type=Path, default=None, help="where to write the run")
    parser.add_argument("--steps", type=int, default=d.steps, help="training steps (default %(default)s)")
    parser.add_argument("--mode", choices=("sync", "async"), default=d.mode,
                        help="controller (default %(default)s)")
    parser.add_argument("--generation-workers", type=int, default=d.generation_workers,
                        help="generation fleet size (default %(default)s)")
    parser.add_argument("--policy-ranks", type=int, default=d.policy_ranks,
                        help="data-parallel policy ranks (default %(default)s)")
    parser.add_argument("--max-staleness", type=int, default=d.max_staleness,
                        help="async: oldest weights version a group may train on (default %(default)s)")
    parser.add_argument("--decode-tps", default=None,
                        help=f"tokens/s each generation worker decodes: one number, or one per "
                             f"worker comma-separated (default {DEFAULT_DECODE_TPS:g})")
    parser.add_argument("--inject", action="append", default=[], metavar="FAULT",
                        help="straggler=generation/1:2.5, hang=policy/1@5:20, kill=generation/1@6, "
                             "env-errors=0.1 (repeatable)")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed (default %(default)s)")
    parser.add_argument(
        "--span-groups", default=",".join(DEFAULT_SPAN_GROUPS),
        help="span-group spec, comma-separated (default %(default)s)",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m rlsight.demo") -> int:
    """Entry point of ``python -m rlsight.demo`` (``make demo``, ``rlsight demo``).

    ``prog`` is the name errors are prefixed with: the command the user typed.
    """
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        settings = DemoSettings(
            steps=args.steps, mode=args.mode, generation_workers=args.generation_workers,
            policy_ranks=args.policy_ranks, max_staleness=args.max_staleness,
            costs=Costs(decode_tps=_decode_rates(args.decode_tps)),
            faults=parse_faults(args.inject), seed=args.seed,
        )
    except ValueError as exc:
        parser.error(str(exc))
    groups = [g.strip() for g in args.span_groups.split(",") if g.strip()]
    # Every group the demo emits is registered by now, so a name nothing owns is a typo: left
    # pending, the run would record nothing and fail only at its report.
    unknown = resolve_span_group_spec(groups).pending
    if unknown:
        known = sorted({*registered_groups(), *registered_presets(), ALL})
        guesses = [difflib.get_close_matches(name, known, n=1, cutoff=0.6) for name in unknown]
        parser.error("--span-groups: " + "; ".join(
            f"{name!r} names no span group, preset or namespace"
            + (f" (did you mean {guess[0]!r}?)" if guess else "")
            for name, guess in zip(unknown, guesses, strict=True)
        ) + f"; groups and presets: {', '.join(known)}")
    print(f"rlsight demo: {settings.mode}, {settings.steps} steps, "
          f"{settings.generation_workers} generation workers, {settings.policy_ranks} policy ranks"
          + "".join(f"; {f}" for f in settings.faults.describe()), flush=True)
    t0 = time.perf_counter()
    run_dir = run_demo(args.run_dir, settings=settings, span_groups=groups)
    print(f"demo finished in {time.perf_counter() - t0:.1f} s; run folder {run_dir}", flush=True)
    try:
        from rlsight.cli import main as cli_main
    except ImportError:
        return 0
    html, trace = run_dir / "report.html", run_dir / "trace.json"
    print()
    code = cli_main(["report", str(run_dir), "--html", str(html)])
    timeline = cli_main(["timeline", str(run_dir), "-o", str(trace)])
    print(f"\nreport.html: {html}\ntrace.json:  {trace} (open in ui.perfetto.dev)")
    return code or timeline
