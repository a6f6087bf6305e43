"""Column arrays of a catalog's offers, for vectorized filtering and scoring."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog._models import PRICE_KINDS, Offer, PriceKind
from ftsolve.catalog._providers import provider_defaults, storage_price

F = NDArray[np.float64]
I = NDArray[np.int64]

BILLING_CODES = {"per-second": 0, "per-minute": 1, "per-hour": 2, "monthly": 3}
PRICE_KIND_CODES: dict[PriceKind, int] = {kind: code for code, kind in enumerate(PRICE_KINDS)}
FLOOR = PRICE_KIND_CODES["floor"]
DEFAULT_INTER_NODE_GBIT = 100.0  # physics.md §9.2 (100 GbE) when a provider publishes nothing


@dataclass(frozen=True)
class OfferArrays:
    """One entry per offer, in catalog order; provider defaults already applied."""

    provider: NDArray[np.str_]  # lower case
    region: NDArray[np.str_]  # lower case
    country: NDArray[np.str_]  # "" when unknown
    gpu: NDArray[np.str_]
    gpus_per_node: I
    on_demand: F  # USD per GPU-hour, nan when not offered
    interruptible: F
    on_demand_kind: I  # PRICE_KIND_CODES of each price (a missing price keeps its offer's code)
    interruptible_kind: I
    launchable: NDArray[np.bool_]
    interruption_rate: F  # per hour, per node
    provisioning_h: F
    storage_usd_per_gb_month: F
    egress_usd_per_gb: F
    inter_node_gbit: F
    cluster_network: NDArray[np.bool_]  # sold as multi-node clusters with a stated network
    billing: I

    @classmethod
    def of(cls, offers: Sequence[Offer]) -> OfferArrays:
        defaults = [provider_defaults(o.provider) for o in offers]
        rate = np.array(
            [
                o.interruption_rate_per_hour
                if o.interruption_rate_per_hour is not None
                else d.interruption_rate_per_hour
                for o, d in zip(offers, defaults, strict=True)
            ],
            dtype=np.float64,
        )
        prov = np.array([d.provisioning_minutes / 60.0 for d in defaults], dtype=np.float64)
        storage = np.array([storage_price(o)[0] for o in offers], dtype=np.float64)
        egress = np.array([d.egress_usd_per_gb for d in defaults], dtype=np.float64)
        net = np.array(
            [
                d.inter_node_gbit_per_s if d.inter_node_gbit_per_s is not None else DEFAULT_INTER_NODE_GBIT
                for d in defaults
            ],
            dtype=np.float64,
        )
        billing = np.array([BILLING_CODES[o.billing] for o in offers], dtype=np.int64)
        return cls(
            provider=np.array([o.provider.lower() for o in offers], dtype=str),
            region=np.array([o.region.lower() for o in offers], dtype=str),
            country=np.array([o.country or "" for o in offers], dtype=str),
            gpu=np.array([o.gpu for o in offers], dtype=str),
            gpus_per_node=np.array([o.gpus_per_node for o in offers], dtype=np.int64),
            on_demand=np.array([o.on_demand_usd_per_gpu_hour or np.nan for o in offers], dtype=np.float64),
            interruptible=np.array([o.interruptible_usd_per_gpu_hour or np.nan for o in offers], dtype=np.float64),
            on_demand_kind=np.array([PRICE_KIND_CODES[o.price_kind] for o in offers], dtype=np.int64),
            interruptible_kind=np.array([PRICE_KIND_CODES[o.interruptible_price_kind] for o in offers], dtype=np.int64),
            launchable=np.array([o.launchable for o in offers], dtype=np.bool_),
            interruption_rate=rate,
            provisioning_h=prov,
            storage_usd_per_gb_month=storage,
            egress_usd_per_gb=egress,
            inter_node_gbit=net,
            # A cluster is 8-GPU nodes from a provider that states its inter-node network (EFA,
            # InfiniBand, ...); single GPUs and marketplace hosts are independent machines.
            cluster_network=np.array(
                [
                    d.inter_node_gbit_per_s is not None and o.gpus_per_node >= 8
                    for o, d in zip(offers, defaults, strict=True)
                ],
                dtype=np.bool_,
            ),
            billing=billing,
        )


def planning_prices(arrays: OfferArrays, *, allow_floor: bool = False) -> tuple[F, F]:
    """(on-demand, interruptible) USD per GPU-hour to plan with: new arrays, with floor prices
    ("from" prices, which say what one pays at least, not what a launch costs) set to nan unless
    allow_floor; nan means not offered, so an offer whose only prices are floors drops out."""
    if allow_floor:
        return arrays.on_demand.copy(), arrays.interruptible.copy()
    on_demand = np.where(arrays.on_demand_kind == FLOOR, np.nan, arrays.on_demand)
    interruptible = np.where(arrays.interruptible_kind == FLOOR, np.nan, arrays.interruptible)
    return on_demand, interruptible
