"""The budget judged at a quantile of the cost (issue 20, --budget-confidence): the quoted cost
against seeded replays, its order against the expected cost, and its effect on plans."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import single_run

import ftsolve
from ftsolve import JobSpec
from ftsolve.solver._cost import ADAPTIVE, FALLBACK, OD, SPOT, RunCosts, RunInputs, price_runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from spot_montecarlo import price_and_replay

RUNS = 6000
# (rate per hour, checkpoint write h, restart h, work h), as in the Monte Carlo benchmark's grid.
POINTS = [(0.3, 0.1, 0.1, 3.0), (1.0, 0.01, 0.5, 20.0), (0.05, 0.5, 0.1, 20.0), (1.0, 0.1, 0.1, 3.0)]


@pytest.mark.parametrize("market", [SPOT, FALLBACK, ADAPTIVE])
@pytest.mark.parametrize("point", POINTS)
def test_the_cost_quoted_at_a_confidence_is_exceeded_at_most_that_often(
    market: int, point: tuple[float, float, float, float]
) -> None:
    for i, q in enumerate((0.8, 0.95)):
        row = price_and_replay(np.random.default_rng([3, market, i]), RUNS, market, q, point)
        if row.offered:
            assert row.p_budget >= q - 3.0 * np.sqrt(q * (1 - q) / RUNS), (q, row)


def _price(run: RunInputs, deadline: float, budget_confidence: float | None) -> RunCosts:
    return price_runs(run, 0.9, deadline, 0, 0.05, 0.0, 7.0, budget_confidence=budget_confidence)


@given(st.floats(0.5, 100.0), st.floats(0.001, 2.0), st.floats(0.001, 0.5), st.floats(0.01, 1.0), st.floats(0.5, 0.97))
def test_the_cost_at_a_confidence_grows_with_it_and_equals_the_expected_cost_without(
    work: float, lam: float, delta: float, restart: float, q: float
) -> None:
    for market in (OD, SPOT, FALLBACK, ADAPTIVE):
        run = single_run(market, work, lam, delta, restart)
        deadline = (work + restart) * 1.6 + 1.0
        plain, low, high = (_price(run, deadline, b) for b in (None, q, min(q + 0.02, 0.99)))
        assert plain.budget_cents[0] == plain.total_cents[0]
        # The expected figures do not depend on how the budget is judged.
        assert low.total_cents[0] == plain.total_cents[0] and low.spot_fraction[0] == plain.spot_fraction[0]
        assert high.budget_cents[0] >= low.budget_cents[0]
        if market == OD:
            assert low.budget_cents[0] == low.total_cents[0]
        # Never below the cheapest run: every hour of it on interruptible capacity, without preemptions.
        assert low.budget_cents[0] >= 0


def _job(**kw: object) -> JobSpec:
    return JobSpec(model="llama-3.1-8b", train_tokens=300_000_000, seq_len=2048, deadline_hours=48, **kw)


def test_a_budget_between_the_expected_and_the_quoted_cost_is_refused_and_the_relaxation_says_so() -> None:
    base = ftsolve.plan(_job(budget_confidence=0.99, markets=("interruptible",)), top=1).plans[0]
    assert base.cost_at_confidence_usd is not None and base.cost_at_confidence_usd > base.total_cost_usd
    between = round((base.total_cost_usd + base.cost_at_confidence_usd) / 2, 2)
    job = _job(budget_usd=between, budget_confidence=0.99, markets=("interruptible",))
    plans = ftsolve.plan(_job(budget_usd=between, markets=("interruptible",)), top=1).plans
    assert plans and plans[0].total_cost_usd <= between  # judged on the expected cost it fits
    try:
        planned = ftsolve.plan(job, top=1).plans
    except ftsolve.NoFeasiblePlan as e:  # the budget's relaxation is judged at 99% too
        relax = next(r for r in e.infeasibility.relaxations if r.constraint == "budget")
        assert relax.value is not None and relax.value > between
        job = job.model_copy(update=relax.updates)
        planned = ftsolve.plan(job, top=1).plans
    for p in planned:  # whatever is planned is judged on its cost at 99%
        assert p.cost_at_confidence_usd is not None and job.budget_usd is not None
        assert p.cost_at_confidence_usd <= job.budget_usd
        assert p.slack["budget_usd"] == pytest.approx(job.budget_usd - p.cost_at_confidence_usd, abs=0.006)
        assert ftsolve.check_plan(job, ftsolve.load_catalog(), p) == []
