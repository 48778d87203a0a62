"""Run the instrumented example and print what it wrote (same as ``make demo``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Defaults stay with the demo (rlsight.demo.run): importing it here would import Ray and
    # numpy for every `rlsight --help`.
    parser.add_argument("--run-dir", type=Path, default=None, help="where to write the run")
    parser.add_argument("--steps", type=int, default=None, help="training steps to run (default 6)")
    parser.add_argument(
        "--span-groups", default=None,
        help="span-group spec, comma-separated (default per_step,per_prompt)",
    )


def run(args: argparse.Namespace) -> int:
    from rlsight.demo import main

    argv: list[str] = []
    if args.steps is not None:
        argv += ["--steps", str(args.steps)]
    if args.run_dir is not None:
        argv += ["--run-dir", str(args.run_dir)]
    if args.span_groups is not None:
        argv += ["--span-groups", args.span_groups]
    return main(argv)
