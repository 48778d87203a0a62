"""Check that instrumentation, declarations and docs agree (drift guards; never imports the code).

With no arguments, reads ``[tool.rlsight.check]`` from the nearest pyproject.toml: the paths
to read, the docs folder, excludes and which guards run. Exit codes: 0 no problems, 1
problems found, 2 unusable input (missing path or docs folder, a file that does not parse,
bad configuration).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlsight.commands._exit import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE

__all__ = ["add_arguments", "run"]


class _GuardsListed(argparse.HelpFormatter):
    """Help whose ``--guard`` line names every guard, read from :mod:`rlsight.check` only when
    the help is printed: importing that package to build the parser cost every ``rlsight``
    command ~12 ms."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if action.dest == "guards" and text:
            from rlsight.check.config import ALL_GUARDS

            text += f": {', '.join(ALL_GUARDS)}"
        return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``rlsight check``'s flags."""
    parser.add_argument(
        "paths", nargs="*", metavar="PATH",
        help="files or folders to check (default: `paths` from [tool.rlsight.check], else .)",
    )
    parser.add_argument("--docs", metavar="DIR", help="docs folder with the span tables (default: docs)")
    parser.add_argument("--json", action="store_true", help="print one JSON document (schema_version 1)")
    parser.formatter_class = _GuardsListed
    parser.add_argument(
        "--guard", action="append", metavar="NAME", dest="guards",
        help="run only this guard (repeatable)",
    )
    parser.add_argument(
        "--config", metavar="PYPROJECT", type=Path,
        help="read [tool.rlsight.check] from this file instead of the nearest pyproject.toml",
    )
    parser.add_argument(
        "--write-docs", "--fix", action="store_true", dest="write_docs",
        help="rewrite the docs' generated blocks from the live registries, then check",
    )


def run(args: argparse.Namespace) -> int:
    """Run the check; print the report to stdout, input errors to stderr."""
    from rlsight.check import CheckInputError, load_check_config, run_check

    try:
        config = load_check_config(pyproject=args.config).with_overrides(
            paths=args.paths or None, docs=args.docs, guards=args.guards
        )
        report = run_check(config, write_docs=args.write_docs)
    except CheckInputError as exc:
        print(f"rlsight check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for path in report.docs_written:
        print(f"rlsight check: rewrote generated blocks in {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.render())
    return EXIT_OK if report.ok else EXIT_PROBLEMS
