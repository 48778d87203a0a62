"""Against a real OTLP collector (rotel, on 127.0.0.1): export to both sinks, valid OTLP/JSON."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

import rlsight
from _rotel import Collector
from rlsight import RL, TelemetryConfig, span
from rlsight.store import read_spans

pytest.importorskip("rotel")

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_spans_reach_the_collector_and_the_local_store(
    collector: Collector, tmp_path: Path, protocol: str
) -> None:
    """With an endpoint set, every span goes to the collector *and* the run folder."""
    name = f"rl.train.to_both_{protocol.replace('/', '_')}"
    endpoint = collector.http if protocol == "http/protobuf" else collector.grpc
    rlsight.setup_telemetry(TelemetryConfig(
        run_dir=str(tmp_path), span_groups=("all",), otlp_endpoint=endpoint, otlp_protocol=protocol,
    ))
    try:
        with rlsight.job_span(), span(RL.TRAINING, name):
            pass
    finally:
        report = rlsight.shutdown_telemetry(timeout_ms=5000)
    assert report.dropped_total == 0
    assert report.exported == {"store": 2, "otlp": 2}
    assert collector.wait_for(name)
    assert name in {s.name for s in read_spans(tmp_path).spans}


def _post_json(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


def test_store_lines_are_otlp_json_a_collector_accepts(collector: Collector, tmp_path: Path) -> None:
    """Each stored line, posted as-is to OTLP/HTTP with JSON encoding, is parsed by the collector."""
    rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=("all",)))
    try:
        with (
            rlsight.startup_span(),
            rlsight.setup_span("collector_json_phase"),
            span(RL.GENERATION, "rl.rollout.stored_json_span", batch_size=3, ratio=0.5),
        ):
            pass
    finally:
        rlsight.shutdown_telemetry()
    trace_lines = (tmp_path / "traces").glob("*.jsonl")
    metric_lines = (tmp_path / "metrics").glob("*.jsonl")
    for path in trace_lines:
        for line in path.read_bytes().splitlines():
            assert _post_json(f"{collector.http}/v1/traces", line) == 200
    posted_metrics = 0
    for path in metric_lines:
        for line in path.read_bytes().splitlines():
            json.loads(line)
            assert _post_json(f"{collector.http}/v1/metrics", line) == 200
            posted_metrics += 1
    assert posted_metrics >= 1
    assert collector.wait_for("rl.rollout.stored_json_span")
    assert collector.wait_for("collector_json_phase")  # the rl.setup.duration point's attribute
