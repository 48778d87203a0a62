"""List the runs in a folder (default ./rlsight-runs): id, start time, algorithm, size.

A run is a sub-folder with a ``manifest.json`` or a ``traces/`` folder. Exit codes: 0 ok
(also when the folder holds no run); 3 the folder does not exist.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlsight.commands._exit import EXIT_INPUT, EXIT_OK, EXIT_USAGE
from rlsight.commands._extras import missing_extra

__all__ = ["RunEntry", "add_arguments", "list_runs", "run"]

_DEFAULT = Path("rlsight-runs")


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One run folder as ``rlsight runs`` lists it."""

    run_id: str
    path: str
    started_at: str | None
    started_unix_ns: int | None
    algorithm: str | None
    span_groups: list[str] | None
    trace_files: int
    metric_files: int
    size_bytes: int


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _entry(folder: Path) -> RunEntry | None:
    from rlsight.store import read_manifest

    manifest: dict[str, Any] = read_manifest(folder) or {}
    traces, metrics = folder / "traces", folder / "metrics"
    if not manifest and not traces.is_dir():
        return None
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    groups = config.get("span_groups") if isinstance(config, dict) else None
    started = manifest.get("started_unix_ns")
    return RunEntry(
        run_id=str(manifest.get("run_id") or folder.name),
        path=str(folder),
        started_at=str(manifest["started_at"]) if manifest.get("started_at") else None,
        started_unix_ns=started if isinstance(started, int) else None,
        algorithm=str(manifest["algorithm"]) if manifest.get("algorithm") else None,
        span_groups=[str(g) for g in groups] if isinstance(groups, list) else None,
        trace_files=len(list(traces.glob("*.jsonl"))) if traces.is_dir() else 0,
        metric_files=len(list(metrics.glob("*.jsonl"))) if metrics.is_dir() else 0,
        size_bytes=_size(folder),
    )


def list_runs(folder: Path) -> list[RunEntry]:
    """The runs under ``folder``, oldest first (runs without a start time last, by name)."""
    entries = [e for e in (_entry(p) for p in sorted(folder.iterdir()) if p.is_dir()) if e is not None]
    return sorted(entries, key=lambda e: (e.started_unix_ns is None, e.started_unix_ns or 0, e.path))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``rlsight runs``'s flags."""
    parser.add_argument("folder", metavar="DIR", nargs="?", type=Path, default=_DEFAULT,
                        help="folder holding run folders (default ./rlsight-runs)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document: {schema_version, runs: [...]}")


def run(args: argparse.Namespace) -> int:
    """Print the runs in ``args.folder``."""
    if not args.json and missing_extra("runs", "rich"):
        return EXIT_USAGE
    folder: Path = args.folder
    if not folder.is_dir():
        print(f"rlsight runs: no folder at {folder}; runs are written to ./rlsight-runs by "
              "default, or pass the folder your run_dir points into", file=sys.stderr)
        return EXIT_INPUT
    entries = list_runs(folder)
    if args.json:
        print(json.dumps({"schema_version": 1, "runs": [asdict(e) for e in entries]}, indent=1))
        return EXIT_OK
    if not entries:
        from rlsight.store._collector import holds_a_run

        hint = (f"; {folder} is a run itself: `rlsight runs {folder.parent}` lists it"
                if holds_a_run(folder) else "")
        print(f"rlsight runs: no runs in {folder}{hint}", file=sys.stderr)
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from rlsight.render._format import count, terminal_safe

    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    for name in ("run", "started (UTC)", "algorithm", "span groups", "files", "size", "path"):
        table.add_column(name, justify="right" if name in ("files", "size") else "left")
    for e in entries:
        cells = (e.run_id, e.started_at or "-", e.algorithm or "-",
                 ",".join(e.span_groups) if e.span_groups else "-",
                 str(e.trace_files + e.metric_files), f"{count(e.size_bytes / 2**20)} MiB", e.path)
        # Text: a run id is never read as markup; terminal_safe: nor acted on as a control code
        table.add_row(*(Text(terminal_safe(c)) for c in cells))
    Console(highlight=False, width=None if sys.stdout.isatty() else 200).print(table)
    return EXIT_OK
