"""A run as Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing open.

Layout: one *process* track per worker group and rank (``driver/0``, ``policy/3``; a rank
restarted as a new process stays one track), one *thread* track per timeline (process id and
thread id). Complete events (``ph: X``) must nest properly on a track, and concurrent async
tasks on one thread do not, so a timeline's spans are dealt into *lanes*: the first lane where
the span nests inside whatever is still open, each lane its own thread track. Every slice's
args carry the span's attributes plus ``bucket``, ``span_id`` and ``trace_id``. A span whose
parent ran in another process gets a flow arrow from the parent's slice to its own.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rlsight._redact import REDACTED, is_content, is_content_key, scrub
from rlsight._semconv import BUCKET, PROCESS_PID, RANK, SERVICE_INSTANCE_ID, SERVICE_NAME, WORKER_GROUP
from rlsight.store._schema import SpanRecord

__all__ = ["chrome_trace", "write_chrome_trace"]


def _process_label(resource: Any) -> tuple[str, int]:
    group = resource.get(WORKER_GROUP, resource.get(SERVICE_NAME, "unknown"))
    try:
        rank = int(resource.get(RANK, 0))
    except (TypeError, ValueError):
        rank = 0
    return str(group), rank


def _instance(span: SpanRecord) -> str:
    return str(span.resource.get(SERVICE_INSTANCE_ID, span.resource.get(PROCESS_PID, "")))


def _lanes(spans: list[SpanRecord]) -> list[int]:
    """Deal spans (sorted by start, longest first) into properly nesting lanes."""
    stacks: list[list[int]] = []
    out = []
    for s in spans:
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= s.start_ns:
                stack.pop()
            if not stack or stack[-1] >= s.end_ns:
                stack.append(s.end_ns)
                out.append(lane)
                break
        else:
            stacks.append([s.end_ns])
            out.append(len(stacks) - 1)
    return out


def _args(span: SpanRecord, content_keys: dict[str, bool]) -> dict[str, Any]:
    """The slice's args; ``content_keys`` caches :func:`is_content_key` across spans."""
    attributes = span.attributes
    args: dict[str, Any] = dict(attributes)
    for key, value in attributes.items():
        content = content_keys.get(key)
        if content is None:
            content = content_keys[key] = is_content_key(key)
        # The store may hold what rlsight's helpers never wrote (set_attribute on a yielded
        # span, another tool's spans): the timeline, a file people share, redacts again.
        if content and is_content(value):
            args[key] = REDACTED
        elif isinstance(value, tuple):
            args[key] = list(value)
    args["bucket"] = attributes.get(BUCKET)
    args["span_id"] = span.span_id
    args["trace_id"] = span.trace_id
    if span.status_code == 2:
        args["error"] = scrub(span.status_message) or True
    return args


def chrome_trace(spans: Iterable[SpanRecord]) -> dict[str, Any]:
    """The trace-event document for ``spans`` (timestamps in microseconds from the first span)."""
    spans = list(spans)
    # A run has a few resources shared by many spans: label each resource once.
    instance_of: dict[int, str] = {}
    label_of: dict[int, tuple[str, int]] = {}
    for s in spans:
        if id(s.resource) not in instance_of:
            instance_of[id(s.resource)] = _instance(s)
            label_of[id(s.resource)] = _process_label(s.resource)
    keys = [(instance_of[id(s.resource)], s.timeline[1], s.start_ns, -s.end_ns, s.trace_id, s.span_id)
            for s in spans]
    order = sorted(range(len(spans)), key=keys.__getitem__)
    ordered = [spans[i] for i in order]
    if not ordered:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    origin = min(s.start_ns for s in ordered)
    labels = sorted(set(label_of.values()), key=lambda lab: (lab[0] != "driver", lab))
    pid_of = {lab: i + 1 for i, lab in enumerate(labels)}
    events: list[dict[str, Any]] = []
    for lab, pid in pid_of.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{lab[0]}/{lab[1]}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
    by_timeline: dict[tuple[str, int], list[SpanRecord]] = defaultdict(list)
    for i in order:
        by_timeline[keys[i][:2]].append(spans[i])
    where: dict[tuple[str, str], tuple[int, int]] = {}
    next_tid: dict[int, int] = defaultdict(int)
    content_keys: dict[str, bool] = {}
    for (_, thread), members in by_timeline.items():
        pid = pid_of[label_of[id(members[0].resource)]]
        pid_resource = members[0].resource.get(PROCESS_PID, "?")
        tids: dict[int, int] = {}
        for s, lane in zip(members, _lanes(members), strict=True):
            if lane not in tids:
                next_tid[pid] += 1
                tids[lane] = tid = next_tid[pid]
                name = f"pid {pid_resource} thread {thread}" + (f" lane {lane + 1}" if lane else "")
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                               "args": {"name": name}})
                events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                               "args": {"sort_index": tid}})
            tid = tids[lane]
            where[(s.trace_id, s.span_id)] = (pid, tid)
            events.append({
                "ph": "X", "name": s.name, "cat": str(s.attributes.get(BUCKET, "span")),
                "pid": pid, "tid": tid, "ts": (s.start_ns - origin) / 1e3,
                "dur": s.duration_ns / 1e3, "args": _args(s, content_keys),
            })
    by_id = {(s.trace_id, s.span_id): s for s in ordered}
    flow = 0
    for s in ordered:
        parent = by_id.get((s.trace_id, s.parent_span_id or ""))
        if parent is None or instance_of[id(parent.resource)] == instance_of[id(s.resource)]:
            continue
        flow += 1
        ppid, ptid = where[(parent.trace_id, parent.span_id)]
        cpid, ctid = where[(s.trace_id, s.span_id)]
        at = min(max(s.start_ns, parent.start_ns), parent.end_ns)
        events.append({"ph": "s", "id": flow, "name": "call", "cat": "flow", "pid": ppid, "tid": ptid,
                       "ts": (at - origin) / 1e3})
        events.append({"ph": "f", "bp": "e", "id": flow, "name": "call", "cat": "flow", "pid": cpid,
                       "tid": ctid, "ts": (s.start_ns - origin) / 1e3})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"origin_unix_ns": origin, "spans": len(ordered), "flows": flow}}


def write_chrome_trace(spans: Sequence[SpanRecord], path: Path) -> dict[str, int]:
    """Write the trace-event JSON for ``spans`` to ``path``; return span, event and flow counts."""
    import orjson

    # Building ~10 small objects per span triggers the cyclic collector over and over, and
    # none of them forms a cycle: pause it for the build (a third of the time at 200k spans).
    enabled = gc.isenabled()
    gc.disable()
    try:
        doc = chrome_trace(spans)
        path.write_bytes(orjson.dumps(doc))
    finally:
        if enabled:
            gc.enable()
    other = doc.get("otherData", {})
    return {"spans": int(other.get("spans", 0)), "events": len(doc["traceEvents"]),
            "flows": int(other.get("flows", 0))}
