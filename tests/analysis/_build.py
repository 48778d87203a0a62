"""Hand-built runs with known answers: span trees as SpanRecords or as real store files.

Times are given in seconds from the run's origin and stored as integer nanoseconds, so a test
can state its expected answer in plain seconds. Ids are deterministic (a counter), so two
builds of the same run are byte-identical.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsight._catalog import run_catalog
from rlsight.analysis import RunReport, analyze_spans
from rlsight.store._schema import AttributeValue, SpanRecord

T0 = 1_700_000_000_000_000_000
SEC = 1_000_000_000

DEFAULT_GROUP = {"productive": "training", "overhead": "refit", "idle": "efficiency",
                 "wasted": "efficiency"}


def ns(seconds: float) -> int:
    """Seconds from the origin as nanoseconds (exact for the values tests use)."""
    return round(seconds * SEC)


@dataclass
class Span:
    trace_id: str
    span_id: str
    process: Proc
    record: SpanRecord | None = None


@dataclass
class Proc:
    run: RunBuilder
    resource: dict[str, AttributeValue]
    spans: list[SpanRecord] = field(default_factory=list)

    def span(
        self,
        name: str,
        start: float,
        end: float,
        *,
        parent: Span | None = None,
        bucket: str | None = None,
        group: str | None = None,
        concurrent: bool = False,
        thread: int = 1,
        status: int = 0,
        **attributes: AttributeValue,
    ) -> Span:
        """Add a span; ``bucket`` also sets ``rl.span_group`` (default group per bucket)."""
        trace_id = parent.trace_id if parent is not None else self.run.new_trace()
        span_id = self.run.new_span()
        attrs: dict[str, AttributeValue] = {"thread.id": thread}
        if bucket is not None:
            attrs["rl.bucket"] = bucket
        if group is not None or bucket is not None:
            attrs["rl.span_group"] = group if group is not None else DEFAULT_GROUP[bucket or ""]
        if concurrent:
            attrs["rl.concurrent"] = True
        attrs.update(attributes)
        record = SpanRecord(
            trace_id=trace_id, span_id=span_id,
            parent_span_id=parent.span_id if parent is not None else None,
            name=name, start_ns=T0 + ns(start), end_ns=T0 + ns(end),
            attributes=attrs, resource=self.resource, status_code=status,
        )
        self.spans.append(record)
        return Span(trace_id, span_id, self, record)

    def step(self, number: int, start: float, end: float, *, parent: Span | None = None,
             thread: int = 1, **attributes: AttributeValue) -> Span:
        """An ``rl.step`` span (umbrella, group ``step``)."""
        return self.span("rl.step", start, end, parent=parent, group="step", thread=thread,
                         **{"rl.step": number, **attributes})


class RunBuilder:
    """A run: processes with spans, written as SpanRecords or as a store folder."""

    def __init__(self, run_id: str = "run1", algorithm: str = "grpo") -> None:
        self.run_id = run_id
        self.algorithm = algorithm
        self.procs: list[Proc] = []
        self._traces = 0
        self._spans = 0

    def new_trace(self) -> str:
        self._traces += 1
        return f"{self._traces:032x}"

    def new_span(self) -> str:
        self._spans += 1
        return f"{self._spans:016x}"

    def process(self, worker_group: str = "driver", rank: int = 0, *, pid: int | None = None,
                devices: int | None = None, **resource: AttributeValue) -> Proc:
        pid = pid if pid is not None else 1000 + len(self.procs)
        res: dict[str, AttributeValue] = {
            "service.name": f"rlsight-{worker_group}",
            "service.instance.id": f"{self.run_id}/{worker_group}/{rank}/{pid}",
            "rl.run.id": self.run_id,
            "rl.worker_group": worker_group,
            "rl.rank": rank,
            "rl.algorithm": self.algorithm,
            "process.pid": pid,
            "host.name": "testhost",
        }
        if devices is not None:
            res["rl.devices"] = devices
        res.update(resource)
        proc = Proc(self, res)
        self.procs.append(proc)
        return proc

    def records(self) -> list[SpanRecord]:
        return [s for p in self.procs for s in p.spans]

    def write(self, run_dir: Path, *, per_line: int = 3, seed: int | None = None,
              manifest: bool = True) -> Path:
        """Write ``run_dir`` as the store does: one JSONL file per process, OTLP/JSON lines.

        ``seed`` shuffles the span order inside each file (order must not matter).
        """
        traces = run_dir / "traces"
        traces.mkdir(parents=True, exist_ok=True)
        for proc in self.procs:
            spans = list(proc.spans)
            if seed is not None:
                random.Random(seed).shuffle(spans)
            r = proc.resource
            path = traces / f"{r['rl.worker_group']}-{r['rl.rank']}-{r['process.pid']}.jsonl"
            with path.open("w") as fh:
                for i in range(0, len(spans), per_line):
                    fh.write(json.dumps(otlp_request(proc.resource, spans[i:i + per_line])) + "\n")
        if manifest:
            (run_dir / "manifest.json").write_text(json.dumps({
                "store_format": 1, "run_id": self.run_id, "started_unix_ns": T0,
                "started_at": "2023-11-14T22:13:20Z", "algorithm": self.algorithm,
                "config": {"run_id": self.run_id, "algorithm": self.algorithm},
                "catalog": run_catalog(),
            }))
        return run_dir


def any_value(v: object) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [any_value(x) for x in v]}}
    return {"stringValue": str(v)}


def key_values(attrs: Mapping[str, object]) -> list[dict[str, Any]]:
    return [{"key": k, "value": any_value(v)} for k, v in attrs.items()]


def otlp_span(s: SpanRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": s.trace_id, "spanId": s.span_id, "name": s.name, "kind": s.kind,
        "startTimeUnixNano": str(s.start_ns), "endTimeUnixNano": str(s.end_ns),
        "attributes": key_values(s.attributes),
    }
    if s.parent_span_id:
        out["parentSpanId"] = s.parent_span_id
    if s.status_code:
        out["status"] = {"code": s.status_code, "message": s.status_message}
    return out


def otlp_request(resource: Mapping[str, object], spans: list[SpanRecord]) -> dict[str, Any]:
    return {"resourceSpans": [{
        "resource": {"attributes": key_values(resource)},
        "scopeSpans": [{"scope": {"name": "rlsight", "version": "0"},
                        "spans": [otlp_span(s) for s in spans]}],
    }]}


def analyze(run: RunBuilder, **options: Any) -> RunReport:
    """Analyse a hand-built run (options as ``analyze_columns``)."""
    return analyze_spans(run.records(), **options)
