"""The local store (rlsight.store): OTLP/JSON lines on disk, read back as flat records."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from rlsight._redact import is_content_key
from rlsight.errors import StoreError
from rlsight.spans import span, umbrella_span
from rlsight.store import read_metrics, read_spans
from rlsight.store._exporters import LocalMetricExporter
from rlsight.store._schema import STATUS_ERROR
from rlsight.store._sink import FileSink
from rlsight.store._span_codec import encode_spans
from rlsight.testing import capture_telemetry


def _trace_lines(run_dir: Path) -> list[dict[str, Any]]:
    (path,) = sorted((run_dir / "traces").glob("*.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


def _all_spans(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        s for line in lines for rs in line["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]
    ]


def _write_two_spans(run_dir: Path) -> None:
    with capture_telemetry(run_dir=run_dir):
        with umbrella_span("rollout", "rl.test.parent"), span(
            "generation", "rl.test.child", batch=8, ratio=0.5, ok=True, model="m", lengths=[1, 2]
        ):
            pass


class TestOtlpJson:
    def test_ids_are_lowercase_hex_and_times_are_decimal_strings(self, run_dir: Path) -> None:
        _write_two_spans(run_dir)
        spans = {s["name"]: s for s in _all_spans(_trace_lines(run_dir))}
        child, parent = spans["rl.test.child"], spans["rl.test.parent"]
        assert re.fullmatch(r"[0-9a-f]{32}", child["traceId"])
        assert re.fullmatch(r"[0-9a-f]{16}", child["spanId"])
        assert child["parentSpanId"] == parent["spanId"] and "parentSpanId" not in parent
        assert re.fullmatch(r"\d+", child["startTimeUnixNano"])
        assert int(child["endTimeUnixNano"]) >= int(child["startTimeUnixNano"])

    def test_kind_is_the_otlp_enum(self, run_dir: Path) -> None:
        _write_two_spans(run_dir)
        assert {s["kind"] for s in _all_spans(_trace_lines(run_dir))} == {1}  # SPAN_KIND_INTERNAL

    def test_attribute_values_use_the_otlp_any_value_mapping(self, run_dir: Path) -> None:
        _write_two_spans(run_dir)
        child = next(s for s in _all_spans(_trace_lines(run_dir)) if s["name"] == "rl.test.child")
        attrs = {kv["key"]: kv["value"] for kv in child["attributes"]}
        assert attrs["rl.batch"] == {"intValue": "8"}
        assert attrs["rl.ratio"] == {"doubleValue": 0.5}
        assert attrs["rl.ok"] == {"boolValue": True}
        assert attrs["rl.model"] == {"stringValue": "m"}
        assert attrs["rl.lengths"] == {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"}]}}

    def test_a_map_or_none_set_on_a_span_is_written_as_its_otlp_exporter_sends_it(
        self, run_dir: Path
    ) -> None:
        """``set_attribute`` with a dict or None (OpenTelemetry's AnyValue): a ``kvlistValue``
        and the empty value, as a collector receives them, not Python's text of the value."""
        with capture_telemetry(run_dir=run_dir):
            with span("generation", "rl.test.child") as s:
                s.set_attribute("cfg", {"lr": 0.5, "layers": [1, 2]})
                s.set_attribute("gone", None)
        (child,) = _all_spans(_trace_lines(run_dir))
        attrs = {kv["key"]: kv["value"] for kv in child["attributes"]}
        assert attrs["cfg"] == {"kvlistValue": {"values": [
            {"key": "lr", "value": {"doubleValue": 0.5}},
            {"key": "layers", "value": {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"}]}}},
        ]}}
        assert attrs["gone"] == {}
        (read,) = read_spans(run_dir).spans
        assert json.loads(str(read.attributes["cfg"])) == {"lr": 0.5, "layers": [1, 2]}
        assert "gone" not in read.attributes

    def test_error_status_is_code_2_with_the_message(self, run_dir: Path) -> None:
        with capture_telemetry(run_dir=run_dir), pytest.raises(ValueError):
            with span("generation", "rl.test.fail"):
                raise ValueError("bad batch")
        (failed,) = _all_spans(_trace_lines(run_dir))
        assert failed["status"] == {"code": 2, "message": "ValueError: bad batch"}
        assert [e["name"] for e in failed["events"]] == ["exception"]

    def test_ok_span_has_no_status(self, run_dir: Path) -> None:
        _write_two_spans(run_dir)
        assert all("status" not in s for s in _all_spans(_trace_lines(run_dir)))

    def test_resource_and_scope_are_written_once_per_request(self, run_dir: Path) -> None:
        _write_two_spans(run_dir)
        (line,) = _trace_lines(run_dir)
        (rs,) = line["resourceSpans"]
        resource = {kv["key"]: kv["value"] for kv in rs["resource"]["attributes"]}
        assert resource["service.name"] == {"stringValue": "rlsight"}
        assert resource["rl.rank"] == {"intValue": "0"}
        (ss,) = rs["scopeSpans"]
        assert ss["scope"]["name"] == "rlsight" and len(ss["spans"]) == 2

    def test_one_file_per_process_named_after_group_rank_and_pid(self, run_dir: Path) -> None:
        _write_two_spans(run_dir)
        assert [p.name for p in (run_dir / "traces").iterdir()] == [f"driver-0-{os.getpid()}.jsonl"]

    def test_nan_metric_point_is_written_as_the_string_nan_and_read_back_as_nan(self, run_dir: Path) -> None:
        """NaN is how a missing value draws a gap; JSON has no NaN, OTLP/JSON spells it "NaN"."""
        # The SDK's instruments drop non-finite measurements, so build the export batch itself.
        point = NumberDataPoint(
            attributes={"series": "missing"}, start_time_unix_nano=1, time_unix_nano=2, value=math.nan
        )
        data = MetricsData([ResourceMetrics(
            Resource.create({"service.name": "t"}),
            [ScopeMetrics(
                InstrumentationScope("rlsight"),
                [Metric("rl.test.gap", "", "", Gauge([point])),
                 Metric("rl.test.inf", "", "", Gauge([NumberDataPoint({}, 1, 2, math.inf)]))],
                "",
            )],
            "",
        )])
        sink = FileSink(run_dir / "metrics" / "w-0-1.jsonl")
        assert LocalMetricExporter(sink).export(data) is MetricExportResult.SUCCESS
        sink.close()
        raw = (run_dir / "metrics" / "w-0-1.jsonl").read_text()
        assert '"asDouble":"NaN"' in raw and '"asDouble":"Infinity"' in raw
        points = {p.name: p for p in read_metrics(run_dir).points}
        gap = points["rl.test.gap"]
        assert gap.kind == "gauge" and gap.attributes == {"series": "missing"}
        assert isinstance(gap.value, float) and math.isnan(gap.value)
        assert points["rl.test.inf"].value == math.inf

    def test_histogram_points_round_trip(self, run_dir: Path) -> None:
        with capture_telemetry(run_dir=run_dir) as cap:
            hist = cap.runtime.meter.create_histogram("rl.test.latency", unit="s")
            for v in (0.1, 0.2, 3.0):
                hist.record(v)
        (point,) = [p for p in read_metrics(run_dir).points if p.name == "rl.test.latency"]
        assert point.kind == "histogram" and point.unit == "s"
        assert point.count == 3 and point.sum == pytest.approx(3.3)
        assert sum(point.bucket_counts) == 3
        assert point.temporality == 1  # delta


_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_attr_values = st.one_of(
    st.booleans(), _int64, st.floats(), st.text(max_size=10),
    st.lists(_int64, max_size=3).map(tuple), st.lists(st.floats(), max_size=3).map(tuple),
    st.lists(st.text(max_size=5), max_size=3).map(tuple),
)


_attr_keys = st.from_regex(r"rl\.[a-z]{1,8}", fullmatch=True).filter(
    lambda key: not is_content_key(key)
)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


class TestAttributeRoundTrip:
    @given(attrs=st.dictionaries(_attr_keys, _attr_values, max_size=5))
    @settings(max_examples=100, deadline=None)
    def test_attribute_values_read_back_with_their_types(self, attrs: dict[str, Any]) -> None:
        """Ints stay ints (int64 travels as a string), NaN and infinities survive JSON."""
        with capture_telemetry() as cap, tempfile.TemporaryDirectory() as tmp:
            with span("generation", "rl.test.attrs", **attrs):
                pass
            sink = FileSink(Path(tmp) / "traces" / "t-0-1.jsonl")
            sink.write(encode_spans(cap.spans()))
            sink.close()
            (record,) = read_spans(tmp).spans
        for key, value in attrs.items():
            assert _same(value, record.attributes[key]), key


class TestReader:
    def test_read_spans_returns_flat_records_with_wire_names(self, run_dir: Path) -> None:
        _write_two_spans(run_dir)
        result = read_spans(run_dir)
        assert result.files == 1 and result.skipped == []
        by_name = {s.name: s for s in result.spans}
        child, parent = by_name["rl.test.child"], by_name["rl.test.parent"]
        assert child.parent_span_id == parent.span_id and parent.parent_span_id is None
        assert child.attributes["rl.bucket"] == "productive"
        assert child.attributes["rl.lengths"] == (1, 2)
        assert child.timeline == (child.resource["service.instance.id"], threading.get_native_id())
        assert child.duration_ns == child.end_ns - child.start_ns >= 0

    def test_error_status_is_read_back(self, run_dir: Path) -> None:
        with capture_telemetry(run_dir=run_dir), pytest.raises(KeyError):
            with span("generation", "rl.test.fail"):
                raise KeyError("k")
        (record,) = read_spans(run_dir).spans
        assert record.status_code == STATUS_ERROR and record.status_message == "KeyError: 'k'"

    def test_missing_run_dir_is_a_store_error(self, tmp_path: Path) -> None:
        with pytest.raises(StoreError, match="does not exist"):
            read_spans(tmp_path / "nope")

    def test_run_dir_without_traces_reads_as_empty(self, tmp_path: Path) -> None:
        result = read_spans(tmp_path)
        assert result.spans == [] and result.files == 0

    def test_truncated_and_garbage_lines_are_skipped_with_file_and_line(self, run_dir: Path) -> None:
        """Bad input loses nothing: every other span of the file is still returned."""
        _write_two_spans(run_dir)
        (path,) = (run_dir / "traces").glob("*.jsonl")
        good = path.read_text()
        assert good.count("\n") == 1
        path.write_text(good + "this is not json\n" + '{"unrelated": 1}\n' + good + good[: len(good) // 2])
        result = read_spans(run_dir)
        assert len(result.spans) == 4
        assert [(s.path, s.line) for s in result.skipped] == [(str(path), 2), (str(path), 3), (str(path), 5)]
        assert "not JSON" in result.skipped[0].reason
        assert "not an OTLP traces request" in result.skipped[1].reason
        assert "truncated line" in result.skipped[2].reason
        assert str(result.skipped[2]).startswith(f"{path}:5: truncated line")

    def test_a_bad_file_does_not_hide_other_files(self, run_dir: Path) -> None:
        _write_two_spans(run_dir)
        (run_dir / "traces" / "broken-0-1.jsonl").write_bytes(b"\xff\xfe not utf8\n")
        result = read_spans(run_dir)
        assert len(result.spans) == 2 and result.files == 2
        broken = str(run_dir / "traces" / "broken-0-1.jsonl")
        assert [(s.path, s.line) for s in result.skipped] == [(broken, 1)]

    def test_truncated_metric_line_is_skipped(self, run_dir: Path) -> None:
        metrics = run_dir / "metrics"
        metrics.mkdir(parents=True)
        (metrics / "w-0-1.jsonl").write_text('{"resourceMetrics": [')
        result = read_metrics(run_dir)
        assert result.points == [] and [s.line for s in result.skipped] == [1]


# -- across processes --------------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import json, os, sys
    from rlsight import TelemetryConfig, setup_telemetry, shutdown_telemetry, span, umbrella_span
    setup_telemetry(TelemetryConfig(run_id="xproc", run_dir=sys.argv[1], span_groups=("all",)),
                    worker_group="writer", rank=1, world_size=2)
    ids = {}
    with umbrella_span("step", "rl.test.outer") as outer:
        for i in range(3):
            with span("generation", "rl.test.inner", index=i) as inner:
                ids[format(inner.get_span_context().span_id, "016x")] = i
    ids["outer"] = format(outer.get_span_context().span_id, "016x")
    shutdown_telemetry()
    print(json.dumps({"pid": os.getpid(), "ids": ids}))
    """
)

_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from rlsight import TelemetryConfig, setup_telemetry, span
    setup_telemetry(TelemetryConfig(run_id="killed", run_dir=sys.argv[1], span_groups=("all",)))
    i = 0
    while True:
        with span("generation", "rl.test.tick", index=i) as s:
            pass
        print(format(s.get_span_context().span_id, "016x"), time.monotonic_ns(), flush=True)
        i += 1
        time.sleep(0.002)
    """
)


def _child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RLSIGHT_", "OTEL_"))}

_KILLED_METRIC_WRITER = textwrap.dedent(
    """
    import sys, time
    from rlsight import MetricSpec, TelemetryConfig, record_metrics, register_metric_group, setup_telemetry
    setup_telemetry(TelemetryConfig(run_id="killed", run_dir=sys.argv[1]))
    register_metric_group("killed", [MetricSpec("killed.loss", "loss", "gauge", "1", "a loss")])
    i = 0
    while True:
        record_metrics("killed", {"loss": 0.5}, {"rl.step": i})
        print(i, time.monotonic_ns(), flush=True)
        i += 1
        time.sleep(0.002)
    """
)

_FLUSHED_THEN_KILLED = textwrap.dedent(
    """
    import sys
    from rlsight import (MetricSpec, TelemetryConfig, flush_telemetry, record_metrics,
                         register_metric_group, setup_telemetry, span)
    # Long store intervals cannot be configured, so the kill follows the flush at once: what
    # is on disk was written by flush_telemetry, not by the periodic writers.
    setup_telemetry(TelemetryConfig(run_id="flushed", run_dir=sys.argv[1], span_groups=("all",)))
    register_metric_group("flushed", [MetricSpec("flushed.loss", "loss", "gauge", "1", "a loss")])
    with span("generation", "rl.test.last"):
        record_metrics("flushed", {"loss": 0.25}, {"rl.step": 7})
    print(flush_telemetry(5000), flush=True)
    import os, signal
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


class TestAcrossProcesses:
    def test_spans_written_by_one_process_are_read_back_by_another(self, run_dir: Path) -> None:
        done = subprocess.run(
            [sys.executable, "-c", _WRITER, str(run_dir)],
            capture_output=True, text=True, timeout=120, env=_child_env(), check=True,
        )
        written = json.loads(done.stdout.strip().splitlines()[-1])
        outer_id = written["ids"].pop("outer")
        result = read_spans(run_dir)
        assert result.skipped == []
        by_id = {s.span_id: s for s in result.spans}
        assert set(by_id) == {outer_id, *written["ids"]}
        for span_id, index in written["ids"].items():
            record = by_id[span_id]
            assert record.name == "rl.test.inner" and record.parent_span_id == outer_id
            assert record.attributes["rl.index"] == index
        resource = by_id[outer_id].resource
        assert resource["process.pid"] == written["pid"]
        assert resource["service.instance.id"] == f"xproc/writer/1/{written['pid']}"

    def test_sigkilled_writer_loses_only_the_last_200_ms(self, run_dir: Path) -> None:
        """Every span that ended 200 ms or more before a SIGKILL is on disk (Ray kills actors)."""
        proc = subprocess.Popen(
            [sys.executable, "-u", "-c", _KILLED_WRITER, str(run_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_child_env(),
        )
        ended: list[tuple[str, int]] = []
        try:
            assert proc.stdout is not None
            while len(ended) < 150:
                line = proc.stdout.readline()
                assert line, "writer exited early"
                span_id, t_ns = line.split()
                ended.append((span_id, int(t_ns)))
        finally:
            killed_at = time.monotonic_ns()
            proc.send_signal(signal.SIGKILL)
            rest, _ = proc.communicate(timeout=30)
        for line in rest.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                ended.append((parts[0], int(parts[1])))
        assert proc.returncode == -signal.SIGKILL
        must_survive = {sid for sid, t in ended if t <= killed_at - 200_000_000}
        assert len(must_survive) >= 20, "the writer ran too briefly to test anything"
        result = read_spans(run_dir)
        assert must_survive <= {s.span_id for s in result.spans}
        assert all(s.reason.startswith("truncated line") for s in result.skipped)

    def test_sigkilled_writer_loses_only_the_last_200_ms_of_metric_points(self, run_dir: Path) -> None:
        """Issue #18: metric points were written every 1 s, so a SIGKILL lost up to a second."""
        proc = subprocess.Popen(
            [sys.executable, "-u", "-c", _KILLED_METRIC_WRITER, str(run_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_child_env(),
        )
        recorded: list[tuple[int, int]] = []
        try:
            assert proc.stdout is not None
            while len(recorded) < 150:
                line = proc.stdout.readline()
                assert line, "writer exited early"
                step, t_ns = line.split()
                recorded.append((int(step), int(t_ns)))
        finally:
            killed_at = time.monotonic_ns()
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        must_survive = {step for step, t in recorded if t <= killed_at - 200_000_000}
        assert len(must_survive) >= 20, "the writer ran too briefly to test anything"
        result = read_metrics(run_dir)
        assert must_survive <= {p.attributes["rl.step"] for p in result.points if p.name == "killed.loss"}
        assert all(s.reason.startswith("truncated line") for s in result.skipped)

    def test_flush_telemetry_writes_the_last_span_and_point_before_a_kill(self, run_dir: Path) -> None:
        done = subprocess.run(
            [sys.executable, "-c", _FLUSHED_THEN_KILLED, str(run_dir)],
            capture_output=True, text=True, timeout=120, env=_child_env(), check=False,
        )
        assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
        assert done.stdout.split() == ["True"]
        assert [s.name for s in read_spans(run_dir).spans] == ["rl.test.last"]
        points = [p for p in read_metrics(run_dir).points if p.name == "flushed.loss"]
        assert [(p.attributes["rl.step"], p.value) for p in points] == [(7, 0.25)]


def test_every_otlp_value_kind_is_read_and_an_empty_value_drops_only_itself(tmp_path: Path) -> None:
    """kvlist, bytes and empty values are valid OTLP: the span around them must not be lost."""
    import json

    from rlsight.analysis._read import read_span_columns

    (tmp_path / "traces").mkdir()
    kv = [
        {"key": "m", "value": {"kvlistValue": {"values": [{"key": "a", "value": {"intValue": "1"}}]}}},
        {"key": "b", "value": {"bytesValue": "AAE="}},
        {"key": "e", "value": {}},
        {"key": "thread.id", "value": {"intValue": "3"}},
    ]
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "rl.a", "kind": 1,
            "startTimeUnixNano": "1", "endTimeUnixNano": "5", "attributes": kv}
    request = {"resourceSpans": [{"resource": {"attributes": []},
                                  "scopeSpans": [{"scope": {"name": "x"}, "spans": [span]}]}]}
    (tmp_path / "traces" / "x.jsonl").write_text(json.dumps(request) + "\n")
    result = read_spans(tmp_path)
    assert result.skipped == []
    (record,) = result.spans
    assert dict(record.attributes) == {"m": '{"a": 1}', "b": "AAE=", "thread.id": 3}
    columns, skipped, _files = read_span_columns(tmp_path)
    assert len(columns.start) == 1 and skipped == []


def test_a_run_written_in_an_unknown_store_format_is_refused_with_the_supported_versions(
    tmp_path: Path,
) -> None:
    import json

    from rlsight.errors import StoreError

    (tmp_path / "traces").mkdir()
    (tmp_path / "manifest.json").write_text(json.dumps({"store_format": 99}))
    with pytest.raises(StoreError, match=r"store format 99.*reads formats \[1\]"):
        read_spans(tmp_path)
