"""The Perfetto (Chrome trace-event) export."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from _build import RunBuilder

from rlsight.render.perfetto import chrome_trace, write_chrome_trace


def _run() -> RunBuilder:
    run = RunBuilder()
    d = run.process()
    step = d.step(1, 0, 10)
    dispatch = d.span("rl.train", 1, 9, parent=step, bucket="productive")
    d.span("task_a", 2, 6, parent=step, bucket="productive", thread=7)
    d.span("task_b", 4, 8, parent=step, bucket="overhead", thread=7)
    w = run.process("policy", 3)
    w.span("rl.train.policy", 2, 8, parent=dispatch, bucket="productive")
    return run


def _names(doc: dict, kind: str) -> dict[tuple[int, int | None], str]:
    return {(e["pid"], e.get("tid")): e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == kind}


def test_one_process_track_per_worker_group_and_rank():
    doc = chrome_trace(_run().records())
    assert sorted(_names(doc, "process_name").values()) == ["driver/0", "policy/3"]


def test_every_span_is_a_slice_with_its_bucket_in_args():
    doc = chrome_trace(_run().records())
    slices = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    assert len(slices) == 5
    assert slices["rl.train"]["args"]["bucket"] == "productive"
    assert slices["rl.train"]["ts"] == 1e6 and slices["rl.train"]["dur"] == 8e6


def test_overlapping_spans_on_one_thread_are_dealt_into_nesting_lanes():
    """task_a [2,6] and task_b [4,8] overlap without nesting: two thread tracks."""
    doc = chrome_trace(_run().records())
    threads = _names(doc, "thread_name")
    assert sorted(threads.values()) == ["pid 1000 thread 1", "pid 1000 thread 7",
                                        "pid 1000 thread 7 lane 2", "pid 1001 thread 1"]
    by_track = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        stack: list[float] = []
        for start, end in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1]
            stack.append(end)


def test_a_cross_process_parent_link_is_a_flow_arrow():
    doc = chrome_trace(_run().records())
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    assert [(e["ph"], e["ts"]) for e in flows] == [("s", 2e6), ("f", 2e6)]
    start, end = flows
    assert start["id"] == end["id"] and end["bp"] == "e" and start["pid"] != end["pid"]


def test_the_written_file_is_json(tmp_path: Path):
    path = tmp_path / "trace.json"
    counts = write_chrome_trace(_run().records(), path)
    assert counts["spans"] == 5 and counts["flows"] == 1
    assert json.loads(path.read_text())["displayTimeUnit"] == "ms"
