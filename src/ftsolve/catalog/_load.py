"""Loading and validating catalog files: bundled hardware and offers, user offer files."""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ftsolve._errors import CatalogError, UnknownCatalogEntry
from ftsolve.catalog._arrays import OfferArrays, offer_arrays
from ftsolve.catalog._columns import ColumnBuilder, OfferTable, cell_rules, encode_chunk, first_duplicate, merge_layers
from ftsolve.catalog._models import MAX_PLAUSIBLE_DISCOUNT, GpuSpec, ModelArch, Offer, echo
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
    "price_kind",
    "interruptible_price_kind",
    "launchable",
    "not_launchable_reason",
    "currency",
    "usd_per_unit",
)


class Catalog(BaseModel):
    """Everything a plan is built from: GPUs, offers and model architectures."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    gpus: Mapping[str, GpuSpec]
    # Columns; an offer becomes an Offer object when it is read (a plan shows a few of a million).
    offers: OfferTable
    models: Mapping[str, ModelArch]

    @field_validator("offers", mode="before")
    @classmethod
    def _as_table(cls, value: Any) -> Any:
        if isinstance(value, OfferTable):
            return value
        items = list(value)
        for item in items:
            if not isinstance(item, Offer):
                raise ValueError(f"expected Offer objects, got {type(item).__name__}")
        return OfferTable.of(items)

    @cached_property
    def arrays(self) -> OfferArrays:
        """Column arrays of the offers (computed once per catalog object)."""
        offers = self.offers
        return offer_arrays(offers if isinstance(offers, OfferTable) else OfferTable.of(offers))

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


def _table(text: str, origin: str) -> tuple[list[str], Iterator[tuple[int, dict[str, str]]]]:
    """The header and the (row number, row) records of a CSV text; errors are one line.

    The csv module parses before comments are dropped, so a line starting with '#' inside a quoted
    multi-line value stays part of that value. Comments are the leading '#' lines (the
    `# schema_version` header) and records whose first line starts with '#' (unquoted). Row numbers
    count records, the header being row 1. Short rows are padded with "" (omitted trailing optional
    columns); a row with more cells than the header is refused, since its values would be misplaced.
    """
    records = _records(text, origin)
    header = [h.strip() for h in next(records, (0, []))[1]]
    if len(set(header)) != len(header):
        dup = next(h for h in header if header.count(h) > 1)
        raise CatalogError(f"{origin}: column {echo(dup)} appears twice in the header")

    def rows() -> Iterator[tuple[int, dict[str, str]]]:
        for number, (_, cells) in enumerate(records, start=2):
            if len(cells) > len(header):
                raise CatalogError(
                    f"{origin}, row {number}: {len(cells)} values for {len(header)} columns; "
                    "quote values that contain commas"
                )
            yield number, dict(zip(header, cells + [""] * (len(header) - len(cells)), strict=True))

    return header, rows()


def _records(
    text: str | Iterable[str], origin: str, inner_comments: bool | None = None
) -> Iterator[tuple[int, list[str]]]:
    """Non-blank, non-comment CSV records, with the physical line each starts on (from a text, or
    from its lines with their line ends). `inner_comments=False` says that no line after the
    leading comments starts with '#' (a text is scanned for it), so lines need no tracking."""
    heads: list[str] = []  # first character of each physical line the reader has pulled
    preamble = 0
    lines = iter(io.StringIO(text) if isinstance(text, str) else text)
    first, offset = "", 0
    for line in lines:
        # Leading comments go before parsing: a quote in one must not open a field.
        if not line.startswith("#"):
            first = line
            break
        preamble += 1
        offset += len(line)
    if inner_comments is None:
        inner_comments = "\n#" in text[offset:] if isinstance(text, str) else True

    def pull() -> Iterator[str]:
        heads.append("")
        yield first
        for line in lines:
            heads.append(line[:1])
            yield line

    source: Iterator[str] = pull() if inner_comments else itertools.chain((first,) if first else (), lines)
    reader = csv.reader(source, strict=True)
    while True:
        start = reader.line_num
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise CatalogError(f"{origin}: not valid CSV at line {preamble + reader.line_num} ({exc})") from None
        if cells and (not inner_comments or heads[start] != "#"):
            yield preamble + start + 1, cells


def _num(value: str) -> float | None:
    return float(value) if value.strip() else None


def load_gpus() -> dict[str, GpuSpec]:
    """The bundled GPU table (gpus.csv, provenance in its `source` column)."""
    gpus = {}
    for _, row in _table(_read_text("gpus.csv"), "bundled gpus.csv")[1]:
        tflops = _num(row["bf16_dense_tflops"]) or _num(row["fp16_dense_tflops"])
        gpus[row["name"]] = GpuSpec(
            name=row["name"],
            display_name=row["display_name"],
            vendor=row["vendor"],
            architecture=row["architecture"],
            memory_gib=float(row["memory_gb"]),
            visible_memory_mib=int(row["visible_memory_mib"]) if row.get("visible_memory_mib") else None,
            visible_memory_source=row.get("visible_memory_source") or "",
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
    return list(read_offer_table(text, origin, gpus))


_CHUNK_ROWS = 32_768


def read_offer_table(
    text: str | Iterable[str], origin: str, gpus: Mapping[str, GpuSpec], inner_comments: bool | None = None
) -> OfferTable:
    """The offers of an offers CSV (a text, or its lines) as columns; errors name the file, row and
    field, and are the first problem in row order, as Offer states it (see catalog/_columns.py)."""
    records = _records(text, origin, inner_comments)
    header = [h.strip() for h in next(records, (0, []))[1]]
    if len(set(header)) != len(header):
        dup = next(h for h in header if header.count(h) > 1)
        raise CatalogError(f"{origin}: column {echo(dup)} appears twice in the header")
    missing = [c for c in OFFER_COLUMNS if c not in header]
    if missing:
        raise CatalogError(f"{origin}: missing column(s) {', '.join(missing)}; expected {', '.join(OFFER_COLUMNS)}")
    rules = cell_rules(gpus, lambda g: not hardware_gaps(g))
    width = len(header)
    known = [(name, i) for i, name in enumerate(header) if name in rules]
    built = ColumnBuilder()
    lines: list[list[int]] = []
    rows: list[list[str]] = []
    numbers: list[int] = []

    def flush() -> None:
        n = len(rows)
        if not n:
            return
        by_column = list(zip(*rows, strict=True))
        chunk = encode_chunk({name: by_column[i] for name, i in known}, n, rules, built.vocabs)
        for i in np.flatnonzero(chunk.doubt).tolist():
            where = f"{origin}, row {numbers[i]}"
            try:
                offer = _offer_from_row(dict(zip(header, rows[i], strict=True)), where, gpus)
            except CatalogError:
                built.add(chunk, i)
                _refuse_duplicate(built.table(), [*lines, numbers[:i]], origin)
                raise
            chunk.set(i, offer, built.vocabs)
        built.add(chunk)
        lines.append(list(numbers))
        rows.clear()
        numbers.clear()

    for number, cells in records:
        if len(cells) != width:
            if len(cells) > width:
                flush()
                _refuse_duplicate(built.table(), lines, origin)
                raise CatalogError(
                    f"{origin}, row {number}: {len(cells)} values for {width} columns; quote values that contain commas"
                )
            cells = cells + [""] * (width - len(cells))
        rows.append(cells)
        numbers.append(number)
        if len(rows) == _CHUNK_ROWS:
            flush()
    flush()
    table = built.table()
    _refuse_duplicate(table, lines, origin)
    return table


def _refuse_duplicate(table: OfferTable, lines: Sequence[Sequence[int]], origin: str) -> None:
    found = first_duplicate(table.keys())
    if found is None:
        return
    flat = [n for part in lines for n in part]
    pos, first = found
    key = "/".join(str(table.values[f][table.codes[f][pos]]) for f in ("provider", "tier", "instance_type", "region"))
    raise CatalogError(f"{origin}, row {flat[pos]}: duplicate offer {echo(key, 80)} (first at row {flat[first]})")


_NUMBER_COLUMNS = (
    "gpus_per_node",
    "on_demand_usd_per_gpu_hour",
    "interruptible_usd_per_gpu_hour",
    "storage_usd_per_gb_month",
    "interruption_rate_per_hour",
)
_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0", "")


FORMULA_STARTS = ("=", "+", "-", "@")


def _offer_from_row(row: Mapping[str, str | None], where: str, gpus: Mapping[str, GpuSpec]) -> Offer:
    """One offer from the text cells of a row; the values are checked by Offer, in one place."""

    def get(col: str) -> str:
        value = (row.get(col) or "").strip()
        # offers_to_csv writes a formula-like text as '=... so that spreadsheets show it as text.
        return value[1:] if value[:1] == "'" and value[1:2] in FORMULA_STARTS else value

    for required in ("provider", "instance_type", "gpus_per_node", "source"):
        if not get(required):
            raise CatalogError(f"{where}: field {required}: empty")
    gpu = get("gpu")
    if gpu not in gpus:
        err = UnknownCatalogEntry("GPU", gpu[:40], list(gpus))
        raise CatalogError(f"{where}: field gpu: {err}")
    missing = hardware_gaps(gpus[gpu])
    if missing:
        raise CatalogError(
            f"{where}: field gpu: {gpu} has no {' or '.join(missing)} in the bundled gpus.csv, so no plan can "
            "use this offer; remove the row"
        )
    estimated = get("price_date_estimated").lower()
    if estimated not in _TRUE + _FALSE:
        raise CatalogError(f"{where}: field price_date_estimated: expected true or false, got {echo(estimated)}")
    launchable = get("launchable").lower() or "true"  # an older file without the column: launchable
    if launchable not in _TRUE + _FALSE:
        raise CatalogError(f"{where}: field launchable: expected true or false, got {echo(launchable)}")
    data: dict[str, object] = {
        "provider": get("provider"),
        "tier": get("tier") or "default",
        "instance_type": get("instance_type"),
        "gpu": gpu,
        "source_gpu_name": get("source_gpu_name") or gpu,
        "billing": get("billing") or "per-hour",
        "region": get("region") or "default",
        "country": get("country") or None,
        "price_date": _date(get("price_date"), where),
        "price_date_estimated": estimated in _TRUE,
        "source": get("source"),
        "notes": get("notes"),
        "price_kind": get("price_kind") or "list",
        "interruptible_price_kind": get("interruptible_price_kind") or None,
        "launchable": launchable in _TRUE,
        "not_launchable_reason": get("not_launchable_reason"),
        # Prices in the row's currency (USD unless stated): Offer converts them at the price date's rate.
        "currency": get("currency").upper() or "USD",
        # Written with the converted prices: present, the prices are already in US dollars.
        "usd_per_unit": get("usd_per_unit") or None,
    }
    # Numbers go to Offer as text: its validators parse them and refuse inf, nan and fractions.
    data |= {col: get(col) or None for col in _NUMBER_COLUMNS}
    try:
        return Offer.model_validate(data)
    except ValidationError as exc:
        field, reason, value = offer_problem(exc)
        message = f"field {field}: {_with_value(reason, value)}" if field else reason
        raise CatalogError(f"{where}: {message}") from None


def hardware_gaps(gpu: GpuSpec) -> list[str]:
    """The hardware fields a plan needs that gpus.csv leaves empty for this GPU (memory is required
    by GpuSpec itself): an offer of such a GPU could be listed but never planned."""
    needed = {"memory_bandwidth_gb_per_s": gpu.memory_bandwidth_gb_per_s, "tensor_tflops": gpu.tensor_tflops}
    return [name for name, value in needed.items() if value is None]


def _with_value(reason: str, value: str) -> str:
    if reason.startswith("is "):
        return f"{value} {reason}"
    head, sep, hint = reason.partition("; ")
    return f"{head}, got {value}{sep}{hint}"


def _date(text: str, where: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise CatalogError(f"{where}: field price_date: {echo(text)} is not a YYYY-MM-DD date") from None


# Reasons by pydantic error type, phrased without the input: the caller adds a capped copy.
_REASONS = {
    "float_parsing": "is not a number",
    "float_type": "is not a number",
    "int_parsing": "is not a whole number",
    "int_parsing_size": "is not a whole number",
    "int_type": "is not a whole number",
    "int_from_float": "must be a whole number",
    "finite_number": "must be a finite number",
    "string_too_short": "must not be empty",
    "date_type": "is not a date",
    "bool_type": "is not true or false",
}


def offer_problem(exc: ValidationError) -> tuple[str, str, str]:
    """(field, reason, capped input) of the first error of an Offer; the field is "" for a rule on the
    whole offer, and the input "" when it is not one value. The reason is one line."""
    first = exc.errors(include_url=False)[0]
    field = ".".join(str(p) for p in first["loc"])
    kind, ctx = first["type"], first.get("ctx") or {}
    if kind in _REASONS:
        reason = _REASONS[kind]
    elif kind == "greater_than":
        reason = "must be positive" if ctx.get("gt") == 0 else f"must be above {ctx.get('gt'):g}"
    elif kind == "greater_than_equal":
        reason = f"must be at least {ctx.get('ge'):g}"
    elif kind == "less_than_equal":
        reason = f"must be at most {ctx.get('le'):g}; check for a typo"
    elif kind == "literal_error":
        reason = f"must be one of {ctx.get('expected')}"
    elif kind == "string_too_long":
        reason = f"must be at most {ctx.get('max_length')} characters"
    else:
        reason = first["msg"].removeprefix("Value error, ")
    value = echo(first["input"]) if field else ""
    return field, " ".join(reason.split()), value


def load_catalog(offers_path: str | Path | None = None, *, replace: bool = False, user: bool = True) -> Catalog:
    """The bundled catalog, then the user catalog (`ftsolve catalog import`), then `offers_path`.

    Later sources override earlier offers with the same provider/tier/instance/region key; with
    `replace=True` the offers of `offers_path` are the only ones.
    """
    from ftsolve.catalog._import import user_catalog_path

    gpus = load_gpus()
    layers: list[OfferTable] = []
    if not (replace and offers_path is not None):
        layers.append(read_offer_table(_read_text("offers.csv"), "bundled offers.csv", gpus))
        user_path = user_catalog_path()
        if user and user_path.exists():
            layers.append(user_offer_table(user_path, gpus))
    if offers_path is not None:
        layers.append(user_offer_table(Path(offers_path), gpus))
    models = {m.name: m for m in PRESETS}
    return Catalog(gpus=gpus, offers=merge_layers(layers), models=models)


def _comment_after_data(path: Path, block: int = 1 << 24) -> bool:
    """Whether a line after the file's first line starts with '#' (a scan of its bytes): without
    one, the reader need not track where each record starts."""
    with open(path, "rb") as f:
        f.readline()
        last = b"\n"
        while data := f.read(block):
            if (last + data).find(b"\n#") >= 0:
                return True
            last = data[-1:]
    return False


def user_offer_table(path: Path, gpus: Mapping[str, GpuSpec]) -> OfferTable:
    """A user's offers file as columns: a CSV is read line by line (a file of a million offers is
    never one string in memory); YAML, and any file the streaming read cannot decode, goes through
    read_user_offers, which reads it whole and says what is wrong with it."""
    from ftsolve._files import OFFERS_FILE_MAX_BYTES
    from ftsolve.catalog._import import read_user_offers

    if path.suffix.lower() not in (".yaml", ".yml"):
        try:
            small = path.stat().st_size <= OFFERS_FILE_MAX_BYTES
            inner = _comment_after_data(path)
            with open(path, encoding="utf-8-sig", newline="\n") as f:
                if small:
                    return read_offer_table(f, str(path), gpus, inner)
        except (OSError, UnicodeDecodeError, MemoryError):
            pass  # read_user_offers states the problem, as it would for any file
    return OfferTable.of(read_user_offers(path, gpus).offers)


def stale_offers(offers: Iterable[Offer], max_age_days: int, today: dt.date | None = None) -> list[Offer]:
    """Offers whose price is older than `max_age_days`."""
    today = today or dt.date.today()
    return [o for o in offers if (today - o.price_date).days > max_age_days]


def deep_discounts(offers: Iterable[Offer], limit: float = MAX_PLAUSIBLE_DISCOUNT) -> list[Offer]:
    """Offers whose interruptible price is more than `limit` (a fraction) under their on-demand price."""
    return [o for o in offers if (o.interruptible_discount or 0.0) > limit]


def _bundled_offers(gpus: Mapping[str, GpuSpec]) -> list[Offer]:
    return parse_offers(_read_text("offers.csv"), "bundled offers.csv", gpus)
