"""Wasted work: time spent on results that were thrown away.

Three sources. Spans in the ``wasted`` bucket (``efficiency_span("wasted/stale_discard")``,
aborted rollouts): their partition time on every timeline (so nesting is never counted
twice) is summed per step, the step taken from each span's trace ancestry or time.
Discarded work: :func:`rlsight.discard` records (``rl.discard`` spans) name rollout groups
thrown away later; every span tagged with one of those ``rl.group_id`` values, and every
span under it in the trace (on any process), had its productive and overhead partition
time relabelled wasted by :func:`charge_discards`, and that time counts in the step that
discarded it. And restarts: when a step number repeats or goes backwards, the earlier
attempts of those step numbers were lost with the crashed process; those steps are
*superseded*, and the run partition counts their whole window as wasted. (A call lost with a
worker Ray replaced reaches this module as a wasted span on its caller's timeline:
:func:`rlsight.analysis.live.lost_work`.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from rlsight._semconv import DISCARD_GROUP_IDS, DISCARD_REASON, DISCARD_SPAN, GROUP_ID
from rlsight.analysis._steps import Steps
from rlsight.analysis._table import SpanTable, nearest_marked
from rlsight.analysis.columns import BUCKET_CODES
from rlsight.analysis.goodput import TimelinePartition
from rlsight.analysis.model import Discarded, Wasted, WastedName

__all__ = ["Discards", "charge_discards", "wasted"]

_WASTED: Final = BUCKET_CODES["wasted"]
_WORK: Final = (BUCKET_CODES["productive"], BUCKET_CODES["overhead"])


@dataclass(frozen=True, slots=True)
class Discards:
    """Which spans' work a later ``discard`` threw away, and by which call."""

    event_of_span: NDArray[np.int64]
    """Index into ``events`` of the discard that charged each span, or -1."""
    events: list[Discarded]


def _id_list(value: object) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [] if value is None else [str(value)]


def charge_discards(
    table: SpanTable, part: TimelinePartition, steps: Steps,
) -> tuple[TimelinePartition, Discards]:
    """Relabel discarded work's productive and overhead segments as wasted (every timeline).

    A group discarded twice is charged to its first discard. Idle time inside discarded
    work stays idle: nothing was computed then.
    """
    cols = table.cols
    n = len(table)
    none = Discards(np.full(n, -1, dtype=np.int64), [])
    name_id = table.name_id(DISCARD_SPAN)
    if name_id < 0:
        return part, none
    calls = sorted((i for i in np.flatnonzero(cols.name == name_id) if int(i) in cols.kept_attributes),
                   key=lambda i: (int(cols.start[i]), int(i)))
    owner_of: dict[str, int] = {}
    raw_events: list[tuple[int, str, list[str]]] = []
    for e, call in enumerate(calls):
        record = cols.kept_attributes[int(call)]
        ids = _id_list(record.get(DISCARD_GROUP_IDS))
        raw_events.append((int(call), str(record.get(DISCARD_REASON, "")), ids))
        for gid in ids:
            owner_of.setdefault(gid, e)
    tagged = np.full(n, -1, dtype=np.int64)
    found: list[set[str]] = [set() for _ in raw_events]
    for index, kept in cols.kept_attributes.items():
        tag = kept.get(GROUP_ID)
        event = owner_of.get(str(tag)) if tag is not None else None
        if event is not None:
            tagged[index] = event
            found[event].add(str(tag))
    anchor = nearest_marked(table.parent, tagged >= 0)
    event_of_span = np.where(anchor >= 0, tagged[np.maximum(anchor, 0)], -1)
    owner = part.owner
    seg_event = np.where(owner >= 0, event_of_span[np.maximum(owner, 0)], -1)
    charged = (seg_event >= 0) & np.isin(part.label, _WORK)
    work = np.zeros(len(raw_events), dtype=np.int64)
    np.add.at(work, seg_event[charged], part.cover.length[charged])
    events = []
    for e, (call_index, reason, ids) in enumerate(raw_events):
        row = int(steps.of_span[call_index])
        events.append(Discarded(
            step_index=row, step=int(steps.number[row]) if row >= 0 else -1, reason=reason,
            groups=len(set(ids)), groups_found=len(found[e]), work_ns=int(work[e]),
        ))
    if charged.any():
        label = part.label.copy()
        label[charged] = _WASTED
        part = dataclasses.replace(part, label=label)
    return part, Discards(event_of_span, events)


def wasted(
    table: SpanTable, part: TimelinePartition, steps: Steps, discards: Discards | None = None,
) -> Wasted:
    """Wasted partition time per step (all timelines), wasted spans by name, and restarts."""
    cols = table.cols
    seg = part.label == _WASTED
    owner = part.owner[seg]
    row = steps.of_span[owner]
    if discards is not None and discards.events:
        # Discarded work counts in the step that threw it away.
        event = discards.event_of_span[owner]
        moved = event >= 0
        event_row = np.asarray([d.step_index for d in discards.events], dtype=np.int64)
        row = np.where(moved, event_row[np.maximum(event, 0)], row)
    length = part.cover.length[seg]
    by_step = np.zeros(len(steps), dtype=np.int64)
    np.add.at(by_step, row[row >= 0], length[row >= 0])
    spans = np.flatnonzero(cols.bucket == _WASTED)
    counts = np.bincount(cols.name[spans], minlength=len(cols.names))
    totals = np.zeros(len(cols.names), dtype=np.int64)
    np.add.at(totals, cols.name[spans], table.duration[spans])
    by_name = sorted(
        (WastedName(cols.names[i], int(counts[i]), int(totals[i])) for i in np.flatnonzero(counts)),
        key=lambda w: (-w.total_ns, w.name),
    )
    superseded = np.flatnonzero(steps.superseded)
    return Wasted(
        restarts=steps.restarts,
        superseded_steps=[int(i) for i in superseded],
        superseded_wall_ns=int(steps.wall[superseded].sum()),
        by_step_ns=[int(v) for v in by_step],
        by_name=by_name,
        discarded=list(discards.events) if discards is not None else [],
    )
