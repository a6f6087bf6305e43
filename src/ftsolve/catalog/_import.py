"""Importing offers: SkyPilot catalog files, the compact multi-cloud extract, and a user's own
CSV or YAML, written atomically into the user catalog that plans read next to the bundled one."""

from __future__ import annotations

import ast
import collections
import contextlib
import csv
import datetime as dt
import io
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ftsolve._errors import CatalogError, UnsafeOutput
from ftsolve._files import (
    OFFERS_FILE_MAX_BYTES,
    cleanup_stale_temporaries,
    exclusive_lock,
    load_yaml,
    read_text_file,
    write_atomically,
)
from ftsolve.catalog._load import (
    FORMULA_STARTS,
    OFFER_COLUMNS,
    _offer_from_row,
    _table,
    hardware_gaps,
    offer_problem,
    parse_offers,
)
from ftsolve.catalog._models import GpuSpec, Offer, PriceKind, echo
from ftsolve.catalog._names import resolve_gpu
from ftsolve.catalog._providers import MARKET_PRICED

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
    "price_kind",
    "interruptible_price_kind",
    "billing",
    "region",
    "country",
    "launchable",
    "not_launchable_reason",
    "storage_usd_per_gb_month",
    "interruption_rate_per_hour",
    "price_date",
    "price_date_estimated",
    "source",
    "notes",
    "currency",
    "usd_per_unit",
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


def detect_format(header: Iterable[str], origin: str = "") -> str:
    cols = set(header)
    if set(SKYPILOT_V8_COLUMNS) <= cols:
        return "skypilot"
    if set(EXTRACT_COLUMNS) <= cols:
        return "skypilot-extract"
    if set(OFFER_COLUMNS) <= cols:
        return "ftsolve"
    raise CatalogError(
        f"{origin + ': ' if origin else ''}unrecognised columns: expected a SkyPilot v8 vms.csv "
        "(InstanceType, AcceleratorName, ...), the compact extract (cloud, instance_type, ...) or ftsolve's "
        f"offers format ({', '.join(OFFER_COLUMNS)})"
    )


def read_offers_text(path: Path) -> str:
    """The text of an offers file (size-limited, strict UTF-8; errors are one line)."""
    return read_text_file(path, "offers file", CatalogError, OFFERS_FILE_MAX_BYTES)


def offers_format(text: str, path: Path) -> str:
    """ "yaml" for a .yaml/.yml file, else the CSV format its header names (see detect_format)."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return "yaml"
    return detect_format(_table(text, str(path))[0], str(path))


def _plain(text: str) -> str:
    """File text as a skip reason may show it: one line, at most 40 characters."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:40])


def _float(value: str, where: str, col: str) -> float | None:
    value = (value or "").strip()
    if not value:
        return None
    try:
        out = float(value)
    except ValueError:
        raise CatalogError(f"{where}: field {col}: {echo(value)} is not a number") from None
    # float() reads "nan", "inf" and 400-digit numbers (as inf) without complaint.
    if not math.isfinite(out):
        raise CatalogError(f"{where}: field {col}: must be a finite number, got {echo(value)}")
    if out < 0:
        raise CatalogError(f"{where}: field {col}: must not be negative, got {echo(value)}")
    return out


def _gpu_count(value: str, where: str, col: str) -> int | None:
    """GPUs per instance; None for a fractional count (a share of one GPU, e.g. Azure's NVads A10)."""
    count = _float(value, where, col)
    if not count:
        raise CatalogError(f"{where}: field {col}: empty or zero")
    return int(count) if count.is_integer() else None


_GPU_INFO_MAX_CHARS = 4_096  # real GpuInfo literals are ~150 characters


def _gpu_memory_gib(gpu_info: str, count: int) -> list[float] | None:
    """Per-GPU memory candidates from SkyPilot's GpuInfo (a Python literal; clouds disagree on
    whether SizeInMiB is per GPU or per instance, so both readings are offered). [] when there is
    none, None when it cannot be read (the GPU is then resolved by its name alone)."""
    if not gpu_info.strip():
        return []
    if len(gpu_info) > _GPU_INFO_MAX_CHARS:
        return None
    try:
        info = ast.literal_eval(gpu_info)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(info, dict):
        return None
    gpus = info.get("Gpus") or [{}]
    if not (isinstance(gpus, list) and isinstance(gpus[0], dict)):
        return None
    memory = gpus[0].get("MemoryInfo") or {}
    if not isinstance(memory, dict):
        return None
    mib = memory.get("SizeInMiB") or info.get("TotalGpuMemoryInMiB")
    if not mib:
        return []
    if isinstance(mib, bool) or not isinstance(mib, (int, float)):
        return None
    try:
        gib = float(mib) / 1024.0
    except OverflowError:
        return None
    if not (math.isfinite(gib) and gib > 0):
        return None
    return [gib, gib / count]


@dataclass(frozen=True)
class _Row:
    provider: str
    tier: str
    instance_type: str
    accelerator: str
    count: int
    memory_gib: list[float] | None  # None: GpuInfo present but unreadable
    od: float | None
    spot: float | None
    region: str
    where: str


@dataclass(frozen=True)
class _Columns:
    accelerator: str
    count: str
    od: str
    spot: str
    instance_type: str
    region: str


_COLUMNS = {
    "skypilot": _Columns("AcceleratorName", "AcceleratorCount", "Price", "SpotPrice", "InstanceType", "Region"),
    "skypilot-extract": _Columns(
        "accelerator_name", "accelerator_count", "price_per_hour", "spot_price_per_hour", "instance_type", "region"
    ),
}


def _read_row(
    fmt: str,
    row: Mapping[str, str],
    where: str,
    provider: str | None,
    tier: Callable[[str, str], str],
    skip: Callable[[str], str],
) -> _Row | str:
    """One row of a SkyPilot file, or why it is skipped. A row ftsolve cannot model is skipped and
    counted; a value that is not a number at all refuses the file (CatalogError), as the file is broken."""
    c = _COLUMNS[fmt]
    acc, itype = row.get(c.accelerator, "").strip(), row.get(c.instance_type, "").strip()
    prov = str(provider) if fmt == "skypilot" else (provider or row.get("cloud", "").strip())
    if not acc:
        return "no accelerator (CPU instance)"
    if skip(prov):
        return f"{_plain(prov)}: {skip(prov)}"
    count = _gpu_count(row.get(c.count, ""), where, c.count)
    if count is None:
        return "fractional GPU count (a share of one GPU)"
    od = _float(row.get(c.od, ""), where, c.od) or None
    spot = _float(row.get(c.spot, ""), where, c.spot) or None  # SkyPilot writes 0.00 for "no bid price"
    if fmt == "skypilot":
        memory = _gpu_memory_gib(row.get("GpuInfo", ""), count)
    else:
        mem = _float(row.get("accelerator_memory_gib", ""), where, "accelerator_memory_gib")
        memory = [mem] if mem else []
    region = row.get(c.region, "").strip()
    return _Row(prov, tier(prov, itype), itype, acc, count, memory, od, spot, region, where)


@dataclass(frozen=True)
class _Context:
    """How a SkyPilot import dates, sources, locates and annotates each provider's offers."""

    price_date: Callable[[str], tuple[dt.date, bool]]
    source: Callable[[str], str]
    country: Callable[[str, str], str]
    notes: Callable[[str], str]


def _group_offer(members: list[_Row], gpus: Mapping[str, GpuSpec], ctx: _Context) -> Offer | str:
    """The offer of one (provider, instance type, region): lowest on-demand price over zones and the
    lowest spot price strictly below it (spot equal to on-demand means no spot capacity); or why not."""
    first = members[0]
    known = {name: g.memory_gib for name, g in gpus.items()}
    gpu = None
    candidates: list[float | None] = list(first.memory_gib or []) or [None]
    for mem in candidates:
        gpu = resolve_gpu(first.accelerator, mem, first.instance_type, first.count, known)
        if gpu:
            break
    if gpu is None:
        return f"not a modelled GPU: {_plain(first.accelerator)}"
    missing = hardware_gaps(gpus[gpu])
    if missing:
        return f"{gpu}: no {' or '.join(missing)} in gpus.csv"
    ods = [r.od for r in members if r.od]
    od = min(ods) if ods else None
    spots = [r.spot for r in members if r.spot and (od is None or r.spot < od)]
    spot = min(spots) if spots else None
    if od is None and spot is None:
        return "no usable price"
    date, estimated = ctx.price_date(first.provider)
    od_kind, spot_kind = skypilot_price_kinds(first.provider, estimated)
    zones = f"{len(members)} zones; lowest price kept" if len(members) > 1 else ""
    try:
        return Offer(
            provider=first.provider,
            tier=first.tier,
            instance_type=first.instance_type,
            gpu=gpu,
            source_gpu_name=first.accelerator,
            gpus_per_node=first.count,
            on_demand_usd_per_gpu_hour=round(od / first.count, 6) if od else None,
            interruptible_usd_per_gpu_hour=round(spot / first.count, 6) if spot else None,
            region=first.region or "default",
            country=ctx.country(first.provider, first.region) or None,
            price_date=date,
            price_date_estimated=estimated,
            source=ctx.source(first.provider),
            notes="; ".join(x for x in (ctx.notes(first.provider), zones) if x),
            price_kind=od_kind,
            interruptible_price_kind=spot_kind,
            launchable=bool(first.region),
            not_launchable_reason="" if first.region else "the SkyPilot catalog row names no region",
        )
    except ValidationError as exc:
        field, reason, _ = offer_problem(exc)
        return f"{field}: {reason}" if field else reason


def skypilot_price_kinds(provider: str, date_estimated: bool) -> tuple[PriceKind, PriceKind]:
    """(on-demand kind, interruptible kind) of a SkyPilot catalog row.

    A SkyPilot fetcher reads the provider's price list or API, so on-demand prices are list prices,
    except on marketplaces and brokers (MARKET_PRICED) whose listings are market prices. Spot prices
    are market prices read when the catalog was fetched. A market price whose date is not known
    (SkyPilot files carry none) only estimates what one pays today.
    """

    def dated(kind: PriceKind) -> PriceKind:
        return "estimate" if kind == "observed" and date_estimated else kind

    return dated("observed" if provider in MARKET_PRICED else "list"), dated("observed")


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
    header, records = _table(text, origin)
    fmt = detect_format(header, origin)
    if fmt == "ftsolve":
        raise CatalogError(f"{origin}: this is an ftsolve offers file, not a SkyPilot catalog")
    if fmt == "skypilot" and not provider:
        raise CatalogError(f"{origin}: a SkyPilot vms.csv does not name its cloud; pass --provider (e.g. lambda)")
    report = ImportReport(offers=[])
    groups: dict[tuple[str, str, str], list[_Row]] = collections.defaultdict(list)
    for line, row in records:
        parsed = _read_row(fmt, row, f"{origin}, row {line}", provider, tier, skip)
        if isinstance(parsed, str):
            report.skipped[parsed] += 1
        else:
            groups[(parsed.provider, parsed.instance_type, parsed.region)].append(parsed)
    ctx = _Context(price_date, source or (lambda p: f"{origin} (SkyPilot catalog, {p})"), country, notes)
    for _, members in sorted(groups.items()):
        offer = _group_offer(members, gpus, ctx)
        if isinstance(offer, str):
            report.skipped[offer] += 1
        else:
            report.offers.append(offer)
    unreadable = sum(r.memory_gib is None for rows in groups.values() for r in rows)
    if unreadable:
        report.warnings.append(f"{unreadable} rows have an unreadable GpuInfo; their GPUs were matched by name")
    return report


def read_user_offers(path: Path, gpus: Mapping[str, GpuSpec]) -> ImportReport:
    """A user's own offers in ftsolve's CSV format or a YAML list with the same field names."""
    return user_offers_from_text(read_offers_text(path), path, gpus)


def user_offers_from_text(text: str, path: Path, gpus: Mapping[str, GpuSpec]) -> ImportReport:
    """The offers of a user's file already read: YAML by its suffix, else ftsolve's CSV."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return ImportReport(offers=_parse_yaml_offers(text, str(path), gpus))
    return ImportReport(offers=parse_offers(text, str(path), gpus))


def _parse_yaml_offers(text: str, origin: str, gpus: Mapping[str, GpuSpec]) -> list[Offer]:
    data: Any = load_yaml(text, origin, CatalogError)
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
        offer = _offer_from_row(_yaml_cells(item, where), where, gpus)
        if offer.key in seen:
            raise CatalogError(f"{where}: duplicate offer {echo(offer.key, 80)} (first at offer {seen[offer.key]})")
        seen[offer.key] = i
        offers.append(offer)
    return offers


def _yaml_cells(item: Mapping[Any, Any], where: str) -> dict[str, str]:
    """A YAML offer as the text cells of a CSV row, so both formats pass the same checks."""
    cells: dict[str, str] = {}
    for key, value in item.items():
        name = str(key)
        if isinstance(value, (dict, list)):
            raise CatalogError(f"{where}: field {echo(name)}: expected one value, not a list or mapping")
        if isinstance(value, bool) and name == "country":
            # YAML 1.1 reads a bare NO (Norway) as false.
            raise CatalogError(f"{where}: field country: YAML read a bare code as true/false; quote it, e.g. 'NO'")
        cells[name] = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return cells


def offers_to_csv(offers: Iterable[Offer]) -> str:
    """ftsolve's offers CSV, the format parse_offers reads back unchanged."""
    out = io.StringIO()
    out.write("# schema_version: 1\n")
    w = csv.DictWriter(out, WRITE_COLUMNS, lineterminator="\n")
    # A row starting with '#' would read back as a comment; quoting its cells keeps it data.
    quoted = csv.DictWriter(out, WRITE_COLUMNS, lineterminator="\n", quoting=csv.QUOTE_ALL)
    w.writeheader()
    for o in sorted(offers, key=lambda o: o.key):
        row = o.model_dump()
        row["price_date"] = o.price_date.isoformat()
        row["price_date_estimated"] = "true" if o.price_date_estimated else "false"
        row["launchable"] = "true" if o.launchable else "false"
        (quoted if o.provider.startswith("#") else w).writerow(
            {c: "" if row.get(c) is None else formula_safe(row[c]) for c in WRITE_COLUMNS}
        )
    return out.getvalue()


def formula_safe(value: object) -> object:
    """A text cell a spreadsheet would run as a formula (=, +, -, @ first) gets a leading
    apostrophe (OWASP's CSV-injection rule); parse_offers removes it again. Numbers stay."""
    if isinstance(value, str) and value[:1] in FORMULA_STARTS:
        return "'" + value
    return value


def merge_into_user_catalog(
    new: list[Offer], gpus: Mapping[str, GpuSpec], path: Path | None = None, *, keep_newer: bool = False
) -> Path:
    """Merge offers into the user catalog (same key: the new offer wins) and write it atomically.
    With `keep_newer`, a stored offer whose price is dated after the new one's stays (the newest
    price wins: `catalog update` from an old local copy must not undo a later import).

    Read, merge and write run under an exclusive lock: without it, two concurrent imports each read
    the old catalog and the later write dropped the other's offers.
    """
    path = path or user_catalog_path()
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(exclusive_lock(path))
        except OSError as exc:
            raise UnsafeOutput(f"{path}: cannot lock the user catalog ({exc.strerror or type(exc).__name__})") from None
        # Only a writer killed before its rename leaves these; under the lock none is in progress.
        cleanup_stale_temporaries(path)
        existing = read_user_offers(path, gpus).offers if path.exists() else []
        if keep_newer:
            dates = {o.key: o.price_date for o in existing}
            new = [o for o in new if o.key not in dates or dates[o.key] <= o.price_date]
        keys = {o.key for o in new}
        write_atomically(path, offers_to_csv([o for o in existing if o.key not in keys] + new))
    return path
