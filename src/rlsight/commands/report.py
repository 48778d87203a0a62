"""Where did the time go: goodput per step and run, startup, fleets, stragglers, volume.

Reads RUN_DIR (a run's store: traces/*.jsonl, metrics/*.jsonl, manifest.json, or the file or
folder an OpenTelemetry Collector's file exporter wrote, one run picked with ``--run-id``) and
prints the report; ``--json`` prints one document (schema in docs/cli.md), ``--html FILE`` writes a
self-contained page. Exit codes: 0 ok; 1 goodput below ``--fail-under``; 2 usage error
(also Collector files holding several runs and no ``--run-id``); 3 RUN_DIR missing or holding
no spans.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rlsight.commands._exit import EXIT_INPUT, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from rlsight.commands._extras import missing_extra
from rlsight.commands._numbers import number
from rlsight.commands._outputs import unusable_output, write_outputs

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["add_arguments", "run"]


def _percentage(text: str) -> float:
    value = number(text, "a number; pass a percentage like 55")
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{value} is not a percentage between 0 and 100")
    return value


def _positive(text: str) -> float:
    value = number(text, "a number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} must be > 0 (a number of MADs, default 3)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``rlsight report``'s flags."""
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                        help="the run folder to read, or a Collector file exporter's file or folder")
    parser.add_argument("--run-id", metavar="ID",
                        help="the run to read from Collector files that hold several runs")
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON document (schema in docs/cli.md)")
    parser.add_argument("--html", metavar="FILE", type=Path,
                        help="also write a self-contained HTML report to FILE")
    parser.add_argument("--fail-under", metavar="GOODPUT_PCT", type=_percentage,
                        help="exit 1 when the run's goodput is below this percentage")
    parser.add_argument("--straggler-mads", metavar="K", type=_positive, default=3.0,
                        help="a rank is a straggler beyond median + K MADs (default 3)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr while the run is read, only on a terminal."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    with Progress(TextColumn("reading spans"), BarColumn(), DownloadColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("read", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def run(args: argparse.Namespace) -> int:
    """Analyse the run and print (or write) the report; return the exit code."""
    if missing_extra("report", "numpy", "orjson", "rich"):
        return EXIT_USAGE
    if args.html is not None and unusable_output("report", "--html", args.html, "report.html"):
        return EXIT_USAGE
    if args.run_dir.is_dir():
        from rlsight._spare_worker import prestart

        prestart(args.run_dir)  # a worker's imports run alongside the ones below
    from rlsight.analysis import analyze_run
    from rlsight.commands._memory import avoid_huge_pages, reuse_freed_memory
    from rlsight.commands._source import AmbiguousRunError, annotate, open_run
    from rlsight.errors import StoreError

    run_dir: Path = args.run_dir
    if not run_dir.exists():
        print(f"rlsight report: no run folder at {run_dir}; pass a folder a run wrote "
              "(`rlsight runs` lists ./rlsight-runs)", file=sys.stderr)
        return EXIT_INPUT
    reuse_freed_memory()
    avoid_huge_pages()
    try:
        with open_run(run_dir, args.run_id) as source, \
                _progress(sys.stderr.isatty() and not args.quiet) as progress:
            report = annotate(analyze_run(source.folder, k=args.straggler_mads, progress=progress),
                              source)
    except AmbiguousRunError as exc:
        print(f"rlsight report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:
        print(f"rlsight report: {exc}", file=sys.stderr)
        return EXIT_INPUT
    def terminal(console: Console) -> None:
        from rlsight.render.table import render_report

        render_report(report, console)

    def page() -> str:
        from rlsight.render.html import render_html

        return render_html(report)

    write_outputs("report", as_json=args.json, document=report.to_dict, terminal=terminal,
                  html=args.html, page=page)
    if report.summary.skipped:
        from rlsight.render._format import terminal_safe

        print(f"rlsight report: skipped {report.summary.skipped} unreadable record(s); "
              f"first: {terminal_safe(str(report.summary.skipped_examples[0]))}", file=sys.stderr)
    if args.fail_under is not None and report.summary.goodput_pct < args.fail_under:
        print(f"rlsight report: goodput {report.summary.goodput_pct:.1f}% is below "
              f"--fail-under {args.fail_under:g}%", file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK
