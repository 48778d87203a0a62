"""Top spans by total and self time."""

from __future__ import annotations

import numpy as np
from _build import SEC, RunBuilder, analyze
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.analysis.hotspots import children_cover


def test_self_time_subtracts_the_union_of_same_thread_children(run: RunBuilder):
    """parent [0,10]; children [1,3] and [2,5] (union 4 s); a remote child does not count."""
    d = run.process()
    parent = d.span("parent", 0, 10)
    d.span("child", 1, 3, parent=parent)
    d.span("child", 2, 5, parent=parent)
    d.span("other_thread_child", 5, 9, parent=parent, thread=2)
    run.process("policy", 0).span("remote_child", 6, 9, parent=parent)
    stats = {s.name: s for s in analyze(run).top_spans}
    assert (stats["parent"].total_ns, stats["parent"].self_ns) == (10 * SEC, 6 * SEC)
    assert (stats["child"].count, stats["child"].total_ns, stats["child"].self_ns) == (2, 5 * SEC, 5 * SEC)


def test_children_are_clipped_to_their_parent(run: RunBuilder):
    d = run.process()
    parent = d.span("parent", 0, 4)
    d.span("late_child", 3, 8, parent=parent)
    assert {s.name: s.self_ns for s in analyze(run).top_spans}["parent"] == 3 * SEC


def test_error_spans_are_counted(run: RunBuilder):
    d = run.process()
    d.span("flaky", 0, 1, status=2)
    d.span("flaky", 1, 2)
    assert {s.name: s.errors for s in analyze(run).top_spans}["flaky"] == 1


def test_spans_are_listed_largest_total_first(run: RunBuilder):
    d = run.process()
    d.span("small", 0, 1)
    d.span("big", 0, 5)
    assert [s.name for s in analyze(run).top_spans] == ["big", "small"]


_rows = st.lists(st.tuples(st.integers(0, 3), st.integers(-20, 40), st.integers(-20, 40)), max_size=30)


@given(_rows, st.sampled_from([1, 1 << 40, 1 << 56]))
@settings(max_examples=300, deadline=None)
def test_children_cover_is_the_union_length_per_group(rows, scale):
    """Start-sorted running-max union == the brute-force count of covered instants, also with
    times too wide to pack (the end-point sweep) and empty or backwards intervals."""
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
    g, s, e = a[:, 0], a[:, 1], a[:, 2]
    got = children_cover(g, s * scale, e * scale, 4)
    for group in range(4):
        points = {t for i in range(len(rows)) if g[i] == group for t in range(int(s[i]), int(e[i]))}
        assert got[group] == len(points) * scale
