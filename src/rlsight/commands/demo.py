"""Run the instrumented example and print what it wrote (same as ``make demo``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", type=Path, default=None, help="where to write the run")
    parser.add_argument("--steps", type=int, default=4, help="training steps to run")


def run(args: argparse.Namespace) -> int:
    from rlsight.demo import main

    argv = ["--steps", str(args.steps)]
    if args.run_dir is not None:
        argv += ["--run-dir", str(args.run_dir)]
    return main(argv)
