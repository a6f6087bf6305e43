"""Shared hypothesis strategies: small random catalogs and jobs."""

from __future__ import annotations

import datetime as dt

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from ftsolve import Catalog, JobSpec, Offer, load_catalog
from ftsolve.solver._cost import RunInputs

_BASE = load_catalog()
GPUS = ("rtx-4090", "a100-sxm-80gb", "h100-sxm", "l40s", "rtx-a6000", "v100-sxm2-16gb", "mi300x")
MODELS = ("qwen2.5-0.5b", "llama-3.2-1b", "llama-3.1-8b", "mistral-7b")


@st.composite
def offers(draw: st.DrawFn, index: int) -> Offer:
    od = draw(st.one_of(st.none(), st.floats(0.2, 8.0)))
    spot = draw(st.one_of(st.none(), st.floats(0.05, 1.0)))
    if od is None and spot is None:
        od = 1.0
    if od is not None and spot is not None:
        spot = round(od * spot, 4)
    return Offer(
        provider=draw(st.sampled_from(["alpha", "beta", "runpod", "aws"])),
        tier="t",
        instance_type=f"inst-{index}",
        gpu=draw(st.sampled_from(GPUS)),
        source_gpu_name="x",
        gpus_per_node=draw(st.sampled_from([1, 2, 4, 8])),
        on_demand_usd_per_gpu_hour=None if od is None else round(od, 4),
        interruptible_usd_per_gpu_hour=spot,
        billing=draw(st.sampled_from(["per-second", "per-hour"])),
        region=draw(st.sampled_from(["r1", "r2"])),
        country=draw(st.sampled_from(["US", "FI", None])),
        price_date=dt.date(2026, 10, 1),
        source="test",
    )


@st.composite
def offer_lists(draw: st.DrawFn) -> tuple[Offer, ...]:
    n = draw(st.integers(1, 6))
    return tuple(draw(offers(i)) for i in range(n))


def catalog_of(offers: tuple[Offer, ...]) -> Catalog:
    """A catalog with the bundled GPUs and models and only these offers."""
    return Catalog(gpus=_BASE.gpus, offers=offers, models=_BASE.models)


@st.composite
def jobs(draw: st.DrawFn) -> JobSpec:
    return JobSpec(
        model=draw(st.sampled_from(MODELS)),
        train_tokens=draw(st.integers(1_000_000, 500_000_000)),
        seq_len=draw(st.sampled_from([512, 2048, 8192])),
        methods=draw(st.sampled_from([("full", "lora", "qlora"), ("lora",), ("full",), ("qlora", "lora")])),
        deadline_hours=draw(st.one_of(st.none(), st.floats(0.5, 200.0))),
        budget_usd=draw(st.one_of(st.none(), st.floats(1.0, 2000.0))),
        markets=draw(
            st.sampled_from(
                [
                    ("on-demand", "interruptible", "fallback"),
                    ("on-demand",),
                    ("interruptible",),
                    ("fallback",),
                ]
            )
        ),
        trial_runs=draw(st.sampled_from([0, 0, 2])),
        failure_probability=draw(st.sampled_from([0.0, 0.0, 0.2])),
        max_gpus=draw(st.sampled_from([1, 8, 16])),
        max_nodes=draw(st.sampled_from([1, 2])),
    )


def single_run(
    market: int,
    work: float,
    lam: float,
    delta: float,
    restart: float,
    *,
    storage_usd_per_gb_month: float = 0.08,
    volume_gb: float = 100.0,
    egress_usd_per_gb: float = 0.09,
    output_gb: float = 0.1,
) -> RunInputs:
    """Pricing inputs of one candidate: `work` hours at preemption rate `lam`, checkpoint writes of
    `delta` hours and restarts of `restart` hours, on 8 USD/h on-demand or 3 USD/h interruptible."""

    def one(x: float) -> NDArray[np.float64]:
        return np.array([x], dtype=np.float64)

    return RunInputs(
        market=np.array([market]),
        work_h=one(work),
        startup_h=one(0.1),
        restart_h=one(restart),
        ckpt_write_h=one(delta),
        final_save_h=one(0.01),
        rate=one(lam),
        od_usd_per_h=one(8.0),
        spot_usd_per_h=one(3.0),
        per_hour_billing=np.array([False]),
        per_minute_billing=np.array([False]),
        storage_usd_per_gb_month=one(storage_usd_per_gb_month),
        volume_gb=one(volume_gb),
        egress_usd_per_gb=one(egress_usd_per_gb),
        output_gb=one(output_gb),
    )


def priced_offer(spot: float, od: float, rate: float | None = None) -> Offer:
    """One H100 offer at these per-GPU-hour prices and interruption rate (None: the provider's)."""
    return Offer(
        provider="acme",
        tier="t",
        instance_type="x1",
        gpu="h100-sxm",
        source_gpu_name="H100",
        gpus_per_node=1,
        on_demand_usd_per_gpu_hour=od,
        interruptible_usd_per_gpu_hour=spot,
        billing="per-second",
        region="r",
        price_date=dt.date(2026, 10, 1),
        source="test",
        interruption_rate_per_hour=rate,
    )
