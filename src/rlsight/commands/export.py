"""Send a stored run to an OTLP collector; resumable, and idempotent once complete.

Every line of RUN_DIR's store (traces, then metrics) not yet accepted by this endpoint is sent
in order; progress is kept in RUN_DIR/export/, so an interrupted export resumes with the same
command and a finished one sends nothing twice. Exit codes: 0 everything sent; 1 the collector
stopped the export (rerun to resume); 2 usage error (also a missing extra); 3 RUN_DIR missing,
not a run folder, or not writable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlsight.commands._exit import EXIT_INPUT, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from rlsight.commands._extras import missing_extra

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``rlsight export``'s flags."""
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run folder to send")
    parser.add_argument("--otlp-endpoint", required=True, metavar="URL",
                        help="the collector's base URL, e.g. http://localhost:4318")
    parser.add_argument("--protocol", choices=("http/protobuf", "grpc"), default="http/protobuf",
                        help="OTLP transport (default http/protobuf; grpc needs rlsight[grpc])")


def run(args: argparse.Namespace) -> int:
    """Export the run and print what was sent."""
    if args.protocol == "grpc" and missing_extra("export", "grpc", extra="grpc"):
        return EXIT_USAGE
    from rlsight._terminal import terminal_safe
    from rlsight.config import endpoint_problem
    from rlsight.errors import StoreError
    from rlsight.store._replay import export_run

    problem = endpoint_problem(args.otlp_endpoint)
    if problem is not None:  # a bad flag value: a usage error, before the run is looked at
        print(f"rlsight export: --otlp-endpoint {args.otlp_endpoint!r}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = export_run(args.run_dir, args.otlp_endpoint, args.protocol)
    except StoreError as exc:
        print(f"rlsight export: {exc}", file=sys.stderr)
        return EXIT_INPUT
    sent = result.sent_lines
    print(f"rlsight export: sent {result.sent_spans} spans in {sent['traces']} request(s) and "
          f"{sent['metrics']} metric request(s) to {result.endpoint} ({result.protocol}); "
          f"{result.already_sent_lines} request(s) were sent by an earlier export", file=sys.stderr)
    if result.skipped:
        print(f"rlsight export: skipped {len(result.skipped)} unreadable record(s); first: "
              f"{terminal_safe(str(result.skipped[0]))}", file=sys.stderr)
    if result.error is not None:
        print(f"rlsight export: the collector did not take the next request ({result.error}); "
              "progress is saved: rerun the same command to resume", file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK
