"""The columnar reader reads what read_spans reads and skips exactly the lines it skips."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from _build import RunBuilder, analyze, otlp_request

from rlsight.analysis import analyze_run, analyze_spans
from rlsight.analysis._read import read_span_columns
from rlsight.errors import StoreError
from rlsight.store import read_spans


def _sample(run: RunBuilder) -> RunBuilder:
    d = run.process()
    step = d.step(1, 0, 10)
    d.span("train", 1, 8, parent=step, bucket="productive", **{"rl.batch_size": 16})
    for rank in range(3):
        w = run.process("policy", rank)
        w.span("rl.worker.load_model", 0, 1, group="setup", **{"rl.backend": "dtensor"})
        w.span("train", 1, 5 + rank, bucket="productive", **{"rl.batch_size": 8.0})
    return run


def test_a_run_read_from_files_analyses_like_its_records(run: RunBuilder, tmp_path: Path):
    _sample(run).write(tmp_path / "run", seed=3)
    from_files = analyze_run(tmp_path / "run").to_dict()
    from_records = analyze(run).to_dict()
    assert from_files["summary"].pop("files") == 4
    from_records["summary"].pop("files")
    # A run folder always gets a post-mortem (its error fields), here without start records.
    postmortem = from_files.pop("postmortem")
    assert postmortem["start_records"] is False and postmortem["errors"] == 0
    assert from_records.pop("postmortem") is None
    assert from_files == from_records


def _damage(run_dir: Path) -> None:
    """Three bad lines: garbage mid-file, JSON that is not OTLP, a truncated last line."""
    path = sorted((run_dir / "traces").glob("policy-0-*.jsonl"))[0]
    lines = path.read_text().splitlines(keepends=True)
    bad_span = otlp_request({"service.instance.id": "x"}, [])
    bad_span["resourceSpans"][0]["scopeSpans"][0]["spans"] = [{"traceId": "ab"}]
    lines.insert(1, "{not json\n")
    lines.insert(2, json.dumps(bad_span) + "\n")
    lines.append('{"resourceSpans": [')
    path.write_text("".join(lines))


def test_skipped_lines_match_read_spans_line_for_line(run: RunBuilder, tmp_path: Path):
    run_dir = _sample(run).write(tmp_path / "run", per_line=1)
    _damage(run_dir)
    cols, skipped, files = read_span_columns(run_dir)
    reference = read_spans(run_dir)
    assert [(s.path, s.line) for s in skipped] == [(s.path, s.line) for s in reference.skipped]
    assert len(skipped) == 3
    assert [s.reason.split(" ")[0] for s in skipped] == ["not", "not", "truncated"]
    assert len(cols) == len(reference.spans) and files == reference.files


def test_a_request_that_fails_half_way_contributes_no_span(run: RunBuilder, tmp_path: Path):
    d = run.process()
    good = d.span("good", 0, 1)
    run_dir = run.write(tmp_path / "run")
    path = next((run_dir / "traces").glob("*.jsonl"))
    request = otlp_request(d.resource, [good.record, good.record])
    del request["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["name"]
    with path.open("a") as fh:
        fh.write(json.dumps(request) + "\n")
    cols, skipped, _ = read_span_columns(run_dir)
    assert len(cols) == 1 and len(skipped) == 1 and "not an OTLP traces request" in skipped[0].reason


def test_progress_reports_bytes_read(run: RunBuilder, tmp_path: Path):
    run_dir = _sample(run).write(tmp_path / "run")
    seen: list[tuple[int, int]] = []
    read_span_columns(run_dir, progress=lambda done, total: seen.append((done, total)))
    assert len(seen) == 4 and seen[-1][0] == seen[-1][1] > 0


def test_a_missing_run_folder_is_a_store_error(tmp_path: Path):
    with pytest.raises(StoreError, match="does not exist"):
        read_span_columns(tmp_path / "nope")


def test_a_run_folder_without_spans_is_a_store_error(tmp_path: Path):
    (tmp_path / "traces").mkdir()
    with pytest.raises(StoreError, match="no spans"):
        analyze_run(tmp_path)


def test_span_ids_repeated_across_traces_still_find_their_own_parent(run: RunBuilder):
    """Ids are per trace; with repeats the exact (trace, id) search is used."""
    d = run.process()
    a = d.step(1, 0, 10)
    b = d.step(2, 10, 20)
    d.span("train", 1, 9, parent=a, bucket="productive")
    d.span("refit", 11, 19, parent=b, bucket="overhead")
    records = run.records()
    records = [dataclasses.replace(r, span_id="00000000000000aa") if r.name == "rl.step" else r
               for r in records]
    records = [dataclasses.replace(r, parent_span_id="00000000000000aa") if r.parent_span_id else r
               for r in records]
    report = analyze_spans(records)
    assert report.notes == []
    assert [s.spans for s in report.steps] == [2, 2]


def _reports_equal(run_dir: Path, **read_options: object) -> None:
    from rlsight.analysis import analyze_columns

    serial = read_span_columns(run_dir, workers=1, cache=bool(read_options.get("cache", True)))
    other = read_span_columns(run_dir, **read_options)  # type: ignore[arg-type]
    assert [(s.path, s.line) for s in other[1]] == [(s.path, s.line) for s in serial[1]]
    assert analyze_columns(other[0], skipped=other[1]).to_dict() == analyze_columns(
        serial[0], skipped=serial[1]).to_dict()


def test_a_two_process_read_equals_a_serial_read(run: RunBuilder, tmp_path: Path):
    run_dir = _sample(run).write(tmp_path / "run", per_line=1)
    _damage(run_dir)
    _reports_equal(run_dir, workers=2)


def test_a_worker_that_cannot_start_leaves_its_shard_to_the_caller(
    run: RunBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    run_dir = _sample(run).write(tmp_path / "run")
    monkeypatch.setattr("sys.executable", str(tmp_path / "no-such-python"))
    _reports_equal(run_dir, workers=2)


def test_a_worker_that_fails_leaves_its_shard_to_the_caller(
    run: RunBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    run_dir = _sample(run).write(tmp_path / "run")
    monkeypatch.setattr("sys.executable", "/bin/false")
    _reports_equal(run_dir, workers=2)


def test_malformed_attribute_values_do_not_stop_the_analysis(run: RunBuilder):
    """A list where a bucket name belongs, a string thread id: noted or defaulted, never a crash."""
    d = run.process()
    step = d.step(1, 0, 10)
    d.span("odd_bucket", 0, 5, parent=step, **{"rl.bucket": ["productive"], "rl.span_group": 7})
    d.span("odd_thread", 5, 6, parent=step, bucket="overhead", **{"thread.id": "main"})
    report = analyze(run)
    assert any("unknown rl.bucket value" in n for n in report.notes)
    assert report.summary.buckets.productive_ns == 0


def test_shared_jobs_return_each_result_in_order_whoever_ran_it():
    """This process from the front, the worker from the back: every job once, in order."""
    from rlsight.analysis._read import shared_jobs

    jobs = list(range(-300, 0))
    arrived: list[int] = []
    assert shared_jobs(abs, jobs, arrived.append) == [abs(j) for j in jobs]
    assert sorted(arrived) == jobs


def test_shared_jobs_without_a_temporary_folder_run_every_job_here(monkeypatch: pytest.MonkeyPatch):
    """The worker's results come back through a temporary folder; none to be had (read-only
    or full TMPDIR) means no worker, not a failed read."""
    import tempfile

    from rlsight.analysis._read import shared_jobs

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError("read-only TMPDIR")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", refuse)
    assert shared_jobs(abs, [-1, -2, -3]) == [1, 2, 3]


def test_shared_jobs_without_a_worker_run_every_job_here(monkeypatch: pytest.MonkeyPatch):
    from rlsight.analysis._read import shared_jobs

    monkeypatch.setattr("sys.executable", "/bin/false")
    assert shared_jobs(abs, [-1, -2, -3]) == [1, 2, 3]


def test_a_worker_started_ahead_takes_the_reads_second_share(
    run: RunBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    """`rlsight report` starts the worker as it begins (its imports overlap the command's);
    the read then hands that worker its share, with the result of a serial read."""
    from rlsight import _spare_worker

    run_dir = _sample(run).write(tmp_path / "run", per_line=1)
    _spare_worker.prestart(run_dir)
    assert _spare_worker._SPARE == []  # a small run is read alone: no process started for it
    monkeypatch.setattr(_spare_worker, "PARALLEL_MIN_BYTES", 0)
    _spare_worker.prestart(run_dir)
    (spare,) = _spare_worker._SPARE
    _reports_equal(run_dir, workers=2, cache=False)
    assert _spare_worker._SPARE == [] and spare.poll() is not None  # taken, and ended


def test_a_worker_started_ahead_and_never_used_is_ended(
    run: RunBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    from rlsight import _spare_worker

    run_dir = _sample(run).write(tmp_path / "run")
    monkeypatch.setattr(_spare_worker, "PARALLEL_MIN_BYTES", 0)
    _spare_worker.prestart(run_dir)
    (spare,) = _spare_worker._SPARE
    _spare_worker._end_spares()  # what exit does
    assert _spare_worker._SPARE == [] and spare.poll() is not None


def test_a_worker_started_ahead_that_died_leaves_its_share_to_the_caller(
    run: RunBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    from rlsight import _spare_worker

    run_dir = _sample(run).write(tmp_path / "run")
    monkeypatch.setattr(_spare_worker, "PARALLEL_MIN_BYTES", 0)
    with monkeypatch.context() as m:
        m.setattr("sys.executable", "/bin/false")
        _spare_worker.prestart(run_dir)
    _spare_worker._SPARE[0].wait()
    _reports_equal(run_dir, workers=2, cache=False)
    assert _spare_worker._SPARE == []


def test_the_worker_reads_with_the_reading_modules_only(run: RunBuilder, tmp_path: Path):
    """The worker enters ``rlsight`` and ``rlsight.analysis`` bare (no OpenTelemetry, no rest of
    the analysis: ~0.3 s less before it reads) and still reads a file exactly as this process."""
    from rlsight.analysis._read import _Job, _run_job, collect_worker, start_worker

    worker = start_worker(eval, "sorted(__import__('sys').modules)")
    assert worker is not None
    modules = collect_worker(worker)
    assert modules is not None and "numpy" in modules
    assert not [m for m in modules if m.startswith("opentelemetry") or m == "rlsight.analysis._run"]
    assert "importlib.metadata" not in modules  # the manifest writer's version look-up: not read here
    run_dir = _sample(run).write(tmp_path / "run")
    path = next((run_dir / "traces").glob("*.jsonl"))
    job = _Job(path, 0, path.stat().st_size, 0, 0)
    worker = start_worker(_run_job, job)
    assert worker is not None
    theirs, ours = collect_worker(worker), _run_job(job)
    assert theirs is not None and theirs.body.names == ours.body.names and theirs.end == ours.end
    assert theirs.body.start.tolist() == ours.body.start.tolist()


def test_a_worker_result_is_mapped_from_its_file_not_copied(tmp_path: Path):
    """The worker's columns come back as views of the result file (copy on write: writable,
    the file unchanged), readable after the file is removed; a short file is refused."""
    import numpy as np

    from rlsight.analysis._read import _load_result, _save_result

    result = {"start": np.arange(1000, dtype=np.int64), "flags": np.ones(7, dtype=bool),
              "empty": np.zeros(0, dtype=np.uint64), "names": ["a", "b"]}
    path = tmp_path / "0.pickle"
    _save_result(path, result)
    written = path.read_bytes()
    got = _load_result(path)
    path.unlink()
    assert got["names"] == ["a", "b"] and got["empty"].dtype == np.uint64 and len(got["empty"]) == 0
    assert got["start"].tolist() == list(range(1000)) and got["flags"].tolist() == [True] * 7
    base = got["start"]
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, memoryview)  # a view of the mapping, not a copy
    got["start"][0] = -1
    short = tmp_path / "1.pickle"
    short.write_bytes(written[:-100])
    with pytest.raises(ValueError, match="shorter"):
        _load_result(short)
    (tmp_path / "2.pickle").write_bytes(written)
    assert _load_result(tmp_path / "2.pickle")["start"][0] == 0


_MANY_FILES_UNDER_A_LOW_FD_LIMIT = r"""
import functools, json, resource, sys, time
from pathlib import Path

resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from rlsight.analysis import _read, analyze_columns

run_dir = Path(sys.argv[1])
serial = _read.read_span_columns(run_dir, workers=1, cache=False)
arrived = {"results": 0, "failed": False}
load = _read._load_result


def counted(*args):
    try:
        return load(*args)
    except OSError:
        arrived["failed"] = True
        raise
    finally:
        arrived["results"] += 1


_read._load_result = counted
run_job = _read._run_job
first = [True]


@functools.wraps(run_job)  # pickled by its name: the worker runs the real one
def busy_first(job):  # this process is busy: the worker takes 100 files before it reads one
    if first.pop() if first else False:
        deadline = time.monotonic() + 30
        while arrived["results"] < 100 and not arrived["failed"] and time.monotonic() < deadline:
            time.sleep(0.01)
    return run_job(job)


_read._run_job = busy_first
waits = []
wait = _read._Channel.wait


def recorded(self, indices):
    got = wait(self, indices)
    waits.append((len(indices), len(got)))
    return got


_read._Channel.wait = recorded
shared = _read.read_span_columns(run_dir, workers=2, cache=False)
print(json.dumps({
    "waits": waits, "failed": arrived["failed"],
    "same": analyze_columns(shared[0], skipped=shared[1]).to_dict()
    == analyze_columns(serial[0], skipped=serial[1]).to_dict(),
}))
"""


def test_a_worker_with_more_results_than_open_files_allowed_still_delivers_them_all(
    run: RunBuilder, tmp_path: Path,
):
    """Each worker result mapped holds an open file; a read of more trace files than this
    process may open (here 150 under a limit of 64) still takes every result the worker sends,
    with the report of a serial read (it had lost the worker at the limit and redone its files)."""
    import subprocess
    import sys

    d = run.process()
    for rank in range(150):
        w = run.process("policy", rank)
        w.span("train", 1, 2 + rank / 100, parent=d.step(rank, 0, 3), bucket="productive")
    run_dir = run.write(tmp_path / "run")
    script = tmp_path / "read.py"
    script.write_text(_MANY_FILES_UNDER_A_LOW_FD_LIMIT)
    done = subprocess.run([sys.executable, str(script), str(run_dir)], capture_output=True,
                          text=True, timeout=120, check=True)
    outcome = json.loads(done.stdout)
    assert not outcome["failed"]
    ((missing, got),) = outcome["waits"]
    assert missing >= 100 and got == missing  # every file the worker took, its result used
    assert outcome["same"]


def test_a_worker_result_not_mapped_is_read_into_writable_memory(tmp_path: Path):
    """Past the read's mapping budget a result is read, not mapped: the same values, writable,
    no file held open."""
    import numpy as np

    from rlsight.analysis._read import _load_result, _save_result

    result = {"start": np.arange(1000, dtype=np.int64), "names": ["a", "b"]}
    path = tmp_path / "0.pickle"
    _save_result(path, result)
    got = _load_result(path, mapped=False)
    base = got["start"]
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, memoryview) and isinstance(base.obj, bytearray)
    assert got["start"].tolist() == list(range(1000)) and got["names"] == ["a", "b"]
    got["start"][0] = -1
    assert _load_result(path, mapped=False)["start"][0] == 0
