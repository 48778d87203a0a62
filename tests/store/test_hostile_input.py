"""Every store reader survives any input: it skips a bad record with ``file:line`` and keeps the rest.

docs/reliability.md names these tests as the proof of "readers never fail".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsight.analysis._read import read_span_columns
from rlsight.cli import EXIT_OK, main
from rlsight.spans import step_span
from rlsight.store import _lines, read_metrics, read_spans
from rlsight.testing import capture_telemetry

_TRACE = "0" * 31 + "1"


def _span(name: str = "work", *, start: Any = "1000", end: Any = "2000",
          attrs: dict[str, Any] | None = None, status: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": _TRACE, "spanId": "0" * 15 + "1", "name": name, "kind": 1,
        "startTimeUnixNano": start, "endTimeUnixNano": end,
        "attributes": [{"key": k, "value": v} for k, v in (attrs or {}).items()],
    }
    if status is not None:
        out["status"] = status
    return out


def _request(*spans: dict[str, Any]) -> str:
    resource = {"attributes": [{"key": "service.instance.id", "value": {"stringValue": "r/driver/0/1"}}]}
    return json.dumps({"resourceSpans": [
        {"resource": resource, "scopeSpans": [{"scope": {"name": "rlsight"}, "spans": list(spans)}]}]})


def _metric_request(value: Any) -> str:
    point = {"timeUnixNano": "2000", "asInt": value, "attributes": []}
    return json.dumps({"resourceMetrics": [{"resource": {"attributes": []}, "scopeMetrics": [
        {"scope": {"name": "rlsight"}, "metrics": [{"name": "m", "gauge": {"dataPoints": [point]}}]}]}]})


_GOOD = _request(_span("rl.step", attrs={"rl.step": {"intValue": "1"}}))
_BIG = str(2**63)
_DEEP = "[" * 100_000 + "]" * 100_000

#: One line each reader must skip, by what is wrong with it.
HOSTILE_SPAN_LINES = {
    "start_time_above_int64": _request(_span(start=str(2**64))),
    "end_time_below_int64": _request(_span(end=str(-(2**63) - 1))),
    "thread_id_above_int64": _request(_span(attrs={"thread.id": {"intValue": _BIG}})),
    "status_code_above_int64": _request(_span(status={"code": 2**70})),
    "step_above_int64": _request(_span("rl.step", attrs={"rl.step": {"intValue": _BIG}})),
    "nested_100k_deep": _DEEP,
    "deep_attribute_value": _request(_span(attrs={"x": {"stringValue": "@"}})).replace(
        '{"stringValue": "@"}', '{"arrayValue": {"values": [' * 400 + "]}}" * 400),
}


def _write(run_dir: Path, kind: str, lines: list[str]) -> Path:
    (run_dir / kind).mkdir(parents=True, exist_ok=True)
    path = run_dir / kind / "driver-0-1.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


class TestEveryReaderSkipsAHostileLine:
    @pytest.mark.parametrize("case", sorted(HOSTILE_SPAN_LINES))
    def test_read_spans_and_columns_keep_the_good_lines(self, case: str, tmp_path: Path) -> None:
        """The bad line is skipped with file:line by both span readers; both good lines stay."""
        path = _write(tmp_path, "traces", [_GOOD, HOSTILE_SPAN_LINES[case], _GOOD])
        records = read_spans(tmp_path)
        cols, skipped, _ = read_span_columns(tmp_path, workers=1)
        assert len(records.spans) == 2 and len(cols) == 2
        assert [(s.path, s.line) for s in records.skipped] == [(str(path), 2)]
        assert [(s.path, s.line) for s in skipped] == [(str(path), 2)]

    @pytest.mark.parametrize("case", sorted(HOSTILE_SPAN_LINES))
    def test_report_and_timeline_exit_0(self, case: str, tmp_path: Path, capsys) -> None:
        """The CLI reads past the bad line and says which line it skipped."""
        path = _write(tmp_path, "traces", [_GOOD, HOSTILE_SPAN_LINES[case]])
        assert main(["report", str(tmp_path)]) == EXIT_OK
        assert main(["timeline", str(tmp_path), "-o", str(tmp_path / "t.json")]) == EXIT_OK
        assert f"{path}:2:" in capsys.readouterr().err
        assert len(json.loads((tmp_path / "t.json").read_text())["traceEvents"]) > 0

    @pytest.mark.parametrize("line", [_DEEP, _metric_request(_BIG)], ids=["nested", "int_above_int64"])
    def test_read_metrics_and_report_on_a_metrics_file(self, line: str, tmp_path: Path) -> None:
        _write(tmp_path, "traces", [_GOOD])
        path = _write(tmp_path, "metrics", [_metric_request("3"), line])
        result = read_metrics(tmp_path)
        assert [p.value for p in result.points] == [3]
        assert [(s.path, s.line) for s in result.skipped] == [(str(path), 2)]
        assert main(["report", str(tmp_path)]) == EXIT_OK

    def test_a_line_over_the_limit_is_skipped_without_reading_it_whole(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A runaway line is skipped in bounded chunks; the lines after it still count."""
        monkeypatch.setattr(_lines, "MAX_LINE_BYTES", 100_000)
        huge = _request(_span(attrs={"blob": {"stringValue": "x" * 350_000}}))
        path = _write(tmp_path, "traces", [_GOOD, huge, _GOOD])
        for skipped, count in ((read_spans(tmp_path).skipped, len(read_spans(tmp_path).spans)),
                               (read_span_columns(tmp_path, workers=1)[1],
                                len(read_span_columns(tmp_path, workers=1)[0]))):
            assert count == 2
            assert [(s.path, s.line) for s in skipped] == [(str(path), 2)]
            assert "line too long" in skipped[0].reason


def test_step_span_above_int64_through_the_public_api_keeps_the_run_readable(tmp_path: Path) -> None:
    """``step_span(2**63)`` writes a readable store; report and timeline succeed."""
    run_dir = tmp_path / "run"
    with capture_telemetry(run_dir=run_dir):
        with step_span(2**63):
            pass
        with step_span(1):
            pass
    result = read_spans(run_dir)
    assert result.skipped == [] and len(result.spans) == 2
    assert {s.attributes["rl.step"] for s in result.spans} == {str(2**63), 1}
    assert main(["report", str(run_dir)]) == EXIT_OK
    assert main(["timeline", str(run_dir), "-o", str(tmp_path / "t.json")]) == EXIT_OK


@pytest.mark.parametrize("text", ["{broken", "[]", "\x00\xff", '"a run"'])
def test_a_damaged_manifest_is_a_skipped_record_not_a_silent_guess(
        text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose manifest.json cannot be read is still reported, from its spans; but what the
    manifest held (the configured span groups, the catalog of a library's groups) is gone, and
    the report must say so rather than read like a run without one."""
    from rlsight import TelemetryConfig, setup_telemetry
    from rlsight.analysis import analyze_run

    run_dir = tmp_path / "run"
    with setup_telemetry(TelemetryConfig(run_dir=str(run_dir))), step_span(1):
        pass
    manifest = run_dir / "manifest.json"
    assert manifest.is_file()
    manifest.write_bytes(text.encode("latin-1"))
    report = analyze_run(run_dir)
    assert report.summary.steps == 1 and report.summary.skipped == 1
    assert report.summary.skipped_examples[0].startswith(f"{manifest}:1: ")
    assert main(["report", str(run_dir)]) == EXIT_OK
    assert f"first: {manifest}:1: manifest.json" in capsys.readouterr().err
    assert main(["watch", str(run_dir), "--once"]) == EXIT_OK
    assert main(["runs", str(tmp_path)]) == EXIT_OK


# -- fuzzing: any bytes, any JSON, the readers return or skip, never raise ------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["resourceSpans", "resourceMetrics", "scopeSpans", "scopeMetrics", "spans",
                         "metrics", "gauge", "sum", "histogram", "dataPoints", "traceId", "spanId",
                         "name", "startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "asInt",
                         "asDouble", "attributes", "key", "value", "intValue", "stringValue",
                         "arrayValue", "values", "status", "code", "resource", "bucketCounts"]),
        inner, max_size=5),
    max_leaves=30,
)
_line = st.one_of(
    st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" ")),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.sampled_from([line.encode() for line in HOSTILE_SPAN_LINES.values()]),
    st.just(_GOOD.encode()),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_line, max_size=6), trailing_newline=st.booleans())
def test_fuzzed_store_files_never_raise_and_account_for_every_line(
        lines: list[bytes], trailing_newline: bool, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each non-blank line yields records or one skipped entry; the readers agree line for line."""
    run_dir = tmp_path_factory.mktemp("fuzz")
    for kind in ("traces", "metrics"):
        (run_dir / kind).mkdir()
        (run_dir / kind / "p-0-1.jsonl").write_bytes(b"\n".join(lines) + (b"\n" if trailing_newline else b""))
    spans = read_spans(run_dir)
    cols, skipped, _ = read_span_columns(run_dir, workers=1)
    metrics = read_metrics(run_dir)
    assert [(s.path, s.line) for s in skipped] == [(s.path, s.line) for s in spans.skipped]
    assert len(cols) == len(spans.spans)
    nonblank = sum(1 for line in lines if line.strip())
    assert len(spans.skipped) <= nonblank and len(metrics.skipped) <= nonblank


def test_collector_files_skip_a_hostile_line_too(tmp_path: Path) -> None:
    """Splitting a Collector's output reads through the same bounded reader."""
    from rlsight.store._collector import split_collector_files

    folder = tmp_path / "otel"
    folder.mkdir()
    path = folder / "telemetry.json"
    path.write_text("\n".join([_GOOD, _DEEP, _GOOD]) + "\n")
    split = split_collector_files(folder, tmp_path / "split")
    assert [(s.path, s.line) for s in split.skipped] == [(str(path), 2)]
