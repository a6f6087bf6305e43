"""GPU hardware, rentable offers and model architectures, with source and date on every figure."""

from ftsolve.catalog._arrays import BILLING_CODES, DEFAULT_INTER_NODE_GBIT, OfferArrays, planning_prices
from ftsolve.catalog._columns import OfferTable
from ftsolve.catalog._currency import CURRENCIES, Currency, Rate, rate_on
from ftsolve.catalog._hf import arch_from_config, config_json_path, load_config_json
from ftsolve.catalog._load import Catalog, load_catalog, load_gpus, parse_offers
from ftsolve.catalog._models import MAX_PLAUSIBLE_DISCOUNT, GpuSpec, ModelArch, Offer
from ftsolve.catalog._names import resolve_gpu
from ftsolve.catalog._presets import PRESETS
from ftsolve.catalog._providers import (
    FALLBACK_STORAGE_SOURCE,
    FALLBACK_STORAGE_USD_PER_GB_MONTH,
    ProviderDefaults,
    provider_defaults,
    storage_price,
)

__all__ = [
    "BILLING_CODES",
    "CURRENCIES",
    "DEFAULT_INTER_NODE_GBIT",
    "FALLBACK_STORAGE_SOURCE",
    "FALLBACK_STORAGE_USD_PER_GB_MONTH",
    "MAX_PLAUSIBLE_DISCOUNT",
    "PRESETS",
    "Catalog",
    "Currency",
    "GpuSpec",
    "ModelArch",
    "Offer",
    "OfferArrays",
    "OfferTable",
    "ProviderDefaults",
    "Rate",
    "arch_from_config",
    "config_json_path",
    "load_catalog",
    "load_config_json",
    "load_gpus",
    "parse_offers",
    "planning_prices",
    "provider_defaults",
    "rate_on",
    "resolve_gpu",
    "storage_price",
]
