"""Cost items: one spec each (name, detail, how its dollars and its source are found).

Pricing (`_cost.price_runs`) sums the registry's items into the total; a plan lists every non-zero
item with its detail and source, in registry order, and so does its JSON. An item that reads a
per-offer fact other than the prices names it in `offer_facts` (an `OfferArrays` column): the
candidate pipeline gathers exactly those facts for pricing and keys twin pruning on them, so
offers that differ in such a fact are never pruned as twins. Adding an item touches this module
(and its test) only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog import Offer, provider_defaults, storage_price
from ftsolve.solver import _coefficients as k

if TYPE_CHECKING:
    from ftsolve.solver._cost import RunInputs

F = NDArray[np.float64]
B = NDArray[np.bool_]


@dataclass(frozen=True)
class Spend:
    """What each candidate's run spends: hours by market and phase, and the rates billed for them."""

    runs: RunInputs
    spot_usd_per_h: F  # all GPUs together; 0 where the offer has no such price
    od_usd_per_h: F
    on_spot: B  # some of the work runs on interruptible capacity
    ends_on_od: F  # the share of runs that finish (and save) on on-demand capacity
    spot_work_h: F
    od_work_h: F
    checkpoint_writes_h: F
    rework_h: F  # expected work lost to preemptions and redone
    switch_h: F  # restart on on-demand capacity after the interruptible share
    rounding_h: F  # billed beyond use by the provider's granularity
    trial_h: F
    failed_h: F
    usd_per_h: F  # the run's average cost per wall hour: trials and failed attempts cost this
    total_h: F  # every hour a volume exists for: the run, trials and failed attempts
    retention_days: float

    def fact(self, column: str) -> F:
        """A per-offer fact an item declared in `offer_facts`, per candidate."""
        return self.runs.offer_facts[column]


def price_source(offer: Offer) -> str:
    """The offer's prices, their date and source: behind every item billed at GPU-hour prices."""
    prices = []
    if offer.on_demand_usd_per_gpu_hour is not None:
        prices.append(f"on-demand {offer.on_demand_usd_per_gpu_hour:g} USD/GPU-h ({offer.price_kind} price)")
    if offer.interruptible_usd_per_gpu_hour is not None:
        prices.append(
            f"interruptible {offer.interruptible_usd_per_gpu_hour:g} USD/GPU-h ({offer.interruptible_price_kind} price)"
        )
    estimated = " (estimated date)" if offer.price_date_estimated else ""
    return f"{' / '.join(prices)} dated {offer.price_date.isoformat()}{estimated}, {offer.source}"


def storage_source(offer: Offer) -> str:
    usd, source = storage_price(offer)
    return f"{usd} USD/GB-month: {source or price_source(offer)}"


def egress_source(offer: Offer) -> str:
    defaults = provider_defaults(offer.provider)
    return f"{defaults.egress_usd_per_gb} USD/GB: {defaults.egress_source}"


@dataclass(frozen=True)
class CostItemSpec:
    """One line of a plan's cost."""

    name: str
    detail: str
    usd: Callable[[Spend], F]
    source: Callable[[Offer], str] = price_source
    offer_facts: tuple[str, ...] = ()  # OfferArrays columns (besides the prices) `usd` reads


def _storage_usd(s: Spend) -> F:
    r = s.runs
    out: F = r.volume_gb * r.storage_usd_per_gb_month * (s.total_h + s.retention_days * 24.0) / k.HOURS_PER_MONTH
    return out


COST_ITEMS: tuple[CostItemSpec, ...] = (
    CostItemSpec(
        "training",
        "GPU-hours of training x price",
        lambda s: s.spot_work_h * s.spot_usd_per_h + s.od_work_h * s.od_usd_per_h,
    ),
    CostItemSpec(
        "startup",
        "provisioning, environment, base-model download and loading, billed",
        lambda s: s.runs.startup_h * np.where(s.on_spot, s.spot_usd_per_h, s.od_usd_per_h),
    ),
    CostItemSpec(
        "checkpoints",
        "checkpoint writes and the final save",
        lambda s: (
            s.checkpoint_writes_h * s.spot_usd_per_h
            + s.runs.final_save_h * (s.ends_on_od * s.od_usd_per_h + (1.0 - s.ends_on_od) * s.spot_usd_per_h)
        ),
    ),
    CostItemSpec(
        "preemption_rework",
        "expected lost work and restarts after preemptions",
        lambda s: s.rework_h * s.spot_usd_per_h,
    ),
    CostItemSpec(
        "fallback_switch",
        "restart on on-demand capacity from the last checkpoint",
        lambda s: s.switch_h * s.od_usd_per_h,
    ),
    CostItemSpec(
        "billing_rounding",
        "billing granularity: on-demand time rounded up",
        lambda s: s.rounding_h * s.od_usd_per_h,
        offer_facts=("billing",),
    ),
    CostItemSpec(
        "trial_runs",
        "trial runs before the final run, at the plan's hourly cost",
        lambda s: s.trial_h * s.usd_per_h,
    ),
    CostItemSpec(
        "failed_attempts",
        "expected failed attempts (each a start-up plus half a run)",
        lambda s: s.failed_h * s.usd_per_h,
    ),
    CostItemSpec(
        "storage",
        "volumes (dataset, base model, two checkpoints) while they exist, incl. retention",
        _storage_usd,
        storage_source,
        offer_facts=("storage_usd_per_gb_month",),
    ),
    CostItemSpec(
        "egress",
        "download of the trained weights or adapter out of the provider",
        lambda s: s.runs.output_gb * s.runs.egress_usd_per_gb,
        egress_source,
        offer_facts=("egress_usd_per_gb",),
    ),
)


def item_specs() -> Mapping[str, CostItemSpec]:
    """The registry by name, read when called (tests may extend it)."""
    return {item.name: item for item in COST_ITEMS}


def item_offer_facts() -> tuple[str, ...]:
    """The per-offer facts the items read, in registry order, each once."""
    return tuple(dict.fromkeys(f for item in COST_ITEMS for f in item.offer_facts))
