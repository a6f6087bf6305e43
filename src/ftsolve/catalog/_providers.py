"""Per-provider defaults for facts an offer row does not carry, each with its source.

A plan that relies on one of these says so in its assumptions. Figures from
../shared/docs/prices-and-spot.md (dates there); where that note calls a figure our own
assumption, the `source` here says "assumption" too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ftsolve.catalog._models import Offer

ProviderClass = Literal["hyperscaler", "gpu-cloud", "marketplace", "dedicated"]


class ProviderDefaults(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider_class: ProviderClass
    provisioning_minutes: float
    provisioning_source: str
    storage_usd_per_gb_month: float | None
    storage_source: str
    interruption_rate_per_hour: float
    interruption_source: str
    inter_node_gbit_per_s: float | None
    network_source: str
    egress_usd_per_gb: float = 0.0
    egress_source: str = "assumption: no egress fee published for this provider"


_SPOT_TRACE = (
    "skypilot-org/spot-traces 2023-04-22 preemption trace, best AZ mean spot lifetime 3.1 h "
    "(1xV100; pessimistic prior for 2026, prices-and-spot.md 2(a))"
)
_NEOCLOUD_SPOT = "assumption: 1 preemption per 10 h (no provider publishes rates; prices-and-spot.md 2(a))"
_MARKET_SPOT = (
    "assumption: 1 interruption per 10 h for outbid/paused marketplace instances "
    "(Vast.ai docs give no rate; prices-and-spot.md 2(a))"
)
_VM_PROVISION = "prices-and-spot.md 2(c): AWS/GCP 3-8 min, Lambda/Nebius/Verda VMs 3-5 min (assumption)"
_POD_PROVISION = "prices-and-spot.md 2(c): RunPod container cold start 0.4-2.0 min (600me benchmark 2026-10-19)"
_NO_NET = "not published in the catalog snapshot; multi-node plans assume 100 GbE (physics.md 9.2)"


def _egress(d: ProviderDefaults, usd: float, source: str) -> ProviderDefaults:
    return d.model_copy(update={"egress_usd_per_gb": usd, "egress_source": source})


def _d(
    cls: ProviderClass,
    prov: float,
    prov_src: str,
    storage: float | None,
    storage_src: str,
    rate: float,
    rate_src: str,
    net: float | None = None,
    net_src: str = _NO_NET,
) -> ProviderDefaults:
    return ProviderDefaults(
        provider_class=cls,
        provisioning_minutes=prov,
        provisioning_source=prov_src,
        storage_usd_per_gb_month=storage,
        storage_source=storage_src,
        interruption_rate_per_hour=rate,
        interruption_source=rate_src,
        inter_node_gbit_per_s=net,
        network_source=net_src,
    )


PROVIDER_DEFAULTS: dict[str, ProviderDefaults] = {
    "aws": _d(
        "hyperscaler",
        6,
        _VM_PROVISION,
        0.08,
        "EBS gp3 us-east-1 $0.08/GB-mo (GitLab MR 45, ~2021)",
        1 / 3.1,
        _SPOT_TRACE,
        3200,
        "p4d/p5: EFA 3200 Gb/s per node (AWS instance specs; unverified)",
    ),
    "gcp": _d(
        "hyperscaler",
        6,
        _VM_PROVISION,
        0.10,
        "pd-balanced ~$0.10/GiB-mo (GCP calculator 2023-05-18)",
        1 / 3.1,
        _SPOT_TRACE,
    ),
    "azure": _d(
        "hyperscaler",
        6,
        _VM_PROVISION,
        None,
        "not in the snapshot",
        1 / 3.1,
        _SPOT_TRACE,
        3200,
        "ND H100 v5: 8x400 Gb/s InfiniBand (Azure docs; unverified)",
    ),
    "lambda": _d(
        "gpu-cloud",
        4,
        _VM_PROVISION,
        None,
        "Lambda filesystem price not found (prices-and-spot.md 2(b))",
        0.1,
        _NEOCLOUD_SPOT,
    ),
    "coreweave": _d(
        "gpu-cloud",
        4,
        _VM_PROVISION,
        0.07,
        "Distributed File Storage $0.07 (coreweave.com 2026-09-20)",
        0.1,
        _NEOCLOUD_SPOT,
        3200,
        "8x400 Gb/s InfiniBand nodes (coreweave.com; unverified)",
    ),
    "nebius": _d(
        "gpu-cloud",
        4,
        _VM_PROVISION,
        0.08,
        "Shared Filesystem $0.08/GiB (nebius.com 2026-10-07)",
        0.1,
        _NEOCLOUD_SPOT,
    ),
    "verda": _d("gpu-cloud", 4, _VM_PROVISION, None, "not in the snapshot", 0.1, _NEOCLOUD_SPOT),
    "runpod": _d(
        "marketplace",
        1,
        _POD_PROVISION,
        0.07,
        "network volume $0.07 (docs.runpod.io, runpod/docs PR #396 2025-10-01)",
        0.1,
        _MARKET_SPOT,
    ),
    "vast": _d("marketplace", 1, _POD_PROVISION, None, "set per host offer (docs.vast.ai)", 0.1, _MARKET_SPOT),
    "hetzner": _d(
        "dedicated",
        60,
        "assumption: dedicated server hand-over about an hour",
        0.0572 * 1.1177,
        "Hetzner Volumes EUR 0.0572 (pricing API 2026-05-27) at ECB 1.1177",
        0.0,
        "not interruptible",
    ),
}

_GENERIC = _d("gpu-cloud", 4, _VM_PROVISION, None, "not in the snapshot", 0.1, _NEOCLOUD_SPOT)
_GENERIC_MARKET = _d("marketplace", 1, _POD_PROVISION, None, "not in the snapshot", 0.1, _MARKET_SPOT)
# Brokers and marketplaces that rent other companies' machines.
_MARKETPLACES = {"shadeform", "primeintellect", "tensordock", "vast", "runpod"}
# Providers whose SkyPilot catalog prices are market listings, not a price list: Vast's fetcher keeps
# the median of the live offers (skypilot sky/catalog/data_fetchers/fetch_vast.py); Shadeform and
# Prime Intellect resell other clouds' capacity at prices that change daily (SOURCES.md). RunPod's
# SkyPilot rows are its SECURE tier, priced by list.
MARKET_PRICED = frozenset({"vast", "shadeform", "primeintellect"})

# When no storage price is known: the median of the documented block/file-storage prices above.
FALLBACK_STORAGE_USD_PER_GB_MONTH = 0.08
FALLBACK_STORAGE_SOURCE = (
    "assumption: $0.08/GB-mo, median of documented provider storage prices (prices-and-spot.md 2(b))"
)


# Internet egress of the trained weights. Hyperscaler list prices are background knowledge, not
# re-checked in a stored source (prices-and-spot.md has none); Lambda and CoreWeave publish no
# egress fee (prices-and-spot.md 2(b)).
_UNVERIFIED = "list price for data transfer out, first tier (background knowledge, unverified)"
PROVIDER_DEFAULTS["aws"] = _egress(PROVIDER_DEFAULTS["aws"], 0.09, "AWS " + _UNVERIFIED)
PROVIDER_DEFAULTS["gcp"] = _egress(PROVIDER_DEFAULTS["gcp"], 0.12, "GCP " + _UNVERIFIED)
PROVIDER_DEFAULTS["azure"] = _egress(PROVIDER_DEFAULTS["azure"], 0.087, "Azure " + _UNVERIFIED)
PROVIDER_DEFAULTS["lambda"] = _egress(
    PROVIDER_DEFAULTS["lambda"],
    0.0,
    "Lambda publishes no egress fees (api-evangelist lambda-labs, 2026-09-20)",
)
PROVIDER_DEFAULTS["coreweave"] = _egress(
    PROVIDER_DEFAULTS["coreweave"], 0.0, "CoreWeave: egress free (docs.coreweave.com, read 2026-09-20)"
)


def provider_defaults(provider: str) -> ProviderDefaults:
    """Defaults for a provider; a generic GPU-cloud or marketplace profile when unlisted."""
    if provider in PROVIDER_DEFAULTS:
        return PROVIDER_DEFAULTS[provider]
    return _GENERIC_MARKET if provider in _MARKETPLACES else _GENERIC


def storage_price(offer: Offer) -> tuple[float, str | None]:
    """(USD per GB-month, its source) of an offer's storage: the offer's own price (source None:
    the offer's), else its provider's default, else the fallback. One order for prices and sources."""
    if offer.storage_usd_per_gb_month:
        return offer.storage_usd_per_gb_month, None
    return provider_storage_price(offer.provider)


def provider_storage_price(provider: str) -> tuple[float, str | None]:
    """(USD per GB-month, its source) of storage at a provider for an offer without its own price."""
    defaults = provider_defaults(provider)
    if defaults.storage_usd_per_gb_month is not None:
        return defaults.storage_usd_per_gb_month, defaults.storage_source
    return FALLBACK_STORAGE_USD_PER_GB_MONTH, FALLBACK_STORAGE_SOURCE
