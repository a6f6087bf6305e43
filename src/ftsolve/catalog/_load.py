"""Loading and validating catalog files: bundled hardware and offers, user offer files."""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterable, Mapping
from functools import cached_property
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from ftsolve._errors import CatalogError, UnknownCatalogEntry
from ftsolve.catalog._arrays import OfferArrays
from ftsolve.catalog._models import GpuSpec, ModelArch, Offer
from ftsolve.catalog._presets import PRESETS

OFFER_COLUMNS = (
    "provider",
    "tier",
    "instance_type",
    "gpu",
    "gpus_per_node",
    "on_demand_usd_per_gpu_hour",
    "interruptible_usd_per_gpu_hour",
    "region",
    "price_date",
    "source",
)
_OPTIONAL_OFFER_COLUMNS = (
    "source_gpu_name",
    "billing",
    "country",
    "storage_usd_per_gb_month",
    "interruption_rate_per_hour",
    "price_date_estimated",
    "notes",
)


class Catalog(BaseModel):
    """Everything a plan is built from: GPUs, offers and model architectures."""

    model_config = ConfigDict(frozen=True)

    gpus: Mapping[str, GpuSpec]
    offers: tuple[Offer, ...]
    models: Mapping[str, ModelArch]

    @cached_property
    def arrays(self) -> OfferArrays:
        """Column arrays of the offers (computed once per catalog object)."""
        return OfferArrays.of(self.offers)

    def gpu(self, name: str) -> GpuSpec:
        try:
            return self.gpus[name]
        except KeyError:
            raise UnknownCatalogEntry("GPU", name, list(self.gpus)) from None

    def model(self, name: str) -> ModelArch:
        try:
            return self.models[name.lower()]
        except KeyError:
            raise UnknownCatalogEntry("model", name, list(self.models)) from None


def _read_text(name: str) -> str:
    return resources.files("ftsolve.catalog").joinpath("data").joinpath(name).read_text(encoding="utf-8")


def _rows(text: str) -> Iterable[dict[str, str]]:
    lines = (line for line in io.StringIO(text) if not line.startswith("#"))
    return csv.DictReader(lines)


def _num(value: str) -> float | None:
    return float(value) if value.strip() else None


def load_gpus() -> dict[str, GpuSpec]:
    """The bundled GPU table (gpus.csv, provenance in its `source` column)."""
    gpus = {}
    for row in _rows(_read_text("gpus.csv")):
        tflops = _num(row["bf16_dense_tflops"]) or _num(row["fp16_dense_tflops"])
        gpus[row["name"]] = GpuSpec(
            name=row["name"],
            display_name=row["display_name"],
            vendor=row["vendor"],
            architecture=row["architecture"],
            memory_gib=float(row["memory_gb"]),
            memory_bandwidth_gb_per_s=_num(row["memory_bandwidth_gbps"]),
            tensor_tflops=tflops,
            supports_bf16=row["supports_bf16"] == "true",
            flash_attention_2=row["flash_attention_2"] == "true",
            form_factor=row["form_factor"],
            interconnect=row["intra_node_interconnect"],
            nvlink_bandwidth_gb_per_s=_num(row["nvlink_bandwidth_gbps"]),
            skypilot_names=tuple(n for n in row["skypilot_names"].split(";") if n),
            source=row["source"],
        )
    return gpus


def parse_offers(text: str, origin: str, gpus: Mapping[str, GpuSpec]) -> list[Offer]:
    """Parse an offers CSV in ftsolve's own format; errors name the file, row and field."""
    reader = _rows(text)
    header = reader.fieldnames or []  # type: ignore[attr-defined]
    missing = [c for c in OFFER_COLUMNS if c not in header]
    if missing:
        raise CatalogError(f"{origin}: missing column(s) {', '.join(missing)}; expected {', '.join(OFFER_COLUMNS)}")
    offers: list[Offer] = []
    seen: dict[str, int] = {}
    for line, row in enumerate(reader, start=2):
        offers.append(_offer_from_row(row, f"{origin}, row {line}", gpus))
        key = offers[-1].key
        if key in seen:
            raise CatalogError(f"{origin}, row {line}: duplicate offer {key} (first at row {seen[key]})")
        seen[key] = line
    return offers


def _offer_from_row(row: Mapping[str, str | None], where: str, gpus: Mapping[str, GpuSpec]) -> Offer:
    def get(col: str) -> str:
        return (row.get(col) or "").strip()

    for col in (
        "on_demand_usd_per_gpu_hour",
        "interruptible_usd_per_gpu_hour",
        "storage_usd_per_gb_month",
        "interruption_rate_per_hour",
        "gpus_per_node",
    ):
        value = get(col)
        if value:
            try:
                number = float(value)
            except ValueError:
                raise CatalogError(f"{where}: field {col}: {value!r} is not a number") from None
            if col != "interruption_rate_per_hour" and number <= 0:
                raise CatalogError(f"{where}: field {col}: must be positive, got {value}")
    date_text = get("price_date")
    try:
        price_date = dt.date.fromisoformat(date_text)
    except ValueError:
        raise CatalogError(f"{where}: field price_date: {date_text!r} is not a YYYY-MM-DD date") from None
    gpu = get("gpu")
    if gpu not in gpus:
        err = UnknownCatalogEntry("GPU", gpu, list(gpus))
        raise CatalogError(f"{where}: field gpu: {err}")
    data: dict[str, object] = {
        "provider": get("provider"),
        "tier": get("tier") or "default",
        "instance_type": get("instance_type"),
        "gpu": gpu,
        "source_gpu_name": get("source_gpu_name") or gpu,
        "gpus_per_node": int(float(get("gpus_per_node") or "0")),
        "on_demand_usd_per_gpu_hour": _num(get("on_demand_usd_per_gpu_hour")),
        "interruptible_usd_per_gpu_hour": _num(get("interruptible_usd_per_gpu_hour")),
        "billing": get("billing") or "per-hour",
        "region": get("region") or "default",
        "country": get("country") or None,
        "storage_usd_per_gb_month": _num(get("storage_usd_per_gb_month")),
        "interruption_rate_per_hour": _num(get("interruption_rate_per_hour")),
        "price_date": price_date,
        "price_date_estimated": get("price_date_estimated") == "true",
        "source": get("source"),
        "notes": get("notes"),
    }
    for required in ("provider", "instance_type", "source"):
        if not data[required]:
            raise CatalogError(f"{where}: field {required}: empty")
    try:
        return Offer.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "row"
        raise CatalogError(f"{where}: field {field}: {first['msg']}") from None


def load_catalog(offers_path: str | Path | None = None, *, replace: bool = False, user: bool = True) -> Catalog:
    """The bundled catalog, then the user catalog (`ftsolve catalog import`), then `offers_path`.

    Later sources override earlier offers with the same provider/tier/instance/region key; with
    `replace=True` the offers of `offers_path` are the only ones.
    """
    from ftsolve.catalog._import import read_user_offers, user_catalog_path

    gpus = load_gpus()
    layers: list[list[Offer]] = []
    if not (replace and offers_path is not None):
        layers.append(_bundled_offers(gpus))
        user_path = user_catalog_path()
        if user and user_path.exists():
            layers.append(read_user_offers(user_path, gpus).offers)
    if offers_path is not None:
        layers.append(read_user_offers(Path(offers_path), gpus).offers)
    merged: dict[str, Offer] = {}
    for layer in layers:
        for o in layer:
            merged.pop(o.key, None)
            merged[o.key] = o
    models = {m.name: m for m in PRESETS}
    return Catalog(gpus=gpus, offers=tuple(merged.values()), models=models)


def _bundled_offers(gpus: Mapping[str, GpuSpec]) -> list[Offer]:
    return parse_offers(_read_text("offers.csv"), "bundled offers.csv", gpus)


def stale_offers(offers: Iterable[Offer], max_age_days: int, today: dt.date | None = None) -> list[Offer]:
    """Offers whose price is older than `max_age_days`."""
    today = today or dt.date.today()
    return [o for o in offers if (today - o.price_date).days > max_age_days]
