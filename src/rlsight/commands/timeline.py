"""Write a run as Chrome trace-event JSON for ui.perfetto.dev (one track per rank, flows).

Open the file at https://ui.perfetto.dev (or chrome://tracing): one process track per worker
group and rank, one thread track per timeline, an arrow from each span to its children in
other processes, and each slice's bucket and attributes in its args. Exit codes: 0 written;
2 usage error (OUTPUT is a folder, or Collector files holding several runs and no
``--run-id``); 3 RUN_DIR missing or holding no spans.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlsight.cli import EXIT_INPUT, EXIT_OK, EXIT_USAGE
from rlsight.commands._extras import missing_extra

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``rlsight timeline``'s flags."""
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                        help="the run folder to read, or a Collector file exporter's file or folder")
    parser.add_argument("--run-id", metavar="ID",
                        help="the run to read from Collector files that hold several runs")
    parser.add_argument("-o", "--output", metavar="FILE", type=Path, default=Path("trace.json"),
                        help="where to write the trace (default ./trace.json)")


def run(args: argparse.Namespace) -> int:
    """Read the run's spans and write the trace-event file."""
    if missing_extra("timeline", "orjson"):
        return EXIT_USAGE
    from rlsight.commands._source import AmbiguousRunError, open_run
    from rlsight.errors import StoreError
    from rlsight.render._format import terminal_safe
    from rlsight.render.perfetto import write_chrome_trace
    from rlsight.store import read_spans

    output: Path = args.output
    if output.is_dir():
        print(f"rlsight timeline: -o {output} is a folder; pass a file name such as "
              f"{output / 'trace.json'}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with open_run(args.run_dir, args.run_id) as source:
            result = read_spans(source.folder)
    except AmbiguousRunError as exc:
        print(f"rlsight timeline: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:
        print(f"rlsight timeline: {exc}", file=sys.stderr)
        return EXIT_INPUT
    skipped = [*source.skipped, *result.skipped]
    # One slice per span, even where a retried export wrote a batch twice.
    seen: set[tuple[str, str]] = set()
    spans = []
    for span in result.spans:
        if (span.trace_id, span.span_id) not in seen:
            seen.add((span.trace_id, span.span_id))
            spans.append(span)
    if not spans:
        print(f"rlsight timeline: no spans in {args.run_dir / 'traces'}; is this a run folder, "
              "and did the run enable telemetry?", file=sys.stderr)
        return EXIT_INPUT
    counts = write_chrome_trace(spans, output)
    if skipped:
        print(f"rlsight timeline: skipped {len(skipped)} unreadable record(s); "
              f"first: {terminal_safe(str(skipped[0]))}", file=sys.stderr)
    print(f"rlsight timeline: wrote {output} ({counts['spans']} spans, {counts['flows']} flows); "
          "open it at https://ui.perfetto.dev", file=sys.stderr)
    return EXIT_OK
