"""OTLP export under hostile sizes and outages, against a real collector (rotel on 127.0.0.1).

docs/reliability.md names these tests for the OTLP guarantees.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

import rlsight
from _rotel import Collector
from rlsight import RL, TelemetryConfig, span
from rlsight._batching import BatchingSpanProcessor

pytest.importorskip("rotel")

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def _count(collector: Collector, needle: str, expected: int, timeout_s: float = 20.0) -> int:
    deadline = time.monotonic() + timeout_s
    seen = 0
    while time.monotonic() < deadline:
        seen = collector.log.read_text(errors="replace").count(needle)
        if seen >= expected:
            break
        time.sleep(0.2)
    return seen


def _emit(name: str, n: int, big: str) -> None:
    for i in range(n):
        with span(RL.TRAINING, name, seq=i):
            pass
    with span(RL.TRAINING, name, blob=big):
        pass


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_5_mb_attribute_is_truncated_and_its_batch_delivered(
        collector: Collector, tmp_path: Path, protocol: str) -> None:
    """One huge attribute used to lose its whole gRPC batch (0 of 1,001); now all 1,001 arrive."""
    name = f"rl.test.bulk_{uuid.uuid4().hex[:8]}"
    endpoint = collector.grpc if protocol == "grpc" else collector.http
    rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=("all",),
                                            otlp_endpoint=endpoint, otlp_protocol=protocol))
    try:
        _emit(name, 1000, "x" * 5_000_000)
    finally:
        report = rlsight.shutdown_telemetry(timeout_ms=10_000)
    assert report.exported["otlp"] == 1001 and report.dropped_total == 0
    assert _count(collector, name, 1001) >= 1001


def test_a_span_too_large_to_send_is_dropped_alone_and_counted(
        collector: Collector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the attribute cap lifted, the oversize span is dropped (``too_large``); its batch is not."""
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", str(10_000_000))
    name = f"rl.test.bulk_{uuid.uuid4().hex[:8]}"
    rlsight.setup_telemetry(TelemetryConfig(run_dir=str(tmp_path), span_groups=("all",),
                                            otlp_endpoint=collector.grpc, otlp_protocol="grpc"))
    try:
        _emit(name, 1000, "x" * 5_000_000)
    finally:
        report = rlsight.shutdown_telemetry(timeout_ms=10_000)
    assert report.dropped == {"otlp/too_large": 1}
    assert report.exported == {"store": 1001, "otlp": 1000}
    assert _count(collector, name, 1000) >= 1000


class _Span:
    def __init__(self, blob: str) -> None:
        self.end_time = time.time_ns()
        self.attributes = {"blob": blob}
        self.events = ()


def test_the_queue_is_bounded_in_bytes_against_a_hung_exporter() -> None:
    """A hung collector holds at most max_queue_bytes of spans; the rest are counted, not kept."""
    release = threading.Event()
    proc = BatchingSpanProcessor(lambda batch: release.wait(10), name="t", interval_s=60,
                                 size_of=lambda s: 2048 + len(s.attributes["blob"]),  # type: ignore[attr-defined]
                                 max_queue_bytes=1_000_000, max_batch_bytes=200_000)
    try:
        for _ in range(1000):
            proc.on_end(_Span("y" * 8000))  # type: ignore[arg-type]
        assert proc.queued_bytes <= 1_000_000
        assert proc.queued == 1_000_000 // 10_048
        assert proc.dropped["queue_full"] == 1000 - proc.queued
    finally:
        release.set()
        proc.shutdown(2000)
