"""The sorting shortcuts used by the candidate table agree with numpy's general routines."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ftsolve.solver._rows import dense_labels, order_by, unique_rows

ints = st.lists(st.integers(-(2**40), 2**40), min_size=0, max_size=60)


@given(ints, st.booleans())
def test_order_by_is_lexsort_on_primary_then_rank(primary: list[int], huge: bool) -> None:
    p = np.array(primary, dtype=np.int64)
    if huge and p.size:
        p[0] = 2**62  # the combined key would overflow: the lexsort path must take over
    rank = np.random.default_rng(len(primary)).permutation(p.size).astype(np.int64) * 3
    assert np.array_equal(order_by(p, rank), np.lexsort((rank, p)))


@given(st.lists(st.integers(0, 10**9), max_size=60), st.booleans())
def test_dense_labels_are_numpys_inverse(values: list[int], small: bool) -> None:
    key = np.array(values, dtype=np.int64) % (50 if small else 10**9)
    expected = np.unique(key, return_inverse=True)[1].reshape(-1) if key.size else key
    assert np.array_equal(dense_labels(key), expected)


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.5, 1.0, 2.5])), max_size=40))
def test_unique_rows_finds_first_occurrences_and_inverse(rows: list[tuple[int, float]]) -> None:
    cols = np.array(rows, dtype=np.float64).reshape(-1, 2)
    first, inverse = unique_rows(cols)
    if not rows:
        assert first.size == 0 and inverse.size == 0
        return
    assert np.array_equal(cols[first][inverse], cols)  # every row maps to an equal row
    assert len({tuple(r) for r in cols[first]}) == first.size  # representatives are distinct
    for g, i in enumerate(first):
        assert i == np.flatnonzero(inverse == g).min()  # and each is the first of its group
