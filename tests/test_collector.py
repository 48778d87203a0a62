"""Against a real OTLP collector (rotel, on 127.0.0.1): export to both sinks, valid OTLP/JSON."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import rlsight
from rlsight import RL, TelemetryConfig, span
from rlsight.store import read_spans

rotel = pytest.importorskip("rotel")

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Collector:
    http: str
    grpc: str
    log: Path

    def wait_for(self, needle: str, timeout_s: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.log.read_text(errors="replace"):
                return True
            time.sleep(0.1)
        return False


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    agent = Path(rotel.__file__).parent / "rotel-agent"
    http_port, grpc_port = _free_port(), _free_port()
    log = tmp_path_factory.mktemp("rotel") / "rotel.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(agent), "start", "--otlp-http-endpoint", f"127.0.0.1:{http_port}",
             "--otlp-grpc-endpoint", f"127.0.0.1:{grpc_port}", "--exporter", "blackhole",
             "--debug-log", "traces", "--debug-log", "metrics",
             "--debug-log-verbosity", "detailed"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", http_port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail(f"rotel did not listen on {http_port}: {log.read_text()}")
        yield Collector(f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{grpc_port}", log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


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
