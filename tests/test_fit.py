"""The constrained least squares behind `benchmarks/memory_accuracy.py --fit`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st


def _benchmark() -> ModuleType:
    path = Path(__file__).parents[1] / "benchmarks" / "memory_accuracy.py"
    spec = importlib.util.spec_from_file_location("memory_accuracy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("memory_accuracy", module)
    spec.loader.exec_module(module)
    return module


FIT = _benchmark()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), cap=st.floats(0.5, 3.0))
def test_constrained_fit_keeps_every_row_within_its_room(seed: int, cap: float) -> None:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.1, 2.0, (30, 3))
    truth = np.array([1.5, 0.7, 2.0])
    y = x @ truth + rng.normal(0.0, 0.05, 30)
    c = rng.uniform(0.0, 1.0, (5, 3))
    d = c @ truth * cap  # cap < 1 makes the truth itself violate some rows
    sol = FIT._constrained_lstsq(x, y, c, d)
    assert np.all(sol >= 0.0)
    assert np.all(c @ sol <= d + 1e-6)
    free = np.linalg.lstsq(x, y, rcond=None)[0]
    if np.all(c @ free <= d) and np.all(free >= 0):
        assert np.allclose(sol, free)  # a constraint that does not bind changes nothing
    else:
        # Binding constraints cost fit: never better than the unconstrained optimum.
        assert np.sum((x @ sol - y) ** 2) >= np.sum((x @ free - y) ** 2) - 1e-9
