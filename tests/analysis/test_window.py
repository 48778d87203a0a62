"""``rlsight timeline``'s window, chosen on columns, is the one a full read of every record gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from _build import RunBuilder

from rlsight.analysis.window import NoStepInRange, window_spans
from rlsight.store import SpanRecord, read_spans


def _reference(run_dir: Path, steps: tuple[int | None, int | None] | None,
               max_spans: int | None) -> tuple[list[SpanRecord], int | None]:
    """The window as the command chose it before: every record read, then filtered."""
    seen: set[tuple[str, str]] = set()
    spans = []
    for s in read_spans(run_dir).spans:
        if (s.trace_id, s.span_id) not in seen:
            seen.add((s.trace_id, s.span_id))
            spans.append(s)
    if steps is not None:
        lo, hi = steps
        chosen = [s for s in spans if s.name == "rl.step" and isinstance(s.attributes.get("rl.step"), int)
                  and (lo is None or s.attributes["rl.step"] >= lo)
                  and (hi is None or s.attributes["rl.step"] <= hi)]
        a, b = min(s.start_ns for s in chosen), max(s.end_ns for s in chosen)
        spans = [s for s in spans if s.start_ns < b and s.end_ns > a]
    cut = None
    if max_spans is not None and len(spans) > max_spans:
        spans.sort(key=lambda s: s.start_ns)
        cut = spans[max_spans].start_ns
        spans = spans[:max_spans]
    return spans, cut


@pytest.fixture
def run_dir(run: RunBuilder, tmp_path: Path) -> Path:
    d = run.process()
    for n in range(1, 5):
        step = d.step(n, 10 * n, 10 * n + 9)
        d.span("train", 10 * n + 1, 10 * n + 8, parent=step, bucket="productive", note=f"x{n}")
        w = run.process("policy", n % 2)
        w.span("work", 10 * n + 2, 10 * n + 6, parent=step, bucket="productive", **{"rl.batch_size": n})
    run_dir = run.write(tmp_path / "run", per_line=2, seed=5)
    # A batch exported twice (a retried export) must give one slice per span.
    path = sorted((run_dir / "traces").glob("driver-*.jsonl"))[0]
    with path.open("a") as fh:
        fh.write(path.read_text().splitlines()[0] + "\n")
    return run_dir


@pytest.mark.parametrize(("steps", "max_spans"), [
    (None, None), (None, 5), ((2, 3), None), ((None, 2), 3), ((3, None), None), ((4, 4), 1)])
def test_the_window_equals_a_full_read_filtered(
        run_dir: Path, steps: tuple[int | None, int | None] | None, max_spans: int | None) -> None:
    expected, cut = _reference(run_dir, steps, max_spans)
    for _ in range(2):  # the second read comes from the column cache
        window = window_spans(run_dir, steps=steps, max_spans=max_spans)
        key = lambda s: (s.trace_id, s.span_id)  # noqa: E731
        assert sorted(window.spans, key=key) == sorted(expected, key=key)
        assert window.cut_at_ns == cut
        assert window.total == len(_reference(run_dir, None, None)[0])


def test_no_step_in_range_is_an_error(run_dir: Path) -> None:
    with pytest.raises(NoStepInRange) as caught:
        window_spans(run_dir, steps=(7, 9))
    assert caught.value.numbered == (1, 4)  # the range the message offers instead


def test_a_line_whose_unread_attribute_is_not_otlp_is_skipped_as_read_spans_skips_it(
        run_dir: Path) -> None:
    """The columns never decode ``note``; the window's full read does, and skips that line."""
    path = sorted((run_dir / "traces").glob("driver-*.jsonl"))[0]
    lines = path.read_text().splitlines()
    # Not the first line: its copy at the end (the retried export) would still read.
    bad = next(i for i, line in enumerate(lines) if i and '"note"' in line)
    lines[bad] = lines[bad].replace('{"stringValue": "x', '{"weirdValue": "x', 1)
    path.write_text("\n".join(lines) + "\n")
    window = window_spans(run_dir)
    reference = read_spans(run_dir)
    assert [(s.path, s.line) for s in window.skipped] == [(s.path, s.line) for s in reference.skipped]
    assert {(s.trace_id, s.span_id) for s in window.spans} == {
        (s.trace_id, s.span_id) for s in reference.spans}
    assert len(window.skipped) == 1 and str(bad + 1) == str(window.skipped[0].line)


@pytest.mark.parametrize("worker", ["starts", "cannot start"])
def test_a_window_read_again_by_two_processes_is_the_same(
        run_dir: Path, worker: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rlsight.analysis import window

    monkeypatch.setattr(window, "_PARALLEL_MIN_SPANS", 0)
    monkeypatch.setattr(window, "usable_cpus", lambda: 2)
    if worker == "cannot start":
        monkeypatch.setattr("sys.executable", str(tmp_path / "no-such-python"))
    expected, _ = _reference(run_dir, None, None)
    key = lambda s: (s.trace_id, s.span_id)  # noqa: E731
    assert sorted(window_spans(run_dir).spans, key=key) == sorted(expected, key=key)


def test_ties_and_repeats_go_to_the_span_read_first(run: RunBuilder, tmp_path: Path) -> None:
    """The cap keeps the earliest spans, and of spans starting together the ones read first;
    an id written twice keeps its first record, though the read sorts each file's columns."""
    d = run.process()
    for n, length in enumerate((1, 5, 2, 4, 3)):  # all start at 10: shortest first in the file
        d.span(f"s{n}", 10, 10 + length, bucket="productive")
    run_dir = run.write(tmp_path / "run", per_line=1)
    path = next((run_dir / "traces").glob("driver-*.jsonl"))
    first = path.read_text().splitlines()[0]
    with path.open("a") as fh:  # s0 again, longer: a record that sorts before the first
        fh.write(first.replace('"endTimeUnixNano": "', '"endTimeUnixNano": "9', 1) + "\n")
    for max_spans in (1, 2, 3, None):
        expected, cut = _reference(run_dir, None, max_spans)
        for _ in range(2):  # the second read comes from the column cache
            window = window_spans(run_dir, max_spans=max_spans)
            assert [(s.name, s.end_ns) for s in window.spans] == [(s.name, s.end_ns) for s in expected]
            assert window.cut_at_ns == cut
