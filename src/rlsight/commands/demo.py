"""Run the instrumented example and print what it wrote (same as ``make demo``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlsight.commands._exit import EXIT_USAGE
from rlsight.commands._extras import missing_extra

# Defaults stay with the demo (rlsight.demo.run.DemoSettings): importing it here would import
# Ray and numpy for every `rlsight --help`. Flags given are forwarded as written.
_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("--steps", int, "training steps (default 20)"),
    ("--mode", str, "sync or async (default sync)"),
    ("--generation-workers", int, "generation fleet size (default 3)"),
    ("--policy-ranks", int, "data-parallel policy ranks (default 2)"),
    ("--max-staleness", int, "async: oldest weights version a group may train on (default 1)"),
    ("--decode-tps", str, "tokens/s per generation worker, one number or one per worker (default 100)"),
    ("--seed", int, "seed (default 0)"),
    ("--span-groups", str, "span-group spec, comma-separated (default per_step,per_prompt)"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", type=Path, default=None, help="where to write the run")
    for flag, kind, text in _FLAGS:
        parser.add_argument(flag, type=kind, default=None, help=text)
    parser.add_argument("--inject", action="append", default=None, metavar="FAULT",
                        help="straggler=generation/1:2.5, hang=policy/1@5:20, kill=generation/1@6, "
                             "env-errors=0.1 (repeatable)")


def run(args: argparse.Namespace) -> int:
    if missing_extra("demo", "ray", "aiohttp", "prometheus_client", "numpy", "orjson", "rich",
                     extra="demo"):
        return EXIT_USAGE
    from rlsight.demo import main

    argv: list[str] = []
    if args.run_dir is not None:
        argv += ["--run-dir", str(args.run_dir)]
    for flag, _, _ in _FLAGS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            argv += [flag, str(value)]
    for fault in args.inject or ():
        argv += ["--inject", fault]
    try:
        return main(argv, prog="rlsight demo")
    except SystemExit as exc:  # the demo's own parser rejected a value: a usage error, exit 2
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
