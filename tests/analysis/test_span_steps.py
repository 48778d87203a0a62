"""Seconds per step of each span name: the counting shortcuts give np.unique's answers."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.analysis.span_steps import _first_of_each, _unique_inverse

_VALUES = st.integers(0, 60).flatmap(
    lambda bound: st.tuples(st.just(bound + 1), st.lists(st.integers(0, bound), max_size=40)))


@settings(max_examples=300, deadline=None)
@given(_VALUES, st.booleans())
def test_unique_by_counting_is_numpys(case: tuple[int, list[int]], wide: bool) -> None:
    """Small ranges are counted, wide ones sorted: either way np.unique's keys, inverse and
    first occurrences."""
    bound, values = case
    bound = bound + 10**6 if wide else bound  # past the counting limit: np.unique itself
    array = np.asarray(values, dtype=np.int64)
    keys, inverse = _unique_inverse(array, bound)
    ref_keys, ref_index, ref_inverse = np.unique(array, return_index=True, return_inverse=True)
    assert keys.tolist() == ref_keys.tolist() and inverse.tolist() == ref_inverse.tolist()
    assert inverse.dtype == np.int64
    distinct, first = _first_of_each(array, bound)
    assert distinct.tolist() == ref_keys.tolist() and first.tolist() == ref_index.tolist()
