"""Run every analysis over one run's spans and assemble the :class:`RunReport`."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlsight._rl_groups import NOT_PER_STEP, rl_group_names
from rlsight._semconv import ALGORITHM, RUN_ID
from rlsight.analysis._read import read_span_columns
from rlsight.analysis._steps import find_steps
from rlsight.analysis._table import SpanTable, build_table
from rlsight.analysis.columns import SpanColumns, span_columns_from_records
from rlsight.analysis.engine import engine_throughput
from rlsight.analysis.fleets import fleets
from rlsight.analysis.goodput import (
    contributors,
    partition_timelines,
    run_partition,
    step_buckets,
    step_goodput_pct,
    step_summary,
)
from rlsight.analysis.hotspots import top_spans
from rlsight.analysis.live import LOST_WORK_SPAN, nothing_ended, post_mortem, with_lost_work
from rlsight.analysis.model import RunReport, RunSummary, StepRollup
from rlsight.analysis.span_steps import span_steps
from rlsight.analysis.startup import startup
from rlsight.analysis.stragglers import DEFAULT_K, stragglers
from rlsight.analysis.volume import volume
from rlsight.analysis.wasted import charge_discards, wasted
from rlsight.errors import StoreError
from rlsight.store import MetricPoint, SkippedRecord, SpanRecord, read_manifest, read_metrics
from rlsight.store._live import read_live

__all__ = ["analyze_columns", "analyze_run", "analyze_spans", "per_step_catalog"]

#: How many skipped records the report quotes (the count is always complete).
_SKIPPED_EXAMPLES = 5


#: Said in the notes when the manifest predates the recorded catalog.
_NO_CATALOG_NOTE = (
    "manifest.json records no span-group catalog (written by an rlsight older than this "
    "reader, or missing): which groups are in per_step comes from rlsight's own groups, "
    "so a library's groups show as unknown"
)


def per_step_catalog(manifest: Mapping[str, Any] | None = None) -> tuple[dict[str, bool], str | None]:
    """Span group -> whether the run's ``per_step`` preset includes it, and a note if guessed.

    The run's own catalog in ``manifest.json`` (written at setup) is authoritative: it knows
    the groups of every library the driver imported. Without one only rlsight's own groups
    are known (the analysis never reads the live group registry: a report must not depend on
    what the reading process imported); when a manifest exists but predates the catalog, the
    second value says so for the report's notes. In-memory analysis without a manifest can
    pass ``per_step`` (or a manifest with ``catalog``) to know other groups.
    """
    catalog = manifest.get("catalog") if manifest else None
    if isinstance(catalog, Mapping) and isinstance(catalog.get("span_groups"), Mapping):
        preset = (catalog.get("presets") or {}).get("per_step")
        groups = preset.get("groups") if isinstance(preset, Mapping) else None
        members = {str(g) for g in groups} if isinstance(groups, list) else set()
        return {str(name): name in members for name in catalog["span_groups"]}, None
    note = _NO_CATALOG_NOTE if manifest else None
    return {name: name not in NOT_PER_STEP for name in rl_group_names()}, note


def most_common(values: Iterable[object]) -> str | None:
    """The most frequent value as a str (ties: the smallest), ignoring ``None``; the report and
    the live view both name a run's id and algorithm by it when the manifest has none."""
    counts = Counter(str(v) for v in values if v is not None)
    return min(counts, key=lambda v: (-counts[v], v)) if counts else None


def _configured_groups(manifest: Mapping[str, Any]) -> list[str] | None:
    config = manifest.get("config")
    groups = config.get("span_groups") if isinstance(config, Mapping) else None
    return [str(g) for g in groups] if isinstance(groups, (list, tuple)) else None


def _notes(table: SpanTable, controllers: Sequence[int], missing_numbers: int) -> list[str]:
    notes = []
    cols = table.cols
    if not len(controllers):
        notes.append("no rl.step spans: per-step rollup unavailable and the run partition is all "
                     "unattributed; enable the 'step' span group (it is in every preset)")
    elif len(controllers) > 1:
        notes.append(f"rl.step spans on {len(controllers)} timelines (a restarted driver, or "
                     "several controller threads); the run partition overlays them")
    if missing_numbers:
        notes.append(f"{missing_numbers} rl.step span(s) without a whole step number (shown as step -1; "
                     "a step_span(2.5) keeps its value in rl.step.value)")
    if table.orphans:
        notes.append(f"{table.orphans} span(s) whose parent is not in the store (lost or still "
                     "open at the end); their depth counts the missing parent as one level")
    if table.cycles:
        notes.append(f"{table.cycles} span(s) on a parent cycle (corrupt ids); treated as roots")
    if table.duplicates:
        notes.append(f"{table.duplicates} duplicate span record(s) (same trace and span id) ignored")
    side = (cols.bucket >= 0) & cols.concurrent
    if side.any():
        seconds = float(table.duration[side].sum()) / 1e9
        notes.append(f"{int(side.sum())} bucketed span(s) tagged rl.concurrent ({seconds:.3f} s) "
                     "overlap other work of their timeline and are outside the partition")
    if cols.invalid_buckets:
        notes.append(f"{cols.invalid_buckets} span(s) with an unknown rl.bucket value, treated as "
                     "unbucketed; valid values: productive, overhead, idle, wasted")
    backwards = int((cols.end < cols.start).sum())
    if backwards:
        notes.append(f"{backwards} span(s) end before they start (clock step); counted as zero length")
    return notes


def analyze_columns(
    cols: SpanColumns,
    *,
    skipped: Sequence[SkippedRecord] = (),
    files: int = 0,
    manifest: Mapping[str, Any] | None = None,
    metrics: Iterable[MetricPoint] = (),
    per_step: Mapping[str, bool] | None = None,
    k: float = DEFAULT_K,
    added: Collection[int] = (),
) -> RunReport:
    """Analyse a run already read into columns.

    Args:
        cols: The spans, from :func:`read_span_columns` (a run folder) or
            :func:`span_columns_from_records`.
        skipped: Records the reader skipped (counted and quoted in the summary).
        files: Number of trace files read.
        manifest: The run's ``manifest.json``, for the run id and algorithm.
        metrics: Metric points, for engine throughput.
        per_step: Group -> in ``per_step`` (default: the manifest's catalog, else rlsight's
            own groups only, which the notes say when the manifest lacks a catalog).
        k: Straggler threshold in MADs.
        added: Span ids of the spans the caller added to ``cols`` (the wait on work a replaced
            worker lost): they partition time like the others, but no file held them, so they
            are left out of the span counts (the summary's, each step's, the volume).

    Raises:
        ValueError: ``cols`` holds no span, or ``k`` is not positive.
    """
    if len(cols) == 0:
        raise ValueError("no spans to analyse; a run writes them to <run_dir>/traces/*.jsonl")
    table = build_table(cols)
    read = (~np.isin(table.cols.span_id, np.fromiter(added, np.uint64, len(added)))
            if added else None)
    steps = find_steps(table)
    controllers = np.unique(steps.timeline)
    part, discards = charge_discards(table, partition_timelines(table, steps), steps)
    run = run_partition(table, part, steps, controllers)
    per_step_buckets = step_buckets(part, steps)
    waste = wasted(table, part, steps, discards)
    of_span = steps.of_span if read is None else steps.of_span[read]
    counts = np.bincount(of_span[of_span >= 0], minlength=len(steps))
    rows = [
        StepRollup(
            index=r, step=int(steps.number[r]), timeline=table.timelines[int(steps.timeline[r])],
            start_unix_ns=int(steps.start[r]), buckets=per_step_buckets[r],
            superseded=bool(steps.superseded[r]), wasted_fleet_ns=waste.by_step_ns[r],
            spans=int(counts[r]),
        )
        for r in range(len(steps))
    ]
    resources = cols.resources
    manifest = manifest or {}
    catalog_note = None
    if per_step is None:
        per_step, catalog_note = per_step_catalog(manifest)
    summary = RunSummary(
        run_id=str(manifest["run_id"]) if manifest.get("run_id") else most_common(
            r.get(RUN_ID) for r in resources),
        algorithm=str(manifest["algorithm"]) if manifest.get("algorithm") else most_common(
            r.get(ALGORITHM) for r in resources),
        start_unix_ns=run.start,
        end_unix_ns=run.end,
        buckets=run.buckets,
        goodput_pct=100.0 * run.buckets.fraction("productive"),
        step_goodput_pct=step_goodput_pct(per_step_buckets, steps.superseded),
        steps=len(steps),
        controller_timelines=[table.timelines[int(t)] for t in controllers],
        spans=len(table) if read is None else int(read.sum()),
        processes=len(resources),
        timelines=len(table.timelines),
        files=files,
        skipped=len(skipped),
        skipped_examples=[str(s) for s in skipped[:_SKIPPED_EXAMPLES]],
        span_groups=_configured_groups(manifest),
    )
    return RunReport(
        summary=summary,
        steps=rows,
        step_summary=step_summary(per_step_buckets),
        top=contributors(table, part, steps),
        startup=startup(table, steps, run.start, run.end),
        fleets=fleets(table, part, run),
        stragglers=stragglers(table, steps, k=k),
        volume=volume(table, steps, per_step, read),
        wasted=waste,
        top_spans=top_spans(table),
        engine=engine_throughput(metrics, steps),
        notes=_notes(table, [int(c) for c in controllers], steps.missing_numbers)
        + ([catalog_note] if catalog_note else []),
        span_steps=span_steps(table, steps),
    )


def _manifest(run_dir: Path) -> tuple[dict[str, Any] | None, list[SkippedRecord]]:
    """The run's manifest, and a skipped record when one is there but cannot be read.

    A damaged manifest loses what only it holds (the configured span groups, a library's
    groups in the catalog); the report still reads the spans, and says what it skipped.
    """
    manifest = read_manifest(run_dir)
    path = run_dir / "manifest.json"
    if manifest is not None or not path.exists():
        return manifest, []
    return None, [SkippedRecord(str(path), 1, (
        "manifest.json is not a readable JSON object, so the run's configured span groups and "
        "its span-group catalog are unknown; the spans are read without them"))]


def analyze_spans(spans: Iterable[SpanRecord], **options: Any) -> RunReport:
    """Analyse in-memory :class:`SpanRecord` objects (options as :func:`analyze_columns`)."""
    return analyze_columns(span_columns_from_records(spans), **options)


def analyze_run(
    run_dir: Path | str,
    *,
    k: float = DEFAULT_K,
    progress: Callable[[int, int], None] | None = None,
) -> RunReport:
    """Read ``run_dir`` (spans, start records, metrics, manifest) and analyse it.

    The report's ``postmortem`` lists the spans that started and never ended, per process.

    Raises:
        StoreError: ``run_dir`` does not exist or holds no readable span.
        ValueError: ``k`` is not positive.
    """
    cols, skipped, files = read_span_columns(run_dir, progress=progress)
    live = read_live(run_dir)
    if len(cols) == 0:
        raise StoreError(nothing_ended(run_dir, live) or (
            f"no spans in {Path(run_dir) / 'traces'} ({files} file(s), {len(skipped)} skipped "
            "record(s)); is this a run folder, and did the run enable telemetry?"
        ))
    metrics = read_metrics(run_dir)
    manifest, unreadable = _manifest(Path(run_dir))
    analysed, lost = with_lost_work(cols, live)
    report = analyze_columns(
        analysed, skipped=[*unreadable, *skipped, *metrics.skipped, *live.skipped], files=files,
        manifest=manifest, metrics=metrics.points, k=k, added=[int(s.span_id, 16) for s in lost.spans],
    )
    if lost.lost:
        report = dataclasses.replace(report, notes=[*report.notes, (
            f"{lost.lost} span(s) of a replaced process (Ray restarted it, or a new one took its worker "
            f"group and rank) never ended; the wait of the span that called each, until the "
            f"replacement started, is counted as wasted ({LOST_WORK_SPAN})")])
    stalls = sorted((Path(run_dir) / "stalls").glob("stall-*.json"), key=lambda p: p.stat().st_mtime)
    return dataclasses.replace(
        report, postmortem=post_mortem(cols, live, stall_records=[str(p) for p in stalls]))
