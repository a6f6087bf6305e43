"""Two engines behind one interface that pick ranked plans from a candidate table.

Both minimize (total cost in cents, tie rank) lexicographically and, with diversity on, take
at most one plan per (GPU type, method, market). The scan is the exact oracle; the CP-SAT
engine solves the same choice as a one-hot model with no-good cuts (docs/cpsat.md 1.3-1.6),
the form that coupled multi-job decisions will extend.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from ftsolve.solver._rows import order_by

I = NDArray[np.int64]
B = NDArray[np.bool_]


class Engine(Protocol):
    name: str

    def rank(self, cost_cents: I, tie_rank: I, group: I, feasible: B, top: int, diverse: bool) -> list[int]:
        """Indices of the chosen candidates, best first."""


def _group_minima(cost_cents: I, tie_rank: I, group: I, feasible: B, diverse: bool) -> I:
    """Feasible candidates that can ever be picked: with diversity, the best of each group."""
    idx = np.nonzero(feasible)[0]
    order = idx[order_by(cost_cents[idx], tie_rank[idx])]
    if not diverse:
        return order
    _, first = np.unique(group[order], return_index=True)
    return order[np.sort(first)]


class ScanEngine:
    name = "scan"

    def rank(self, cost_cents: I, tie_rank: I, group: I, feasible: B, top: int, diverse: bool) -> list[int]:
        return [int(i) for i in _group_minima(cost_cents, tie_rank, group, feasible, diverse)[:top]]


class CpSatEngine:
    """One Boolean per candidate; exactly one chosen; re-solve with a cut per pick."""

    name = "cpsat"

    def __init__(self, seed: int = 0, time_limit_s: float = 30.0) -> None:
        self.seed = seed
        self.time_limit_s = time_limit_s

    def rank(self, cost_cents: I, tie_rank: I, group: I, feasible: B, top: int, diverse: bool) -> list[int]:
        # Presolve by dominance: within a diversity group only its cheapest member can be
        # picked, because a pick cuts the whole group; and with no coupling between choices the
        # k-th pick is the k-th best of those, so rows past the first `top` can never be picked.
        rows = _group_minima(cost_cents, tie_rank, group, feasible, diverse)[:top]
        rows = np.sort(rows)
        if rows.size == 0:
            return []
        # Imported here: ortools (and the pandas it pulls in) costs a quarter second to import,
        # which every CLI call would pay for an engine most calls do not use.
        from ortools.sat.python import cp_model

        model = cp_model.CpModel()
        x = [model.new_bool_var(f"row[{int(r)}]") for r in rows]
        model.add_exactly_one(x)
        # Ties broken inside the objective: cost·R + tie rank stays far below 2^63.
        scale = int(tie_rank.max()) + 1
        coeffs = [int(cost_cents[r]) * scale + int(tie_rank[r]) for r in rows]
        model.minimize(cp_model.LinearExpr.weighted_sum(x, coeffs))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = self.seed
        solver.parameters.max_time_in_seconds = self.time_limit_s
        picked: list[int] = []
        for _ in range(min(top, rows.size)):
            status = solver.solve(model)
            if status != cp_model.OPTIMAL:
                break
            j = next(j for j, var in enumerate(x) if solver.boolean_value(var))
            picked.append(int(rows[j]))
            model.add(x[j] == 0)
        return picked


ENGINES: dict[str, type[ScanEngine] | type[CpSatEngine]] = {"scan": ScanEngine, "cpsat": CpSatEngine}
