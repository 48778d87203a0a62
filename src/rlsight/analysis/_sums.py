"""Exact integer sums per group, without ``np.add.at``'s cost at a million values.

``np.add.at(out, index, values)`` is exact for int64 but runs an element at a time (about
60 ms per million values); ``np.bincount`` with weights runs in a tight loop but sums in
float64. The two agree exactly whenever every partial sum is an integer below 2**53 in
magnitude, which the sum of the values' magnitudes bounds: then bincount is used, else add.at.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["group_counts", "group_sums"]

#: Below this total magnitude (float64-estimated, with room for its rounding) float sums are exact.
_EXACT_BELOW: Final = float(2**52)


def group_sums(index: NDArray[np.int64], values: NDArray[np.int64], size: int) -> NDArray[np.int64]:
    """``out[k]`` = the sum of ``values[i]`` over ``index[i] == k``, for ``k < size``, exactly."""
    if len(values) and float(np.abs(values, dtype=np.float64).sum()) < _EXACT_BELOW:
        return np.bincount(index, weights=values, minlength=size).astype(np.int64)
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, index, values)
    return out


def group_counts(
    rows: NDArray[np.int64], columns: NDArray[np.int64], shape: tuple[int, int],
) -> NDArray[np.int64]:
    """How often each (row, column) pair occurs, as a ``shape`` matrix of int64 counts."""
    flat = np.bincount(rows * shape[1] + columns, minlength=shape[0] * shape[1])
    return flat.astype(np.int64, copy=False).reshape(shape)
