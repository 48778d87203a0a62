"""Write a run as Chrome trace-event JSON for ui.perfetto.dev (one track per rank, flows).

Open the file at https://ui.perfetto.dev (or chrome://tracing): one process track per worker
group and rank, one thread track per timeline, an arrow from each span to its children in
other processes, and each slice's bucket and attributes in its args. ``--steps A:B`` keeps
the spans that overlap those steps and ``--max-spans`` caps what is written (the earliest
spans), so a large run still opens in Perfetto. Exit codes: 0 written; 2 usage error (OUTPUT
is a folder, Collector files holding several runs and no ``--run-id``, no step in
``--steps``); 3 RUN_DIR missing or holding no spans (a run none of whose spans ended yet
has its open spans drawn).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from rlsight.commands._exit import EXIT_INPUT, EXIT_OK, EXIT_USAGE
from rlsight.commands._extras import missing_extra
from rlsight.commands._outputs import unusable_output

__all__ = ["MAX_SPANS", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``rlsight timeline``'s flags."""
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                        help="the run folder to read, or a Collector file exporter's file or folder")
    parser.add_argument("--run-id", metavar="ID",
                        help="the run to read from Collector files that hold several runs")
    parser.add_argument("-o", "--output", metavar="FILE", type=Path, default=Path("trace.json"),
                        help="where to write the trace (default ./trace.json)")
    parser.add_argument("--steps", metavar="A:B", type=_step_range,
                        help="only the spans that overlap steps A to B (inclusive; 'A:' from A "
                             "on, ':B' up to B, 'N' one step)")
    parser.add_argument("--max-spans", metavar="N", type=_positive, default=MAX_SPANS,
                        help=f"write at most N spans, the earliest (default {MAX_SPANS:,}: "
                             "Perfetto stays responsive); use --steps to pick another window")


#: Spans written by default: Perfetto's page handles about this many slices comfortably.
MAX_SPANS: Final = 200_000


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _step_range(text: str) -> tuple[int | None, int | None]:
    """``"A:B"``, ``"A:"``, ``":B"`` or ``"N"`` as (first, last), either open (None)."""
    first, sep, last = text.partition(":")
    try:
        lo = int(first) if first.strip() else None
        hi = int(last) if last.strip() else None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--steps {text!r}: expected A:B, A:, :B or N with whole step numbers") from None
    if not sep:
        hi = lo
    if lo is not None and hi is not None and hi < lo:
        raise argparse.ArgumentTypeError(f"--steps {text!r}: the last step is before the first")
    return lo, hi


def run(args: argparse.Namespace) -> int:
    """Read the run's spans and write the trace-event file."""
    if missing_extra("timeline", "numpy", "orjson"):
        return EXIT_USAGE
    from rlsight.analysis._read import read_span_columns
    from rlsight.analysis.window import NoStepInRange, window_spans
    from rlsight.commands._memory import reuse_freed_memory
    from rlsight.commands._source import AmbiguousRunError, open_run
    from rlsight.errors import StoreError
    from rlsight.render._format import terminal_safe
    from rlsight.render.perfetto import write_chrome_trace

    output: Path = args.output
    if unusable_output("timeline", "-o", output, "trace.json"):
        return EXIT_USAGE
    reuse_freed_memory()
    try:
        with open_run(args.run_dir, args.run_id) as source:
            cols, read_skipped, _ = read_span_columns(source.folder)
            window = window_spans(source.folder, steps=args.steps, max_spans=args.max_spans,
                                  columns=(cols, read_skipped))
            opened, left_out = _open_spans(source.folder, cols, window, args.steps, args.max_spans)
    except AmbiguousRunError as exc:
        print(f"rlsight timeline: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:
        print(f"rlsight timeline: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except NoStepInRange as exc:
        fix = (f"the run's steps are numbered {exc.numbered[0]} to {exc.numbered[1]}"
               if exc.numbered else "the run has no numbered rl.step span: drop --steps")
        print(f"rlsight timeline: no rl.step span numbered within --steps "
              f"{_describe_range(args.steps)} in {args.run_dir}; {fix}", file=sys.stderr)
        return EXIT_USAGE
    skipped = [*source.skipped, *window.skipped]
    if not window.total and not opened:
        print(f"rlsight timeline: no spans in {args.run_dir / 'traces'}; is this a run folder, "
              "and did the run enable telemetry?", file=sys.stderr)
        return EXIT_INPUT
    if not window.total:
        # A run hung (or killed) before its first span ended: its open spans are the trace.
        print(f"rlsight timeline: no span of {args.run_dir} has ended; drawing the "
              f"{len(opened)} that started (the run was killed, or still runs); `rlsight watch "
              f"{args.run_dir}` shows where each process is", file=sys.stderr)
    if window.cut_at_ns is not None:
        # Perfetto's time axis starts at the first span written (render.perfetto's origin).
        axis_s = (window.cut_at_ns - min(s.start_ns for s in window.spans)) / 1e9
        print(f"rlsight timeline: wrote the first {args.max_spans:,} spans only (those starting "
              f"before {axis_s:.3f} s on the trace's time axis, {window.cut_at_ns} ns since the "
              "epoch); pick a window with --steps A:B or raise --max-spans", file=sys.stderr)
    if left_out:
        print(f"rlsight timeline: {left_out:,} span(s) that never ended were left out by "
              "--max-spans (the latest to start); raise it to draw them", file=sys.stderr)
    counts = write_chrome_trace([*window.spans, *opened], output)
    if skipped:
        print(f"rlsight timeline: skipped {len(skipped)} unreadable record(s); "
              f"first: {terminal_safe(str(skipped[0]))}", file=sys.stderr)
    never = f", {len(opened)} of them never ended (args: rl.open)" if opened else ""
    print(f"rlsight timeline: wrote {output} ({counts['spans']} spans{never}, {counts['flows']} "
          "flows); open it at https://ui.perfetto.dev", file=sys.stderr)
    return EXIT_OK


def _open_spans(folder: Path, cols: Any, window: Any, steps: tuple[int | None, int | None] | None,
                max_spans: int) -> tuple[list[Any], int]:
    """The spans that never ended (from the start records), drawn to where the post-mortem ages
    them, and how many ``--max-spans`` left out. With ``--steps A:B``, those that start before
    the window's last span ends; and no more than the cap leaves room for, the earliest (none
    where it cut the window)."""
    from rlsight.analysis.live import open_span_records
    from rlsight.store._live import read_live

    live = read_live(folder)
    if not live.starts:
        return [], 0
    opened = open_span_records(cols, live)
    if steps is not None and steps[1] is not None and window.spans:
        last = max(s.end_ns for s in window.spans)
        opened = [s for s in opened if s.start_ns <= last]
    opened.sort(key=lambda s: s.start_ns)
    room = max(0, max_spans - len(window.spans))
    return opened[:room], max(0, len(opened) - room)


def _describe_range(steps: tuple[int | None, int | None]) -> str:
    lo, hi = steps
    return f"{'' if lo is None else lo}:{'' if hi is None else hi}"
