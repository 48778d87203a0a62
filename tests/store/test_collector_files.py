"""Collector file-exporter output read as runs: several runs and signals in one file, repeats.

The files are made of lines real runs wrote (the store's lines are OTLP/JSON requests, which is
what a Collector's file exporter appends), mixed the way a Collector mixes them: both runs and
both signals in one file, a rotated second file, a retried batch written twice, a log line.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsight import RL, TelemetryConfig, job_span, setup_span, setup_telemetry, span, startup_span, step_span
from rlsight.cli import EXIT_INPUT, EXIT_OK, EXIT_USAGE, main
from rlsight.store import read_spans, split_collector_files


def _real_run(root: Path, run_id: str, steps: int) -> Path:
    config = TelemetryConfig(run_id=run_id, run_dir=str(root / run_id), span_groups=("per_step",),
                             strict=True)
    with setup_telemetry(config) as telemetry, job_span(total_steps=steps):
        with startup_span(), setup_span("workers"):
            pass
        for step in range(1, steps + 1):
            with step_span(step), span(RL.TRAINING, "rl.train.policy"):
                pass
    return telemetry.config.run_path


def _lines(run: Path) -> list[str]:
    return [line for kind in ("traces", "metrics") for f in sorted((run / kind).glob("*.jsonl"))
            for line in f.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    return _real_run(root, "alpha", 3), _real_run(root, "beta", 5)


@pytest.fixture
def otel(runs: tuple[Path, Path], tmp_path: Path) -> Path:
    """A Collector output folder: both runs interleaved, a rotated file, a repeat of beta's, a log line."""
    lines = _lines(runs[0]) + _lines(runs[1])
    random.Random(7).shuffle(lines)
    folder = tmp_path / "otel"
    folder.mkdir()
    cut = len(lines) // 3
    (folder / "telemetry-2026-11-30T15-00-00.000.json").write_text("\n".join(lines[:cut]) + "\n")
    repeat = next(line for line in _lines(runs[1]) if "resourceSpans" in line)  # beta's: its report notes it
    log = json.dumps({"resourceLogs": [{"resource": {}, "scopeLogs": []}]})
    (folder / "telemetry.json").write_text("\n".join([*lines[cut:], repeat, log, "{not json"]) + "\n")
    (folder / "README.txt").write_text("not read: only *.json and *.jsonl files are")
    return folder


def _span_ids(run: Path) -> set[tuple[str, str]]:
    return {(s.trace_id, s.span_id) for s in read_spans(run).spans}


class TestSplit:
    def test_each_run_gets_exactly_its_own_spans_once(self, runs, otel, tmp_path):
        split = split_collector_files(otel, tmp_path / "split")
        assert set(split.runs) == {"alpha", "beta"}
        for run in runs:
            mine = split.runs[run.name]
            spans = read_spans(mine.folder).spans
            assert len(spans) == len({(s.trace_id, s.span_id) for s in spans}) == mine.spans
            assert _span_ids(mine.folder) == _span_ids(run)

    def test_a_repeated_batch_is_counted_not_kept(self, otel, tmp_path):
        split = split_collector_files(otel, tmp_path / "split")
        assert split.duplicate_spans > 0
        assert split.files == 2

    def test_a_line_that_is_not_json_is_skipped_with_file_and_line(self, otel, tmp_path):
        split = split_collector_files(otel, tmp_path / "split")
        [bad] = split.skipped
        assert bad.path.endswith("telemetry.json") and "not JSON" in bad.reason

    def test_metric_points_go_to_their_run(self, otel, tmp_path):
        split = split_collector_files(otel, tmp_path / "split")
        assert split.runs["alpha"].metric_points > 0 and split.runs["beta"].metric_points > 0

    def test_a_request_mixing_runs_is_divided(self, runs, tmp_path):
        a, b = (json.loads(next(line for line in _lines(r) if "resourceSpans" in line)) for r in runs)
        mixed = {"resourceSpans": a["resourceSpans"] + b["resourceSpans"]}
        (tmp_path / "one.json").write_text(json.dumps(mixed) + "\n")
        split = split_collector_files(tmp_path / "one.json", tmp_path / "split")
        assert {r: v.spans for r, v in split.runs.items()} == {
            "alpha": sum(len(ss["spans"]) for ss in a["resourceSpans"][0]["scopeSpans"]),
            "beta": sum(len(ss["spans"]) for ss in b["resourceSpans"][0]["scopeSpans"]),
        }

    def test_a_malformed_request_is_skipped_whole_and_its_spans_stay_readable_later(self, runs, tmp_path):
        good = json.loads(next(line for line in _lines(runs[0]) if "resourceSpans" in line))
        broken = json.loads(json.dumps(good))
        del broken["resourceSpans"][0]["scopeSpans"][0]["spans"][-1]["spanId"]
        (tmp_path / "c.json").write_text(json.dumps(broken) + "\n" + json.dumps(good) + "\n")
        split = split_collector_files(tmp_path / "c.json", tmp_path / "split")
        assert len(split.skipped) == 1 and split.duplicate_spans == 0
        expected = sum(len(ss["spans"]) for ss in good["resourceSpans"][0]["scopeSpans"])
        assert split.runs["alpha"].spans == expected


class TestCommands:
    def test_report_of_one_run_equals_the_report_of_its_run_folder(self, runs, otel, capsys):
        assert main(["report", str(runs[1]), "--json"]) == EXIT_OK
        direct = json.loads(capsys.readouterr().out)
        assert main(["report", str(otel), "--run-id", "beta", "--json"]) == EXIT_OK
        via = json.loads(capsys.readouterr().out)
        for key in ("steps", "step_summary", "top_spans", "span_steps", "fleets", "startup"):
            assert via[key] == direct[key], key
        assert via["summary"]["spans"] == direct["summary"]["spans"]
        assert via["summary"]["buckets"] == direct["summary"]["buckets"]
        assert via["summary"]["skipped"] == 1
        assert any("repeated span(s)" in n for n in via["notes"])

    def test_a_runs_report_counts_only_its_own_repeats(self, runs, tmp_path, capsys):
        alpha, beta = (_lines(r) for r in runs)
        repeat = next(line for line in alpha if "resourceSpans" in line)
        repeated = sum(len(ss["spans"]) for rs in json.loads(repeat)["resourceSpans"]
                       for ss in rs["scopeSpans"])
        (tmp_path / "otel.json").write_text("\n".join([*alpha, *beta, repeat]) + "\n")
        split = split_collector_files(tmp_path / "otel.json", tmp_path / "split")
        assert (split.runs["alpha"].duplicate_spans, split.runs["beta"].duplicate_spans) == (repeated, 0)
        assert main(["report", str(tmp_path / "otel.json"), "--run-id", "beta", "--json"]) == EXIT_OK
        assert not any("repeated" in n for n in json.loads(capsys.readouterr().out)["notes"])
        assert main(["report", str(tmp_path / "otel.json"), "--run-id", "alpha", "--json"]) == EXIT_OK
        notes = json.loads(capsys.readouterr().out)["notes"]
        assert any(n.startswith(f"{repeated} repeated span(s) and 0 ") for n in notes), notes

    def test_the_runs_root_is_not_a_run_and_the_error_names_its_runs(self, runs, capsys):
        root = runs[0].parent  # ./rlsight-runs: what a newcomer passes first
        assert main(["report", str(root)]) == EXIT_INPUT
        err = capsys.readouterr().err
        assert f"{root} is a folder of runs (alpha, beta), not a run" in err
        assert f"rlsight runs {root}" in err

    def test_several_runs_without_run_id_is_a_usage_error_listing_them(self, otel, capsys):
        assert main(["report", str(otel)]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert "hold 2 runs: alpha (" in err and "beta (" in err and "--run-id" in err

    def test_an_unknown_run_id_exits_3_naming_the_runs_found(self, otel, capsys):
        assert main(["report", str(otel), "--run-id", "gamma"]) == EXIT_INPUT
        assert "runs found: alpha, beta" in capsys.readouterr().err

    def test_a_single_run_file_needs_no_run_id(self, runs, tmp_path, capsys):
        one = tmp_path / "alpha.jsonl"
        one.write_text("\n".join(_lines(runs[0])) + "\n")
        assert main(["report", str(one), "--json"]) == EXIT_OK
        assert json.loads(capsys.readouterr().out)["summary"]["run_id"] == "alpha"

    def test_timeline_writes_each_span_of_the_chosen_run_once(self, runs, otel, tmp_path, capsys):
        out = tmp_path / "trace.json"
        assert main(["timeline", str(otel), "--run-id", "alpha", "-o", str(out)]) == EXIT_OK
        events = json.loads(out.read_text())["traceEvents"]
        slices = [e for e in events if e.get("ph") == "X"]
        assert len(slices) == len(_span_ids(runs[0]))

    def test_run_id_on_a_run_folder_of_another_run_exits_3(self, runs, capsys):
        assert main(["report", str(runs[0]), "--run-id", "beta"]) == EXIT_INPUT
        assert "holds run 'alpha', not 'beta'" in capsys.readouterr().err


def _request(run_id: str, span_ids: list[int]) -> str:
    resource = {"attributes": [{"key": "rl.run.id", "value": {"stringValue": run_id}}]}
    spans = [{"traceId": f"{sid:032x}", "spanId": f"{sid:016x}", "name": "s", "kind": 1,
              "startTimeUnixNano": "1", "endTimeUnixNano": "2", "attributes": []} for sid in span_ids]
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]),
                               st.lists(st.integers(1, 60), min_size=1, max_size=6)),
                     min_size=1, max_size=25),
    files=st.integers(1, 4),
    seed=st.integers(0, 1000),
)
def test_any_layout_of_retried_batches_splits_into_each_span_once(tmp_path_factory, batches, files, seed):
    """However batches (retried, overlapping) are spread over files: each run gets each of its
    span ids exactly once, and every repeat is counted."""
    root = tmp_path_factory.mktemp("prop")
    lines = [_request(run, ids) for run, ids in batches]
    rng = random.Random(seed)
    for i in range(files):
        (root / f"otel-{i}.json").write_text("")
    for line in lines:
        with (root / f"otel-{rng.randrange(files)}.json").open("a") as fh:
            fh.write(line + "\n")
    split = split_collector_files(root, root / "split")
    # The same span id in two runs is the same span (ids are the key): the first run keeps it.
    owner: dict[int, str] = {}
    total = 0
    for path in sorted(root.glob("otel-*.json")):
        for line in path.read_text().splitlines():
            request = json.loads(line)
            run = request["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"]
            for s in request["resourceSpans"][0]["scopeSpans"][0]["spans"]:
                owner.setdefault(int(s["spanId"], 16), run)
                total += 1
    for run in {"a", "b", "c"}:
        expected = {sid for sid, r in owner.items() if r == run}
        spans = read_spans(split.runs[run].folder).spans if run in split.runs else []
        assert sorted(int(s.span_id, 16) for s in spans) == sorted(expected)
    assert split.duplicate_spans == total - len(owner)


def test_watch_reads_one_run_of_collector_files(runs, otel, capsys):
    """Collector files carry no start records: watch shows the run's finished steps, the
    planned length from the finished rl.job, and the path it was given (not the temporary
    folder the files were split into, gone once the command ends)."""
    assert main(["watch", str(otel), "--run-id", "beta", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1
    assert (doc["steps"], doc["last_step"], doc["total_steps"]) == (5, 5, 5)
    assert doc["run_dir"] == str(otel)
    assert main(["watch", str(otel), "--run-id", "beta", "--once"]) == EXIT_OK
    assert "last step 5 of 5" in capsys.readouterr().out
    assert main(["watch", str(otel), "--once"]) == EXIT_USAGE
    assert "--run-id" in capsys.readouterr().err
