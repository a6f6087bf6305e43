"""Importing offers: SkyPilot catalog files, the compact multi-cloud extract, and a user's own
CSV or YAML, written atomically into the user catalog that plans read next to the bundled one."""

from __future__ import annotations

import ast
import collections
import csv
import datetime as dt
import io
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftsolve._errors import CatalogError
from ftsolve._files import write_atomically
from ftsolve.catalog._load import OFFER_COLUMNS, _offer_from_row, parse_offers
from ftsolve.catalog._models import GpuSpec, Offer
from ftsolve.catalog._names import resolve_gpu

SKYPILOT_V8_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region", "SpotPrice")
EXTRACT_COLUMNS = (
    "cloud",
    "instance_type",
    "accelerator_name",
    "accelerator_count",
    "price_per_hour",
    "region",
)
WRITE_COLUMNS = (
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
)


@dataclass
class ImportReport:
    """What an import produced and what it skipped, by reason."""

    offers: list[Offer]
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)
    warnings: list[str] = field(default_factory=list)


def user_catalog_path() -> Path:
    """Where imported offers live: $FTSOLVE_HOME/offers.csv, else the XDG config folder."""
    home = os.environ.get("FTSOLVE_HOME")
    if home:
        return Path(home) / "offers.csv"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ftsolve" / "offers.csv"


def detect_format(header: Iterable[str]) -> str:
    cols = set(header)
    if set(SKYPILOT_V8_COLUMNS) <= cols:
        return "skypilot"
    if set(EXTRACT_COLUMNS) <= cols:
        return "skypilot-extract"
    if set(OFFER_COLUMNS) <= cols:
        return "ftsolve"
    raise CatalogError(
        "unrecognised columns: expected a SkyPilot v8 vms.csv (InstanceType, AcceleratorName, ...), "
        "the compact extract (cloud, instance_type, ...) or ftsolve's offers format "
        f"({', '.join(OFFER_COLUMNS)})"
    )


def _float(value: str, where: str, col: str) -> float | None:
    value = (value or "").strip()
    if not value:
        return None
    try:
        out = float(value)
    except ValueError:
        raise CatalogError(f"{where}: field {col}: {value!r} is not a number") from None
    if out < 0:
        raise CatalogError(f"{where}: field {col}: must not be negative, got {value}")
    return out


def _gpu_memory_gib(gpu_info: str, count: int) -> list[float]:
    """Per-GPU memory candidates from SkyPilot's GpuInfo (a Python literal; clouds disagree on
    whether SizeInMiB is per GPU or per instance, so both readings are offered)."""
    try:
        info = ast.literal_eval(gpu_info) if gpu_info.strip() else {}
    except (ValueError, SyntaxError):
        return []
    gpus = info.get("Gpus") or [{}]
    mib = (gpus[0].get("MemoryInfo") or {}).get("SizeInMiB") or info.get("TotalGpuMemoryInMiB")
    if not mib:
        return []
    return [float(mib) / 1024.0, float(mib) / 1024.0 / max(count, 1)]


@dataclass(frozen=True)
class _Row:
    provider: str
    tier: str
    instance_type: str
    accelerator: str
    count: int
    memory_gib: list[float]
    od: float | None
    spot: float | None
    region: str
    where: str


def _group_skypilot(
    rows: list[_Row],
    gpus: Mapping[str, GpuSpec],
    price_date: Callable[[str], tuple[dt.date, bool]],
    source: Callable[[str], str],
    country: Callable[[str, str], str],
    notes: Callable[[str], str],
    report: ImportReport,
) -> None:
    """One offer per (provider, instance type, region): lowest on-demand price over zones and the
    lowest spot price strictly below it (spot equal to on-demand means no spot capacity)."""
    known = {name: g.memory_gib for name, g in gpus.items()}
    groups: dict[tuple[str, str, str], list[_Row]] = collections.defaultdict(list)
    for r in rows:
        groups[(r.provider, r.instance_type, r.region)].append(r)
    for (provider, itype, region), members in sorted(groups.items()):
        first = members[0]
        gpu = None
        for mem in first.memory_gib or [None]:  # type: ignore[list-item]
            gpu = resolve_gpu(first.accelerator, mem, itype, first.count, known)
            if gpu:
                break
        if gpu is None:
            report.skipped[f"not a modelled GPU: {first.accelerator}"] += 1
            continue
        ods = [r.od for r in members if r.od]
        od = min(ods) if ods else None
        spots = [r.spot for r in members if r.spot and (od is None or r.spot < od)]
        spot = min(spots) if spots else None
        if od is None and spot is None:
            report.skipped["no usable price"] += 1
            continue
        date, estimated = price_date(provider)
        zones = f"{len(members)} zones; lowest price kept" if len(members) > 1 else ""
        note = "; ".join(x for x in (notes(provider), zones) if x)
        report.offers.append(
            Offer(
                provider=provider,
                tier=first.tier,
                instance_type=itype,
                gpu=gpu,
                source_gpu_name=first.accelerator,
                gpus_per_node=first.count,
                on_demand_usd_per_gpu_hour=round(od / first.count, 6) if od else None,
                interruptible_usd_per_gpu_hour=round(spot / first.count, 6) if spot else None,
                region=region or "default",
                country=country(provider, region) or None,
                price_date=date,
                price_date_estimated=estimated,
                source=source(provider),
                notes=note,
            )
        )


def read_skypilot(
    text: str,
    origin: str,
    gpus: Mapping[str, GpuSpec],
    *,
    provider: str | None,
    price_date: Callable[[str], tuple[dt.date, bool]],
    source: Callable[[str], str] | None = None,
    country: Callable[[str, str], str] = lambda provider, region: "",
    tier: Callable[[str, str], str] = lambda provider, instance_type: "on-demand/spot",
    notes: Callable[[str], str] = lambda provider: "",
    skip: Callable[[str], str] = lambda provider: "",
) -> ImportReport:
    """Offers from a SkyPilot v8 `vms.csv` or the compact multi-cloud extract."""
    reader = csv.DictReader(io.StringIO(text))
    fmt = detect_format(reader.fieldnames or [])
    if fmt == "ftsolve":
        raise CatalogError(f"{origin}: this is an ftsolve offers file, not a SkyPilot catalog")
    if fmt == "skypilot" and not provider:
        raise CatalogError(f"{origin}: a SkyPilot vms.csv does not name its cloud; pass --provider (e.g. lambda)")
    report = ImportReport(offers=[])
    rows: list[_Row] = []
    for line, row in enumerate(reader, start=2):
        where = f"{origin}, row {line}"
        if fmt == "skypilot":
            acc, count_text = row.get("AcceleratorName") or "", row.get("AcceleratorCount") or ""
            od_col, spot_col, itype, region = "Price", "SpotPrice", row["InstanceType"], row["Region"]
            memory = _gpu_memory_gib(row.get("GpuInfo") or "", int(float(count_text or 1)))
            prov = str(provider)
        else:
            acc, count_text = row["accelerator_name"], row["accelerator_count"]
            od_col, spot_col, itype, region = (
                "price_per_hour",
                "spot_price_per_hour",
                row["instance_type"],
                row["region"],
            )
            mem = _float(row.get("accelerator_memory_gib") or "", where, "accelerator_memory_gib")
            memory = [mem] if mem else []
            prov = provider or row["cloud"]
        if not acc.strip():
            report.skipped["no accelerator (CPU instance)"] += 1
            continue
        if skip(prov):
            report.skipped[f"{prov}: {skip(prov)}"] += 1
            continue
        count_col = "AcceleratorCount" if fmt == "skypilot" else "accelerator_count"
        count_f = _float(count_text, where, count_col)
        if not count_f:
            raise CatalogError(f"{where}: field {count_col}: empty or zero")
        od = _float(row.get(od_col) or "", where, od_col)
        spot = _float(row.get(spot_col) or "", where, spot_col)
        if od == 0:
            od = None
        if spot == 0:
            spot = None  # SkyPilot writes 0.00 where a marketplace has no bid price
        rows.append(_Row(prov, tier(prov, itype), itype, acc, int(count_f), memory, od, spot, region, where))
    _group_skypilot(
        rows,
        gpus,
        price_date,
        source or (lambda p: f"{origin} (SkyPilot catalog, {p})"),
        country,
        notes,
        report,
    )
    return report


def read_user_offers(path: Path, gpus: Mapping[str, GpuSpec]) -> ImportReport:
    """A user's own offers in ftsolve's CSV format or a YAML list with the same field names."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read ({exc.strerror})") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        return ImportReport(offers=_parse_yaml_offers(text, str(path), gpus))
    return ImportReport(offers=parse_offers(text, str(path), gpus))


def _parse_yaml_offers(text: str, origin: str, gpus: Mapping[str, GpuSpec]) -> list[Offer]:
    import yaml

    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{origin}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if isinstance(data, dict):
        data = data.get("offers")
    if not isinstance(data, list):
        raise CatalogError(f"{origin}: expected a list of offers (or a mapping with an 'offers' list)")
    offers: list[Offer] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(data, start=1):
        where = f"{origin}, offer {i}"
        if not isinstance(item, dict):
            raise CatalogError(f"{where}: expected a mapping of fields")
        missing = [c for c in OFFER_COLUMNS if c not in item]
        if missing:
            raise CatalogError(f"{where}: missing field(s) {', '.join(missing)}")
        offer = _offer_from_row({k: "" if v is None else str(v) for k, v in item.items()}, where, gpus)
        if offer.key in seen:
            raise CatalogError(f"{where}: duplicate offer {offer.key} (first at offer {seen[offer.key]})")
        seen[offer.key] = i
        offers.append(offer)
    return offers


def offers_to_csv(offers: Iterable[Offer]) -> str:
    out = io.StringIO()
    out.write("# schema_version: 1\n")
    w = csv.DictWriter(out, WRITE_COLUMNS, lineterminator="\n")
    w.writeheader()
    for o in sorted(offers, key=lambda o: o.key):
        row = o.model_dump()
        row["price_date"] = o.price_date.isoformat()
        row["price_date_estimated"] = "true" if o.price_date_estimated else "false"
        w.writerow({c: "" if row.get(c) is None else row[c] for c in WRITE_COLUMNS})
    return out.getvalue()


def merge_into_user_catalog(new: list[Offer], gpus: Mapping[str, GpuSpec], path: Path | None = None) -> Path:
    """Merge offers into the user catalog (same key: the new offer wins) and write it atomically."""
    path = path or user_catalog_path()
    existing: list[Offer] = []
    if path.exists():
        existing = parse_offers(path.read_text(encoding="utf-8"), str(path), gpus)
    keys = {o.key for o in new}
    write_atomically(path, offers_to_csv([o for o in existing if o.key not in keys] + new))
    return path
