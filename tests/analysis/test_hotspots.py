"""Top spans by total and self time."""

from __future__ import annotations

from _build import SEC, RunBuilder, analyze


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
