"""Re-planning with lower bounds (issue 18, "fast everywhere"): the bounds hold for every priced
candidate, and a bounded re-plan finds exactly the plan a full re-plan finds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import catalog_of, jobs, offer_lists

import ftsolve
from ftsolve import Catalog, JobSpec, NoFeasiblePlan, Offer
from ftsolve.solver._api import plan_from_row
from ftsolve.solver._grid import CandidateTable, build_candidates
from ftsolve.solver._objectives import objective_key
from ftsolve.solver._pipeline import least_row_hours_and_usd, offer_rows, unpriced, unpriced_bounds
from ftsolve.solver._plans import JobValue
from ftsolve.solver._replan import Replan, least_key

BUNDLED = ftsolve.load_catalog()
RECIPES: list[dict[str, JobValue]] = [
    {},
    {"optimizer": "adamw-8bit"},
    {"optimizer": "paged-adamw-8bit", "adapter_dtype": "bf16"},
    {"loss": "chunked", "activation_offload": True},
    {"budget_confidence": 0.9},
    {"objective": "time"},
    {"objective": "weighted", "time_value_usd_per_hour": 30.0},
]
CHANGES: list[dict[str, JobValue]] = [
    {"optimizer": "adamw-8bit"},
    {"activation_offload": True},
    {"methods": ("full", "lora", "qlora")},
    {"markets": ("on-demand", "interruptible", "fallback", "adaptive")},
    {"markets": ("fallback", "adaptive")},
    {"max_gpus": 64, "max_nodes": 8},
    {"deadline_hours": 3.0},
    {"budget_usd": 5.0},
    {"deadline_hours": 12.0, "budget_usd": 40.0},
    {"budget_usd": 40.0, "objective": "time"},
]


def _bounds_by_candidate(job: JobSpec, cat: Catalog, t: CandidateTable) -> dict[tuple[int, ...], tuple[float, float]]:
    u = unpriced(job, cat, t.offer_arrays, t.arch)
    hours, usd = unpriced_bounds(u, t.offer_arrays)
    c = u.candidates
    keys = zip(c.offer.tolist(), c.market.tolist(), c.nodes.tolist(), c.cfg.tolist(), strict=True)
    return {k: (float(h), float(d)) for k, h, d in zip(keys, hours, usd, strict=True)}


def _assert_bounds_hold(job: JobSpec, cat: Catalog) -> None:
    t = build_candidates(job, cat)
    bounds = _bounds_by_candidate(job, cat, t)
    row_h, row_usd = least_row_hours_and_usd(job, t.arch, t.offer_arrays, offer_rows(job, cat, t.offer_arrays, True))
    assert (row_h >= 0).all() and (np.nan_to_num(row_usd) >= 0).all()
    key = objective_key(job, t)[0]
    for i in np.flatnonzero(t.runnable):
        h, usd = bounds[(int(t.offer_idx[i]), int(t.market[i]), int(t.nodes[i]), int(t.cfg[i]))]
        assert t.quantile_hours[i] >= h * (1 - 1e-9), (i, h)
        assert t.expected_hours[i] >= h * (1 - 1e-9), (i, h)
        assert t.total_cents[i] >= usd * 100 - 2 and t.budget_cents[i] >= usd * 100 - 2, (i, usd)
        assert key[i] >= least_key(job, np.array([h]), np.array([usd]))[0]


@given(jobs(), offer_lists(), st.sampled_from(RECIPES))
def test_every_priced_candidate_takes_at_least_its_lower_bounds(
    job: JobSpec, offers: tuple[Offer, ...], recipe: dict[str, JobValue]
) -> None:
    # A bound above a priced figure would let the diagnosis set aside a plan it should quote.
    _assert_bounds_hold(job.model_copy(update=recipe), catalog_of(offers))


@pytest.mark.parametrize(
    "job",
    [
        JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24, budget_usd=1),
        JobSpec(
            model="llama-3.1-70b", train_tokens=200_000_000, seq_len=4096, methods=("full",), deadline_hours=48,
            trial_runs=2, failure_probability=0.1, budget_usd=100, budget_confidence=0.9,
        ),
    ],
)  # fmt: skip
def test_lower_bounds_hold_on_the_bundled_catalog(job: JobSpec) -> None:
    _assert_bounds_hold(job, BUNDLED)


def _best(job: JobSpec, cat: Catalog) -> tuple[object, ...] | None:
    try:
        p = ftsolve.plan(job, cat, top=1).plans[0]
    except NoFeasiblePlan:
        return None
    return (p.offer.instance_type, p.n_gpus, p.nodes, p.method, p.market, p.total_cost_usd, p.time.quantile_hours)


@given(jobs(), offer_lists(), st.sampled_from(CHANGES), st.sampled_from([None, 0, 50, 10**6]))
def test_a_bounded_re_plan_finds_the_plan_a_full_one_finds(
    job: JobSpec, offers: tuple[Offer, ...], change: dict[str, JobValue], guess: int | None
) -> None:
    cat = catalog_of(offers)
    search = Replan(job, build_candidates(job, cat), lambda j: build_candidates(j, cat), small_table=0)
    found = search.best(change, guess)  # a guess, right or wrong, never changes the answer
    want = _best(job.model_copy(update=change), cat)
    if found is None:
        assert want is None
        return
    trial, t, i = found
    o = t.offers[int(t.offer_idx[i])]
    p = plan_from_row(trial, t, i, 1, i)
    assert want == (o.instance_type, int(t.n_gpus[i]), int(t.nodes[i]), p.method, p.market, p.total_cost_usd,
                    p.time.quantile_hours)  # fmt: skip
