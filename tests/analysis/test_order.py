"""Canonical order: a part sorted by a read job leads to the table an unsorted read leads to,
and a run whose files are read sorted needs no sort in the table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _build import RunBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.analysis import _table, analyze_columns
from rlsight.analysis._order import canonical_order, renumber, sort_part
from rlsight.analysis._read import read_span_columns
from rlsight.analysis._table import build_table
from rlsight.analysis.columns import Row, SpanColumns, concat_columns, span_columns_from_rows

_KEYS = ("p/b", "p/a", "p/c")


@st.composite
def _parts(draw: st.DrawFn) -> list[SpanColumns]:
    """A few parts (files) of spans with small value ranges: ties on every key, ids that repeat
    within and across traces, processes in several parts and in an order unlike their ids'."""
    resources = [{"service.instance.id": k} for k in _KEYS]
    span = st.tuples(
        st.sampled_from(["t2", "t1", "t3"]), st.integers(1, 6), st.integers(0, 6),
        st.sampled_from(["a", "b"]), st.integers(0, 3), st.integers(0, 4), st.integers(0, 2),
        st.integers(0, 1), st.sampled_from([None, "productive"]))
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        rows: list[Row] = []
        for trace, sid, pid, name, start, length, process, thread, bucket in draw(st.lists(span, max_size=9)):
            attrs = {"thread.id": thread, **({"rl.bucket": bucket} if bucket else {})}
            rows.append((f"{trace:0>32}", f"{sid:016x}", f"{pid:016x}" if pid else "", name, start,
                         start + length, 0, process, attrs))
        parts.append(span_columns_from_rows(rows, resources))
    return parts


def _table_state(cols: SpanColumns) -> dict[str, object]:
    table = build_table(cols)
    arrays = ("start", "end", "trace", "span_id", "parent_id", "name", "process", "thread", "bucket")
    return {
        **{a: getattr(table.cols, a).tolist() for a in arrays},
        "names": [table.cols.names[i] for i in table.cols.name.tolist()],
        "parent": table.parent.tolist(), "depth": table.depth.tolist(),
        "timelines": table.timelines, "duplicates": table.duplicates, "orphans": table.orphans,
    }


@settings(max_examples=300, deadline=None)
@given(_parts())
def test_sorted_parts_make_the_table_unsorted_parts_make(parts: list[SpanColumns]) -> None:
    """Sorting each part changes nothing the table holds, duplicates' survivors included."""
    assert _table_state(concat_columns([sort_part(p) for p in parts])) == _table_state(concat_columns(parts))


@settings(max_examples=300, deadline=None)
@given(_parts())
def test_a_sorted_part_is_in_the_order_the_table_takes(parts: list[SpanColumns]) -> None:
    """The table finds a sorted part in canonical order (permutes nothing); its ids stay its own."""
    found: list[object] = []

    def spy(*args: Any) -> Any:
        found.append(canonical_order(*args))
        return found[-1]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(_table, "canonical_order", spy)
        for part in parts:
            build_table(sort_part(part))
    assert found == [None] * len(parts)
    for part in parts:
        assert (sort_part(part).names, sort_part(part).traces) == (part.names, part.traces)


def test_a_run_read_file_by_file_is_in_canonical_order(
    run: RunBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each read job sorts its file: with files in the order of their processes (as the store
    names them), the table permutes nothing, whatever order the lines were written in."""
    d = run.process()
    for i in range(3):
        step = d.step(i, 10 * i, 10 * i + 9)
        d.span("train", 10 * i + 1, 10 * i + 8, parent=step, bucket="productive")
        d.span("wait", 10 * i + 1, 10 * i + 2, parent=step, bucket="idle")
    for rank in range(2):
        w = run.process("policy", rank)
        for i in range(3):
            w.span("train", 10 * i + 1, 10 * i + 5 + rank, bucket="productive")
    run_dir = run.write(tmp_path / "run", per_line=2, seed=5)
    expected = analyze_columns(read_span_columns(run_dir, workers=1, cache=False)[0]).to_dict()

    def refuse(*args: object) -> None:
        raise AssertionError("the table permuted a run that was read in order")

    monkeypatch.setattr(_table, "reorder", refuse)
    for cache in (False, True, True):  # uncached, then cold and warm
        cols = read_span_columns(run_dir, workers=1, cache=cache)[0]
        assert np.all(np.diff(cols.process) >= 0)
        assert analyze_columns(cols).to_dict() == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=3), unique=True, max_size=6).flatmap(
    lambda keys: st.tuples(st.just(keys), st.lists(st.integers(0, max(len(keys) - 1, 0)),
                                                   max_size=10 if keys else 0))))
def test_renumbered_ids_follow_their_keys_sorted(case: tuple[list[str], list[int]]) -> None:
    """Processes and traces are numbered in sorted order of their ids, each span keeping its id."""
    keys, values = case
    new_values, new_keys, old = renumber(np.asarray(values, dtype=np.int64), keys)
    assert new_keys == sorted(keys)
    assert [new_keys[v] for v in new_values.tolist()] == [keys[v] for v in values]
    assert (old is None) == (new_keys == keys)
