"""Property tests: the two engines agree, every plan re-checks, rankings are sorted and stable."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import catalog_of, jobs, offer_lists

import ftsolve
from ftsolve import Catalog, JobSpec, NoFeasiblePlan, Offer
from ftsolve.solver import _grid
from ftsolve.solver._engines import CpSatEngine, ScanEngine
from ftsolve.solver._grid import build_candidates


def _run(job: JobSpec, catalog: Catalog, engine: str) -> ftsolve.PlanSet | None:
    try:
        return ftsolve.plan(job, catalog, engine=engine, top=4)
    except NoFeasiblePlan:
        return None


@given(jobs(), offer_lists())
def test_engines_agree_on_ranked_costs_and_infeasibility(job: JobSpec, offers: tuple[Offer, ...]) -> None:
    catalog = catalog_of(offers)
    scan = _run(job, catalog, "scan")
    cpsat = _run(job, catalog, "cpsat")
    assert (scan is None) == (cpsat is None)
    if scan is not None and cpsat is not None:
        assert [p.total_cost_usd for p in scan.plans] == [p.total_cost_usd for p in cpsat.plans]
        assert [p.offer.key for p in scan.plans] == [p.offer.key for p in cpsat.plans]


@given(jobs(), offer_lists())
def test_every_plan_passes_check_plan_and_ranking_is_sorted(job: JobSpec, offers: tuple[Offer, ...]) -> None:
    catalog = catalog_of(offers)
    result = _run(job, catalog, "scan")
    if result is None:
        return
    # Ranked by expected cost with the practitioner's preferences counted as extra cost
    # (QLoRA where LoRA was allowed, each doubling of nodes, interruptible capacity).
    def ranking(p: ftsolve.Plan) -> float:
        extra = (p.method == "qlora" and "lora" in job.methods) + math.log2(p.nodes) + (p.market != "on-demand")
        return p.total_cost_usd * (1 + job.tie_tolerance * extra)

    ranked = [ranking(p) for p in result.plans]
    assert all(a <= b + 0.01 for a, b in itertools.pairwise(ranked))
    for p in result.plans:
        assert ftsolve.check_plan(job, catalog, p) == []
        assert p.memory.peak_gib <= p.memory.usable_gib
        assert sum(p.memory.components_gib.values()) == pytest.approx(p.memory.peak_gib, abs=0.02)
        if job.deadline_hours is not None:
            assert p.time.quantile_hours <= job.deadline_hours
        if job.budget_usd is not None:
            assert p.total_cost_usd <= job.budget_usd
    # Diversity: no two plans share GPU type, method and market.
    keys = [(p.gpu, p.method, p.market) for p in result.plans]
    assert len(keys) == len(set(keys))


@given(jobs(), offer_lists())
def test_same_inputs_same_json(job: JobSpec, offers: tuple[Offer, ...]) -> None:
    catalog = catalog_of(offers)
    a, b = _run(job, catalog, "cpsat"), _run(job, catalog, "cpsat")
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert a.model_dump_json() == b.model_dump_json()


@given(jobs(), offer_lists())
def test_infeasible_diagnosis_names_a_real_conflict(job: JobSpec, offers: tuple[Offer, ...]) -> None:
    catalog = catalog_of(offers)
    try:
        ftsolve.plan(job, catalog)
    except NoFeasiblePlan as exc:
        inf = exc.infeasibility
        assert inf.summary
        # Each quoted budget/deadline relaxation, applied, yields a plan at the quoted cost.
        for r in inf.relaxations:
            if r.constraint == "budget":
                relaxed = job.model_copy(update={"budget_usd": r.value})
            elif r.constraint == "deadline":
                relaxed = job.model_copy(update={"deadline_hours": r.value})
            else:
                continue
            best = ftsolve.plan(relaxed, catalog, top=1).plans[0]
            assert best.total_cost_usd == pytest.approx(r.plan_cost_usd)


def test_bundled_catalog_plans_the_readme_job() -> None:
    job = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24, budget_usd=300)
    catalog = ftsolve.load_catalog()
    scan = ftsolve.plan(job, catalog, engine="scan")
    cpsat = ftsolve.plan(job, catalog, engine="cpsat")
    assert [p.total_cost_usd for p in scan.plans] == [p.total_cost_usd for p in cpsat.plans]
    assert len(scan.plans) == 5
    for p in scan.plans:
        assert ftsolve.check_plan(job, catalog, p) == []
        assert sum(c.usd for c in p.cost_items) == pytest.approx(p.total_cost_usd, abs=0.005)


def test_tiny_budget_is_infeasible_and_names_the_budget() -> None:
    job = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24, budget_usd=0.01)
    with pytest.raises(NoFeasiblePlan) as info:
        ftsolve.plan(job)
    inf = info.value.infeasibility
    assert any("budget" in c for c in inf.conflicts)
    budget = next(r for r in inf.relaxations if r.constraint == "budget")
    assert budget.value is not None and budget.value > 0.01


def _assert_pricing_shortcut_matches_sorting(job: JobSpec, catalog: Catalog) -> None:
    # build_candidates tells the pricing which candidates share their time inputs; pricing
    # without that hint finds the shared inputs by sorting them, and must price the same.
    with_hint = build_candidates(job, catalog)
    original = _grid._same_time_as
    try:
        _grid._same_time_as = lambda *args: None  # type: ignore[assignment]
        without = build_candidates(job, catalog)
    finally:
        _grid._same_time_as = original
    assert np.array_equal(with_hint.total_cents, without.total_cents)
    assert np.array_equal(with_hint.quantile_hours, without.quantile_hours)
    assert np.array_equal(with_hint.tau_hours, without.tau_hours, equal_nan=True)
    assert np.array_equal(with_hint.spot_fraction, without.spot_fraction)


@given(jobs(), offer_lists())
def test_pricing_shortcut_matches_sorting_the_time_inputs(job: JobSpec, offers: tuple[Offer, ...]) -> None:
    _assert_pricing_shortcut_matches_sorting(job, catalog_of(offers))


@pytest.mark.parametrize("deadline_hours", [None, 9.0, 30.0])
def test_pricing_shortcut_matches_sorting_on_the_bundled_catalog(deadline_hours: float | None) -> None:
    job = JobSpec(
        model="llama-3.1-8b",
        train_tokens=100_000_000,
        seq_len=2048,
        deadline_hours=deadline_hours,
        max_nodes=2,
        max_gpus=16,
    )
    _assert_pricing_shortcut_matches_sorting(job, ftsolve.load_catalog())


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(0, 40), st.integers(1, 6), st.booleans())
def test_rank_is_the_same_from_both_engines(data: st.DataObject, n: int, top: int, diverse: bool) -> None:
    # The planner's call: a ranked top-k of one table, best first by (key, tie rank), one row
    # per diversity group; few distinct keys so that ties are common.
    ints = st.lists(st.integers(0, 6), min_size=n, max_size=n)
    key = np.array(data.draw(ints), dtype=np.int64) * 1000
    group = np.array(data.draw(ints), dtype=np.int64)
    feasible = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    tie = np.array(data.draw(st.permutations(list(range(n)))), dtype=np.int64)
    scan = ScanEngine().rank(key, tie, group, feasible, top, diverse)
    assert CpSatEngine().rank(key, tie, group, feasible, top, diverse) == scan
    expected = sorted((int(key[i]), int(tie[i]), i) for i in range(n) if feasible[i])
    if diverse:
        firsts: dict[int, tuple[int, int, int]] = {}
        for e in expected:
            firsts.setdefault(int(group[e[2]]), e)
        expected = sorted(firsts.values())
    assert scan == [i for _, _, i in expected[:top]]
