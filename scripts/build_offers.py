"""Build the bundled offers file from the dated public snapshots in ../shared/data.

    python scripts/build_offers.py [SHARED_DATA_DIR]

Reads skypilot_gpu_offers.csv and extra_gpu_prices.csv (provenance in SOURCES.md), maps every
GPU spelling to a canonical id, converts instance prices to USD per GPU-hour, and writes
src/ftsolve/catalog/data/offers.csv atomically. Rows it cannot use are counted and listed
by reason on stderr, never guessed.
"""

from __future__ import annotations

import collections
import csv
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ftsolve.catalog._names import resolve_gpu  # noqa: E402

OUT = ROOT / "src/ftsolve/catalog/data/offers.csv"
COLUMNS = [
    "provider",
    "tier",
    "instance_type",
    "gpu",
    "source_gpu_name",
    "gpus_per_node",
    "on_demand_usd_per_gpu_hour",
    "interruptible_usd_per_gpu_hour",
    "billing",
    "region",
    "country",
    "storage_usd_per_gb_month",
    "interruption_rate_per_hour",
    "price_date",
    "price_date_estimated",
    "source",
    "notes",
]

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
        return "IT" if r.startswith("it-") or not r else ""
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


def known_memory() -> dict[str, float]:
    with open(ROOT / "src/ftsolve/catalog/data/gpus.csv", newline="") as f:
        return {row["name"]: float(row["memory_gb"]) for row in csv.DictReader(f)}


def fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def skypilot_rows(
    path: Path, mem: dict[str, float], skipped: collections.Counter[str]
) -> list[dict[str, str]]:
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = collections.defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            groups[(row["cloud"], row["instance_type"], row["region"])].append(row)
    out = []
    for (cloud, itype, region), rows in sorted(groups.items()):
        first = rows[0]
        if cloud in SKIP_CLOUDS:
            skipped[f"{cloud}: {SKIP_CLOUDS[cloud]}"] += 1
            continue
        count = int(float(first["accelerator_count"]))
        memory = float(first["accelerator_memory_gib"]) if first["accelerator_memory_gib"] else None
        gpu = resolve_gpu(first["accelerator_name"], memory, itype, count, mem)
        if gpu is None:
            skipped[f"not a modelled GPU: {first['accelerator_name']}"] += 1
            continue
        prices = [float(r["price_per_hour"]) for r in rows if r["price_per_hour"]]
        od = min(prices) if prices else None
        # Per availability zone: spot equal to on-demand means no spot capacity (prices-and-spot.md).
        spots = [float(r["spot_price_per_hour"]) for r in rows if r["spot_price_per_hour"]]
        spots = [s for s in spots if od is None or s < od]
        spot = min(spots) if spots else None
        if od is None and spot is None:
            skipped["no usable price"] += 1
            continue
        provider, tier = cloud, "on-demand/spot"
        if cloud in ("shadeform", "primeintellect"):
            sep = "__" if cloud == "primeintellect" else "_"
            tier = "via " + itype.split(sep)[0]
        notes = []
        if cloud == "seeweb":
            notes.append("currency likely EUR, stored as printed (SOURCES.md, unverified)")
        if cloud == "runpod":
            notes.append("SECURE tier; catalog spot equals on-demand, so no interruptible price")
        if len(rows) > 1:
            notes.append(f"{len(rows)} availability zones; lowest price kept")
        date = SKYPILOT_DATES.get(cloud, SKYPILOT_WINDOW_START)
        out.append(
            {
                "provider": provider,
                "tier": tier,
                "instance_type": itype,
                "gpu": gpu,
                "source_gpu_name": first["accelerator_name"],
                "gpus_per_node": str(count),
                "on_demand_usd_per_gpu_hour": fmt(od / count if od else None),
                "interruptible_usd_per_gpu_hour": fmt(spot / count if spot else None),
                "billing": "per-hour",
                "region": region or "default",
                "country": country_of(cloud, region),
                "storage_usd_per_gb_month": "",
                "interruption_rate_per_hour": "",
                "price_date": date,
                "price_date_estimated": "false" if cloud in SKYPILOT_DATES else "true",
                "source": f"skypilot-org/skypilot-catalog catalogs/v8/{cloud}/vms.csv (see SOURCES.md)",
                "notes": "; ".join(notes),
            }
        )
    return out


BILLING = {
    "per-second": "per-second",
    "per-minute": "per-minute",
    "per-hour": "per-hour",
    "per-hour (list unit)": "per-hour",
    "monthly": "monthly",
}


def extra_rows(path: Path, mem: dict[str, float], skipped: collections.Counter[str]) -> list[dict[str, str]]:
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            count = int(row["gpus_per_instance"])
            m = re.search(r"(\d+)\s*GB", row["gpu"])
            memory = float(m.group(1)) if m else None
            gpu = resolve_gpu(row["gpu"], memory, row["instance_type"], count, mem)
            if gpu is None:
                skipped[f"not a modelled GPU: {row['gpu']}"] += 1
                continue
            od = (
                float(row["on_demand_usd_per_instance_hour"])
                if row["on_demand_usd_per_instance_hour"]
                else None
            )
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
            out.append(
                {
                    "provider": row["provider"],
                    "tier": row["offering"],
                    "instance_type": row["instance_type"],
                    "gpu": gpu,
                    "source_gpu_name": row["gpu"],
                    "gpus_per_node": str(count),
                    "on_demand_usd_per_gpu_hour": fmt(od / count if od else None),
                    "interruptible_usd_per_gpu_hour": fmt(spot / count if spot else None),
                    "billing": BILLING[row["billing"]] if row["billing"] else "per-hour",
                    "region": row["region"] or "default",
                    "country": row["country"],
                    "storage_usd_per_gb_month": row["storage_usd_per_gb_month"],
                    "interruption_rate_per_hour": "",
                    "price_date": date,
                    "price_date_estimated": estimated,
                    "source": row["source"],
                    "notes": row["notes"][:300],
                }
            )
    return out


def main() -> None:
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared/data"
    mem = known_memory()
    skipped: collections.Counter[str] = collections.Counter()
    rows = skypilot_rows(data / "skypilot_gpu_offers.csv", mem, skipped)
    rows += extra_rows(data / "extra_gpu_prices.csv", mem, skipped)
    rows.sort(key=lambda r: (r["provider"], r["tier"], r["instance_type"], r["region"]))
    keys = collections.Counter((r["provider"], r["tier"], r["instance_type"], r["region"]) for r in rows)
    dupes = [k for k, v in keys.items() if v > 1]
    if dupes:
        raise SystemExit(f"duplicate offers: {dupes[:5]}")
    fd, tmp = tempfile.mkstemp(dir=OUT.parent, suffix=".tmp")
    with os.fdopen(fd, "w", newline="") as f:
        f.write("# schema_version: 1\n")
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    os.chmod(tmp, 0o644)
    os.replace(tmp, OUT)
    print(f"wrote {len(rows)} offers to {OUT.relative_to(ROOT)}", file=sys.stderr)
    for reason, n in sorted(skipped.items(), key=lambda kv: -kv[1]):
        print(f"  skipped {n:4d}  {reason}", file=sys.stderr)


if __name__ == "__main__":
    main()
