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


def _arg(key: str, value: Any) -> Any:
    # The store may hold what rlsight's helpers never wrote (set_attribute on a yielded span,
    # another tool's spans): the timeline, a file people share, applies the redaction again.
    if is_content_key(key) and is_content(value):
        return REDACTED
    return list(value) if isinstance(value, tuple) else value


def _args(span: SpanRecord) -> dict[str, Any]:
    args: dict[str, Any] = {k: _arg(k, v) for k, v in span.attributes.items()}
    args["bucket"] = span.attributes.get(BUCKET)
    args["span_id"] = span.span_id
    args["trace_id"] = span.trace_id
    if span.status_code == 2:
        args["error"] = scrub(span.status_message) or True
    return args


def chrome_trace(spans: Iterable[SpanRecord]) -> dict[str, Any]:
    """The trace-event document for ``spans`` (timestamps in microseconds from the first span)."""
    ordered = sorted(spans, key=lambda s: (_instance(s), s.timeline[1], s.start_ns, -s.end_ns,
                                           s.trace_id, s.span_id))
    if not ordered:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    origin = min(s.start_ns for s in ordered)
    labels = sorted({_process_label(s.resource) for s in ordered},
                    key=lambda lab: (lab[0] != "driver", lab))
    pid_of = {lab: i + 1 for i, lab in enumerate(labels)}
    events: list[dict[str, Any]] = []
    for lab, pid in pid_of.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{lab[0]}/{lab[1]}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
    by_timeline: dict[tuple[str, int], list[SpanRecord]] = defaultdict(list)
    for s in ordered:
        by_timeline[(_instance(s), s.timeline[1])].append(s)
    where: dict[tuple[str, str], tuple[int, int]] = {}
    next_tid: dict[int, int] = defaultdict(int)
    for (_, thread), members in by_timeline.items():
        pid = pid_of[_process_label(members[0].resource)]
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
                "dur": s.duration_ns / 1e3, "args": _args(s),
            })
    by_id = {(s.trace_id, s.span_id): s for s in ordered}
    flow = 0
    for s in ordered:
        parent = by_id.get((s.trace_id, s.parent_span_id or ""))
        if parent is None or _instance(parent) == _instance(s):
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

    doc = chrome_trace(spans)
    path.write_bytes(orjson.dumps(doc))
    other = doc.get("otherData", {})
    return {"spans": int(other.get("spans", 0)), "events": len(doc["traceEvents"]),
            "flows": int(other.get("flows", 0))}
