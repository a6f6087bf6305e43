"""Fast distinct rows of a 2-D array (np.unique(axis=0) sorts opaque byte strings; lexsort is
several times faster on numeric columns)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

I = NDArray[np.int64]


def unique_rows(cols: NDArray[np.float64]) -> tuple[I, I]:
    """(index of the first occurrence of each distinct row, inverse mapping every row to it)."""
    n = cols.shape[0]
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort(cols.T[::-1])
    ordered = cols[order]
    new = np.ones(n, dtype=bool)
    new[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    group = np.cumsum(new) - 1
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = group
    first = np.full(int(group[-1]) + 1, n, dtype=np.int64)
    np.minimum.at(first, group, order)
    return first, inverse
