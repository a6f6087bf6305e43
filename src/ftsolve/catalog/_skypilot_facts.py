"""Facts SkyPilot's catalog files do not carry, applied to their offers in one place: by the build of
the bundled catalog (scripts/build_offers.py) and by `ftsolve catalog update`, so that a refreshed
offer has the key (tier), caveats and estimates of the bundled offer it replaces."""

from __future__ import annotations

from collections.abc import Mapping

from ftsolve.catalog._models import Offer

# Brokers resell other clouds' capacity: instance type "<provider><separator>...", tier "via <provider>".
BROKER_SEPARATORS = {"shadeform": "_", "primeintellect": "__"}
_TIERS = {"azure": "pay-as-you-go/spot"}  # the bundled Azure offers' tier (extra_gpu_prices.csv)
SKYPILOT_NOTES = {
    "seeweb": "prices read as EUR (the catalog prints them without a currency; likely EUR for this Italian "
    "provider, SOURCES.md, unverified) and converted at the ECB rate of the price date",
    "runpod": "SECURE tier; catalog spot equals on-demand, so no interruptible price",
}
SKYPILOT_OVERRIDES: dict[str, dict[str, object]] = {
    # Seeweb's catalog prices are probably EUR printed as USD (SOURCES.md): converted, and an estimate.
    "seeweb": {"price_kind": "estimate", "currency": "EUR"},
    "fluidstack": {
        "launchable": False,
        "not_launchable_reason": "region from SkyPilot's v9 catalog; the v8 catalog that SkyPilot releases read "
        "has no Fluidstack file (SOURCES.md)",
    },
}

# Vast.ai interruptible prices, estimated: SkyPilot's Vast catalog has no bid price (SpotPrice 0.00
# in every catalogs/v8 and v9 vast/vms.csv read), so each offer's on-demand price is scaled by the
# marketplace's median interruptible/on-demand ratio for its GPU. The medians are one value per offer
# (dph_total / num_gpus) over verified hosts with reliability >= 0.95, the interruptible side being
# Vast's "bid" search, whose dph_total is the minimum bid plus storage (a floor, not a clearing
# price). Snapshot 2026-08-07 22:07 UTC of Vast's offer search, GhcFrank/investment-os@4101807717598ca6e8
# e7d4c20a6859e9a01c1c6b data/market_data/gpu_cloud_market_history.csv (medians recomputed from the
# raw rows; they match the repository's data/signals/gpu_cloud_market_signals.csv). Later snapshots
# return a capped result set, so they are not used.
VAST_BID_SOURCE = (
    "GhcFrank/investment-os@4101807 data/market_data/gpu_cloud_market_history.csv, Vast offer search "
    "2026-08-07 22:07 UTC"
)
VAST_BID_RATIO: dict[str, tuple[float, float, int]] = {
    # GPU: (median interruptible, median on-demand USD/GPU-h, offers on the interruptible side)
    "rtx-4090": (0.3202, 0.3937, 99),
    "rtx-5090": (0.3878, 0.5072, 119),
    "a100-sxm-80gb": (0.6676, 1.0672, 20),
    "a100-pcie-80gb": (0.6676, 1.0672, 20),  # Vast's "A100 80GB" search pools both form factors
    "h100-sxm": (2.3699, 3.2161, 12),
    "h100-pcie": (1.4681, 2.0011, 5),
    "l40s": (0.5346, 0.8005, 18),
}


def skypilot_tier(provider: str, instance_type: str) -> str:
    """The tier of a SkyPilot offer: "via <provider>" for a broker's resold capacity, else the tier the
    bundled catalog uses for that cloud, so a refreshed offer replaces its bundled one."""
    separator = BROKER_SEPARATORS.get(provider)
    if separator and separator in instance_type:
        return "via " + instance_type.split(separator)[0]
    return _TIERS.get(provider, "on-demand/spot")


def with_overrides(offer: Offer, update: Mapping[str, object]) -> Offer:
    """The offer with some fields replaced, validated again; an offer the importer already marked not
    launchable keeps its own reason."""
    if not update or (not offer.launchable and "launchable" in update):
        return offer
    return Offer.model_validate(offer.model_dump() | dict(update))


def vast_bid_estimate(offer: Offer) -> Offer:
    """A Vast offer with an interruptible price estimated from the marketplace's bid/ask ratio."""
    ratio = VAST_BID_RATIO.get(offer.gpu)
    od = offer.on_demand_usd_per_gpu_hour
    if offer.provider != "vast" or ratio is None or od is None or offer.interruptible_usd_per_gpu_hour:
        return offer
    bid, ask, n = ratio
    note = (
        f"interruptible = on-demand x {bid / ask:.3f}, the median minimum bid over the median ask of "
        f"{offer.gpu} on Vast ({bid:g} / {ask:g} USD/GPU-h, {n} bid offers; {VAST_BID_SOURCE})"
    )
    update = {
        "interruptible_usd_per_gpu_hour": round(od * bid / ask, 4),
        "interruptible_price_kind": "estimate",
        "notes": "; ".join(x for x in (offer.notes, note) if x),
    }
    return with_overrides(offer, update)


def no_skypilot_cloud(provider: str) -> str:
    """Why an offer of this provider cannot be launched: the SkyPilot release ftsolve exports for has
    no such cloud (SkyPilot's catalog repository has files for providers its releases do not know);
    "" where it has."""
    # Imported here: the exports import the catalog.
    from ftsolve._exports._launch import SKYPILOT_CLOUDS, SKYPILOT_VERSION

    if provider in SKYPILOT_CLOUDS:
        return ""
    return (
        f"SkyPilot {SKYPILOT_VERSION} has no {provider} cloud (sky.utils.registry.CLOUD_REGISTRY), "
        "and ftsolve exports SkyPilot tasks only"
    )


def completed(offer: Offer) -> Offer:
    """A SkyPilot offer with what its file leaves out: the provider's overrides and estimates, and
    not launchable where the SkyPilot release has no cloud for its provider."""
    out = vast_bid_estimate(with_overrides(offer, SKYPILOT_OVERRIDES.get(offer.provider, {})))
    reason = no_skypilot_cloud(out.provider) if out.launchable else ""
    return with_overrides(out, {"launchable": False, "not_launchable_reason": reason}) if reason else out
