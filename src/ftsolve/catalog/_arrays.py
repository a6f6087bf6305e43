"""Column arrays of a catalog's offers, for vectorized filtering and scoring."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog._models import PRICE_KINDS, Offer, PriceKind
from ftsolve.catalog._providers import provider_defaults, provider_storage_price

if TYPE_CHECKING:
    from ftsolve.catalog._columns import OfferTable

F = NDArray[np.float64]
I = NDArray[np.int64]

BILLING_CODES = {"per-second": 0, "per-minute": 1, "per-hour": 2, "monthly": 3}
PRICE_KIND_CODES: dict[PriceKind, int] = {kind: code for code, kind in enumerate(PRICE_KINDS)}
FLOOR = PRICE_KIND_CODES["floor"]
DEFAULT_INTER_NODE_GBIT = 100.0  # physics.md §9.2 (100 GbE) when a provider publishes nothing


@dataclass(frozen=True)
class OfferArrays:
    """One entry per offer, in catalog order; provider defaults already applied.

    Text columns are codes into their sorted distinct values (`provider_id` into `providers`, ...):
    a filter tests the few names, not a million strings. `provider`, `region`, `country` and `gpu`
    give one string per offer where a caller wants them so."""

    provider_id: I  # into providers
    providers: NDArray[np.str_]  # lower case, sorted, each one some offer's
    region_id: I
    regions: NDArray[np.str_]  # lower case
    country_id: I
    countries: NDArray[np.str_]  # "" when unknown
    gpu_id: I
    gpus: NDArray[np.str_]
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

    @cached_property
    def provider(self) -> NDArray[np.str_]:
        return _per_offer(self.providers, self.provider_id)

    @cached_property
    def region(self) -> NDArray[np.str_]:
        return _per_offer(self.regions, self.region_id)

    @cached_property
    def country(self) -> NDArray[np.str_]:
        return _per_offer(self.countries, self.country_id)

    @cached_property
    def gpu(self) -> NDArray[np.str_]:
        return _per_offer(self.gpus, self.gpu_id)

    @classmethod
    def of(cls, offers: Sequence[Offer]) -> OfferArrays:
        from ftsolve.catalog._columns import OfferTable

        return offer_arrays(offers if isinstance(offers, OfferTable) else OfferTable.of(offers))


def _per_offer(names: NDArray[np.str_], ids: I) -> NDArray[np.str_]:
    out: NDArray[np.str_] = names[ids] if names.size else np.zeros(ids.shape, dtype=str)
    return out


def offer_arrays(table: OfferTable) -> OfferArrays:
    """The columns the solver reads, from a table's columns: every per-offer value is computed once
    per distinct value (provider defaults per provider) and gathered by code."""

    # The provider's codes as indices once: seven columns look them up (a table's codes are 1-byte
    # where they can be, and numpy widens an index array for every lookup).
    provider_at = table.codes["provider"].astype(np.intp)

    def at(name: str) -> NDArray[Any]:
        return provider_at if name == "provider" else table.codes[name]

    def per(name: str, fn: Callable[[Any], object], dtype: Any) -> NDArray[Any]:
        lut = np.array([fn(v) for v in table.values[name]], dtype=dtype)
        out: NDArray[Any] = lut[at(name)] if lut.size else np.zeros(0, dtype)
        return out

    def names(name: str, fn: Callable[[Any], str]) -> tuple[I, NDArray[np.str_]]:
        # Sorted over the values some offer has: two tables of the same offers give equal arrays.
        codes = at(name)
        present = np.bincount(codes, minlength=len(table.values[name])) > 0
        text = np.array([fn(v) for v in table.values[name]], dtype=str)
        distinct, rank = np.unique(text[present], return_inverse=True)
        lut = np.zeros(len(text), dtype=np.int64)
        lut[present] = rank.reshape(-1)
        return lut[codes], distinct

    defaults = {p: provider_defaults(str(p)) for p in table.values["provider"]}
    nums = table.numbers
    gpn = table.gpus_per_node
    own_rate = nums["interruption_rate_per_hour"]
    rate = np.where(
        np.isnan(own_rate), per("provider", lambda p: defaults[p].interruption_rate_per_hour, float), own_rate
    )
    own_storage = nums["storage_usd_per_gb_month"]
    # storage_price's order: the offer's own price, else its provider's, else the fallback.
    storage = np.where(
        np.isnan(own_storage), per("provider", lambda p: provider_storage_price(p)[0], float), own_storage
    )
    clustered = per("provider", lambda p: defaults[p].inter_node_gbit_per_s is not None, bool)
    provider_id, providers = names("provider", str.lower)
    region_id, regions = names("region", str.lower)
    country_id, countries = names("country", lambda c: c or "")
    gpu_id, gpus = names("gpu", str)
    return OfferArrays(
        provider_id=provider_id,
        providers=providers,
        region_id=region_id,
        regions=regions,
        country_id=country_id,
        countries=countries,
        gpu_id=gpu_id,
        gpus=gpus,
        gpus_per_node=gpn.astype(np.int64),
        on_demand=nums["on_demand_usd_per_gpu_hour"].astype(np.float64),
        interruptible=nums["interruptible_usd_per_gpu_hour"].astype(np.float64),
        on_demand_kind=per("price_kind", PRICE_KIND_CODES.__getitem__, np.int64),
        interruptible_kind=per("interruptible_price_kind", PRICE_KIND_CODES.__getitem__, np.int64),
        launchable=per("launchable", bool, np.bool_),
        interruption_rate=rate.astype(np.float64, copy=False),
        provisioning_h=per("provider", lambda p: defaults[p].provisioning_minutes / 60.0, np.float64),
        storage_usd_per_gb_month=storage.astype(np.float64, copy=False),
        egress_usd_per_gb=per("provider", lambda p: defaults[p].egress_usd_per_gb, np.float64),
        inter_node_gbit=per(
            "provider",
            lambda p: (
                DEFAULT_INTER_NODE_GBIT
                if defaults[p].inter_node_gbit_per_s is None
                else defaults[p].inter_node_gbit_per_s
            ),
            np.float64,
        ),
        # A cluster is 8-GPU nodes from a provider that states its inter-node network (EFA,
        # InfiniBand, ...); single GPUs and marketplace hosts are independent machines.
        cluster_network=clustered & (gpn >= 8),
        billing=per("billing", BILLING_CODES.__getitem__, np.int64),
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
