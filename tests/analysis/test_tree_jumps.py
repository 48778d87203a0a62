"""Depths, parent cycles and step anchors from one pointer-jumping pass, against walking the
tree one parent at a time."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.analysis._table import _depths, nearest_marked


@st.composite
def forests(draw: st.DrawFn) -> tuple[list[int], list[bool], list[bool]]:
    """Parent indexes (-1: none) that may form cycles, which spans name a parent, which are marked."""
    n = draw(st.integers(0, 14))
    parent = draw(st.lists(st.integers(-1, n - 1), min_size=n, max_size=n))
    named = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    marked = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return parent, [p >= 0 or x for p, x in zip(parent, named, strict=True)], marked


def _walk(
    parent: list[int], has: list[bool], marked: list[bool],
) -> tuple[list[int], list[int], list[int], int]:
    """Spans whose parent chain never ends become roots; then depth and nearest marked by walking."""
    n = len(parent)

    def ends(i: int) -> bool:
        seen = set()
        while i >= 0:
            if i in seen:
                return False
            seen.add(i)
            i = parent[i]
        return True

    cyclic = [not ends(i) for i in range(n)]
    fixed = [-1 if c else p for p, c in zip(parent, cyclic, strict=True)]
    depth, nearest = [], []
    for i in range(n):
        d, j, near = 0, i, -1
        while j >= 0:
            d += has[j] and not cyclic[j]
            if near < 0 and marked[j]:
                near = j
            j = fixed[j]
        depth.append(d)
        nearest.append(near)
    return depth, fixed, nearest, sum(cyclic)


@settings(max_examples=300, deadline=None)
@given(forests())
def test_one_pass_gives_the_depths_parents_cycles_and_nearest_marked_of_a_walk(forest):
    parent, has, marked = forest
    p = np.asarray(parent, dtype=np.int64)
    h = np.asarray(has, dtype=bool)
    m = np.asarray(marked, dtype=bool)
    depth, fixed, cycles, nearest = _depths(p, h, m)
    want_depth, want_fixed, want_nearest, want_cycles = _walk(parent, has, marked)
    assert (depth.tolist(), fixed.tolist(), cycles) == (want_depth, want_fixed, want_cycles)
    assert nearest is not None and nearest.tolist() == want_nearest
    assert nearest.tolist() == nearest_marked(fixed, m).tolist()
    plain = _depths(p, h)
    assert plain[3] is None and plain[0].tolist() == want_depth
