"""max_cover and covered_length against brute force over elementary segments."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.analysis._intervals import _range_max, _sparse_range_max, covered_length, max_cover

intervals = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 40), st.integers(0, 6)),
    max_size=25,
)


def _arrays(rows: list[tuple[int, int, int, int]]) -> tuple[np.ndarray, ...]:
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    return a[:, 0], a[:, 1], a[:, 2], a[:, 3]


@given(intervals, st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40)), max_size=5))
@settings(max_examples=300, deadline=None)
def test_max_cover_picks_the_highest_priority_lowest_index_interval(rows, marks):
    """Each segment's winner is the covering interval a linear scan would pick."""
    g, s, e, p = _arrays(rows)
    m = np.asarray(marks, dtype=np.int64).reshape(-1, 2)
    cover = max_cover(g, s, e, p, m[:, 0], m[:, 1])
    for k in range(len(cover.start)):
        lo, hi = cover.start[k], cover.end[k]
        if hi == lo:
            continue
        best = -1
        for i in range(len(rows)):
            covers = g[i] == cover.group[k] and s[i] <= lo and e[i] >= hi and e[i] > s[i]
            if covers and (best < 0 or p[i] > p[best]):
                best = i
        assert cover.winner[k] == best


@given(intervals, st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40)), max_size=5))
@settings(max_examples=200, deadline=None)
def test_max_cover_segments_tile_each_group_between_its_points(rows, marks):
    """Segments of a group are contiguous, so window sums are differences of prefix sums."""
    g, s, e, p = _arrays(rows)
    m = np.asarray(marks, dtype=np.int64).reshape(-1, 2)
    cover = max_cover(g, s, e, p, m[:, 0], m[:, 1])
    for group in set(cover.group.tolist()):
        sel = cover.group == group
        starts, ends = cover.start[sel], cover.end[sel]
        assert (ends[:-1] == starts[1:]).all()
        assert ends[-1] == starts[-1]
    for (mg, mt), seg in zip(m.tolist(), cover.marks.tolist(), strict=True):
        assert (cover.group[seg], cover.start[seg]) == (mg, mt)


@given(intervals, st.lists(st.integers(0, 40), max_size=5), st.booleans())
@settings(max_examples=200, deadline=None)
def test_max_cover_of_one_group_given_as_none_is_that_of_its_group_0(rows, marks, wide):
    """``group=None`` (the driver's one timeline) skips the group keys; the same cover."""
    _, s, e, p = _arrays(rows)
    s, e = s << (57 * wide), e << (57 * wide)  # times too wide to pack with groups, too
    t = np.asarray(marks, dtype=np.int64) << (57 * wide)
    zeros = np.zeros(len(s), np.int64)
    want = max_cover(zeros, s, e, p, np.zeros(len(t), np.int64), t)
    got = max_cover(None, s, e, p, None, t)
    for field in ("group", "start", "end", "winner", "marks"):
        assert getattr(got, field).tolist() == getattr(want, field).tolist(), field


def test_max_cover_rejects_negative_priorities():
    """Priorities are packed with the index; a negative one would corrupt the packing."""
    one = np.asarray([0], dtype=np.int64)
    with pytest.raises(ValueError, match="priorities must lie in"):
        max_cover(one, one, one + 1, one - 1)


@given(intervals)
@settings(max_examples=200, deadline=None)
def test_covered_length_is_the_union_length_per_group(rows):
    """The union counts each covered instant once, however many intervals overlap it."""
    g, s, e, _ = _arrays(rows)
    got = covered_length(g, s, e, 3)
    for group in range(3):
        points = {t for i in range(len(rows)) if g[i] == group
                  for t in range(int(s[i]), int(e[i]))}
        assert got[group] == len(points)


@given(intervals)
@settings(max_examples=100, deadline=None)
def test_max_cover_is_the_same_when_times_are_too_wide_to_pack(rows):
    """Times spread over more than 2**62 / groups ns take the lexsort path; same answer."""
    g, s, e, p = _arrays(rows)
    scale = 1 << 57
    narrow = max_cover(g, s, e, p)
    wide = max_cover(g, s * scale, e * scale, p)
    assert (wide.winner == narrow.winner).all() and (wide.group == narrow.group).all()
    assert (wide.start == narrow.start * scale).all()


@given(intervals)
@settings(max_examples=100, deadline=None)
def test_covered_length_is_the_same_when_times_are_too_wide_to_pack(rows):
    """Times too wide for one int64 sort key take the two-key path; same answer, scaled."""
    g, s, e, _ = _arrays(rows)
    scale = 1 << 57
    assert (covered_length(g, s * scale, e * scale, 3) == covered_length(g, s, e, 3) * scale).all()


@given(st.integers(1, 40).flatmap(lambda size: st.tuples(
    st.just(size),
    st.lists(st.tuples(st.integers(0, size - 1), st.integers(1, size), st.integers(0, 99)), max_size=20))))
@settings(max_examples=300, deadline=None)
def test_both_range_max_strategies_are_the_brute_force_max(case):
    """Writing every covered position and the sparse table's blocks give the same maxima."""
    size, rows = case
    rows = [(lo, max(hi, lo + 1), v) for lo, hi, v in rows if lo < size]
    lo, hi, values = (np.asarray([r[k] for r in rows], dtype=np.int64) for k in range(3))
    hi = np.minimum(hi, size)
    expected = [max((v for a, b, v in zip(lo, hi, values, strict=True) if a <= p < b), default=-1)
                for p in range(size)]
    assert _range_max(size, lo, hi, values).tolist() == expected
    if len(lo):
        assert _sparse_range_max(size, lo, hi, values, hi - lo).tolist() == expected


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-20, 40), st.integers(-20, 40)), max_size=30),
       st.sampled_from([1, 1 << 40, 1 << 56]))
@settings(max_examples=300, deadline=None)
def test_covered_length_counts_each_instant_once_at_any_time_scale(rows, scale):
    """Start-sorted keys with a running max of ends (and, when the times are too wide to pack,
    the end-point sweep) == brute force, with empty and backwards intervals among them."""
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
    g, s, e = a[:, 0], a[:, 1], a[:, 2]
    got = covered_length(g, s * scale, e * scale, 4)
    for group in range(4):
        points = {t for i in range(len(rows)) if g[i] == group for t in range(int(s[i]), int(e[i]))}
        assert got[group] == len(points) * scale
