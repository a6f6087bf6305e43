"""Plans a practitioner would launch (issue 14): headroom for the estimate's band, the global batch
held, clusters only where a provider sells them, honest preferences and filters that know names."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ftsolve
from ftsolve import JobSpec, Offer, UnknownCatalogEntry

CATALOG = ftsolve.load_catalog(user=False)
README_JOBS = [
    JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24, budget_usd=300),
    JobSpec(model="llama-3.1-70b", train_tokens=200_000_000, seq_len=4096, deadline_hours=48),
    JobSpec(model="qwen3-4b", train_tokens=10**7, seq_len=32768, methods=("lora",)),
    JobSpec(model="llama-3.1-8b", train_tokens=10**8, seq_len=2048, global_batch_size=24, max_gpus=16),
]


@pytest.mark.parametrize("job", README_JOBS, ids=["readme", "70b", "long-context", "batch-24"])
def test_peak_plus_band_fits_and_the_global_batch_is_held(job: JobSpec) -> None:
    for p in ftsolve.plan(job, CATALOG, top=5).plans:
        m = p.memory
        assert m.band >= 0.14  # the validated band of the method on the stack, never zero by default
        assert m.peak_gib * (1 + m.band) <= m.usable_gib + 1e-3
        assert m.headroom_gib >= -1e-3
        # Usable is what the device reports less the driver's share, not its nominal size.
        spec = CATALOG.gpus[p.gpu]
        assert spec.visible_memory_mib is not None and spec.visible_memory_source
        assert m.usable_gib <= spec.visible_memory_mib / 1024 - 0.5
        assert p.global_batch == p.micro_batch * p.grad_accum * p.n_gpus == job.global_batch_size


def test_a_users_margin_replaces_the_band_and_a_batch_tolerance_is_shown() -> None:
    job = README_JOBS[0].model_copy(update={"memory_margin": 0.5})
    assert all(p.memory.band == 0.5 for p in ftsolve.plan(job, CATALOG).plans)
    odd = JobSpec(model="qwen3-4b", train_tokens=10**7, seq_len=1024, global_batch_size=16, gpus=("rtx-4090",))
    exact = ftsolve.plan(odd.model_copy(update={"max_gpus": 3, "max_nodes": 1}), CATALOG, top=10)
    assert all(p.n_gpus in (1, 2) for p in exact.plans)  # 3 GPUs cannot split 16 sequences evenly
    loose = ftsolve.plan(
        odd.model_copy(update={"max_gpus": 3, "max_nodes": 1, "batch_tolerance": 0.5}), CATALOG, top=10
    )
    three = [p for p in loose.plans if p.n_gpus == 3]
    assert all(16 < p.global_batch <= 24 for p in three)


def _offer(provider: str, gpus_per_node: int, price: float, region: str = "r") -> Offer:
    return Offer(
        provider=provider,
        tier="t",
        instance_type=f"{provider}-{gpus_per_node}x",
        gpu="h100-sxm",
        source_gpu_name="H100",
        gpus_per_node=gpus_per_node,
        on_demand_usd_per_gpu_hour=price,
        region=region,
        country="US",
        price_date=dt.date(2026, 10, 1),
        source="test",
    )


def test_several_nodes_only_on_a_provider_that_sells_clusters() -> None:
    offers = (_offer("vast", 1, 1.0), _offer("aws", 8, 3.0))
    cat = ftsolve.Catalog(gpus=CATALOG.gpus, offers=offers, models=CATALOG.models)
    job = JobSpec(model="llama-3.1-70b", train_tokens=10**8, seq_len=2048, methods=("lora",), max_gpus=16, max_nodes=4)
    for p in ftsolve.plan(job, cat, top=5).plans:
        assert p.nodes == 1 or p.offer.provider == "aws"
        assert p.offer.provider != "vast" or p.n_gpus == 1


@settings(max_examples=15, deadline=None)
@given(price=st.floats(0.5, 5.0), nodes_cap=st.integers(2, 4))
def test_adding_a_node_never_ranks_first_at_equal_cost(price: float, nodes_cap: int) -> None:
    # Two clustered offers with one price: one node must rank above more nodes of the same kind
    # whenever their costs are within the preference tolerance.
    cat = ftsolve.Catalog(gpus=CATALOG.gpus, offers=(_offer("aws", 8, price),), models=CATALOG.models)
    job = JobSpec(model="qwen3-4b", train_tokens=10**8, seq_len=1024, max_gpus=8 * nodes_cap, max_nodes=nodes_cap)
    plans = ftsolve.plan(job, cat, top=10, diverse=False).plans
    first = plans[0]
    for p in plans[1:]:
        if p.nodes > first.nodes:
            assert p.total_cost_usd * (1 + job.tie_tolerance) >= first.total_cost_usd - 0.01


def test_lora_is_preferred_over_qlora_within_the_tolerance_and_the_why_says_so() -> None:
    job = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, gpus=("b200",), markets=("on-demand",))
    plans = ftsolve.plan(job, CATALOG, top=5).plans
    by_method = {p.method: p for p in plans}
    lora, qlora = by_method["lora"], by_method["qlora"]
    if qlora.total_cost_usd < lora.total_cost_usd <= qlora.total_cost_usd * (1 + job.tie_tolerance):
        assert plans.index(lora) < plans.index(qlora)
        assert "preferred within 3%: LoRA over QLoRA" in lora.why


def test_filters_understand_names_and_refuse_unknown_ones() -> None:
    job = JobSpec(model="llama-3.1-8b", train_tokens=10**7, seq_len=1024, gpus=("h100",))
    plans = ftsolve.plan(job, CATALOG).plans
    assert plans and all(p.gpu.startswith("h100") for p in plans)
    assert {p.gpu for p in ftsolve.plan(job.model_copy(update={"gpus": ("A6000",)}), CATALOG).plans} == {"rtx-a6000"}
    with pytest.raises(UnknownCatalogEntry, match="h100"):
        ftsolve.plan(job.model_copy(update={"gpus": ("h1000",)}), CATALOG)
    with pytest.raises(UnknownCatalogEntry, match="lambda"):
        ftsolve.plan(job.model_copy(update={"gpus": None, "providers": ("lamda",)}), CATALOG)


def test_floor_prices_are_not_planned_unless_allowed() -> None:
    job = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, gpus=("b300",), providers=("nebius",))
    floors = [p for p in ftsolve.plan(job.model_copy(update={"allow_floor_prices": True}), CATALOG).plans]
    assert any(p.market != "on-demand" for p in floors)
    for p in ftsolve.plan(job, CATALOG).plans:
        assert p.market == "on-demand"


def test_missing_hardware_data_is_reported_as_missing_data() -> None:
    # A GPU the catalog cannot time (no tensor peak) beside one it can: compare and the plan's
    # "not chosen" line name the missing data, not an incompatibility or a quota.
    blind = CATALOG.gpus["h100-sxm"].model_copy(update={"name": "h100-blind", "tensor_tflops": None})
    gpus = {**CATALOG.gpus, "h100-blind": blind}
    offers = (
        _offer("aws", 8, 3.0),
        _offer("vast", 1, 0.5).model_copy(update={"gpu": "h100-blind", "instance_type": "blind"}),
    )
    cat = ftsolve.Catalog(gpus=gpus, offers=offers, models=CATALOG.models)
    job = JobSpec(model="llama-3.1-8b", train_tokens=10**7, seq_len=2048)
    rows = {r.option: r for r in ftsolve.compare(job, cat)}
    assert not rows["h100-blind"].feasible
    note = rows["h100-blind"].blocked_by
    assert "no tensor peak or memory bandwidth in the catalog" in note and "quota" not in note
    rejected = " ".join(ftsolve.plan(job, cat).rejected)
    assert "h100-blind" in rejected and "no tensor peak" in rejected


def test_usable_memory_follows_what_the_device_reports() -> None:
    # ECC takes 1/16 of an A10G's GDDR6 and a B300 shows about 268.6 of its 288 GiB: plans must
    # not count on the nominal figure (issue 14).
    from ftsolve.solver._hardware import usable_gib

    gpus = CATALOG.gpus
    assert usable_gib(gpus["a10g"]) < 22.0 < gpus["a10g"].memory_gib * 0.98
    assert usable_gib(gpus["b300"]) < 269.0 < gpus["b300"].memory_gib * 0.98
    assert usable_gib(gpus["h100-sxm"]) == pytest.approx((81559 - 620) / 1024)
    offered = {o.gpu for o in CATALOG.offers}
    assert all(gpus[g].visible_memory_mib for g in offered if g != "mi325x")


def test_the_micro_batch_choice_and_its_alternative_are_stated() -> None:
    from click.testing import CliRunner

    from ftsolve.cli import cli
    from ftsolve.solver._pipeline import MICRO_BATCH_SPEED_TOLERANCE

    job = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=4096, global_batch_size=64)
    plans = ftsolve.plan(job, CATALOG, top=10).plans
    smaller = []
    for p in plans:
        mb = p.micro_batch_choice
        assert mb is not None and mb.chosen == p.micro_batch <= mb.largest_fitting
        # The largest one fits too, with the same headroom rule, and is what a smaller one gives up.
        assert mb.largest_peak_gib * (1 + p.memory.band) <= p.memory.usable_gib + 1e-3
        assert mb.largest_peak_gib >= p.memory.peak_gib - 1e-3
        if mb.chosen < mb.largest_fitting:
            assert 0 <= mb.largest_speedup_pct < 100 * MICRO_BATCH_SPEED_TOLERANCE
            smaller.append(p)
    assert smaller, "no plan here picks a micro-batch below the largest that fits"
    args = ["explain", "--model", "llama-3.1-8b", "--tokens", "50M", "--seq-len", "4096", "--global-batch-size", "64"]
    out = CliRunner().invoke(cli, [*args, "--rank", str(smaller[0].rank)], env={"COLUMNS": "200"}).output
    mb = smaller[0].micro_batch_choice
    assert mb is not None
    assert f"micro-batch {mb.chosen}: the smallest within 3% of the fastest; {mb.largest_fitting}," in out
