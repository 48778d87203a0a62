"""The fast lexsort is np.lexsort's permutation exactly, ties and 64-bit keys included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.analysis._order import canonical_order
from rlsight.analysis._sorting import lexsort, lexsort_ties

_INT64 = st.integers(-(2**63), 2**63 - 1)
_SMALL = st.integers(-3, 3)


@st.composite
def _keys(draw: st.DrawFn) -> list[np.ndarray]:
    n = draw(st.integers(1, 40))
    keys = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["small", "wide", "uint64", "bool"]))
        if kind == "uint64":
            values = draw(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 2), min_size=n, max_size=n))
            keys.append(np.array(values, dtype=np.uint64))
        elif kind == "bool":
            keys.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))))
        else:
            values = draw(st.lists(_SMALL if kind == "small" else _INT64 | _SMALL, min_size=n, max_size=n))
            keys.append(np.array(values, dtype=np.int64))
    return keys


@settings(max_examples=300, deadline=None)
@given(_keys())
def test_lexsort_is_numpys(keys: list[np.ndarray]) -> None:
    assert lexsort(keys).tolist() == np.lexsort(keys).tolist()


def test_empty_keys_sort_to_nothing() -> None:
    assert lexsort([np.zeros(0, np.int64), np.zeros(0, np.int64)]).tolist() == []


def test_packed_keys_sort_like_numpy_on_span_like_columns() -> None:
    rng = np.random.default_rng(7)
    n = 5000
    timeline = rng.integers(0, 4, n)
    start = rng.integers(0, 50, n) * 1_000_000_007
    end = start + rng.integers(0, 3, n)
    span_id = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    span_id[::10] = 5  # repeated ids only break ties
    keys = [span_id, rng.integers(0, 3, n), -end, start, timeline]
    assert (lexsort(keys) == np.lexsort(keys)).all()


@settings(max_examples=300, deadline=None)
@given(_keys(), st.data())
def test_lexsort_ties_is_numpys(keys: list[np.ndarray], data) -> None:
    """The primary key decides, the others only break its ties: np.lexsort's permutation."""
    keys = [k.astype(np.int64) if k.dtype == np.bool_ else k for k in keys]
    n = len(keys[0])
    primary = np.array(data.draw(st.lists(_SMALL | _INT64, min_size=n, max_size=n)), np.int64)
    if data.draw(st.booleans()):
        primary = np.sort(primary)  # often in order, with or without ties
    assert lexsort_ties(primary, keys).tolist() == np.lexsort((*keys, primary)).tolist()


def test_canonical_order_sees_columns_handed_over_in_order() -> None:
    """Spans already in (start, longest first) order need no permutation."""
    start = np.arange(0, 100, 10, dtype=np.int64)
    end = start + 5
    ids = np.arange(10, 0, -1, dtype=np.uint64)
    zeros = np.zeros(10, np.int64)

    def order(start: np.ndarray) -> list[int] | None:
        got = canonical_order(start, end, zeros, ids, zeros, 1, 1)
        return None if got is None else got.tolist()

    assert order(start) is None
    assert order(start[::-1].copy()) == list(range(9, -1, -1))
    # Two spans start together, the longer first: the tie is broken by the end, then the id.
    start[1], end[1] = start[0], end[0] - 1
    assert order(start) is None
    end[1] = end[0]
    assert order(start) == [1, 0, *range(2, 10)]


def test_a_key_spanning_2_to_the_63_after_a_constant_one_sorts_like_numpy() -> None:
    """Regression: a constant primary key then one of width 2**63 overflowed the packing."""
    keys = [np.array([2**63 - 1, 0, 5], dtype=np.int64), np.zeros(3, np.int64)]
    assert lexsort(keys).tolist() == np.lexsort(keys).tolist() == [1, 2, 0]
