"""Fast distinct rows and orderings of integer and float columns (np.unique(axis=0) sorts opaque
byte strings; lexsort is several times faster on numeric columns, one argsort faster still)."""

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


def order_by(primary: I, rank: I) -> I:
    """Indices sorting by `primary`, ties broken by `rank` (distinct non-negative integers).

    One sort of a combined key where it fits in int64, which is several times faster than
    np.lexsort's pass per key; np.lexsort otherwise.
    """
    if primary.shape[0] == 0:
        return np.zeros(0, np.int64)
    lo, hi = int(primary.min()), int(primary.max())
    m = int(rank.max()) + 1
    if (hi - lo + 1) * m < 2**62:
        out: I = np.argsort((primary - lo) * m + rank)
        return out
    fallback: I = np.lexsort((rank, primary))
    return fallback


def dense_labels(key: I) -> I:
    """Labels 0..g-1 for the distinct values of non-negative integer `key`, in increasing order
    of the key (np.unique's return_inverse), without sorting when the keys are small."""
    if key.shape[0] == 0:
        return np.zeros(0, np.int64)
    top = int(key.max())
    if top > 4 * key.shape[0] + 1024:
        labels: I = np.unique(key, return_inverse=True)[1].reshape(-1)
        return labels
    present = np.zeros(top + 1, dtype=bool)
    present[key] = True
    out: I = (np.cumsum(present) - 1)[key]
    return out
