"""A short instrumented run: what rlsight records, end to end, in a few seconds.

This is the stand-in for the full demo (a real GRPO run on a local Ray cluster, tracked as
its own issue). It drives the same span vocabulary a trainer would (startup phases, steps,
generation, reward, logprob, training, refit, a buffer-starvation wait, a validation pass
under ``bucket_scope``), writes the local store, and prints what it wrote.
"""

from __future__ import annotations

import argparse
import collections
import random
import time
from collections.abc import Sequence
from pathlib import Path

from rlsight import (
    RL,
    Bucket,
    TelemetryConfig,
    bucket_scope,
    efficiency_span,
    job_span,
    setup_span,
    setup_telemetry,
    span,
    startup_span,
    step_span,
)

__all__ = ["main", "run_short_demo"]


def _work(seconds: float) -> None:
    """Stand-in for real work: sleep, so the demo is quick and timings are readable."""
    time.sleep(seconds)


def run_short_demo(run_dir: Path | None = None, *, steps: int = 4, seed: int = 0) -> Path:
    """Run a few instrumented steps in this process and return the run folder."""
    rng = random.Random(seed)
    config = TelemetryConfig(
        run_dir=str(run_dir) if run_dir is not None else None,
        span_groups=("per_step",),
        algorithm="grpo",
    )
    with setup_telemetry(config) as telemetry, job_span(steps=steps):
        with startup_span():
            with setup_span("ray"):
                _work(0.05)
            with setup_span("workers"):
                _work(0.08)
            with setup_span("initial_fill"):
                _work(0.03)
        for step in range(1, steps + 1):
            with step_span(step, prompts=8):
                with efficiency_span("idle/buffer_starvation"):
                    _work(0.01 + rng.random() * 0.02)
                with span(RL.GENERATION, "rl.rollout.generate", batch_size=8):
                    _work(0.06 + rng.random() * 0.02)
                with span(RL.REWARD, "rl.rollout.reward"):
                    _work(0.01)
                with span(RL.LOGPROB, "rl.logprob.reference"):
                    _work(0.015)
                with span(RL.TRAINING, "rl.train.policy", batch_size=8):
                    _work(0.05)
                    with span(RL.OPTIMIZER, "rl.train.optimizer_step"):
                        _work(0.01)
                with span(RL.REFIT, "rl.refit.push_weights"):
                    _work(0.012)
                if step % 2 == 0:
                    with bucket_scope(Bucket.OVERHEAD), span(RL.GENERATION, "rl.validate.generate"):
                        _work(0.02)
        out = telemetry.config.run_path
    return out


def _summarise(run_dir: Path) -> str:
    from rlsight.store import read_metrics, read_spans

    spans = read_spans(run_dir)
    metrics = read_metrics(run_dir)
    counts = collections.Counter(s.name for s in spans.spans)
    lines = [f"run folder: {run_dir}"]
    for path in sorted(run_dir.rglob("*")):
        if path.is_file():
            lines.append(f"  {path.relative_to(run_dir)}  ({path.stat().st_size} bytes)")
    lines.append(f"{len(spans.spans)} spans, {len(metrics.points)} metric points, "
                 f"{len(spans.skipped) + len(metrics.skipped)} unreadable lines")
    for name, n in sorted(counts.items()):
        lines.append(f"  {n:4d}  {name}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m rlsight.demo`` (``make demo``)."""
    parser = argparse.ArgumentParser(prog="python -m rlsight.demo", description=__doc__)
    parser.add_argument("--run-dir", type=Path, default=None, help="where to write the run")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    run_dir = run_short_demo(args.run_dir, steps=args.steps)
    print(_summarise(run_dir))
    try:
        from rlsight.cli import main as cli_main
    except ImportError:
        return 0
    print()
    return cli_main(["report", str(run_dir)])
