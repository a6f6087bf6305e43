"""Engines that pick rows from candidate tables: one job's ranked plans, or coupled choices.

A `ChoiceProblem` is one or more `ChoiceTable`s (one per job or run: an integer objective key per
row, a tie rank, a diversity group, a feasibility mask and integer columns such as cost cents, GPU
count, provider id, start and duration) plus shared limits that couple them (`Budget`, `Quota`).
Each table chooses exactly one row (at most one when optional). With a `Timeline` each table also
runs for its chosen row's duration from a start the engine chooses (a campaign's calendar:
earliest starts, precedence, due times, a horizon), and quotas can hold at every instant of it.

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

# The start column of a quota window in a problem with a timeline: the start the engine chooses.
START = "@start"


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


@dataclass(frozen=True)
class Timeline:
    """Start times as decisions: every table runs once, for its chosen row's `duration` column
    (integer time units; ftsolve uses minutes), from a start the engine chooses.

    A table starts no earlier than `release[name]` (default 0) and ends by `due[name]` and by
    `horizon`; for each pair (first, then) in `after`, `then` starts once `first` has ended. An
    optional table that chooses no row runs for no time. A `Quota` with window (START, duration)
    counts a row while its table runs. `minimize`: "key" orders the objective by the sum of keys,
    then the finish (the last end); "finish" the other way round.
    """

    horizon: int
    duration: str = "duration_min"
    release: Mapping[str, int] = field(default_factory=dict)
    due: Mapping[str, int] = field(default_factory=dict)
    after: tuple[tuple[str, str], ...] = ()
    minimize: Literal["key", "finish"] = "key"

    def end_limit(self, name: str) -> int:
        """The latest end of table `name`: its due time or the horizon, whichever is earlier."""
        return min(self.horizon, self.due.get(name, self.horizon))


@dataclass(frozen=True, eq=False)
class ChoiceProblem:
    """Tables, each choosing one row (at most one if optional), coupled by shared limits.

    Objective: minimize the sum of the chosen rows' keys; at equal sums, the smallest sum of
    (position of the chosen row in its table's `order()` + 1), so an optional table prefers no
    row at equal key. Remaining ties are resolved by the engine, deterministically.
    """

    tables: tuple[ChoiceTable, ...]
    limits: tuple[SharedLimit, ...] = ()
    timeline: Timeline | None = None

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
            if isinstance(lim, Quota) and lim.window is not None and lim.window[0] == START:
                _check_running_quota(lim, self.timeline, self.tables)
        if self.timeline is not None:
            _check_timeline(self.timeline, self.tables)

    @property
    def coupled(self) -> bool:
        return bool(self.limits) or self.timeline is not None


def _check_running_quota(lim: Quota, tl: Timeline | None, tables: tuple[ChoiceTable, ...]) -> None:
    """A quota over a timeline: its window is the timeline's duration, its usages demands (>= 0)."""
    if tl is None or lim.window is None or lim.window[1] != tl.duration:
        raise ChoiceProblemError(
            f"quota {lim.name!r} counts rows while their table runs: that needs a timeline "
            "whose duration column is the window's"
        )
    if any(np.any(t.columns[lim.column] < 0) for t in tables):
        raise ChoiceProblemError(f"quota {lim.name!r} over a timeline needs usages of at least 0 in {lim.column!r}")


def _check_timeline(tl: Timeline, tables: tuple[ChoiceTable, ...]) -> None:
    names = {t.name for t in tables}
    named = [*tl.release, *tl.due, *(n for pair in tl.after for n in pair)]
    unknown = [n for n in named if n not in names]
    if unknown:
        raise ChoiceProblemError(f"the timeline names table {unknown[0]!r}, which the problem lacks")
    lacking = [t.name for t in tables if tl.duration not in t.columns]
    if lacking:
        raise ChoiceProblemError(f"table {lacking[0]!r} lacks the timeline's duration column {tl.duration!r}")
    times = [tl.horizon, *tl.release.values(), *tl.due.values()]
    if any(not isinstance(v, int) or v < 0 for v in times):
        raise ChoiceProblemError("timeline times must be integers of at least 0")
    if any(np.any(t.columns[tl.duration] < 0) for t in tables):
        raise ChoiceProblemError(f"durations ({tl.duration!r}) must be at least 0")


def _columns_read(lim: SharedLimit) -> tuple[str, ...]:
    if isinstance(lim, Budget):
        return (lim.column,)
    return tuple(c for c in (lim.column, lim.by, *(lim.window or ())) if c != START)


@dataclass(frozen=True)
class Choice:
    """An engine's answer: the chosen row per table (None: an optional table chose none, or no
    solution), the sum of their keys, and a lower bound on it (equal to it when optimal).

    With a timeline also each table's start (None where it chose no row), the finish (the last
    end, 0 when nothing runs) and a lower bound on it; a bound is None where the objective gives
    none (the second term of an answer not proven optimal)."""

    status: Status
    rows: tuple[int | None, ...]
    objective: int | None
    bound: int | None
    wall_s: float = field(default=0.0, compare=False)
    starts: tuple[int | None, ...] = ()
    finish: int | None = None
    finish_bound: int | None = None

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
    rows with key >= 0 and no negative summed column. With a timeline the duration counts as a
    summed column: a shorter run ends earlier and holds every quota for less time. Dropping
    dominated rows keeps the optimum and its tie-break.
    """
    summed = {lim.column for lim in problem.limits}
    same = {c for lim in problem.limits if isinstance(lim, Quota) for c in (lim.by, *(lim.window or ()))}
    same.discard(START)
    if problem.timeline is not None:
        summed.add(problem.timeline.duration)
        same.discard(problem.timeline.duration)
    tables = tuple(_undominated_table(t, sorted(summed), sorted(same)) for t in problem.tables)
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
            names = ", ".join([lim.name for lim in problem.limits] + ["timeline"] * (problem.timeline is not None))
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
        R_t: the candidate rows of table t (feasible and, with presolve, undominated; with a
        timeline, only rows that fit between the table's release and its latest end).
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

    With a timeline (horizon H, duration column d, release a_t, latest end b_t = min(due_t, H)):
    Variables
        s_t ∈ [a_t, b_t] start[t];  δ_t = Σ_r d_tr x_tr duration[t];  e_t = s_t + δ_t ≤ b_t end[t];
        f ∈ [0, H] finish, f ≥ e_t for every t;  for a quota q with window (START, d) and a limited
        value v, per table t and group g of its rows in R_t^qv with the same (d_tr, u^{c_q}_tr):
        y_tqvg = Σ_{r ∈ g} x_tr holds[q][t][g], and the optional interval [s_t, s_t + d_g) present
        when y_tqvg (fixed length and demand: stronger propagation than a variable-size interval).
    Constraints
        s_then ≥ e_first                          for every (first, then) in `after`  (precedence)
        cumulative over the intervals of (q, v) with demands u_g ≤ Q_qv at every instant, and
        Σ_t Σ_{r ∈ R_t^qv} u_tr d_tr x_tr ≤ Q_qv · (max_t b_t − min_t a_t)  (its energy, a linear cut)
        (both left out where Σ_t max_r u_tr ≤ Q_qv: every table at once fits)
    Objective, lexicographic in two solves (the second holds the first term at its best value):
        "key" first:     min Σ (k_tr − κ_t) x_tr,  then  min M · f + Σ (p_tr + 1) x_tr
        "finish" first:  min f,                    then  min M · Σ (k_tr − κ_t) x_tr + Σ (p_tr + 1) x_tr
    The search starts from a complete hint: a serial schedule with crashing (`serial_schedule`).

    One worker, a fixed seed and a wall-clock limit (and, when given, a deterministic-time limit,
    which keeps a limited search reproducible); a time-limited answer is "feasible" with its
    bound. With `first_solution` the search stops at the first solution: a feasibility check.
    Problems are presolved by dominance first (`presolve_dominance`; off with presolve=False).
    """

    name = "cpsat"

    def __init__(
        self,
        seed: int = 0,
        time_limit_s: float = 30.0,
        presolve: bool = True,
        deterministic_time: float | None = None,
        first_solution: bool = False,
    ) -> None:
        self.seed = seed
        self.time_limit_s = time_limit_s
        self.presolve = presolve
        self.deterministic_time = deterministic_time
        self.first_solution = first_solution

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
        model = _CpSatModel(problem, self.seed, self.time_limit_s, self.deterministic_time)
        return model.solve(first_solution=self.first_solution)


@dataclass(frozen=True)
class _Runs:
    """The timeline's variables, one entry per table."""

    start: list[Any]
    duration: list[Any]
    end: list[Any]
    interval: list[Any]
    finish: Any
    finish_max: int


@dataclass(frozen=True)
class _Objective:
    """The objective (CpSatEngine's docstring): without a timeline one weighted sum (key · scale +
    rank); with one, the `first` term and its tie-break `then`. `shift` is Σ κ_t."""

    first: Any
    then: Any
    scale: int
    shift: int
    key_first: bool


class _CpSatModel:
    """The model of `CpSatEngine`, built once; `exclude` cuts a row for re-solving (top-k)."""

    def __init__(
        self, problem: ChoiceProblem, seed: int, time_limit_s: float, deterministic_time: float | None = None
    ) -> None:
        # Imported here: ortools (and the pandas it pulls in) costs a quarter second to import,
        # which every CLI call would pay for an engine most calls do not use.
        from ortools.sat.python import cp_model

        self.cp_model = cp_model
        self.problem = problem
        self.model = cp_model.CpModel()
        self.seed = seed
        self.time_limit_s = time_limit_s
        self.deterministic_time = deterministic_time
        self.rows = [self._candidate_rows(t) for t in problem.tables]
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
        # (literal, table, candidate rows): true when the table chooses one of those rows; hinted with them.
        self.holds: list[tuple[Any, int, list[int]]] = []
        self.runs = self._add_timeline(problem.timeline) if problem.timeline is not None else None
        for lim in problem.limits:
            self._add_limit(lim)
        self.objective = self._add_objective()
        if problem.coupled:
            self._add_hints()

    def _candidate_rows(self, t: ChoiceTable) -> I:
        rows: I = np.nonzero(t.feasible)[0].astype(np.int64)
        tl = self.problem.timeline
        if tl is not None:
            # A row too long to run between the table's release and its latest end is never possible.
            fits = tl.release.get(t.name, 0) + t.columns[tl.duration][rows] <= tl.end_limit(t.name)
            rows = rows[fits]
        return rows

    def _add_choices(self) -> None:
        for t, x in zip(self.problem.tables, self.x, strict=True):
            if t.optional:
                self.model.add_at_most_one(x).with_name(f"one[{t.name}]")
            else:
                self.model.add_exactly_one(x).with_name(f"one[{t.name}]")

    def _add_timeline(self, tl: Timeline) -> _Runs:
        """Start, duration and end per table, precedence, and the finish (the last end)."""
        cp_model, model = self.cp_model, self.model
        start, duration, end, interval = [], [], [], []
        # A run left out takes no time at its earliest start, after its predecessors (its
        # successors still wait for them); no due time binds it, only the latest end of all.
        finish_max = max([tl.horizon, *(tl.release.values())])
        runs: dict[int, Any] = {}
        for k, (t, rows, x) in enumerate(zip(self.problem.tables, self.rows, self.x, strict=True)):
            release = tl.release.get(t.name, 0)
            latest = max(release, tl.end_limit(t.name))
            d = t.columns[tl.duration][rows]
            lengths = sorted({int(v) for v in d} | ({0} if t.optional or not rows.size else set()))
            top = finish_max if t.optional else latest
            s = model.new_int_var(release, top, f"start[{t.name}]")
            size = model.new_int_var_from_domain(cp_model.Domain.from_values(lengths), f"duration[{t.name}]")
            model.add(size == cp_model.LinearExpr.weighted_sum(x, [int(v) for v in d]))
            e = model.new_int_var(release, top, f"end[{t.name}]")
            start.append(s)
            duration.append(size)
            end.append(e)
            interval.append(model.new_interval_var(s, size, e, f"run[{t.name}]"))
            if t.optional:
                runs[k] = model.new_bool_var(f"runs[{t.name}]")
                model.add(runs[k] == sum(x))
                model.add(e <= latest).only_enforce_if(runs[k]).with_name(f"due[{t.name}]")
                self.holds.append((runs[k], k, list(range(len(x)))))
        index = {t.name: i for i, t in enumerate(self.problem.tables)}
        for first, then in tl.after:
            model.add(start[index[then]] >= end[index[first]]).with_name(f"after[{first}][{then}]")
        finish = model.new_int_var(0, finish_max, "finish")
        for k, e in enumerate(end):
            # The finish is the last end of a table that runs: one that chooses no row does not.
            bound = model.add(finish >= e)
            if k in runs:
                bound.only_enforce_if(runs[k])
        return _Runs(start, duration, end, interval, finish, finish_max)

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
            if s_col == START:
                self._add_cumulative(lim.column, member, cap, label)
                continue
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

    def _add_cumulative(self, column: str, masks: list[B], limit: int, name: str) -> None:
        """At every instant, Σ column over the running tables' chosen rows the masks select ≤ limit:
        one optional interval per table and (duration, usage) of its masked rows, present when the
        table chooses one of those rows, of fixed length and demand (stronger propagation than
        one interval of variable length and demand per table)."""
        assert self.runs is not None  # ChoiceProblem refuses a START window without a timeline
        tl = self.problem.timeline
        assert tl is not None
        intervals: list[Any] = []
        demands: list[int] = []
        peak = 0
        tables = zip(self.problem.tables, self.rows, self.x, masks, self.runs.start, strict=True)
        for k, (t, rows, x, mask, start) in enumerate(tables):
            idx = np.nonzero(mask)[0]
            use = t.columns[column][rows[idx]]
            length = t.columns[tl.duration][rows[idx]]
            keep = use > 0
            if not keep.any():
                continue
            peak += int(use.max())
            groups: dict[tuple[int, int], list[int]] = {}
            for j, u, d in zip(idx[keep], use[keep], length[keep], strict=True):
                groups.setdefault((int(d), int(u)), []).append(int(j))
            for (d, u), members in groups.items():
                present = self.model.new_bool_var(f"holds[{name}][{t.name}][{d}x{u}]")
                self.model.add(present == sum(x[j] for j in members))
                self.holds.append((present, k, members))
                intervals.append(self.model.new_optional_fixed_size_interval_var(start, d, present, f"run[{t.name}]"))
                demands.append(u)
        if peak > limit:
            self.model.add_cumulative(intervals, demands, int(limit)).with_name(name)
            self._add_energy(column, masks, limit, name)

    def _add_energy(self, column: str, masks: list[B], limit: int, name: str) -> None:
        """Σ use · duration over the masked rows ≤ limit · the span they can run in: implied by the
        cumulative, and a linear cut that its relaxation otherwise misses."""
        tl = self.problem.timeline
        assert tl is not None
        variables: list[Any] = []
        coeffs: list[int] = []
        first, last = tl.horizon, 0
        for t, rows, x, mask in zip(self.problem.tables, self.rows, self.x, masks, strict=True):
            idx = np.nonzero(mask)[0]
            if not idx.size:
                continue
            energy = t.columns[column][rows[idx]] * t.columns[tl.duration][rows[idx]]
            variables += [x[j] for j in idx]
            coeffs += [int(e) for e in energy]
            first, last = min(first, tl.release.get(t.name, 0)), max(last, tl.end_limit(t.name))
        span = max(0, last - first)
        self.model.add(self.cp_model.LinearExpr.weighted_sum(variables, coeffs) <= int(limit) * span).with_name(
            f"energy[{name}]"
        )

    def _add_objective(self) -> _Objective:
        """Minimize the objective of the class docstring: one weighted sum without a timeline; with
        one, its first term now and its tie-break in a second solve (`solve`)."""
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
        times = 0 if self.runs is None else self.runs.finish_max
        if (max(spread, times) + 1) * scale >= _MAX_OBJECTIVE:
            raise ChoiceProblemError(
                f"objective keys too large for exact integer arithmetic (spread {spread}, {times} instants, "
                f"× {scale} positions). To fix: express keys or times in coarser integer units"
            )
        variables: list[Any] = []
        keys: list[int] = []
        ranks: list[int] = []
        for t, rows, x, p, s in zip(tables, self.rows, self.x, pos, shifts, strict=True):
            variables += x
            keys += [int(k) - s for k in t.key[rows]]
            ranks += [int(q) + 1 for q in p[rows]]
        weighted = self.cp_model.LinearExpr.weighted_sum
        if self.runs is None:
            self.model.minimize(weighted(variables, [k * scale + r for k, r in zip(keys, ranks, strict=True)]))
            return _Objective(None, None, scale, sum(shifts), key_first=True)
        key, rank, finish = weighted(variables, keys), weighted(variables, ranks), self.runs.finish
        key_first = self.problem.timeline is None or self.problem.timeline.minimize == "key"
        first, then = (key, finish * scale + rank) if key_first else (finish, key * scale + rank)
        self.model.minimize(first)
        return _Objective(first, then, scale, sum(shifts), key_first)

    def _add_hints(self) -> None:
        # Each mandatory table's own best row: a greedy start (docs/cpsat.md 1.5) that the
        # coupling may make infeasible, which CP-SAT then repairs or ignores. On a timeline, a
        # serial schedule of those rows hints every variable: a complete hint.
        picks: list[int | None] = []
        for t, rows, p in zip(self.problem.tables, self.rows, self.position, strict=True):
            picks.append(int(np.argmin(p[rows])) if rows.size and not t.optional else None)
        schedule = None
        if self.runs is not None:
            positions = [p[r] for p, r in zip(self.position, self.rows, strict=True)]
            schedule = serial_schedule(self.problem, self.rows, positions)
        if schedule is not None:
            picks = [pick for pick, _ in schedule]
        for x, pick in zip(self.x, picks, strict=True):
            for j, var in enumerate(x):
                self.model.add_hint(var, j == pick)
        if schedule is not None and self.runs is not None:
            self._hint_times(schedule)

    def _hint_times(self, schedule: list[tuple[int | None, int]]) -> None:
        tl, runs = self.problem.timeline, self.runs
        assert tl is not None and runs is not None
        ends = []
        tables = zip(self.problem.tables, self.rows, schedule, runs.start, runs.duration, runs.end, strict=True)
        for t, rows, (pick, start), s, d, e in tables:
            length = 0 if pick is None else int(t.columns[tl.duration][rows[pick]])
            self.model.add_hint(s, start)
            self.model.add_hint(d, length)
            self.model.add_hint(e, start + length)
            ends.append(start + length)
        self.model.add_hint(runs.finish, max(ends, default=0))
        for var, k, members in self.holds:
            self.model.add_hint(var, schedule[k][0] in members)

    def exclude(self, table: int, row: int) -> None:
        # Used for ranking uncoupled tables, which carry no hints that a cut could contradict.
        j = int(np.searchsorted(self.rows[table], row))
        self.model.add(self.x[table][j] == 0)

    def solve(self, first_solution: bool = False) -> Choice:
        """Solve; on a timeline in two steps: the first term of the objective, then its tie-break
        with the first held at its value (from that solution, as a complete hint). One weighted
        sum would find the same answer but searches far worse (its small terms stall the search)."""
        cp_model = self.cp_model
        share = 1.0 if self.objective.then is None or first_solution else 0.8
        solver, status, wall = self._search(share, first_solution)
        n = len(self.problem.tables)
        if status == cp_model.MODEL_INVALID:
            raise ChoiceProblemError(f"CP-SAT rejected the model: {self.model.validate()}")
        if status == cp_model.INFEASIBLE:
            return Choice("infeasible", (None,) * n, None, None, wall)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Choice("unknown", (None,) * n, None, None, wall)
        optimal = status == cp_model.OPTIMAL
        bound = math.floor(solver.best_objective_bound)
        if self.objective.then is not None and not first_solution:
            best = round(solver.objective_value)
            self.model.clear_hints()  # type: ignore[no-untyped-call]
            for i in range(len(self.model.proto.variables)):
                var = self.model.get_int_var_from_proto_index(i)
                self.model.add_hint(var, solver.value(var))
            self.model.add(self.objective.first <= best).with_name("best first term")
            self.model.minimize(self.objective.then)
            second, status2, wall2 = self._search(max(0.2, 1.0 - wall / self.time_limit_s), False)
            wall += wall2
            if status2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                solver, optimal = second, optimal and status2 == cp_model.OPTIMAL
        return self._choice(solver, optimal, bound, wall)

    def _search(self, share: float, first_solution: bool) -> tuple[Any, Any, float]:
        solver = self.cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = self.seed
        solver.parameters.max_time_in_seconds = self.time_limit_s * share
        solver.parameters.stop_after_first_solution = first_solution
        if self.deterministic_time is not None:
            solver.parameters.max_deterministic_time = self.deterministic_time * share
        start = time.perf_counter()
        status = solver.solve(self.model)
        return solver, status, time.perf_counter() - start

    def _choice(self, solver: Any, optimal: bool, bound: int, wall: float) -> Choice:
        """The solution in `solver` as a Choice; `bound` bounds the objective's (first) term."""
        chosen: list[int | None] = []
        for rows, x in zip(self.rows, self.x, strict=True):
            hit = [int(rows[j]) for j, var in enumerate(x) if solver.boolean_value(var)]
            chosen.append(hit[0] if hit else None)
        # The key sum is recomputed from the rows rather than read back from the float objective.
        total = sum(int(t.key[r]) for t, r in zip(self.problem.tables, chosen, strict=True) if r is not None)
        starts, finish = self._times(solver, chosen)
        if optimal:
            return Choice("optimal", tuple(chosen), total, total, wall, starts, finish, finish)
        goal = self.objective
        if goal.then is None:  # one weighted sum: the terms below the key weigh less than its weight
            return Choice("feasible", tuple(chosen), total, min(bound // goal.scale + goal.shift, total), wall)
        if goal.key_first:
            return Choice("feasible", tuple(chosen), total, min(bound + goal.shift, total), wall, starts, finish)
        assert finish is not None
        return Choice("feasible", tuple(chosen), total, None, wall, starts, finish, min(bound, finish))

    def _times(self, solver: Any, chosen: list[int | None]) -> tuple[tuple[int | None, ...], int | None]:
        """Each table's start (None where it chose no row) and the finish, from the chosen rows."""
        tl = self.problem.timeline
        if self.runs is None or tl is None:
            return (), None
        starts: list[int | None] = []
        ends = [0]
        for t, r, s in zip(self.problem.tables, chosen, self.runs.start, strict=True):
            if r is None:
                starts.append(None)
                continue
            starts.append(int(solver.value(s)))
            ends.append(int(solver.value(s)) + int(t.columns[tl.duration][r]))
        return tuple(starts), max(ends)


Placed = list[tuple[int, int, dict[tuple[int, int], int], int]]  # (start, end, holds, table) per placed table


def serial_schedule(problem: ChoiceProblem, rows: list[I], positions: list[I]) -> list[tuple[int | None, int]] | None:
    """A schedule to start the search from: each mandatory table on its first row by `positions`
    (its candidate rows, smaller first), placed by a serial schedule (tables in order of latest
    start once their predecessors are placed, each at its earliest start within the quotas over
    the timeline); while a table ends late, the table on its critical chain with the cheapest
    speed-up (key added per time saved) moves to a faster row ("crashing"). Budgets and other
    limits are not looked at. Per table: (index into its candidate rows or None, start); None when
    a mandatory table has no row.
    """
    tl = problem.timeline
    assert tl is not None
    tables = problem.tables
    if any(not r.size and not t.optional for t, r in zip(tables, rows, strict=True)):
        return None
    index = {t.name: i for i, t in enumerate(tables)}
    preds: list[list[int]] = [[] for _ in tables]
    for first, then in tl.after:
        preds[index[then]].append(index[first])
    quotas = [q for q in problem.limits if isinstance(q, Quota) and q.window is not None and q.window[0] == START]
    durations = [t.columns[tl.duration][r] for t, r in zip(tables, rows, strict=True)]
    keys = [t.key[r] for t, r in zip(tables, rows, strict=True)]
    needs = [[_needs(t, int(row), quotas) for row in r] for t, r in zip(tables, rows, strict=True)]
    fits = [np.array([_fits_alone(n, quotas) for n in ns], dtype=bool) for ns in needs]
    picks: list[int | None] = []
    for t, pos, ok in zip(tables, positions, fits, strict=True):
        usable = np.flatnonzero(ok)
        picks.append(None if t.optional or not usable.size else int(usable[np.argmin(pos[usable])]))
    if any(pick is None and not t.optional for pick, t in zip(picks, tables, strict=True)):
        return None
    for _ in range(1 + sum(r.size for r in rows)):  # each move makes a table faster: finitely many
        lengths = [0 if j is None else int(d[j]) for j, d in zip(picks, durations, strict=True)]
        holds = [None if j is None else needs[i][j] for i, j in enumerate(picks)]
        starts, cause = _list_schedule(problem, preds, lengths, holds, quotas)
        late = [(starts[i] + lengths[i] - tl.end_limit(t.name), i) for i, t in enumerate(tables)]
        over, worst = max(late)
        if over <= 0:
            break
        chain: list[int] = []
        k: int | None = worst
        while k is not None:
            chain.append(k)
            k = cause[k]
        move = _cheapest_speedup(chain, picks, durations, keys, fits)
        if move is None:
            break
        picks[move[0]] = move[1]
    return [(j, start) for j, start in zip(picks, starts, strict=True)]


def _cheapest_speedup(
    chain: list[int], picks: list[int | None], durations: list[I], keys: list[I], fits: list[B]
) -> tuple[int, int] | None:
    """(table, row): the faster row on the chain that adds the least key per unit of time saved."""
    best: tuple[float, int, int] | None = None
    for k in chain:
        j = picks[k]
        if j is None:
            continue
        faster = np.flatnonzero((durations[k] < durations[k][j]) & fits[k])
        if not faster.size:
            continue
        rate = (keys[k][faster] - keys[k][j]) / (durations[k][j] - durations[k][faster])
        m = int(np.argmin(rate))
        if best is None or float(rate[m]) < best[0]:
            best = (float(rate[m]), k, int(faster[m]))
    return None if best is None else (best[1], best[2])


def _list_schedule(
    problem: ChoiceProblem,
    preds: list[list[int]],
    lengths: list[int],
    needs: list[dict[tuple[int, int], int] | None],
    quotas: list[Quota],
) -> tuple[list[int], list[int | None]]:
    """Starts of fixed rows: tables in order of latest start once their predecessors are placed,
    each at its earliest start within the quotas; and per table the table that set its start
    (the predecessor that ended last, or the placed table whose end freed a quota), if any."""
    tl = problem.timeline
    assert tl is not None
    tables, n = problem.tables, len(problem.tables)
    succs: list[list[int]] = [[] for _ in range(n)]
    for then, firsts in enumerate(preds):
        for first in firsts:
            succs[first].append(then)
    latest = [tl.end_limit(t.name) for t in tables]
    for i in reversed(_topological(preds, succs)):
        for u in succs[i]:
            latest[i] = min(latest[i], latest[u] - lengths[u])
    starts = [tl.release.get(t.name, 0) for t in tables]
    cause: list[int | None] = [None] * n
    placed: Placed = []
    waiting = [len(p) for p in preds]
    ready = [i for i in range(n) if not waiting[i]]
    while ready:
        i = min(ready, key=lambda k: (latest[k] - lengths[k], k))
        ready.remove(i)
        ends = {p: starts[p] + lengths[p] for p in preds[i]}
        est = max([tl.release.get(tables[i].name, 0), *ends.values()])
        cause[i] = max(ends, key=lambda p: (ends[p], -p)) if ends and max(ends.values()) == est else None
        need = needs[i] or {}
        start = _earliest_fit(placed, est, lengths[i], need, quotas)
        starts[i] = est if start is None else start
        if starts[i] > est:
            cause[i] = next((k for s, e, _, k in placed if e == starts[i]), cause[i])
        placed.append((starts[i], starts[i] + lengths[i], need, i))
        for u in succs[i]:
            waiting[u] -= 1
            if not waiting[u]:
                ready.append(u)
    return starts, cause


def _topological(preds: list[list[int]], succs: list[list[int]]) -> list[int]:
    waiting = [len(p) for p in preds]
    todo = [i for i, w in enumerate(waiting) if not w]
    order = []
    while todo:
        i = todo.pop()
        order.append(i)
        for u in succs[i]:
            waiting[u] -= 1
            if not waiting[u]:
                todo.append(u)
    return order


def _needs(table: ChoiceTable, row: int, quotas: list[Quota]) -> dict[tuple[int, int], int]:
    """What a row holds of each limited quota value while it runs: (quota, value) -> usage."""
    out = {}
    for q, quota in enumerate(quotas):
        value = int(table.columns[quota.by][row])
        if quota.limit_of(value) is not None and int(table.columns[quota.column][row]) > 0:
            out[(q, value)] = int(table.columns[quota.column][row])
    return out


def _fits_alone(need: dict[tuple[int, int], int], quotas: list[Quota]) -> bool:
    return all(amount <= (quotas[q].limit_of(v) or 0) for (q, v), amount in need.items())


def _earliest_fit(
    placed: Placed, est: int, length: int, need: dict[tuple[int, int], int], quotas: list[Quota]
) -> int | None:
    """The earliest start from `est` at which `need` fits under every quota for `length`, or None
    when it exceeds a quota by itself."""
    if not _fits_alone(need, quotas):
        return None
    caps = {key: quotas[key[0]].limit_of(key[1]) or 0 for key in need}
    for start in sorted({est} | {e for _, e, _, _ in placed if e > est}):
        stop = start + length
        points = [start, *(s for s, _, _, _ in placed if start < s < stop)]
        if all(
            sum(u.get(key, 0) for s, e, u, _ in placed if s <= p < e) + amount <= caps[key]
            for p in points
            for key, amount in need.items()
        ):
            return start
    return None


ENGINES: dict[str, type[ScanEngine] | type[CpSatEngine]] = {"scan": ScanEngine, "cpsat": CpSatEngine}
