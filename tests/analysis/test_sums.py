"""``group_sums`` / ``group_counts`` equal ``np.add.at``, whichever way they sum."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rlsight.analysis._sums import group_counts, group_sums

_VALUES = st.one_of(st.integers(-(2**40), 2**40), st.integers(-(2**62), 2**62), st.just(2**53 + 1))


@given(pairs=st.lists(st.tuples(st.integers(0, 5), _VALUES), max_size=40), extra=st.integers(0, 3))
def test_group_sums_are_add_at(pairs: list[tuple[int, int]], extra: int) -> None:
    index = np.asarray([i for i, _ in pairs], dtype=np.int64)
    values = np.asarray([v for _, v in pairs], dtype=np.int64)
    size = int(index.max(initial=-1)) + 1 + extra
    want = np.zeros(size, dtype=np.int64)
    np.add.at(want, index, values)
    got = group_sums(index, values, size)
    assert got.dtype == np.int64 and got.tolist() == want.tolist()


@given(pairs=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), max_size=40))
def test_group_counts_are_add_at(pairs: list[tuple[int, int]]) -> None:
    rows = np.asarray([r for r, _ in pairs], dtype=np.int64)
    columns = np.asarray([c for _, c in pairs], dtype=np.int64)
    want = np.zeros((4, 5), dtype=np.int64)
    np.add.at(want, (rows, columns), 1)
    got = group_counts(rows, columns, (4, 5))
    assert got.dtype == np.int64 and got.tolist() == want.tolist()
