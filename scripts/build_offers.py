"""Build the bundled offers file from the dated public snapshots in ../shared/data.

    python scripts/build_offers.py [SHARED_DATA_DIR]

Reads skypilot_gpu_offers.csv and extra_gpu_prices.csv (provenance in SOURCES.md), then the
project's own data/extra_offers.csv (same columns; provenance in data/OFFERS.md) for offers the
shared snapshots lack, maps every GPU spelling to a canonical id, converts instance prices to USD
per GPU-hour, and writes src/ftsolve/catalog/data/offers.csv atomically. Both price files go
through the same checks. Rows it cannot use are counted and listed by reason on stderr, never
guessed.
"""

from __future__ import annotations

import collections
import csv
import datetime as dt
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ftsolve._exports._launch import SKYPILOT_VERSION  # noqa: E402
from ftsolve._files import write_atomically  # noqa: E402
from ftsolve.catalog import GpuSpec, Offer, load_gpus  # noqa: E402
from ftsolve.catalog._import import offers_to_csv, read_skypilot  # noqa: E402
from ftsolve.catalog._load import _offer_from_row, hardware_gaps  # noqa: E402
from ftsolve.catalog._models import PriceKind  # noqa: E402
from ftsolve.catalog._names import resolve_gpu  # noqa: E402
from ftsolve.catalog._skypilot_facts import (  # noqa: E402
    SKYPILOT_NOTES,
    completed,
    no_skypilot_cloud,
    skypilot_tier,
    with_overrides,
)

OUT = ROOT / "src/ftsolve/catalog/data/offers.csv"
# Offers the shared snapshots lack, kept by this project (provenance of each row in data/OFFERS.md).
PROJECT_EXTRA = ROOT / "data/extra_offers.csv"
# The columns of extra_gpu_prices.csv, which data/extra_offers.csv repeats exactly.
EXTRA_COLUMNS = (
    "provider",
    "offering",
    "instance_type",
    "gpu",
    "gpus_per_instance",
    "on_demand_usd_per_instance_hour",
    "spot_usd_per_instance_hour",
    "billing",
    "region",
    "country",
    "storage_usd_per_gb_month",
    "price_date",
    "source",
    "notes",
)
# extra_rows keeps this many characters of a row's notes; a project row must fit (data/OFFERS.md has room).
EXTRA_NOTES_CHARS = 300

# SOURCES.md: no commit date was retrievable for the SkyPilot catalog files. Where SOURCES.md
# matches a cloud's prices to a dated transcription, that date is used; otherwise the start of
# the stated snapshot window (Aug-Nov 2026) is used, so staleness warnings err on the safe side.
SKYPILOT_DATES = {
    "aws": "2026-11-09",  # p4d/p4de/p5 us-east-1 equal datareceipts hyperscalers.json of 2026-11-09
    "lambda": "2026-09-20",  # equal lambda.ai as transcribed 2026-09-20 (api-evangelist)
    "runpod": "2026-08-19",  # 1x A100-80GB SECURE $1.39 = privum/ai-compute-prices 2026-08-19
}
SKYPILOT_WINDOW_START = "2026-08-01"
# Prices that SOURCES.md says are not real prices.
SKIP_CLOUDS = {"mithril": "placeholder or auction-floor prices (SOURCES.md)"}

COUNTRY_WORDS = {
    "usa": "US",
    "us": "US",
    "canada": "CA",
    "india": "IN",
    "iceland": "IS",
    "germany": "DE",
    "finland": "FI",
    "israel": "IL",
    "norway": "NO",
    "uk": "GB",
    "netherlands": "NL",
    "france": "FR",
    "singapore": "SG",
    "sweden": "SE",
    "australia": "AU",
    "japan": "JP",
    "poland": "PL",
}
AWS_EU = {
    "eu-central-1": "DE",
    "eu-north-1": "SE",
    "eu-south-2": "ES",
    "eu-west-1": "IE",
    "eu-west-2": "GB",
    "eu-west-3": "FR",
}
LAMBDA_EU = {"europe-central-1": "DE", "europe-south-1": "IT"}


def country_of(cloud: str, region: str) -> str:
    r = region.strip()
    if cloud == "aws":
        return AWS_EU.get(r, "US" if r.startswith("us-") else "")
    if cloud == "lambda":
        return LAMBDA_EU.get(r, "US" if r.startswith("us-") else "")
    if cloud == "vast":
        parts = [p.strip() for p in r.split(",")]
        return parts[1] if len(parts) > 1 else ""
    if cloud == "verda":
        return "FI" if r.startswith("FIN") else ""
    if cloud == "nebius":
        return {"eu-north1": "FI", "eu-west1": "FR", "us-central1": "US"}.get(r, "")
    if cloud == "seeweb":
        # Region names carry the country (it-fr2, it-mi2, ch-lug1, bg-sof1 in catalogs/v8/seeweb/vms.csv);
        # a row without a region has no known country.
        return {"it": "IT", "ch": "CH", "bg": "BG"}.get(r.split("-")[0], "") if r else ""
    if cloud in ("runpod", "primeintellect"):
        return r if len(r) == 2 else ""
    if cloud == "fluidstack":
        return "FI" if r == "FINLAND" else ""
    if cloud == "cudo":
        return {"ca": "CA", "no": "NO", "se": "SE", "us": "US"}.get(r.split("-")[0], "")
    if cloud == "hyperstack":
        return {"CANADA-1": "CA", "NORWAY-1": "NO", "US-1": "US"}.get(r, "")
    if cloud == "jarvislabs":
        return "IN"
    if cloud == "shadeform":
        for word in r.split("-"):
            if word in COUNTRY_WORDS:
                return COUNTRY_WORDS[word]
    return ""


def fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def skypilot_offers(path: Path, gpus: dict[str, GpuSpec], skipped: collections.Counter[str]) -> list[Offer]:
    """The compact SkyPilot extract, through the same importer users run (`ftsolve catalog import`)."""

    def price_date(cloud: str) -> tuple[dt.date, bool]:
        return dt.date.fromisoformat(SKYPILOT_DATES.get(cloud, SKYPILOT_WINDOW_START)), cloud not in SKYPILOT_DATES

    report = read_skypilot(
        path.read_text(encoding="utf-8"),
        str(path.name),
        gpus,
        provider=None,
        price_date=price_date,
        source=lambda cloud: f"skypilot-org/skypilot-catalog catalogs/v8/{cloud}/vms.csv (see SOURCES.md)",
        country=country_of,
        tier=skypilot_tier,
        notes=lambda cloud: SKYPILOT_NOTES.get(cloud, ""),
        skip=lambda cloud: SKIP_CLOUDS.get(cloud, ""),
    )
    skipped.update(report.skipped)
    # Price kinds come from the importer (skypilot_price_kinds); overrides and Vast's estimated
    # interruptible prices from catalog._skypilot_facts, which `ftsolve catalog update` applies too.
    return [with_skypilot_verdict(completed(o)) for o in report.offers]


BILLING = {
    "per-second": "per-second",
    "per-minute": "per-minute",
    "per-hour": "per-hour",
    "per-hour (list unit)": "per-hour",
    "monthly": "monthly",
}


# Price kinds of extra_gpu_prices.csv, per provider: (on-demand, interruptible), with reasons.
EXTRA_KINDS: dict[str, tuple[PriceKind, PriceKind]] = {
    # Cloud Billing catalog list price; Spot VM price at the file's generation time (GCP reprices Spot).
    "gcp": ("list", "observed"),
    # Catalog list price; lowest AZ spot price of an undated catalog file (SOURCES.md "AWS notes").
    "aws": ("list", "estimate"),
    # Retail Prices API pay-as-you-go meter; the Spot meter moves with capacity.
    "azure": ("list", "observed"),
    # Published per-node list and North-America spot prices (coreweave.com/pricing, 2026-09-20).
    "coreweave": ("list", "list"),
    # GPU-hour list price; preemptible "from $0.99 / $0.79 / ..." is a floor (SOURCES.md; Nebius reprices
    # spot as often as every 15 minutes). The RTX PRO 6000 and L40S list prices are "from" the smallest host
    # preset, which is itself a price-list entry (the SkyPilot Nebius catalog has L40S at 1.5484 for it), so
    # they stay list.
    "nebius": ("list", "floor"),
    "hetzner": ("list", "list"),
    "ovhcloud": ("list", "list"),
    "scaleway": ("list", "list"),
    # Minimum "From" price per GPU-hour across the marketplace's hosts (rwydaegh/goliat, January 2026).
    "tensordock": ("floor", "floor"),
    # data/extra_offers.csv (data/OFFERS.md). DigitalOcean ("do", SkyPilot's name): the "On-Demand Price" of
    # digitalocean.com/pricing/gpu-droplets; no spot price.
    "do": ("list", "list"),
    # Hot Aisle's own price for newly allocated MI300X VMs (hotaisle/hotaisle-website); no spot price.
    "hotaisle": ("list", "list"),
    # Crusoe's on-demand price as transcribed from crusoe.ai/cloud/pricing (dstackai/gpuhunt); spot left out.
    "crusoe": ("list", "list"),
}


def extra_kinds(row: dict[str, str]) -> tuple[PriceKind, PriceKind]:
    if row["provider"] == "runpod":
        # Secure: RunPod's own data centres at list prices; community: third-party hosts' market price.
        # Spot (2025-06-21 rows only): the GraphQL secureSpotPrice/communitySpotPrice read that day.
        return ("list" if row["offering"] == "secure" else "observed"), "observed"
    if row["provider"] not in EXTRA_KINDS:
        raise SystemExit(f"{row['provider']}: add its price kinds (on-demand, interruptible) to EXTRA_KINDS")
    return EXTRA_KINDS[row["provider"]]


# Where the source gives no data-centre location, one from the providers' own listings.
# Hetzner: the GPU matrix (hetzner.com/dedicated-rootserver/matrix-gpu) as read on 2026-10-08 in a research
# memo (index file id 70462421288, repository not reported): GEX63 in Helsinki, GEX131 in Nuremberg and
# Falkenstein. Location codes and countries: docs.hetzner.com/de/general/others/data-centers-and-connection
# (last change 2024-10-24): NBG1 Nuremberg DE, FSN1 Falkenstein DE, HEL1 Helsinki FI.
# OVHcloud: ovhcloud.com/en/public-cloud/prices shows the GPU instances' location as France (Gravelines,
# region code GRA), as read ~2026-10-06 in a price log (index file id 71183914390, repository not reported);
# the region's number (GRA9, GRA11) is not stated. All OVHcloud Public Cloud prices are the same per region.
_HETZNER_LOC = "location from hetzner.com GPU matrix read 2026-10-08 (index file 70462421288); HEL1/FSN1/NBG1 "
_HETZNER_DOC = "countries from docs.hetzner.com data-centers-and-connection (2024-10-24)"
EXTRA_LOCATIONS: dict[tuple[str, str], list[tuple[str, str, str]]] = {
    ("hetzner", "GEX63"): [("hel1", "FI", _HETZNER_LOC + _HETZNER_DOC)],
    ("hetzner", "GEX131"): [
        ("fsn1", "DE", _HETZNER_LOC + _HETZNER_DOC),
        ("nbg1", "DE", _HETZNER_LOC + _HETZNER_DOC),
    ],
}
_OVH_LOC = (
    "GRA = Gravelines, France: location shown on ovhcloud.com/en/public-cloud/prices (~2026-10-06, index file "
    "71183914390); region number not stated"
)

# Why an extra offer cannot be launched as written (none: a launcher takes its region and type).
EXTRA_NOT_LAUNCHABLE = {
    "runpod": "RunPod tier price with no data centre or SkyPilot instance type (SkyPilot names RunPod types like "
    "1x_A100-80GB_SECURE): import catalogs/v8/runpod/vms.csv for launchable offers",
    "coreweave": "price-list line for North America: no CoreWeave region or node type (CoreWeave is launched "
    "through its Kubernetes clusters)",
    "nebius": "price list for all regions: no Nebius region or preset; the SkyPilot Nebius offers carry both",
    "hetzner": "monthly dedicated server with a setup fee, ordered in Hetzner Robot; no launcher starts it",
    "ovhcloud": "the source names no OVHcloud region code (GRA9, GRA11, ...) to launch in",
    "tensordock": "marketplace 'from' price across hosts: no host or location to launch on",
    # The reasons below fit the 120 characters an export refusal quotes.
    # docs.digitalocean.com/products/droplets/details/features (validated 2025-11-20): MI325X only in the
    # "Contract-only GPU Droplets" tables; the price note in data/OFFERS.md says the same.
    "do": "DigitalOcean's docs list the MI325X sizes as contract-only (a sales agreement, not self-service)",
    # The price is per GPU for 1x/2x/4x VMs in Michigan; SkyPilot 0.14.1 has no sky/clouds/hotaisle.py.
    "hotaisle": "no Hot Aisle VM type or location code in the source; SkyPilot 0.14.1 has no Hot Aisle cloud",
}
# The same, for one instance type of a provider whose other offers launch.
EXTRA_NOT_LAUNCHABLE_TYPES = {
    # SkyPilot 0.14.1's sky/catalog/data_fetchers/fetch_azure.py FAMILY_NAME_TO_SKYPILOT_GPU_NAME has no MI300X
    # family, so the size has no accelerator and sky/clouds/azure.py picks its CPU image (no ROCm driver).
    ("azure", "Standard_ND96isr_MI300X_v5"): "SkyPilot 0.14.1 knows no accelerator for Azure MI300X VMs: it would "
    "boot its CPU image, without ROCm",
}


# What SkyPilot (the release pyproject pins, 0.14.1) can launch, checked on every offer (the SkyPilot
# extract's through with_skypilot_verdict, the extra rows' through not_launchable_reason) after the reasons
# above: an offer that passes them but names a provider SkyPilot has no cloud for, or an Azure size or
# region SkyPilot's Azure catalog lacks, is marked not launchable here (data/OFFERS.md, "Launchable with
# SkyPilot 0.14.1"). The Azure rows come from Azure's retail-price API (extra_gpu_prices.csv and
# data/extra_offers.csv), not from SkyPilot's catalog, so they are held against what that catalog has:
# * github:coopslarhette/skypilot-catalog catalogs/v8/azure/vms.csv @20291d7eda23e6f420cd9586558cf0bc4051851c
#   (a fork's copy of the v8 file SkyPilot 0.14.1 reads; upstream's was not readable) and upstream
#   github:skypilot-org/skypilot-catalog catalogs/v6/azure/vms.csv @098741e70562f65d7af1cceb81e33b284f742604:
#   the same rows for these sizes (v6 lacks only the centralus rows of NC40ads/NC80adis_H100_v5), every row
#   in one of the nine US regions below, and no H200 or GB200 row;
# * SkyPilot 0.14.1's sky/catalog/data_fetchers/fetch_azure.py: US_REGIONS (the same nine) unless run with
#   --all-regions, and FAMILY_NAME_TO_SKYPILOT_GPU_NAME with no H200 or GB200 family;
# * skypilot-org/skypilot issue #6848 (2025-08-25): "Invalid region 'germanywestcentral' ... List of supported
#   azure regions: 'centralus, eastus, eastus2, northcentralus, southcentralus, westcentralus, westus,
#   westus2, westus3'".
SKYPILOT_AZURE_REGIONS = frozenset(
    {
        "centralus",
        "eastus",
        "eastus2",
        "northcentralus",
        "southcentralus",
        "westcentralus",
        "westus",
        "westus2",
        "westus3",
    }
)
_A100_V4_NC_REGIONS = frozenset({"centralus", "eastus", "eastus2", "southcentralus", "westus", "westus2", "westus3"})
_H100_V5_NC_REGIONS = frozenset({"centralus", "eastus", "eastus2", "southcentralus", "westus3"})
# Each Azure GPU size of the bundled offers and the regions SkyPilot's Azure catalog has it in.
SKYPILOT_AZURE_SIZES: dict[str, frozenset[str]] = {
    "Standard_NC24ads_A100_v4": _A100_V4_NC_REGIONS,
    "Standard_NC48ads_A100_v4": _A100_V4_NC_REGIONS,
    "Standard_NC96ads_A100_v4": _A100_V4_NC_REGIONS,
    "Standard_NC40ads_H100_v5": _H100_V5_NC_REGIONS,
    "Standard_NC80adis_H100_v5": _H100_V5_NC_REGIONS,
    "Standard_ND96amsr_A100_v4": frozenset({"eastus", "eastus2", "southcentralus"}),
    "Standard_ND96asr_v4": frozenset({"eastus", "southcentralus", "westus2"}),
    # Listed as H100:12 although the VM has 8 GPUs; the SkyPilot export names the real count
    # (ftsolve._exports._launch.SKYPILOT_GPU_MISCOUNTS).
    "Standard_ND96isr_H100_v5": frozenset({"eastus", "eastus2", "westus"}),
}
# Azure GPU sizes SkyPilot's Azure catalog has no row for, with the GPU family its fetcher lacks.
SKYPILOT_AZURE_MISSING = {
    "Standard_ND96isr_H200_v5": "H200",
    "Standard_ND128isr_NDR_GB200_v6": "GB200",
    "Standard_ND96isr_MI300X_v5": "MI300X",
}


def _regions(names: str) -> frozenset[str]:
    """Region names separated by spaces."""
    return frozenset(names.split())


# The bundled GCP rows come from Cyclenerd's price list (extra_gpu_prices.csv), which names every region
# with a SKU price; SkyPilot launches a GCP instance type only in the regions its GCP catalog lists it in.
# Held against github:skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv @006059e0f18acb1341e22a27751e9f80df6ba92f
# (the VM rows and the accelerator rows agree; @8427bbff988abdd050a9f51addd314ef31cb4e85 has the same a2 regions and
# no g4 rows either), read 2026-12-02. a3-highgpu-4g/8g: only the regions that read confirmed.
_GCP_A2_HIGHGPU = _regions(
    "asia-northeast1 asia-northeast3 asia-southeast1 europe-west4 me-west1 "
    "us-central1 us-east1 us-west1 us-west3 us-west4"
)
_GCP_G2 = _regions(
    "asia-east1 asia-northeast1 asia-northeast3 asia-south1 asia-southeast1 "
    "europe-west1 europe-west2 europe-west3 europe-west4 europe-west6 "
    "me-central2 northamerica-northeast1 northamerica-northeast2 us-central1 us-east1 "
    "us-east4 us-west1 us-west4"
)
_GCP_A3_SMALL = _regions(
    "asia-east1 asia-northeast1 asia-south1 asia-south2 asia-southeast1 "
    "australia-southeast1 europe-north1 europe-west1 europe-west3 europe-west4 "
    "europe-west8 europe-west9 us-central1 us-east4 us-east5 "
    "us-west1 us-west4"
)
_GCP_A3_LARGE = _regions("europe-west1 europe-west4 us-central1 us-east4 us-east5")
_GCP_A3_MEGA = _regions(
    "asia-east1 asia-northeast1 asia-southeast1 australia-southeast1 europe-north1 "
    "europe-west1 europe-west3 europe-west4 us-central1 us-east4 "
    "us-east5 us-west1 us-west4"
)
# Instance-type prefix -> the regions SkyPilot's GCP catalog has it in (empty: not in the catalog at all).
SKYPILOT_GCP_TYPES: dict[str, frozenset[str]] = {
    "a2-highgpu-": _GCP_A2_HIGHGPU,
    "a2-megagpu-": _regions("asia-southeast1 europe-west4 us-central1"),
    "a2-ultragpu-": _regions("asia-southeast1 europe-west4 us-central1 us-east4 us-east5"),
    "a3-highgpu-1g": _GCP_A3_SMALL,
    "a3-highgpu-2g": _GCP_A3_SMALL,
    "a3-highgpu-4g": _GCP_A3_LARGE,
    "a3-highgpu-8g": _GCP_A3_LARGE,
    "a3-megagpu-": _GCP_A3_MEGA,
    "g2-standard-": _GCP_G2,
    "g4-standard-": frozenset(),  # RTX PRO 6000: SkyPilot 0.14.1 maps RTXPRO6000 to g4, its catalog has no rows
}


def _gcp_reason(size: str, region: str) -> str:
    prefix = next((p for p in SKYPILOT_GCP_TYPES if size.startswith(p)), None)
    if prefix is None:
        raise SystemExit(f"gcp {size}: add the regions SkyPilot's GCP catalog has it in to SKYPILOT_GCP_TYPES")
    regions = SKYPILOT_GCP_TYPES[prefix]
    if not regions:
        return f"SkyPilot's GCP catalog (catalogs/v8/gcp/vms.csv) has no {size} rows"
    if region not in regions:
        return f"SkyPilot's GCP catalog (catalogs/v8/gcp/vms.csv) has no {size} in {region}"
    return ""


def skypilot_reason(provider: str, size: str, region: str) -> str:
    """Why SkyPilot 0.14.1 cannot launch an offer of this provider, instance type and region; "" when it can."""
    if no_skypilot_cloud(provider):
        return no_skypilot_cloud(provider)
    if provider == "gcp":
        return _gcp_reason(size, region)
    if provider != "azure":
        return ""
    if size in SKYPILOT_AZURE_MISSING:
        family = SKYPILOT_AZURE_MISSING[size]
        return f"SkyPilot {SKYPILOT_VERSION}'s Azure catalog has no {size} (its Azure fetcher has no {family} family)"
    if size not in SKYPILOT_AZURE_SIZES:
        raise SystemExit(f"azure {size}: add the regions SkyPilot's Azure catalog has it in to SKYPILOT_AZURE_SIZES")
    if region not in SKYPILOT_AZURE_REGIONS:
        return (
            "SkyPilot's hosted Azure catalog covers US regions only (fetch_azure.py US_REGIONS; SkyPilot issue #6848)"
        )
    if region not in SKYPILOT_AZURE_SIZES[size]:
        return f"SkyPilot's Azure catalog has {size} only in {', '.join(sorted(SKYPILOT_AZURE_SIZES[size]))}"
    return ""


def with_skypilot_verdict(offer: Offer) -> Offer:
    """The offer, marked not launchable when SkyPilot 0.14.1 cannot launch it; one already marked keeps its reason."""
    reason = skypilot_reason(offer.provider, offer.instance_type, offer.region) if offer.launchable else ""
    return with_overrides(offer, {"launchable": False, "not_launchable_reason": reason}) if reason else offer


def not_launchable_reason(row: dict[str, str]) -> str:
    """Why an extra row cannot be launched as written; "" when it can."""
    return (
        EXTRA_NOT_LAUNCHABLE_TYPES.get((row["provider"], row["instance_type"]))
        or EXTRA_NOT_LAUNCHABLE.get(row["provider"])
        or skypilot_reason(row["provider"], row["instance_type"], row["region"] or "default")
    )


def extra_rows(
    path: Path, gpus: dict[str, GpuSpec], mem: dict[str, float], skipped: collections.Counter[str]
) -> list[tuple[str, dict[str, str]]]:
    """(at, offer row) of each offer of an extra price file (extra_gpu_prices.csv's columns): `at` names
    the file and line the offer came from."""
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != EXTRA_COLUMNS:
            raise SystemExit(f"{path.name}: expected the columns {','.join(EXTRA_COLUMNS)}, got {reader.fieldnames}")
        for row in reader:
            at = f"{path.name}, line {reader.line_num}"
            if len(row["notes"]) > EXTRA_NOTES_CHARS and path == PROJECT_EXTRA:
                raise SystemExit(f"{at}: notes longer than {EXTRA_NOTES_CHARS} characters; move detail to OFFERS.md")
            count = int(row["gpus_per_instance"])
            m = re.search(r"(\d+)\s*GB", row["gpu"])
            memory = float(m.group(1)) if m else None
            gpu = resolve_gpu(row["gpu"], memory, row["instance_type"], count, mem)
            if gpu is None:
                skipped[f"not a modelled GPU: {row['gpu']}"] += 1
                continue
            missing = hardware_gaps(gpus[gpu])
            if missing:
                skipped[f"{gpu}: no {' or '.join(missing)} in gpus.csv"] += 1
                continue
            od = float(row["on_demand_usd_per_instance_hour"]) if row["on_demand_usd_per_instance_hour"] else None
            spot = float(row["spot_usd_per_instance_hour"]) if row["spot_usd_per_instance_hour"] else None
            if spot is not None and od is not None and spot >= od:
                spot = None  # Azure rows where the Spot meter equals pay-as-you-go (SOURCES.md)
            if od is None and spot is None:
                skipped["no usable price"] += 1
                continue
            date, estimated = row["price_date"], "false"
            if not date:
                # AWS g-family rows: same undated catalog file as the p-family (SOURCES.md).
                date, estimated = SKYPILOT_DATES["aws"], "true"
            od_kind, spot_kind = extra_kinds(row)
            reason = not_launchable_reason(row)
            base = {
                "provider": row["provider"],
                "tier": row["offering"],
                "instance_type": row["instance_type"],
                "gpu": gpu,
                "source_gpu_name": row["gpu"],
                "gpus_per_node": str(count),
                "on_demand_usd_per_gpu_hour": fmt(od / count if od else None),
                "interruptible_usd_per_gpu_hour": fmt(spot / count if spot else None),
                "price_kind": od_kind,
                "interruptible_price_kind": spot_kind,
                "billing": BILLING[row["billing"]] if row["billing"] else "per-hour",
                "region": row["region"] or "default",
                "country": row["country"],
                "launchable": "false" if reason else "true",
                "not_launchable_reason": reason,
                "storage_usd_per_gb_month": row["storage_usd_per_gb_month"],
                "interruption_rate_per_hour": "",
                "price_date": date,
                "price_date_estimated": estimated,
                "source": row["source"],
                "notes": row["notes"][:300],
            }
            for region, country, where in extra_locations(row):
                located = {"region": region, "country": country} if region else {}
                note = f"{base['notes']}; {where}" if where else base["notes"]
                out.append((at, base | located | {"notes": note}))
    return out


def extra_locations(row: dict[str, str]) -> list[tuple[str, str, str]]:
    """(region, country, provenance) of each location an extra row is offered in; ("", "", "") keeps the
    row's own region and country."""
    if (row["provider"], row["instance_type"]) in EXTRA_LOCATIONS:
        return EXTRA_LOCATIONS[(row["provider"], row["instance_type"])]
    if row["provider"] == "ovhcloud":
        return [("GRA", "FR", _OVH_LOC)]
    if row["provider"] == "hetzner":
        raise SystemExit(f"hetzner {row['instance_type']}: add its location to EXTRA_LOCATIONS")
    return [("", "", "")]


def main() -> None:
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared/data"
    gpus = load_gpus()
    mem = {name: g.memory_gib for name, g in gpus.items()}
    skipped: collections.Counter[str] = collections.Counter()
    offers = skypilot_offers(data / "skypilot_gpu_offers.csv", gpus, skipped)
    for path in (data / "extra_gpu_prices.csv", PROJECT_EXTRA):
        offers += [_offer_from_row(row, at, gpus) for at, row in extra_rows(path, gpus, mem, skipped)]
    keys = collections.Counter(o.key for o in offers)
    dupes = [k for k, v in keys.items() if v > 1]
    if dupes:
        raise SystemExit(f"duplicate offers: {dupes[:5]}")
    write_atomically(OUT, offers_to_csv(offers))
    print(f"wrote {len(offers)} offers to {OUT.relative_to(ROOT)}", file=sys.stderr)
    for reason, n in sorted(skipped.items(), key=lambda kv: -kv[1]):
        print(f"  skipped {n:4d}  {reason}", file=sys.stderr)


if __name__ == "__main__":
    main()
