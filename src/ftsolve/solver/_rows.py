"""Fast distinct rows and orderings of integer and float columns (np.unique(axis=0) sorts opaque
byte strings; lexsort is several times faster on numeric columns, one argsort faster still)."""

from __future__ import annotations

from typing import Any

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


MIX = np.uint64(0x9E3779B97F4A7C15)  # an odd multiplier that spreads bits (Fibonacci hashing)


def equal_rows(cols: list[NDArray[Any]], rows: I) -> I:
    """A label per row of `rows`, equal where the rows are equal in every (numeric) column; nan
    counts as -1 (-0.0 equals 0.0). One sort of a hash of the rows, then each row is checked
    against a row of its label; exact: rows that share a hash but differ go to unique_rows, which
    sorts every column. Columns are taken at `rows` into two buffers, one at a time (a million
    rows of eight columns would be 64 MB more)."""
    n = rows.shape[0]
    if n == 0:
        return np.zeros(0, np.int64)
    buf, other = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.float64)

    def taken(col: NDArray[Any], out: NDArray[np.float64]) -> NDArray[np.uint64]:
        """The column at `rows` in `out` (floats; whole numbers as their int64 bits), as bits."""
        if col.dtype.kind == "f":
            # clip: no copy to guard `out` against a bad index (rows are valid)
            np.take(col.astype(np.float64, copy=False), rows, out=out, mode="clip")
            out += 0.0  # -0.0 becomes 0.0
            if not np.isfinite(out).all():
                np.nan_to_num(out, copy=False, nan=-1.0)
        else:
            np.take(col.astype(np.int64, copy=False), rows, out=out.view(np.int64), mode="clip")
        bits: NDArray[np.uint64] = out.view(np.uint64)
        return bits

    mixed = np.zeros(n, dtype=np.uint64)
    scratch = other.view(np.uint64)
    with np.errstate(over="ignore"):
        for col in cols:
            np.bitwise_xor(mixed, taken(col, buf), out=mixed)
            np.multiply(mixed, MIX, out=mixed)
            np.bitwise_xor(mixed, np.right_shift(mixed, np.uint64(29), out=scratch), out=mixed)
    # Labels by one unstable sort (np.unique's return_index sorts stably, several times slower);
    # any row of a label stands for it.
    order = np.argsort(mixed)
    ordered = mixed[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    del mixed, ordered
    label = np.empty(n, dtype=np.int64)
    label[order] = np.cumsum(new) - 1
    first = order[new]
    for col in cols:
        values = taken(col, buf)
        np.take(values[first], label, out=scratch, mode="clip")
        if not np.array_equal(values, scratch):
            exact = [taken(c, buf).view(np.float64).copy() if c.dtype.kind == "f" else c[rows] for c in cols]
            return unique_rows(np.stack(exact, axis=1).astype(np.float64))[1]
    out: I = label.astype(np.int64, copy=False)
    return out


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
