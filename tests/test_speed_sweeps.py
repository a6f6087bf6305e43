"""`pareto` prices one table for all points (issue 18): each point is still the plan `plan` gives
at that limit, figure for figure."""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import catalog_of, jobs, offer_lists

import ftsolve
from ftsolve import Catalog, JobSpec, NoFeasiblePlan, Offer
from ftsolve.solver._grid import build_candidates
from ftsolve.solver._sweeps import FrontierPoint, _limits, _mark_frontier


def _planned(job: JobSpec, cat: Catalog, sweep: Literal["deadline", "budget"], points: int) -> list[FrontierPoint]:
    """The frontier the slow way: one `plan` per swept value."""
    free = job.model_copy(update={"deadline_hours": None} if sweep == "deadline" else {"budget_usd": None})
    t = build_candidates(free, cat)
    out = []
    for limit in _limits(sweep, t, t.feasible(), points):
        update = {"deadline_hours": float(limit)} if sweep == "deadline" else {"budget_usd": float(limit)}
        try:
            trial = job.model_copy(update=update if sweep == "deadline" else {**update, "objective": "time"})
            p = ftsolve.plan(trial, cat, top=1).plans[0]
            figures: tuple[float | None, ...] = (p.total_cost_usd, p.time.expected_hours, p.time.quantile_hours)
            label: str | None = f"{p.n_gpus}x {p.gpu} {p.method} {p.market}"
        except NoFeasiblePlan:
            figures, label = (None, None, None), None
        out.append(
            FrontierPoint(
                limit=round(float(limit), 4),
                feasible=label is not None,
                total_cost_usd=figures[0],
                expected_hours=figures[1],
                quantile_hours=figures[2],
                label=label,
                on_frontier=False,
            )
        )
    return _mark_frontier(out)


@given(jobs(), offer_lists(), st.sampled_from(["deadline", "budget"]))
def test_each_point_is_the_plan_at_its_limit(
    job: JobSpec, offers: tuple[Offer, ...], sweep: Literal["deadline", "budget"]
) -> None:
    cat = catalog_of(offers)
    try:
        points = ftsolve.pareto(job, cat, sweep=sweep, points=4)
    except NoFeasiblePlan:
        return
    assert points == _planned(job, cat, sweep, 4)


@pytest.mark.parametrize("sweep", ["deadline", "budget"])
def test_the_readme_frontier_is_the_plan_at_each_limit(sweep: Literal["deadline", "budget"]) -> None:
    cat = ftsolve.load_catalog()
    job = JobSpec(model="llama-3.1-8b", train_tokens=200_000_000, seq_len=2048, budget_usd=None)
    points = ftsolve.pareto(job, cat, sweep=sweep, points=5)
    assert any(p.on_frontier for p in points)
    assert points == _planned(job, cat, sweep, 5)
