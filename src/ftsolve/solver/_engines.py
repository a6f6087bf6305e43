"""Engines that pick rows from candidate tables: one job's ranked plans, or coupled choices.

A `ChoiceProblem` is one or more `ChoiceTable`s (one per job or run: an integer objective key per
row, a tie rank, a diversity group, a feasibility mask and integer columns such as cost cents, GPU
count, provider id, start and duration) plus shared limits that couple them (`Budget`, `Quota`).
Each table chooses exactly one row (at most one when optional).

`ScanEngine` is the exact numpy oracle for uncoupled tables and refuses coupled problems;
`CpSatEngine` solves both as a one-hot model (docs/cpsat.md 1.3-1.7). `rank` ranks one job's
table, best first by (key, tie rank), at most one plan per diversity group: the planner's call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from ftsolve._errors import ChoiceProblemError
from ftsolve.solver._rows import order_by

I = NDArray[np.int64]
B = NDArray[np.bool_]
Status = Literal["optimal", "feasible", "infeasible", "unknown"]

# Objective coefficients times their 0/1 variables must stay inside int64 (docs/cpsat.md 1.2).
_MAX_OBJECTIVE = 2**62


@dataclass(frozen=True, eq=False)
class ChoiceTable:
    """One decision: choose a row of this table (a job's or run's candidates).

    `key` is the integer objective per row (cents or other integer units), minimized over the
    chosen rows; `tie_rank` orders rows of equal key (lower first; default the row order);
    `group` is the diversity group used when ranking; `feasible` masks the rows that may be
    chosen. `columns` holds further integer columns per row that shared limits read: usages
    summed under a limit (``cost_cents``, ``gpus``), keys that group them (``provider``) and
    times (``start_min``, ``duration_min``). An optional table may choose no row, which counts
    zero in every sum. `row_names` (default the row index) name the model's variables.
    """

    name: str
    key: I
    feasible: B
    tie_rank: I | None = None
    group: I | None = None
    columns: Mapping[str, I] = field(default_factory=dict)
    optional: bool = False
    row_names: Sequence[str] | None = None

    def __post_init__(self) -> None:
        n = _integer_column(self.name, "key", self.key, None)
        if not isinstance(self.feasible, np.ndarray) or self.feasible.dtype != np.bool_:
            raise ChoiceProblemError(f"table {self.name!r}: feasible must be a numpy bool array")
        if self.feasible.shape != (n,):
            raise ChoiceProblemError(f"table {self.name!r}: feasible has shape {self.feasible.shape}, key ({n},)")
        for label, col in (("tie_rank", self.tie_rank), ("group", self.group), *self.columns.items()):
            if col is not None:
                _integer_column(self.name, label, col, n)
        if self.row_names is not None and len(self.row_names) != n:
            raise ChoiceProblemError(f"table {self.name!r}: {len(self.row_names)} row names for {n} rows")

    def __len__(self) -> int:
        return int(self.key.shape[0])

    def order(self) -> I:
        """Row indices sorted by (key, tie rank, row): the table's preference order."""
        rows = np.arange(len(self), dtype=np.int64)
        tie = self.tie_rank if self.tie_rank is not None else rows
        out: I = np.lexsort((rows, tie, self.key)).astype(np.int64)
        return out

    def row_name(self, row: int) -> str:
        return self.row_names[row] if self.row_names is not None else str(row)


def _integer_column(table: str, label: str, col: Any, n: int | None) -> int:
    if not isinstance(col, np.ndarray) or col.ndim != 1 or not np.issubdtype(col.dtype, np.integer):
        raise ChoiceProblemError(
            f"table {table!r}: column {label!r} must be a 1-D numpy integer array "
            "(round floats to integer units once, outside the model)"
        )
    if n is not None and col.shape[0] != n:
        raise ChoiceProblemError(f"table {table!r}: column {label!r} has {col.shape[0]} rows, key {n}")
    return int(col.shape[0])


@dataclass(frozen=True)
class Budget:
    """Shared budget: the sum of `column` over every table's chosen row is at most `limit`."""

    limit: int
    column: str = "cost_cents"
    name: str = "budget"


@dataclass(frozen=True)
class Quota:
    """Per value v of column `by`: the sum of `column` over chosen rows whose `by` is v is at most
    `limits[v]` (`default_limit` for values not listed; no limit when that is None).

    Without `window` every chosen row counts at once. With `window` = (start column, duration
    column) a row counts during [start, start + duration), and the limit holds at every instant.
    """

    column: str
    by: str
    limits: Mapping[int, int] = field(default_factory=dict)
    default_limit: int | None = None
    window: tuple[str, str] | None = None
    name: str = "quota"

    def limit_of(self, value: int) -> int | None:
        return self.limits.get(value, self.default_limit)


SharedLimit = Budget | Quota


@dataclass(frozen=True, eq=False)
class ChoiceProblem:
    """Tables, each choosing one row (at most one if optional), coupled by shared limits.

    Objective: minimize the sum of the chosen rows' keys; at equal sums, the smallest sum of
    (position of the chosen row in its table's `order()` + 1), so an optional table prefers no
    row at equal key. Remaining ties are resolved by the engine, deterministically.
    """

    tables: tuple[ChoiceTable, ...]
    limits: tuple[SharedLimit, ...] = ()

    def __post_init__(self) -> None:
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            raise ChoiceProblemError(f"table names must be distinct (got {names})")
        for lim in self.limits:
            for t in self.tables:
                missing = [c for c in _columns_read(lim) if c not in t.columns]
                if missing:
                    raise ChoiceProblemError(
                        f"limit {lim.name!r} reads column {missing[0]!r}, which table {t.name!r} lacks"
                    )

    @property
    def coupled(self) -> bool:
        return bool(self.limits)


def _columns_read(lim: SharedLimit) -> tuple[str, ...]:
    if isinstance(lim, Budget):
        return (lim.column,)
    return (lim.column, lim.by, *(lim.window or ()))


@dataclass(frozen=True)
class Choice:
    """An engine's answer: the chosen row per table (None: an optional table chose none, or no
    solution), the sum of their keys, and a lower bound on it (equal to it when optimal)."""

    status: Status
    rows: tuple[int | None, ...]
    objective: int | None
    bound: int | None
    wall_s: float = field(default=0.0, compare=False)

    @property
    def gap(self) -> float | None:
        """Relative optimality gap of a feasible answer (0 when proven optimal)."""
        if self.objective is None or self.bound is None:
            return None
        return (self.objective - self.bound) / max(1, abs(self.objective))


class Engine(Protocol):
    name: str

    def rank(self, cost_cents: I, tie_rank: I, group: I, feasible: B, top: int, diverse: bool) -> list[int]:
        """Indices of the chosen candidates, best first."""

    def solve(self, problem: ChoiceProblem) -> Choice:
        """The best choice of one row per table under the problem's shared limits."""


def _group_minima(cost_cents: I, tie_rank: I, group: I, feasible: B, diverse: bool) -> I:
    """Feasible candidates that can ever be picked: with diversity, the best of each group."""
    idx = np.nonzero(feasible)[0]
    order = idx[order_by(cost_cents[idx], tie_rank[idx])]
    if not diverse:
        return order
    _, first = np.unique(group[order], return_index=True)
    return order[np.sort(first)]


def _ranked_candidates(table: ChoiceTable, top: int, diverse: bool) -> I:
    """The first `top` rows of an uncoupled table, best first, at most one per group with diversity.

    A presolve by dominance as well: within a group only its best member can be picked, because a
    pick cuts the whole group; and with no coupling the k-th pick is the k-th best of those.
    """
    n = len(table)
    tie = table.tie_rank if table.tie_rank is not None else np.arange(n, dtype=np.int64)
    group = table.group if table.group is not None else np.arange(n, dtype=np.int64)
    return _group_minima(table.key, tie, group, table.feasible, diverse)[:top]


def presolve_dominance(problem: ChoiceProblem) -> ChoiceProblem:
    """The same problem with rows that no optimal choice needs masked out (row indices unchanged).

    Row r of a table is dominated by row s of the same table when s comes first in the table's
    order (so key_s <= key_r), every column summed under a limit is no larger at s, and every
    column a limit groups or times rows by is equal: swapping r for s in any choice keeps every
    limit and improves the objective or its tie-break. In an optional table "no row" dominates
    rows with key >= 0 and no negative summed column. Dropping dominated rows keeps the optimum
    and its tie-break.
    """
    summed = sorted({lim.column for lim in problem.limits})
    same = sorted({c for lim in problem.limits if isinstance(lim, Quota) for c in (lim.by, *(lim.window or ()))})
    tables = tuple(_undominated_table(t, summed, same) for t in problem.tables)
    return replace(problem, tables=tables)


def _undominated_table(table: ChoiceTable, summed: list[str], same: list[str]) -> ChoiceTable:
    order = table.order()
    order = order[table.feasible[order]]
    use = np.stack([table.columns[c] for c in summed], axis=1) if summed else np.zeros((len(table), 0), np.int64)
    if table.optional:
        # "No row" costs 0 in every column and comes before every row in the tie-break.
        worse_than_none = (table.key[order] >= 0) & np.all(use[order] >= 0, axis=1)
        order = order[~worse_than_none]
    if same and order.size:
        profile = np.stack([table.columns[c][order] for c in same], axis=1)
        label = np.unique(profile, axis=0, return_inverse=True)[1].reshape(-1)
    else:
        label = np.zeros(order.size, dtype=np.int64)
    keep = np.zeros(len(table), dtype=bool)
    for g in np.unique(label):
        alive = order[label == g]
        while alive.size:
            # The first row left is undominated: every earlier row was kept, or was dominated by
            # a kept row, which (dominance being transitive) would have removed this one too.
            best, alive = alive[0], alive[1:]
            keep[best] = True
            alive = alive[~np.all(use[alive] >= use[best], axis=1)]
    return replace(table, feasible=keep)


class ScanEngine:
    """The exact numpy oracle: one job's ranked rows, or uncoupled tables each at their best row."""

    name = "scan"

    def rank(self, cost_cents: I, tie_rank: I, group: I, feasible: B, top: int, diverse: bool) -> list[int]:
        table = ChoiceTable("job", cost_cents, feasible, tie_rank=tie_rank, group=group)
        return [int(i) for i in _ranked_candidates(table, top, diverse)]

    def solve(self, problem: ChoiceProblem) -> Choice:
        if problem.coupled:
            names = ", ".join(lim.name for lim in problem.limits)
            raise ChoiceProblemError(
                f"the scan engine solves uncoupled tables only; this problem has shared limits ({names}). "
                "To fix: solve it with CpSatEngine"
            )
        start = time.perf_counter()
        rows: list[int | None] = []
        for t in problem.tables:
            best = _ranked_candidates(t, 1, diverse=False)
            if best.size and not (t.optional and t.key[best[0]] >= 0):
                rows.append(int(best[0]))
            elif t.optional:
                rows.append(None)
            else:
                return Choice("infeasible", (None,) * len(problem.tables), None, None, time.perf_counter() - start)
        total = sum(int(t.key[r]) for t, r in zip(problem.tables, rows, strict=True) if r is not None)
        return Choice("optimal", tuple(rows), total, total, time.perf_counter() - start)


class CpSatEngine:
    """CP-SAT over one Boolean per (table, candidate row), for coupled choices.

    Sets
        T: the tables (jobs or runs), in the problem's order; T° ⊆ T the optional ones.
        R_t: the candidate rows of table t (feasible and, with presolve, undominated).
        For a budget b: its column c_b and limit B_b.
        For a quota q, each value v of its key column `by` with a limit Q_qv:
        R_t^qv = {r ∈ R_t : by_tr = v}. Without a window: one instant. With a window
        (start s, duration d): instants τ ∈ S_qv = {s_tr : r ∈ R_t^qv, d_tr > 0}, and
        R_t^qvτ = {r ∈ R_t^qv : s_tr ≤ τ < s_tr + d_tr}; a step function of τ peaks at a start.
    Data
        k_tr: the row's integer key; p_tr: its position in table t's (key, tie rank, row) order;
        u^c_tr: its value in column c.
    Variables
        x_tr ∈ {0, 1}, named pick[t][r]: table t chooses row r.
    Constraints
        Σ_{r ∈ R_t} x_tr = 1 for t ∈ T \\ T°,  ≤ 1 for t ∈ T°          (one choice per table)
        Σ_t Σ_{r ∈ R_t} u^{c_b}_tr x_tr ≤ B_b                          (each budget)
        Σ_t Σ_{r ∈ R_t^qvτ} u^{c_q}_tr x_tr ≤ Q_qv  for every q, v, τ     (each quota)
    Objective
        min  M · Σ_t Σ_r (k_tr − κ_t) x_tr + Σ_t Σ_r (p_tr + 1) x_tr,  with
        κ_t = min_r k_tr for t ∉ T° (0 for optional tables) and M = 1 + Σ_t max_r (p_tr + 1):
        the sum of keys first, then the tie-break (ties between equal sums of positions go to
        the solver, deterministic with one worker and a fixed seed).

    One worker, a fixed seed and a wall-clock limit; a time-limited answer is "feasible" with its
    bound. Problems are presolved by dominance first (`presolve_dominance`; off with presolve=False).
    """

    name = "cpsat"

    def __init__(self, seed: int = 0, time_limit_s: float = 30.0, presolve: bool = True) -> None:
        self.seed = seed
        self.time_limit_s = time_limit_s
        self.presolve = presolve

    def rank(self, cost_cents: I, tie_rank: I, group: I, feasible: B, top: int, diverse: bool) -> list[int]:
        table = ChoiceTable("job", cost_cents, feasible, tie_rank=tie_rank, group=group)
        rows = _ranked_candidates(table, top, diverse)
        if rows.size == 0:
            return []
        mask = np.zeros(len(table), dtype=bool)
        mask[rows] = True
        model = _CpSatModel(ChoiceProblem((replace(table, feasible=mask),)), self.seed, self.time_limit_s)
        picked: list[int] = []
        for _ in range(rows.size):
            choice = model.solve()
            row = choice.rows[0]
            if choice.status != "optimal" or row is None:
                break
            picked.append(row)
            model.exclude(0, row)
        return picked

    def solve(self, problem: ChoiceProblem) -> Choice:
        if self.presolve:
            problem = presolve_dominance(problem)
        return _CpSatModel(problem, self.seed, self.time_limit_s).solve()


class _CpSatModel:
    """The model of `CpSatEngine`, built once; `exclude` cuts a row for re-solving (top-k)."""

    def __init__(self, problem: ChoiceProblem, seed: int, time_limit_s: float) -> None:
        # Imported here: ortools (and the pandas it pulls in) costs a quarter second to import,
        # which every CLI call would pay for an engine most calls do not use.
        from ortools.sat.python import cp_model

        self.cp_model = cp_model
        self.problem = problem
        self.model = cp_model.CpModel()
        self.seed = seed
        self.time_limit_s = time_limit_s
        self.rows = [np.nonzero(t.feasible)[0].astype(np.int64) for t in problem.tables]
        self.x = [
            [self.model.new_bool_var(f"pick[{t.name}][{t.row_name(int(r))}]") for r in rows]
            for t, rows in zip(problem.tables, self.rows, strict=True)
        ]
        self.position = []
        for t in problem.tables:
            pos = np.empty(len(t), dtype=np.int64)
            pos[t.order()] = np.arange(len(t), dtype=np.int64)
            self.position.append(pos)
        self._add_choices()
        for lim in problem.limits:
            self._add_limit(lim)
        self.scale, self.shift = self._add_objective()
        if problem.coupled:
            self._add_hints()

    def _add_choices(self) -> None:
        for t, x in zip(self.problem.tables, self.x, strict=True):
            if t.optional:
                self.model.add_at_most_one(x).with_name(f"one[{t.name}]")
            else:
                self.model.add_exactly_one(x).with_name(f"one[{t.name}]")

    def _add_limit(self, lim: SharedLimit) -> None:
        cols = [t.columns for t in self.problem.tables]
        if isinstance(lim, Budget):
            self._add_sum(lim.column, [np.ones(rows.size, dtype=bool) for rows in self.rows], lim.limit, lim.name)
            return
        values = sorted({int(v) for c, rows in zip(cols, self.rows, strict=True) for v in c[lim.by][rows]})
        for v in values:
            cap = lim.limit_of(v)
            if cap is None:
                continue
            label = f"{lim.name}[{lim.by}={v}]"
            member = [c[lim.by][rows] == v for c, rows in zip(cols, self.rows, strict=True)]
            if lim.window is None:
                self._add_sum(lim.column, member, cap, label)
                continue
            s_col, d_col = lim.window
            start = [c[s_col][rows] for c, rows in zip(cols, self.rows, strict=True)]
            end = [c[s_col][rows] + c[d_col][rows] for c, rows in zip(cols, self.rows, strict=True)]
            instants = sorted({int(t0) for m, s, e in zip(member, start, end, strict=True) for t0 in s[m & (e > s)]})
            for tau in instants:
                active = [m & (s <= tau) & (tau < e) for m, s, e in zip(member, start, end, strict=True)]
                self._add_sum(lim.column, active, cap, f"{label}[t={tau}]")

    def _add_sum(self, column: str, masks: list[B], limit: int, name: str) -> None:
        """Σ column·x over the candidate rows each table's mask selects ≤ limit."""
        variables: list[Any] = []
        coeffs: list[int] = []
        for t, rows, x, mask in zip(self.problem.tables, self.rows, self.x, masks, strict=True):
            idx = np.nonzero(mask)[0]
            variables += [x[j] for j in idx]
            coeffs += [int(c) for c in t.columns[column][rows[idx]]]
        expr = self.cp_model.LinearExpr.weighted_sum(variables, coeffs)
        self.model.add(expr <= int(limit)).with_name(name)

    def _add_objective(self) -> tuple[int, int]:
        """Minimize (Σ key − Σ κ)·M + Σ (position + 1); returns (M, Σ κ)."""
        tables, pos = self.problem.tables, self.position
        scale = 1 + sum(int(p[rows].max()) + 1 for p, rows in zip(pos, self.rows, strict=True) if rows.size)
        shifts = [
            0 if t.optional or not rows.size else int(t.key[rows].min())
            for t, rows in zip(tables, self.rows, strict=True)
        ]
        spread = sum(
            int(np.abs(t.key[rows] - s).max())
            for t, rows, s in zip(tables, self.rows, shifts, strict=True)
            if rows.size
        )
        if (spread + 1) * scale >= _MAX_OBJECTIVE:
            raise ChoiceProblemError(
                f"objective keys too large for exact integer arithmetic (spread {spread} × {scale} positions). "
                "To fix: express keys in coarser integer units"
            )
        variables: list[Any] = []
        coeffs: list[int] = []
        for t, rows, x, p, s in zip(tables, self.rows, self.x, pos, shifts, strict=True):
            variables += x
            coeffs += [(int(k) - s) * scale + int(q) + 1 for k, q in zip(t.key[rows], p[rows], strict=True)]
        self.model.minimize(self.cp_model.LinearExpr.weighted_sum(variables, coeffs))
        return scale, sum(shifts)

    def _add_hints(self) -> None:
        # Each mandatory table's own best row: a greedy start (docs/cpsat.md 1.5) that the
        # coupling may make infeasible, which CP-SAT then repairs or ignores.
        for t, rows, x, p in zip(self.problem.tables, self.rows, self.x, self.position, strict=True):
            if rows.size and not t.optional:
                best = int(np.argmin(p[rows]))
                for j, var in enumerate(x):
                    self.model.add_hint(var, j == best)

    def exclude(self, table: int, row: int) -> None:
        # Used for ranking uncoupled tables, which carry no hints that a cut could contradict.
        j = int(np.searchsorted(self.rows[table], row))
        self.model.add(self.x[table][j] == 0)

    def solve(self) -> Choice:
        cp_model = self.cp_model
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = self.seed
        solver.parameters.max_time_in_seconds = self.time_limit_s
        start = time.perf_counter()
        status = solver.solve(self.model)
        wall = time.perf_counter() - start
        n = len(self.problem.tables)
        if status == cp_model.MODEL_INVALID:
            raise ChoiceProblemError(f"CP-SAT rejected the model: {self.model.validate()}")
        if status == cp_model.INFEASIBLE:
            return Choice("infeasible", (None,) * n, None, None, wall)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Choice("unknown", (None,) * n, None, None, wall)
        chosen: list[int | None] = []
        for rows, x in zip(self.rows, self.x, strict=True):
            hit = [int(rows[j]) for j, var in enumerate(x) if solver.boolean_value(var)]
            chosen.append(hit[0] if hit else None)
        # The key sum is recomputed from the rows rather than read back from the float objective.
        total = sum(int(t.key[r]) for t, r in zip(self.problem.tables, chosen, strict=True) if r is not None)
        if status == cp_model.OPTIMAL:
            return Choice("optimal", tuple(chosen), total, total, wall)
        bound = math.floor(solver.best_objective_bound) // self.scale + self.shift
        return Choice("feasible", tuple(chosen), total, min(bound, total), wall)


ENGINES: dict[str, type[ScanEngine] | type[CpSatEngine]] = {"scan": ScanEngine, "cpsat": CpSatEngine}
