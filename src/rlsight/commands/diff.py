"""Compare two runs: per bucket, span name, startup phase and fleet, B against A.

RUN_A and RUN_B are run folders, saved ``rlsight report --json`` documents, or the output
of a Collector's file exporter holding one run. Every change
is B minus A. ``--fail-if-slower PCT`` makes a CI gate: exit 1 when B's median step is more
than PCT percent slower than A's, or when B did not finish (it failed, or a step never ended).
Exit codes: 0 ok; 1 B slower than ``--fail-if-slower`` allows, or unfinished; 2 usage error
(Collector files holding several runs included); 3 a run missing, unreadable, holding no spans,
or (with ``--fail-if-slower``) without steps to compare.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rlsight.commands._exit import EXIT_INPUT, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from rlsight.commands._extras import missing_extra
from rlsight.commands._numbers import number
from rlsight.commands._outputs import unusable_output, write_outputs

if TYPE_CHECKING:
    from rich.console import Console

    from rlsight.analysis import RunReport

__all__ = ["add_arguments", "run"]


def _percentage(text: str) -> float:
    value = number(text, "a number; pass a percentage like 10")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; pass how many percent slower B may be")
    if not value < math.inf:  # NaN or infinity: no change could ever fail the gate
        raise argparse.ArgumentTypeError(f"{value} is not a finite number; pass how many percent "
                                         "slower B may be, like 10")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``rlsight diff``'s flags."""
    parser.add_argument("run_a", metavar="RUN_A", type=Path,
                        help="the baseline: a run folder or a `rlsight report --json` file")
    parser.add_argument("run_b", metavar="RUN_B", type=Path,
                        help="the run compared with it (folder or report JSON)")
    parser.add_argument("--json", action="store_true",
                        help="print the diff as one JSON document (schema in docs/diff.md)")
    parser.add_argument("--html", metavar="FILE", type=Path,
                        help="also write the diff as a self-contained HTML page to FILE")
    parser.add_argument("--fail-if-slower", metavar="PCT", type=_percentage,
                        help="exit 1 when B's median step is more than PCT%% slower than A's")


class _InputError(Exception):
    """A run that cannot be read; the message names it and the fix."""


class _UsageError(_InputError):
    """Collector files holding several runs: a usage error (exit 2), as for `rlsight report`."""


def _load_report(path: Path) -> RunReport:
    """The report of ``path``: a saved ``--json`` report, a run folder, or Collector output.

    Raises:
        _InputError: nothing usable at ``path``.
    """
    from rlsight.analysis import analyze_run
    from rlsight.commands._source import AmbiguousRunError, annotate, open_run, saved_report
    from rlsight.errors import StoreError

    if not path.exists():
        raise _InputError(f"no run folder or report file at {path}; pass a folder a run wrote "
                          "or a file saved with `rlsight report RUN_DIR --json > FILE`")
    try:
        saved = saved_report(path)
    except StoreError as exc:
        raise _InputError(str(exc)) from exc
    if saved is not None:
        return saved
    try:
        with open_run(path) as source:
            return annotate(analyze_run(source.folder), source)
    except AmbiguousRunError as exc:
        raise _UsageError(f"{exc} (to compare one run of several, save its report with "
                          "`rlsight report PATH --run-id ID --json > FILE`)") from exc
    except StoreError as exc:
        raise _InputError(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    """Compare the two runs and print (or write) the diff; return the exit code."""
    if missing_extra("diff", "numpy", "orjson", "rich"):
        return EXIT_USAGE
    from rlsight.analysis.diff import diff_reports

    if args.html is not None and unusable_output("diff", "--html", args.html, "diff.html"):
        return EXIT_USAGE
    try:
        a, b = _load_report(args.run_a), _load_report(args.run_b)
    except _InputError as exc:
        print(f"rlsight diff: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, _UsageError) else EXIT_INPUT
    diff = diff_reports(a, b)
    def terminal(console: Console) -> None:
        from rlsight.render.diff import render_diff

        render_diff(diff, console)

    def page() -> str:
        from rlsight.render.diff import render_diff_html

        return render_diff_html(diff)

    write_outputs("diff", as_json=args.json, document=diff.to_dict, terminal=terminal,
                  html=args.html, page=page)
    if args.fail_if_slower is not None:
        if diff.b.unfinished is not None:
            # A run that hung or failed has short medians over the steps that did end: it read
            # 77% faster than a healthy one and passed the gate.
            print(f"rlsight diff: B did not finish: {diff.b.unfinished}; --fail-if-slower "
                  "compares finished runs", file=sys.stderr)
            return EXIT_PROBLEMS
        if diff.step_change_pct is None:
            print("rlsight diff: --fail-if-slower needs rl.step spans in both runs; "
                  "enable the 'step' span group (it is in every preset)", file=sys.stderr)
            return EXIT_INPUT
        if diff.step_change_pct > args.fail_if_slower:
            print(f"rlsight diff: B's median step is {diff.step_change_pct:.1f}% slower than A's, "
                  f"more than --fail-if-slower {args.fail_if_slower:g}%", file=sys.stderr)
            return EXIT_PROBLEMS
    return EXIT_OK
