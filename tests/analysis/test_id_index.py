"""The span id index (hash table plus sorted spill) finds what a dict of ids finds, and sees
every repeated id."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsight.analysis._table import _IdIndex

_ID = st.integers(1, 2**64 - 1) | st.integers(1, 40)
#: Ids that share the hash's top bits (same slot in a small table) but differ below them.
_CROWDED = st.integers(0, 7).map(lambda low: (0xABC << 52) | low)


@st.composite
def _ids(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    ids = draw(st.lists(_ID | _CROWDED, max_size=60))
    queries = draw(st.lists(st.sampled_from(ids) | _ID, max_size=30) if ids else st.lists(_ID, max_size=5))
    return ids, queries


@settings(max_examples=400, deadline=None)
@given(_ids())
def test_the_index_finds_each_id_and_sees_repeats(case: tuple[list[int], list[int]]) -> None:
    ids, queries = case
    index = _IdIndex(np.array(ids, dtype=np.uint64))
    assert index.repeats == (len(set(ids)) < len(ids))
    if index.repeats:
        return
    where = {span_id: i for i, span_id in enumerate(ids)}
    found = index.find(np.array(queries, dtype=np.uint64)).tolist()
    assert found == [where.get(q, -1) for q in queries]


def test_counted_ids_spread_and_are_all_found() -> None:
    """A test id generator's 1, 2, 3, ... (all top bits zero) still hash apart."""
    ids = np.arange(1, 5001, dtype=np.uint64)
    index = _IdIndex(ids)
    assert not index.repeats and len(index.spill) < len(ids) // 4
    assert index.find(ids[::-1].copy()).tolist() == list(range(4999, -1, -1))
    assert index.find(np.array([0, 5001], dtype=np.uint64)).tolist() == [-1, -1]
