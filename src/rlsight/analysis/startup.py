"""Startup: the time from the run's first span to the first step, and what filled it.

The breakdown comes from ``rl.setup.<phase>`` spans that start before the first step, in
order of start (the waterfall), and their per-phase totals. Startup time that no setup span
covers is *unaccounted*. Worker model loads (``rl.worker.load_model``, opened inside each
worker because the driver cannot see into them) are summarised per rank (longest load) and
per worker group (the slowest rank, which is when the group is ready).
"""

from __future__ import annotations

import numpy as np

from rlsight._semconv import BACKEND, LOAD_MODEL_SPAN, SETUP_SPAN_PREFIX, STARTUP_SPAN
from rlsight.analysis._intervals import covered_length
from rlsight.analysis._steps import Steps
from rlsight.analysis._table import SpanTable
from rlsight.analysis.model import LoadModel, LoadModelGroup, PhaseTotal, SetupPhase, Startup

__all__ = ["startup"]


def startup(table: SpanTable, steps: Steps, run_start: int, run_end: int) -> Startup:
    """Startup wall, setup phases, unaccounted time and model loads."""
    cols = table.cols
    first_step = int(steps.start[0]) if len(steps) else run_end
    wall = max(0, first_step - run_start)
    setup_names = [i for i, n in enumerate(cols.names) if n.startswith(SETUP_SPAN_PREFIX)]
    idx = np.flatnonzero(np.isin(cols.name, setup_names) & (cols.start < first_step))
    idx = idx[np.lexsort((cols.name[idx], cols.start[idx]))]
    dur = table.duration
    phases = [SetupPhase(cols.names[cols.name[i]][len(SETUP_SPAN_PREFIX):], int(cols.start[i] - run_start),
                         int(dur[i])) for i in idx]
    totals: dict[str, list[int]] = {}
    for p in phases:
        entry = totals.setdefault(p.phase, [0, 0])
        entry[0] += p.duration_ns
        entry[1] += 1
    covered = covered_length(
        np.zeros(len(idx), np.int64), np.maximum(cols.start[idx], run_start),
        np.minimum(cols.end[idx], first_step), 1,
    )
    startup_id = table.name_id(STARTUP_SPAN)
    startup_spans = np.flatnonzero(cols.name == startup_id) if startup_id >= 0 else np.zeros(0, np.int64)
    loads = _load_model(table, run_start)
    first_startup = startup_spans[np.argmin(cols.start[startup_spans])] if len(startup_spans) else -1
    return Startup(
        wall_ns=wall,
        startup_span_ns=int(dur[first_startup]) if first_startup >= 0 else None,
        phases=phases,
        phase_totals=[PhaseTotal(name, d, n) for name, (d, n) in totals.items()],
        unaccounted_ns=wall - int(covered[0]),
        load_model=loads,
        load_model_groups=_load_groups(loads),
    )


def _load_model(table: SpanTable, run_start: int) -> list[LoadModel]:
    cols = table.cols
    name = table.name_id(LOAD_MODEL_SPAN)
    if name < 0:
        return []
    best: dict[tuple[str, int], tuple[int, int]] = {}
    dur = table.duration
    for i in np.flatnonzero(cols.name == name).tolist():
        r = table.ranks[cols.process[i]]
        key = (r.worker_group, r.rank)
        if key not in best or dur[i] > best[key][0]:
            best[key] = (int(dur[i]), i)
    out = []
    for (group, rank), (d, span) in sorted(best.items()):
        backend = cols.kept_attributes.get(span, {}).get(BACKEND)
        out.append(LoadModel(group, rank, int(cols.start[span]) - run_start, d,
                             None if backend is None else str(backend)))
    return out


def _load_groups(loads: list[LoadModel]) -> list[LoadModelGroup]:
    out = []
    for group in sorted({x.worker_group for x in loads}):
        members = [x for x in loads if x.worker_group == group]
        slowest = max(members, key=lambda x: (x.duration_ns, -x.rank))
        out.append(LoadModelGroup(group, len(members), slowest.duration_ns, slowest.rank,
                                  float(np.median([x.duration_ns for x in members]))))
    return out
