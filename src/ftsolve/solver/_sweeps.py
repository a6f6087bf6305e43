"""Side-by-side comparisons and cost-versus-finish-time frontiers, each from one priced table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from ftsolve._errors import InvalidJobSpec
from ftsolve.catalog import Catalog, load_catalog
from ftsolve.solver._api import _failure, plan
from ftsolve.solver._grid import CandidateTable, build_candidates
from ftsolve.solver._job import MARKETS, JobSpec
from ftsolve.solver._memory import METHOD_NAMES
from ftsolve.solver._objectives import objective_key
from ftsolve.solver._replan import Replan, Updates


class CompareRow(BaseModel):
    """The best plan of one GPU type (or method), or what stops it."""

    model_config = ConfigDict(frozen=True)

    option: str
    feasible: bool
    n_gpus: int | None
    method: str | None
    market: str | None
    provider: str | None
    expected_hours: float | None
    total_cost_usd: float | None
    blocked_by: str


class FrontierPoint(BaseModel):
    """The best plan when the swept limit (deadline or budget) has this value."""

    model_config = ConfigDict(frozen=True)

    limit: float
    feasible: bool
    total_cost_usd: float | None
    expected_hours: float | None
    quantile_hours: float | None
    label: str | None
    on_frontier: bool


def compare(job: JobSpec, catalog: Catalog | None = None, *, by: Literal["gpu", "method"] = "gpu") -> list[CompareRow]:
    """The same job across GPU types or methods, cheapest first, infeasible options last."""
    t = build_candidates(job, catalog if catalog is not None else load_catalog())
    feasible = t.feasible()
    if by == "gpu":
        values = np.array([t.offers[int(i)].gpu for i in t.offer_idx], dtype=str) if len(t) else np.zeros(0, str)
    else:
        values = np.array([METHOD_NAMES[int(m)] for m in t.method], dtype=str)
    rows: list[CompareRow] = []
    for value in sorted(set(values.tolist())):
        members = np.nonzero(values == value)[0]
        ok = members[feasible[members]]
        if ok.size:
            i = int(ok[np.lexsort((t.tie_rank[ok], t.total_cents[ok]))[0]])
            o = t.offers[int(t.offer_idx[i])]
            rows.append(
                CompareRow(
                    option=value,
                    feasible=True,
                    n_gpus=int(t.n_gpus[i]),
                    method=METHOD_NAMES[int(t.method[i])],
                    market=MARKETS[int(t.market[i])],
                    provider=o.provider,
                    expected_hours=round(float(t.expected_hours[i]), 3),
                    total_cost_usd=int(t.total_cents[i]) / 100,
                    blocked_by="",
                )
            )
        else:
            rows.append(
                CompareRow(
                    option=value,
                    feasible=False,
                    n_gpus=None,
                    method=None,
                    market=None,
                    provider=None,
                    expected_hours=None,
                    total_cost_usd=None,
                    blocked_by=_failure(job, t, members),
                )
            )
    rows.sort(key=lambda r: (not r.feasible, r.total_cost_usd or 0.0, r.option))
    return rows


MAX_POINTS = 200  # each point is a plan; more is a typo, not a finer frontier


def pareto(
    job: JobSpec,
    catalog: Catalog | None = None,
    *,
    sweep: Literal["deadline", "budget"] = "deadline",
    points: int = 12,
    on_point: Callable[[], None] | None = None,
) -> list[FrontierPoint]:
    """Best plan for each value of the swept limit; `on_frontier` marks the non-dominated points
    of expected cost against finish time.

    One table is priced for all points: the job without the swept limit. A budget changes no
    price, so each point of a budget sweep ranks that table again. A deadline sets the fallbacks'
    interruptible share, so each point of a deadline sweep is re-planned (_replan.Replan), pricing
    only the offers that may beat the best plan the table already has within that deadline."""
    if not 2 <= points <= MAX_POINTS:
        raise InvalidJobSpec(f"invalid points {points}: sweep between 2 and {MAX_POINTS} values")
    catalog = catalog if catalog is not None else load_catalog()
    free = job.model_copy(update={"deadline_hours": None} if sweep == "deadline" else {"budget_usd": None})
    t = build_candidates(free, catalog)
    ok = t.feasible()
    if not ok.any():
        plan(free, catalog, top=1)  # raises NoFeasiblePlan with the full diagnosis
    search = Replan(free, t, lambda j: build_candidates(j, catalog))
    key = objective_key(free, t)[0]
    out: list[FrontierPoint] = []
    for limit in _limits(sweep, t, ok, points):
        if sweep == "deadline":
            updates: Updates = {"deadline_hours": float(limit)}
            within = ok & (t.quantile_hours <= limit)
            guess = int(key[within].min()) if within.any() else None
        else:
            updates, guess = {"budget_usd": float(limit), "objective": "time"}, None
        out.append(_point(float(limit), search.best(updates, guess)))
        if on_point is not None:
            on_point()
    return _mark_frontier(out)


def _limits(sweep: str, t: CandidateTable, ok: NDArray[np.bool_], points: int) -> NDArray[np.float64]:
    """The swept values: from the fastest plan's finish (or the cheapest plan's cost) to past the
    other end of the frontier, geometrically spaced."""
    if sweep == "deadline":
        lo = float(np.min(t.quantile_hours[ok]))
        cheapest = int(np.nonzero(ok)[0][np.argmin(t.total_cents[ok])])
        hi = max(float(t.quantile_hours[cheapest]) * 1.25, lo * 1.5)
        out: NDArray[np.float64] = np.geomspace(lo * 1.0001, hi, points)
        return out
    cost = t.total_cents[ok] / 100
    fastest = int(np.nonzero(ok)[0][np.argmin(t.expected_hours[ok])])
    out = np.geomspace(
        float(np.min(cost)) * 1.0001,
        max(int(t.total_cents[fastest]) / 100, float(np.min(cost)) * 2),
        points,
    )
    return out


def _point(limit: float, found: tuple[JobSpec, CandidateTable, int] | None) -> FrontierPoint:
    """The point of a swept value: its best plan's figures, rounded as a Plan rounds them."""
    if found is None:
        return FrontierPoint(
            limit=round(limit, 4),
            feasible=False,
            total_cost_usd=None,
            expected_hours=None,
            quantile_hours=None,
            label=None,
            on_frontier=False,
        )
    _, t, i = found
    gpu = t.offers[int(t.offer_idx[i])].gpu
    return FrontierPoint(
        limit=round(limit, 4),
        feasible=True,
        total_cost_usd=int(t.total_cents[i]) / 100,
        expected_hours=round(float(t.expected_hours[i]), 4),
        quantile_hours=round(float(t.quantile_hours[i]), 4),
        label=f"{int(t.n_gpus[i])}x {gpu} {METHOD_NAMES[int(t.method[i])]} {MARKETS[int(t.market[i])]}",
        on_frontier=False,
    )


def _mark_frontier(points: list[FrontierPoint]) -> list[FrontierPoint]:
    pairs = [(p.total_cost_usd, p.quantile_hours) for p in points if p.feasible]
    marked = []
    for p in points:
        on = False
        if p.total_cost_usd is not None and p.quantile_hours is not None:
            me = (p.total_cost_usd, p.quantile_hours)
            on = not any(
                c is not None and q is not None and c <= me[0] and q <= me[1] and (c, q) != me for c, q in pairs
            )
        marked.append(p.model_copy(update={"on_frontier": on}))
    return marked
