"""Cost items and constraints are registries: a new entry reaches the table, the plan, its JSON and
the diagnosis without edits elsewhere, and twin pruning keys on every per-offer fact they read."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import numpy as np
import pytest
from strategies import catalog_of

import ftsolve
from ftsolve import JobSpec, NoFeasiblePlan, Offer
from ftsolve.catalog import OfferArrays
from ftsolve.solver import _constraints, _items
from ftsolve.solver._api import check_plan
from ftsolve.solver._constraints import Constraint
from ftsolve.solver._grid import CONSTRAINTS, build_candidates
from ftsolve.solver._items import CostItemSpec, Spend
from ftsolve.solver._pipeline import TIME_FACTS, pricing_facts, twin_groups

CATALOG = ftsolve.load_catalog(user=False)
JOB = JobSpec(model="qwen3-4b", train_tokens=10**7, seq_len=512, gpus=("h100-sxm", "l40s"))


def _flat_fee(s: Spend) -> np.ndarray:
    return np.full(s.od_work_h.shape, 5.0)


def test_registries_have_unique_names_and_known_offer_facts() -> None:
    names = [item.name for item in _items.COST_ITEMS]
    assert len(names) == len(set(names))
    columns = {f.name for f in dataclasses.fields(OfferArrays)}
    assert all(set(item.offer_facts) <= columns for item in _items.COST_ITEMS)
    assert set(TIME_FACTS) <= columns
    assert list(CONSTRAINTS) == [c.name for c in _constraints.CONSTRAINTS]
    assert all(c.label for c in _constraints.CONSTRAINTS)
    # Everything the catalog's old "profile" key held is a pricing fact (plus the network, which
    # the hardware key holds).
    assert {"interruption_rate", "provisioning_h", "storage_usd_per_gb_month", "egress_usd_per_gb", "billing"} <= set(
        pricing_facts()
    )


def test_a_new_cost_item_reaches_the_total_the_plan_and_its_json(monkeypatch: pytest.MonkeyPatch) -> None:
    before = ftsolve.plan(JOB, CATALOG, top=1).plans[0]
    fee = CostItemSpec(
        "support_fee", "a flat support fee per run", _flat_fee, lambda offer: f"test fee ({offer.provider})"
    )
    monkeypatch.setattr(_items, "COST_ITEMS", (*_items.COST_ITEMS, fee))
    plans = ftsolve.plan(JOB, CATALOG, top=1)
    after = plans.plans[0]
    # A flat fee moves every candidate alike: the same plan wins, 5 USD dearer.
    assert after.offer == before.offer and after.n_gpus == before.n_gpus
    assert after.total_cost_usd == pytest.approx(before.total_cost_usd + 5.0, abs=1e-9)
    item = next(c for c in after.cost_items if c.name == "support_fee")
    assert (item.usd, item.detail, item.source) == (
        5.0,
        "a flat support fee per run",
        f"test fee ({after.offer.provider})",
    )
    assert [c.name for c in after.cost_items][-1] == "support_fee"  # registry order
    data = json.loads(plans.model_dump_json())
    assert {"name": "support_fee", "usd": 5.0}.items() <= data["plans"][0]["cost_items"][-1].items()
    assert check_plan(JOB, CATALOG, after) == []  # the independent re-check prices it too


def _offer(country: str, od: float, index: int) -> Offer:
    return Offer(
        provider="alpha",
        tier="t",
        instance_type=f"inst-{index}",
        gpu="h100-sxm",
        source_gpu_name="x",
        gpus_per_node=1,
        on_demand_usd_per_gpu_hour=od,
        region=f"r{index}",
        country=country,
        price_date=dt.date(2026, 10, 1),
        source="test",
    )


def _levy_usd(s: Spend) -> np.ndarray:
    out: np.ndarray = np.where(s.fact("country") == "DE", 100.0, 0.0)
    return out


def test_a_new_per_offer_cost_fact_keeps_its_offers_apart_in_twin_pruning(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two offers that differ in price and country only: without the levy the German one is the
    # cheaper twin and the other is pruned; with it the American one wins, and pruning keeps it.
    catalog = catalog_of((_offer("DE", 2.0, 0), _offer("US", 2.2, 1)))
    job = JOB.model_copy(update={"gpus": None, "markets": ("on-demand",), "max_gpus": 1})
    groups = twin_groups(catalog.arrays, np.ones(2, dtype=bool), np.zeros(2, dtype=np.int64))
    assert groups[0] == groups[1]
    assert ftsolve.plan(job, catalog, top=1).plans[0].offer.country == "DE"

    levy = CostItemSpec("levy", "a levy on German offers", _levy_usd, offer_facts=("country",))
    monkeypatch.setattr(_items, "COST_ITEMS", (*_items.COST_ITEMS, levy))
    assert "country" in pricing_facts()
    groups = twin_groups(catalog.arrays, np.ones(2, dtype=bool), np.zeros(2, dtype=np.int64))
    assert groups[0] != groups[1]
    best = ftsolve.plan(job, catalog, top=1).plans[0]
    assert best.offer.country == "US"
    unpruned = build_candidates(job, catalog, prune=False)
    assert len(build_candidates(job, catalog)) == len(unpruned)
    cheapest = int(np.argmin(np.where(unpruned.feasible(), unpruned.total_cents, np.iinfo(np.int64).max)))
    assert unpruned.offers[int(unpruned.offer_idx[cheapest])].country == "US"


def test_an_item_reads_only_the_offer_facts_it_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    sneaky = CostItemSpec("sneaky", "reads a fact it does not declare", _levy_usd)
    monkeypatch.setattr(_items, "COST_ITEMS", (*_items.COST_ITEMS, sneaky))
    with pytest.raises(KeyError, match="country"):
        build_candidates(JOB, CATALOG)


def test_a_new_constraint_reaches_the_masks_the_plans_and_the_diagnosis(monkeypatch: pytest.MonkeyPatch) -> None:
    winner = ftsolve.plan(JOB, CATALOG, top=1).plans[0].offer.provider
    not_winner = Constraint(
        "avoid_provider",
        f"offers not from {winner}",
        lambda job, t: t.offer_arrays.provider[t.offer_idx] != winner.lower(),
    )
    monkeypatch.setattr(_constraints, "CONSTRAINTS", (*_constraints.CONSTRAINTS, not_winner))
    table = build_candidates(JOB, CATALOG)
    assert list(table.masks)[-1] == "avoid_provider"
    providers = table.offer_arrays.provider[table.offer_idx]
    assert not (table.feasible() & (providers == winner.lower())).any()
    assert table.feasible(ignore=("avoid_provider",)).sum() > table.feasible().sum()
    assert all(p.offer.provider != winner for p in ftsolve.plan(JOB, CATALOG, top=3).plans)

    nothing = Constraint("nothing", "no candidate at all", lambda job, t: np.zeros(len(t), dtype=bool))
    monkeypatch.setattr(_constraints, "CONSTRAINTS", (*_constraints.CONSTRAINTS, nothing))
    one = JOB.model_copy(update={"gpus": ("h100-sxm",), "methods": ("qlora",), "max_gpus": 1})
    with pytest.raises(NoFeasiblePlan) as info:
        ftsolve.plan(one, CATALOG)
    inf = info.value.infeasibility
    assert inf.ruled_out_by["nothing"] == inf.candidates > 0
