"""Re-planning one job with some fields changed, pricing only what may win.

Explanations re-plan an infeasible job once per relaxation, and `pareto` once per swept limit.
Pricing is most of a candidate table's cost, so a changed job is first scored before pricing
(_pipeline.unpriced) and given lower bounds: no run of a candidate finishes before its start-up
and work are done, nor costs less than those hours on all its GPUs at the cheaper price its
market may pay (_pipeline.least_hours_and_usd). Only the offers where some candidate's bounds
keep the limits (and, given an incumbent, could beat it) are priced: a branch whose GPU-hours
at the cheapest price are already above the budget ends there, unpriced.

Such a table holds every candidate of the full table that may be feasible (or win), with the
same figures: each candidate is priced from its own inputs, twins are pruned within its offers
as in the full table (a dominating twin has bounds no higher, so it is kept with the twin it
dominates), and ties rank by the same order. Its best plan is therefore the full table's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog import Catalog, OfferTable
from ftsolve.solver._compat import CONFIGS
from ftsolve.solver._grid import CandidateTable, build_candidates
from ftsolve.solver._job import MARKETS, METHODS, JobSpec
from ftsolve.solver._objectives import OBJECTIVES, best_row, objective_key
from ftsolve.solver._pipeline import (
    Candidates,
    Rows,
    Unpriced,
    least_row_hours_and_usd,
    offer_rows,
    unpriced,
    unpriced_bounds,
)
from ftsolve.solver._plans import JobValue

Rebuild = Callable[[JobSpec], CandidateTable]
Updates = dict[str, JobValue]
F = NDArray[np.float64]
I = NDArray[np.int64]
B = NDArray[np.bool_]

# Job fields that change which candidates pass or win, not what any candidate costs or takes (the
# deadline does change prices: it sets the fallback's interruptible share).
PRICE_NEUTRAL = frozenset(
    {"budget_usd", "gpu_quota", "batch_tolerance", "objective", "time_value_usd_per_hour", "tie_tolerance"}
)
# Fields only the physics reads (through the memory options): the offer rows stay as they are.
PHYSICS_ONLY = frozenset({"optimizer", "adapter_dtype", "loss", "activation_offload"})
# Fields no stage before pricing reads, apart from whether a deadline is given at all (without
# one, no fallback rows are scored).
LIMITS = frozenset({"deadline_hours", "budget_usd"})
# A candidate is set aside unpriced only when its bounds are clearly beyond a limit: cost items
# are rounded to cents one by one, and finish quantiles are found numerically.
BOUND_RELATIVE_SLACK = 1e-6
BOUND_USD_SLACK = 0.05
# Below this many candidates a table is rebuilt in full: scoring a changed job before pricing
# would cost about as much as pricing all of it. Changes that widen the scope are bounded anyway.
SMALL_TABLE = 4000
WIDENING = frozenset({"max_gpus", "max_nodes", "providers", "regions", "countries", "gpus", "eu_only"})
# The filters a table of some offers of the job's scope no longer needs (each offer passed them).
_IN_SCOPE: Updates = {"providers": None, "regions": None, "countries": None, "gpus": None, "eu_only": False}


def _key(updates: Updates) -> str:
    return repr(sorted(updates.items()))


def within_limits(job: JobSpec, least_hours: F, least_usd: F) -> B:
    """Candidates whose lower bounds keep the job's deadline and budget: the only ones that may."""
    ok = np.ones(least_hours.shape, dtype=bool)
    if job.deadline_hours is not None:
        ok &= least_hours <= job.deadline_hours * (1.0 + BOUND_RELATIVE_SLACK)
    if job.budget_usd is not None:
        ok &= least_usd <= job.budget_usd * (1.0 + BOUND_RELATIVE_SLACK) + BOUND_USD_SLACK
    return ok


def _narrowed(job: JobSpec, c: Candidates, keep: I) -> Updates:
    """The caps, methods and markets of the candidates `keep`, where leaving the others out
    changes no kept candidate's figures or rank: LoRA stays while allowed (it decides whether QLoRA
    pays its preference), and interruptible capacity stays (it decides whether a fallback is
    priced standing alone); the two fallbacks have the same bounds, so they stay or go together."""
    methods = {METHODS[m] for m in CONFIGS[c.cfg[keep], 0]} | ({"lora"} & set(job.methods))
    markets = {MARKETS[m] for m in c.market[keep]} | ({"interruptible"} & set(job.markets))
    return {
        "max_gpus": int(c.n_gpus[keep].max()),
        "max_nodes": int(c.nodes[keep].max()),
        "methods": tuple(m for m in job.methods if m in methods),
        "markets": tuple(m for m in job.markets if m in markets),
    }


def least_key(job: JobSpec, least_hours: F, least_usd: F) -> I:
    """A lower bound of each candidate's objective key: the objective of its bounds. Keys never
    fall as cost or hours rise, and the preferences only add to the ranking cents."""
    cents = np.floor(least_usd * 100.0 * (1.0 - BOUND_RELATIVE_SLACK)).astype(np.int64) - 2
    return OBJECTIVES[job.objective].key(job, np.maximum(cents, 0), least_hours * (1.0 - BOUND_RELATIVE_SLACK))


class Replan:
    """The job of a table, re-planned with some fields changed; each changed job's table once.

    `table` is a changed job's full table. `within_reach` is a table of the offers where some of
    its candidates may keep its limits and, given `below`, have an objective key of at most
    `below` (None: no candidate may). `best` is the changed job's best plan."""

    def __init__(self, job: JobSpec, table: CandidateTable, rebuild: Rebuild, small_table: int = SMALL_TABLE) -> None:
        self.job = job
        self.small_table = small_table
        self.base = table
        self.rebuild = rebuild
        self.tables: dict[str, tuple[JobSpec, CandidateTable]] = {_key({}): (job, table)}
        self.reached: dict[tuple[str, int | None], tuple[JobSpec, CandidateTable | None]] = {}
        self.scored: dict[str, Unpriced] = {}
        self.rows: Rows | None = None
        # The catalog the table was built from, as far as the stages before pricing read it.
        self.catalog = Catalog.model_construct(gpus=table.gpu_specs, offers=OfferTable.of(table.offers), models={})

    def table(self, updates: Updates) -> tuple[JobSpec, CandidateTable]:
        key = _key(updates)
        if key not in self.tables:
            trial = self.job.model_copy(update=updates)
            if set(updates) <= PRICE_NEUTRAL:  # the same candidates and prices; only masks and keys change
                self.tables[key] = (trial, dataclasses.replace(self.base, job=trial))
            else:
                self.tables[key] = (trial, self.rebuild(trial))
        return self.tables[key]

    def within_reach(self, updates: Updates, below: int | None = None) -> tuple[JobSpec, CandidateTable | None]:
        # Planning prices (the table's offer arrays) follow allow_floor_prices: a change of it
        # is built in full.
        small = len(self.base) < self.small_table and not WIDENING & set(updates)
        if small or _key(updates) in self.tables or set(updates) <= PRICE_NEUTRAL or "allow_floor_prices" in updates:
            return self.table(updates)
        key = (_key(updates), below)
        if key not in self.reached:
            trial = self.job.model_copy(update=updates)
            self.reached[key] = (trial, self._reachable(trial, updates, below))
        return self.reached[key]

    def best(self, updates: Updates, guess: int | None = None) -> tuple[JobSpec, CandidateTable, int] | None:
        """The changed job's best plan (its table and row), or None. `guess` is a key some plan
        is thought to reach: if the best plan found among the candidates that may beat it does
        reach it, that plan is the best of all; else the search is repeated without it."""
        trial, t = self.within_reach(updates, guess)
        i = None if t is None else best_row(trial, t)
        if guess is not None and (t is None or i is None or objective_key(trial, t)[0][i] > guess):
            trial, t = self.within_reach(updates)
            i = None if t is None else best_row(trial, t)
        return None if t is None or i is None else (trial, t, i)

    def _reachable(self, trial: JobSpec, updates: Updates, below: int | None) -> CandidateTable | None:
        """The table of the offers where some candidate of `trial` may keep its limits (and beat
        `below`), with the GPU and node caps of those candidates (fewer node counts to score)."""
        arr = self.base.offer_arrays
        u = self._unpriced(trial, updates)
        c = u.candidates
        hours, usd = unpriced_bounds(u, arr)
        ok = c.runnable & within_limits(trial, hours, usd)
        if below is not None:
            ok &= least_key(trial, hours, usd) <= below
        keep = np.flatnonzero(ok)
        if keep.size == 0:
            return None
        offers = OfferTable.of(self.base.offers[int(i)] for i in np.unique(c.offer[keep]))
        sub = Catalog.model_construct(gpus=self.base.gpu_specs, offers=offers, models={})
        narrow = {"model": self.base.arch, **_IN_SCOPE, **_narrowed(trial, c, keep)}
        return build_candidates(trial.model_copy(update=narrow), sub)

    def _unpriced(self, trial: JobSpec, updates: Updates) -> Unpriced:
        """The changed job before pricing, on the rows whose start-up alone keeps the budget;
        once per change that is not only of the deadline."""
        scoring = {f: v for f, v in updates.items() if f not in LIMITS}
        key = f"{_key(scoring)} deadline={trial.deadline_hours is not None} budget={trial.budget_usd}"
        if key not in self.scored:
            arr = self.base.offer_arrays
            same_deadline = (trial.deadline_hours is None) == (self.job.deadline_hours is None)
            if set(scoring) <= PHYSICS_ONLY and same_deadline:
                self.rows = self.rows or offer_rows(self.job, self.catalog, arr, prune=True)
                rows = self.rows
            else:
                rows = offer_rows(trial, self.catalog, arr, prune=True)
            # Every candidate of a row pays the row's start-up: beyond the budget, none can keep it.
            budget_only = trial.model_copy(update={"deadline_hours": None})
            reach = within_limits(budget_only, *least_row_hours_and_usd(trial, self.base.arch, arr, rows))
            rows = rows if reach.all() else rows.take(np.flatnonzero(reach))
            self.scored[key] = unpriced(trial, self.catalog, arr, self.base.arch, rows)
        return self.scored[key]
