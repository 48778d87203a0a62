"""Read what an OpenTelemetry Collector's file exporter wrote, as rlsight runs.

A Collector's ``file`` exporter appends one OTLP/JSON request per line to the file it is given
(traces, metrics and logs alike, from every process and every run that sends to it), and may
rotate it into more files. That is the store's own line format with two differences: lines of
several runs and signals share a file, and a request retried between an SDK and the Collector
can appear twice. :func:`split_collector_files` reads such files once and writes each run's
spans and metric points into a run folder of its own, the layout every rlsight reader takes,
with repeated spans (same trace and span id) and repeated metric points dropped and counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from rlsight._semconv import RUN_ID
from rlsight.errors import StoreError
from rlsight.store._lines import PARSE_ERRORS, json_lines
from rlsight.store._schema import SkippedRecord

__all__ = [
    "COLLECTOR_SUFFIXES",
    "CollectorRun",
    "CollectorSplit",
    "collector_files",
    "holds_a_run",
    "not_a_run",
    "split_collector_files",
]

#: File name endings read from a Collector output folder (rotated files keep them).
COLLECTOR_SUFFIXES: Final = (".json", ".jsonl")
#: Run id given to resources that carry no ``rl.run.id`` (processes rlsight did not set up).
NO_RUN_ID: Final = ""
_METRIC_KINDS: Final = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")


@dataclass(frozen=True, slots=True)
class CollectorRun:
    """One run found in Collector files, written out as a run folder."""

    run_id: str
    """The resources' ``rl.run.id``; ``""`` for resources without one."""
    folder: Path
    spans: int
    metric_points: int
    duplicate_spans: int = 0
    """This run's spans that a retried export wrote again (dropped, counted here)."""
    duplicate_points: int = 0
    """This run's metric points that a retried export wrote again."""


@dataclass(frozen=True, slots=True)
class CollectorSplit:
    """What :func:`split_collector_files` found: runs, dropped repeats, unreadable lines."""

    runs: dict[str, CollectorRun]
    files: int
    duplicate_spans: int = 0
    duplicate_points: int = 0
    skipped: list[SkippedRecord] = field(default_factory=list)


def collector_files(source: Path) -> list[Path]:
    """The files of a Collector output: ``source`` itself, or its ``*.json``/``*.jsonl`` files.

    Raises:
        StoreError: ``source`` does not exist, or is a folder holding no such file.
    """
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise StoreError(f"no file or folder at {source}; pass a run folder or the file (or "
                         "folder) a Collector's file exporter writes")
    files = sorted(p for p in source.iterdir()
                   if p.is_file() and p.name.endswith(COLLECTOR_SUFFIXES) and not p.name.startswith("."))
    if not files:
        raise not_a_run(source, f"nor Collector files ({', '.join('*' + s for s in COLLECTOR_SUFFIXES)})")
    return files


def holds_a_run(folder: Path) -> bool:
    """Whether ``folder`` is laid out as a run folder the store wrote."""
    return (folder / "traces").is_dir() or (folder / "manifest.json").is_file()


def not_a_run(folder: Path, also: str = "") -> StoreError:
    """The error for an existing ``folder`` that holds no run (``also``: what else it lacks),
    naming the runs in it when it is the runs root (./rlsight-runs), the usual mix-up."""
    runs = sorted(p.name for p in folder.iterdir() if p.is_dir() and holds_a_run(p))
    if runs:
        shown = ", ".join(runs[:5]) + (f" and {len(runs) - 5} more" if len(runs) > 5 else "")
        return StoreError(f"{folder} is a folder of runs ({shown}), not a run; pass one of "
                          f"them (`rlsight runs {folder}` lists them)")
    lacks = f"neither a run (traces/, manifest.json) {also}" if also else "no run (traces/, manifest.json)"
    return StoreError(f"{folder} holds {lacks}; pass the folder a run wrote (`rlsight runs` lists "
                      "./rlsight-runs)")


def _run_id(resource: Any) -> str:
    for kv in (resource or {}).get("attributes") or ():
        if kv.get("key") == RUN_ID:
            value = kv.get("value") or {}
            return str(value.get("stringValue", NO_RUN_ID))
    return NO_RUN_ID


class _Writer:
    """Per-run output files, opened on first use."""

    def __init__(self, into: Path) -> None:
        self._into = into
        self._files: dict[tuple[str, str], IO[str]] = {}
        self.folders: dict[str, Path] = {}
        self.spans: dict[str, int] = {}
        self.points: dict[str, int] = {}
        self.repeated_spans: dict[str, int] = {}
        self.repeated_points: dict[str, int] = {}

    def write(self, run_id: str, kind: str, request: dict[str, Any]) -> None:
        handle = self._files.get((run_id, kind))
        if handle is None:
            folder = self.folders.setdefault(run_id, self._into / f"run-{len(self.folders)}")
            (folder / kind).mkdir(parents=True, exist_ok=True)
            handle = self._files[(run_id, kind)] = (folder / kind / "collector.jsonl").open("w")
        handle.write(json.dumps(request, separators=(",", ":")) + "\n")

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()


class _Splitter:
    """Dedupes and divides requests by run; a request is split whole or skipped whole."""

    def __init__(self, writer: _Writer) -> None:
        self.writer = writer
        self.seen_spans: set[tuple[str, str]] = set()
        self.seen_points: set[str] = set()
        self.duplicate_spans = 0
        self.duplicate_points = 0

    def traces(self, request: dict[str, Any]) -> None:
        by_run: dict[str, list[dict[str, Any]]] = {}
        counts: dict[str, int] = {}
        new: set[tuple[str, str]] = set()
        repeats = 0
        repeated: dict[str, int] = {}
        for rs in request["resourceSpans"]:
            run = _run_id(rs.get("resource"))
            scopes = []
            for ss in rs.get("scopeSpans") or ():
                spans = []
                for s in ss.get("spans") or ():
                    key = (str(s["traceId"]), str(s["spanId"]))
                    if key in self.seen_spans or key in new:
                        repeats += 1
                        repeated[run] = repeated.get(run, 0) + 1
                        continue
                    new.add(key)
                    spans.append(s)
                if spans:
                    scopes.append({**ss, "spans": spans})
            if scopes:
                by_run.setdefault(run, []).append({**rs, "scopeSpans": scopes})
                counts[run] = counts.get(run, 0) + sum(len(s["spans"]) for s in scopes)
        self.seen_spans |= new
        self.duplicate_spans += repeats
        for run, n in repeated.items():
            self.writer.repeated_spans[run] = self.writer.repeated_spans.get(run, 0) + n
        for run, resource_spans in by_run.items():
            self.writer.write(run, "traces", {"resourceSpans": resource_spans})
            self.writer.spans[run] = self.writer.spans.get(run, 0) + counts[run]

    def metrics(self, request: dict[str, Any]) -> None:
        by_run: dict[str, list[dict[str, Any]]] = {}
        counts: dict[str, int] = {}
        new: set[str] = set()
        repeats = 0
        repeated: dict[str, int] = {}
        for rm in request["resourceMetrics"]:
            run = _run_id(rm.get("resource"))
            resource = json.dumps(rm.get("resource") or {}, sort_keys=True)
            scopes = []
            kept = 0
            for sm in rm.get("scopeMetrics") or ():
                metrics = []
                for m in sm.get("metrics") or ():
                    kind = next((k for k in _METRIC_KINDS if k in m), None)
                    if kind is None:
                        continue
                    points = []
                    for p in m[kind].get("dataPoints") or ():
                        key = f"{resource}\x00{m['name']}\x00{json.dumps(p, sort_keys=True)}"
                        if key in self.seen_points or key in new:
                            repeats += 1
                            repeated[run] = repeated.get(run, 0) + 1
                            continue
                        new.add(key)
                        points.append(p)
                    if points:
                        metrics.append({**m, kind: {**m[kind], "dataPoints": points}})
                        kept += len(points)
                if metrics:
                    scopes.append({**sm, "metrics": metrics})
            if scopes:
                by_run.setdefault(run, []).append({**rm, "scopeMetrics": scopes})
                counts[run] = counts.get(run, 0) + kept
        self.seen_points |= new
        self.duplicate_points += repeats
        for run, n in repeated.items():
            self.writer.repeated_points[run] = self.writer.repeated_points.get(run, 0) + n
        for run, resource_metrics in by_run.items():
            self.writer.write(run, "metrics", {"resourceMetrics": resource_metrics})
            self.writer.points[run] = self.writer.points.get(run, 0) + counts[run]


def split_collector_files(source: Path | str, into: Path | str) -> CollectorSplit:
    """Split a Collector's output at ``source`` into one run folder per run under ``into``.

    Lines that are not JSON, or not an OTLP traces, metrics or logs request, are skipped and
    reported with ``file:line``; logs are ignored. A request is split per resource, so a
    batch that mixes runs is divided between them.

    Raises:
        StoreError: ``source`` holds no Collector file (see :func:`collector_files`).
    """
    files = collector_files(Path(source))
    writer = _Writer(Path(into))
    splitter = _Splitter(writer)
    skipped: list[SkippedRecord] = []
    try:
        for path in files:
            # The shared bounded reader: a runaway line or nesting too deep is skipped with
            # file:line like any other bad record.
            for lineno, request in json_lines(path, skipped):
                _split_request(splitter, path, lineno, request, skipped)
    finally:
        writer.close()
    runs = {
        run: CollectorRun(run, folder, writer.spans.get(run, 0), writer.points.get(run, 0),
                          writer.repeated_spans.get(run, 0), writer.repeated_points.get(run, 0))
        for run, folder in writer.folders.items()
    }
    return CollectorSplit(runs, len(files), splitter.duplicate_spans, splitter.duplicate_points,
                          skipped)


def _split_request(splitter: _Splitter, path: Path, lineno: int, request: Any,
                   skipped: list[SkippedRecord]) -> None:
    try:
        if isinstance(request, dict) and "resourceSpans" in request:
            splitter.traces(request)
        elif isinstance(request, dict) and "resourceMetrics" in request:
            splitter.metrics(request)
        elif not (isinstance(request, dict) and "resourceLogs" in request):
            skipped.append(SkippedRecord(str(path), lineno, "not an OTLP traces, metrics or logs request"))
    except PARSE_ERRORS as exc:
        skipped.append(SkippedRecord(str(path), lineno, f"not an OTLP request ({exc!r})"))
