"""The column cache never changes an answer: a cached read equals a read of the JSON alone.

Each test reads with the cache, changes the store the way runs and people do (append, finish
a truncated line, rewrite in place, replace the file, damage the cache), and compares the next
cached read with ``cache=False``, the reference.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from _build import RunBuilder, otlp_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsight.analysis import _cache, analyze_columns
from rlsight.analysis._read import read_span_columns
from rlsight.store import _reader


def _read(run_dir: Path, cache: bool = True) -> dict[str, Any]:
    """Everything a read returns, comparable: the report, the skipped lines, the span count."""
    cols, skipped, files = read_span_columns(run_dir, workers=1, cache=cache)
    report = analyze_columns(cols, skipped=skipped, files=files, per_step={}).to_dict() if len(cols) else None
    return {"spans": len(cols), "skipped": [str(s) for s in skipped], "files": files, "report": report}


def _assert_same_as_uncached(run_dir: Path) -> None:
    assert _read(run_dir) == _read(run_dir, cache=False)


def _line(run: RunBuilder, name: str, start: float) -> str:
    d = run.procs[0]
    return json.dumps(otlp_request(d.resource, [d.span(name, start, start + 1, bucket="productive").record]))


@pytest.fixture
def run_dir(run: RunBuilder, tmp_path: Path) -> Path:
    d = run.process()
    step = d.step(1, 0, 10)
    d.span("train", 1, 8, parent=step, bucket="productive")
    w = run.process("policy", 0)
    w.span("rl.worker.load_model", 0, 1, group="setup", **{"rl.backend": "dtensor"})
    return run.write(tmp_path / "run", per_line=1)


def _counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the lines handed to a parser from now on (typed or plain JSON, whichever reads them)."""
    calls: list[int] = []
    real = _reader.numbered_lines

    def counted(*args: Any, **kwargs: Any) -> Any:
        for item in real(*args, **kwargs):
            if isinstance(item, tuple):
                calls.append(len(item[1]))
            yield item

    monkeypatch.setattr(_reader, "numbered_lines", counted)
    return calls


def test_a_settled_unchanged_run_is_read_from_the_cache_alone(
        run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cache, "SETTLED_NS", 0)
    first = _read(run_dir)
    assert list((run_dir / _cache.CACHE_DIR).glob("*.cols"))
    parses = _counting_parses(monkeypatch)
    assert _read(run_dir) == first
    assert parses == []
    assert _read(run_dir, cache=False) == first


def test_an_appended_file_parses_only_what_was_appended(
        run: RunBuilder, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _read(run_dir)
    path = sorted((run_dir / "traces").glob("driver-*.jsonl"))[0]
    with path.open("a") as fh:
        fh.write(_line(run, "late", 20) + "\n")
    parses = _counting_parses(monkeypatch)
    cached = _read(run_dir)
    assert len(parses) == 1  # the new line; the rest came from the cache
    assert cached == _read(run_dir, cache=False)
    assert cached["spans"] == 4
    parses.clear()
    assert _read(run_dir) == cached
    assert parses == []  # the entry was extended to the new line


def test_a_truncated_last_line_is_read_again_once_it_is_complete(run: RunBuilder, run_dir: Path) -> None:
    path = sorted((run_dir / "traces").glob("driver-*.jsonl"))[0]
    line = _line(run, "late", 20)
    with path.open("a") as fh:
        fh.write(line[:40])
    before = _read(run_dir)
    assert before == _read(run_dir, cache=False)
    assert "truncated line" in before["skipped"][0]
    with path.open("a") as fh:
        fh.write(line[40:] + "\n")
    after = _read(run_dir)
    assert after["skipped"] == [] and after["spans"] == 4
    _assert_same_as_uncached(run_dir)


def test_a_file_rewritten_in_place_with_the_same_size_is_read_again(run: RunBuilder, run_dir: Path) -> None:
    _read(run_dir)
    path = sorted((run_dir / "traces").glob("driver-*.jsonl"))[0]
    text = path.read_text()
    assert '"train"' in text
    with path.open("r+") as fh:  # same inode, same size, one span renamed
        fh.write(text.replace('"train"', '"trian"'))
    assert "trian" in json.dumps(_read(run_dir)["report"])
    _assert_same_as_uncached(run_dir)


def test_a_file_replaced_by_another_is_read_again(run: RunBuilder, run_dir: Path) -> None:
    _read(run_dir)
    path = sorted((run_dir / "traces").glob("driver-*.jsonl"))[0]
    replacement = path.with_suffix(".new")
    replacement.write_text(_line(run, "other", 0) + "\n" + path.read_text())
    os.replace(replacement, path)
    _assert_same_as_uncached(run_dir)


@pytest.mark.parametrize("damage", ["garbage", "foreign", "empty"])
def test_a_damaged_or_foreign_entry_is_ignored(run_dir: Path, damage: str) -> None:
    _read(run_dir)
    for entry in (run_dir / _cache.CACHE_DIR).glob("*.cols"):
        if damage == "garbage":
            entry.write_bytes(b"rlsight-columns\n\xff\xff\xff\xff\xff\xff\xff\x7f{")
        elif damage == "empty":
            entry.write_bytes(b"")
        else:  # another rlsight's entry: same layout, other fingerprint, other answers
            raw = entry.read_bytes()
            fingerprint = _cache.fingerprint().encode()
            assert fingerprint in raw
            entry.write_bytes(raw.replace(fingerprint, b"x" * len(fingerprint)).replace(
                b'"train"', b'"wrong"'))
    _assert_same_as_uncached(run_dir)


def test_a_run_folder_where_no_cache_can_be_written_reads_as_ever(run_dir: Path) -> None:
    (run_dir / ".rlsight-cache").write_text("a file where the cache folder would go")
    _assert_same_as_uncached(run_dir)
    assert (run_dir / ".rlsight-cache").is_file()


def test_a_two_process_read_fills_and_uses_the_cache_like_a_serial_one(
        run: RunBuilder, run_dir: Path) -> None:
    parallel = read_span_columns(run_dir, workers=2)
    path = sorted((run_dir / "traces").glob("policy-*.jsonl"))[0]
    with path.open("a") as fh:
        fh.write(_line(run, "late", 20) + "\n")
    again = read_span_columns(run_dir, workers=2)
    assert len(again[0]) == len(parallel[0]) + 1
    _assert_same_as_uncached(run_dir)


# -- any sequence of what happens to a store file: cached == uncached after each step -------------

_EDITS = st.lists(st.sampled_from(["good", "bad", "partial", "finish", "rewrite", "truncate", "read"]),
                  min_size=1, max_size=8)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=_EDITS)
def test_any_history_of_a_file_reads_the_same_cached_and_uncached(
        edits: list[str], run: RunBuilder, tmp_path_factory: pytest.TempPathFactory) -> None:
    run_dir = tmp_path_factory.mktemp("hist")
    (run_dir / "traces").mkdir()
    path = run_dir / "traces" / "driver-0-1.jsonl"
    path.write_text("")
    if not run.procs:
        run.process()
    pending = ""
    for i, edit in enumerate(edits):
        line = _line(run, f"s{i}", i)
        if edit == "good":
            _append(path, line + "\n")
        elif edit == "bad":
            _append(path, "{not json\n")
        elif edit == "partial":
            pending = line[len(line) // 2:] + "\n"
            _append(path, line[:len(line) // 2])
        elif edit == "finish" and pending:
            _append(path, pending)
            pending = ""
        elif edit == "rewrite":  # same inode, same size, different bytes
            text = path.read_bytes()
            path.write_bytes(text.replace(b'"s', b'"t'))
        elif edit == "truncate":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
            pending = ""
        assert _read(run_dir) == _read(run_dir, cache=False), edits[: i + 1]


def _append(path: Path, text: str) -> None:
    with path.open("a") as fh:
        fh.write(text)


def test_a_worker_saves_the_entry_of_a_file_it_reads_as_this_process_would(run_dir: Path) -> None:
    """Each process of a shared read saves the entries of the files it read: the worker (its
    ``rlsight`` entered bare) writes the entry this process writes for the same job."""
    from rlsight.analysis._read import _plan, _run_job, collect_worker, start_worker

    path = sorted((run_dir / "traces").glob("policy-*.jsonl"))[0]
    job = _plan(run_dir, path, True)[3]
    assert job is not None and job.save is not None
    worker = start_worker(_run_job, job)
    assert worker is not None and collect_worker(worker) is not None
    theirs = _cache.load_entry(run_dir, path)
    _cache.entry_path(run_dir, path).unlink()
    _run_job(job)
    ours = _cache.load_entry(run_dir, path)
    assert theirs is not None and ours is not None
    assert (theirs.covered, theirs.lines, theirs.crc, theirs.stat, theirs.skipped) == (
        ours.covered, ours.lines, ours.crc, ours.stat, ours.skipped)
    for name in _cache._ARRAYS:
        assert getattr(theirs.cols, name).tobytes() == getattr(ours.cols, name).tobytes(), name
    assert (theirs.cols.names, theirs.cols.kept_attributes) == (ours.cols.names, ours.cols.kept_attributes)
    _assert_same_as_uncached(run_dir)


def test_a_cold_read_leaves_an_entry_for_every_file(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cache, "SETTLED_NS", 0)
    read_span_columns(run_dir, workers=2)
    files = sorted(p.name for p in (run_dir / "traces").glob("*.jsonl"))
    assert sorted(p.name.removesuffix(".cols") for p in (run_dir / _cache.CACHE_DIR).glob("*.cols")) == files
    parses = _counting_parses(monkeypatch)
    cached = _read(run_dir)
    assert parses == []
    assert cached == _read(run_dir, cache=False)
