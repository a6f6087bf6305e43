"""Loading and validating catalog files: bundled hardware and offers, user offer files."""

from __future__ import annotations

import contextlib
import csv
import ctypes
import datetime as dt
import hashlib
import importlib
import io
import itertools
import queue
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO, Protocol, cast

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ftsolve._errors import CatalogError, UnknownCatalogEntry
from ftsolve.catalog._arrays import OfferArrays, offer_arrays
from ftsolve.catalog._cache import file_stat, has_entry, identity, read_cached, write_cached
from ftsolve.catalog._columns import (
    Appended,
    ColumnBuilder,
    OfferTable,
    cell_rules,
    distinct_cells,
    encode_chunk,
    first_duplicate,
    has_duplicate,
    merge_layers,
)
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
    """The bundled GPU table (gpus.csv, provenance in its `source` column), a dict of its own."""
    return dict(_bundled_gpus())


# The bundled files are package data: parsed once per process. A library caller estimating in a
# loop (estimate_time without a catalog) read them on every call, ~30 ms each.
@cache
def _bundled_gpus() -> dict[str, GpuSpec]:
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


@cache
def _bundled_table() -> OfferTable:
    """The bundled offers' columns, shared by every catalog: read-only, so no catalog can change
    another's."""
    table = read_offer_table(_read_text("offers.csv"), "bundled offers.csv", _bundled_gpus())
    for array in (*table.codes.values(), *table.numbers.values(), table.gpus_per_node):
        array.flags.writeable = False
    return table


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
        cells = {name: distinct_cells(by_column[i]) for name, i in known}
        chunk = encode_chunk(cells, n, rules, built.vocabs)
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
        layers.append(_bundled_table())
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


def _csv_offer_table(path: Path, gpus: Mapping[str, GpuSpec]) -> OfferTable:
    inner = _comment_after_data(path)
    with open(path, encoding="utf-8-sig", newline="\n") as f:
        return read_offer_table(f, str(path), gpus, inner)


def user_offer_table(path: Path, gpus: Mapping[str, GpuSpec]) -> OfferTable:
    """A user's offers file as columns: a CSV is read line by line (a file of a million offers is
    never one string in memory); YAML, and any file the streaming read cannot decode, goes through
    read_user_offers, which reads it whole and says what is wrong with it."""
    from ftsolve._files import OFFERS_FILE_MAX_BYTES
    from ftsolve.catalog._import import read_user_offers

    if path.suffix.lower() not in (".yaml", ".yml"):
        try:
            size = path.stat().st_size
            if size <= OFFERS_FILE_MAX_BYTES:
                if size >= CACHE_MIN_BYTES:
                    return _large_offer_table(path, gpus, fast=size >= FAST_MIN_BYTES)
                return (size >= FAST_MIN_BYTES and fast_offer_table(path, gpus)) or _csv_offer_table(path, gpus)
        except (OSError, UnicodeDecodeError, MemoryError):
            pass  # read_user_offers states the problem, as it would for any file
    return OfferTable.of(read_user_offers(path, gpus).offers)


def _large_offer_table(path: Path, gpus: Mapping[str, GpuSpec], fast: bool) -> OfferTable:
    """A large file is parsed once; later loads of the same bytes read its columns back. Where the
    cache has no entry for the file, it is not hashed first: the fast reader hashes the bytes as it
    reads them (on its second thread), and the entry's key names exactly the bytes parsed."""
    ident = identity(path, gpus) if has_entry(path) else None
    table = read_cached(ident)
    if table is not None:
        return table
    stat = file_stat(path)  # before the parse: write_cached skips a file changed meanwhile
    content = hashlib.sha256()
    table = fast_offer_table(path, gpus, content) if fast else None
    if table is not None:
        ident = identity(path, gpus, content.hexdigest(), stat)
    else:
        ident = ident or identity(path, gpus, stat=stat)
        table = _csv_offer_table(path, gpus)
    if ident is not None:
        write_cached(path, table, ident)
    return table


# --- large files: pandas' C parser ------------------------------------------------------------
#
# The csv module reads ~70k rows a second, so a million offers took 14 s. pandas (installed with
# OR-Tools) reads them several times faster; its import (~0.3 s) makes it worth it only for large
# files: the two break even at ~25k offers (~7 MB). pandas reads every cell as text (dtype=object;
# as "category" the text is the same, but pandas 3 sorts each chunk's categories, twice as slow),
# and the cells go through the same column checks.

FAST_MIN_BYTES = 8 * 1024 * 1024
CACHE_MIN_BYTES = 8 * 1024 * 1024  # files from this size on are parsed once (catalog/_cache.py)
_FAST_CHUNK_ROWS = 32_768  # rows checked at a time (fewer: more numpy calls per row)
# Rows pandas parses at a time: it makes a chunk's cells column by column, most of the time in
# fetching each cell's first byte, and a small chunk's tokens stay in the CPU's cache for that (a
# 2-core machine parsed a million offers in ~5 s in chunks of 8192 rows, ~7 s in chunks of 32768;
# fewer rows: pandas' own cost per chunk grows). Parsed chunks are checked _FAST_CHUNK_ROWS at once.
_PARSE_ROWS = 8_192
_CHECK_BYTES = 1024 * 1024  # bytes _StrictBytes reads and checks at a time
_MANY_VALUES = ("instance_type", "region", "notes", "source")  # fields that may differ in every offer
_BOM = b"\xef\xbb\xbf"


class Hash(Protocol):
    """What the fast reader feeds the bytes it reads to (a hashlib object)."""

    def update(self, data: bytes, /) -> None: ...


class _Unsure(Exception):
    """The fast reader cannot vouch that it reads the file as read_offer_table would."""


def _byte_set(chars: str) -> NDArray[np.bool_]:
    out = np.zeros(256, dtype=bool)
    out[list(chars.encode())] = True
    return out


_BEFORE_OPENING = _byte_set(',\n"')  # a quote opens a field, or is the second of a doubled one
_AFTER_CLOSING = _byte_set(',\n\r"')  # a quote closes a field, or is the first of a doubled one
_LINE_START_UNSURE = _byte_set("# \t")  # a comment, or a line pandas may skip as blank


class _StrictBytes:
    """A binary file as pandas reads it, checked a block at a time for what pandas' C tokenizer
    reads otherwise than the csv module with strict=True: a quote that neither opens a field,
    closes one nor doubles another (pandas reads `"a"b` as `ab`, the csv module refuses it), a
    carriage return before anything but a line feed (pandas ends the line there), a NUL, a line
    starting with '#' (a comment the csv reader drops), a space or tab (pandas skips a line of
    nothing but blanks), a record longer than the csv module's field limit, and a quote left open
    at the end. Each raises _Unsure; `unsure` keeps why (pandas replaces an exception raised in
    read).

    A second thread reads and checks the blocks ahead (numpy's scans, the reads and the hashing run
    without the GIL, beside pandas' parsing); use it as a context manager, which stops that thread.
    `content`, if given, is fed each block read."""

    def __init__(self, f: BinaryIO, record_limit: int, content: Hash | None = None) -> None:
        self.f = f
        self.record_limit = record_limit
        self.content = content
        self.block = b""  # checked, and handed out from `taken` on
        self.taken = 0
        self.quotes = 0  # read so far: an odd count is inside a quoted field
        self.prev = ord("\n")  # the byte before the next block (the data start on a new line)
        self.closing = False  # the last block ended on a quote that closes a field
        self.offset = 0  # of the next block in the data
        self.record_start = 0  # of the record the next block continues
        self.unsure = ""
        self.marks = self.spare = np.zeros(0, dtype=bool)
        self.ahead: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=8)
        self.stop = threading.Event()
        self.worker = threading.Thread(target=self._read_ahead, name="ftsolve-offers-check", daemon=True)

    def __enter__(self) -> _StrictBytes:
        self.worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        while self.worker.is_alive():  # a worker waiting to hand over a block gets its place
            with contextlib.suppress(queue.Empty):
                self.ahead.get(timeout=0.01)
        self.worker.join()

    def _read_ahead(self) -> None:
        while not self.stop.is_set():
            try:
                block = self.f.read(_CHECK_BYTES)
                if self.content is not None:
                    self.content.update(block)
                self._check(block)
            except _Unsure as exc:
                self.unsure = str(exc)
                self.ahead.put(exc)
                return
            except BaseException as exc:  # handed to the reading thread, which raises it
                self.ahead.put(exc)
                return
            self.ahead.put(block)
            if not block:
                return

    def read(self, size: int = -1) -> bytes:
        if self.taken >= len(self.block):
            got = self.ahead.get()
            if isinstance(got, BaseException):
                raise got
            self.block, self.taken = got, 0
        size = len(self.block) if size < 0 else size
        out = self.block[self.taken : self.taken + size]
        self.taken += len(out)
        return out

    def _check(self, data: bytes) -> None:
        if not data:
            if self.quotes % 2:
                raise _Unsure("a quoted field is not closed")
            self._records(np.array([self.offset], dtype=np.int64))
            return
        a = np.frombuffer(data, dtype=np.uint8)
        if b"\x00" in data:
            raise _Unsure("a NUL byte")
        if (self.prev == ord("\r") and a[0] != ord("\n")) or (b"\r" in data and self._bare_cr(a)):
            raise _Unsure("a carriage return")
        # Line feeds and quotes, in one scan of the block (into buffers kept from block to block).
        if self.marks.shape[0] < a.size:
            self.marks, self.spare = np.empty(a.size, dtype=bool), np.empty(a.size, dtype=bool)
        found, spare = self.marks[: a.size], self.spare[: a.size]
        np.equal(a, ord("\n"), out=found)
        np.logical_or(found, np.equal(a, ord('"'), out=spare), out=found)
        marks = np.flatnonzero(found)
        is_quote = a[marks] == ord('"')
        quotes, newlines = marks[is_quote], marks[~is_quote]
        starts = newlines[newlines + 1 < a.size] + 1
        if _LINE_START_UNSURE[a[starts]].any() or (self.prev == ord("\n") and _LINE_START_UNSURE[a[0]]):
            raise _Unsure("a line starting with '#', a space or a tab")
        if self.closing and not _AFTER_CLOSING[a[0]]:
            raise _Unsure("a quote that does not close its field")
        if quotes.size:
            # Quotes alternate: an even-numbered one (from 0) opens a field or doubles the quote
            # before it, an odd-numbered one closes its field or is doubled by the next.
            opening = (self.quotes + np.arange(quotes.size)) % 2 == 0
            before = np.where(quotes > 0, a[quotes - 1], self.prev)
            inside = quotes + 1 < a.size
            after = a[np.minimum(quotes + 1, a.size - 1)]
            if not _BEFORE_OPENING[before[opening]].all() or not _AFTER_CLOSING[after[~opening & inside]].all():
                raise _Unsure("a quote inside a field")
            self.closing = bool(not opening[-1] and not inside[-1])
        else:
            self.closing = False
        # Record ends: the line feeds after an even number of quotes.
        outside = (self.quotes + np.cumsum(is_quote)[~is_quote]) % 2 == 0
        self._records(self.offset + newlines[outside] + 1)
        self.quotes += quotes.size
        self.prev = int(a[-1])
        self.offset += a.size

    @staticmethod
    def _bare_cr(a: NDArray[np.uint8]) -> bool:
        cr = np.flatnonzero(a[:-1] == ord("\r"))
        return bool((a[cr + 1] != ord("\n")).any())

    def _records(self, ends: NDArray[np.int64]) -> None:
        if ends.size:
            if int(np.diff(ends, prepend=self.record_start).max()) > self.record_limit:
                raise _Unsure("a record longer than the csv module's field limit")
            self.record_start = int(ends[-1])


def _plain_header(f: BinaryIO) -> list[str] | None:
    """The header of an offers file open at its start, read as _records reads it (the leading
    '#' lines skipped); None where it is not one plain line (the csv path reads it then)."""
    if f.read(3) != _BOM:
        f.seek(0)
    for line in iter(f.readline, b""):
        text = line.decode("utf-8")  # UnicodeDecodeError: the csv path reports the file
        if text.startswith("#"):
            continue
        text = text.removesuffix("\n").removesuffix("\r")
        if not text.strip() or any(c in text for c in '"\r\n\x00'):
            return None
        return [h.strip() for h in text.split(",")]
    return None


def _addresses(col: NDArray[np.object_]) -> NDArray[np.intp]:
    """The addresses of a contiguous object array's objects (its buffer read as integers)."""
    n = col.shape[0]
    return np.ctypeslib.as_array((ctypes.c_ssize_t * n).from_address(col.ctypes.data))


def _distinct(pd: Any, parts: Sequence[NDArray[np.object_]]) -> tuple[NDArray[np.object_], NDArray[np.intp]]:
    """(distinct objects, each row's index into them) of a column of str objects, given in parts.
    pandas makes one object per distinct cell of each block it parses, so factorizing the objects'
    addresses (a hash of integers) finds the distinct cells several times faster than hashing and
    comparing the strings, and no object is touched but the distinct ones; encode_chunk looks up
    each object by value."""
    rows, objects = pd.factorize(np.concatenate([_addresses(p) for p in parts]))
    n = rows.shape[0]
    first = np.empty(objects.shape[0], dtype=np.intp)
    first[rows[::-1]] = np.arange(n - 1, -1, -1)  # the last write is each object's first row
    ends = np.cumsum([p.shape[0] for p in parts])
    part = np.searchsorted(ends, first, side="right")
    distinct = np.empty(first.shape[0], dtype=object)
    for j, col in enumerate(parts):
        mine = part == j
        distinct[mine] = col[first[mine] - (ends[j] - col.shape[0])]
    return distinct, rows


def _parsed(chunks: Any, width: int, rows: int) -> Iterator[list[NDArray[np.object_]]]:
    """The columns (object arrays of str, one per header field) of each block of rows pandas
    parses: its C reader's own arrays (pandas' DataFrame and Series around them took a quarter of
    the parse). A block whose fields are not the header's raises: pandas gives a first row longer
    than the header more of them. Its frames could not be trusted for that (they drop one extra
    empty cell of the first row without a warning), so a pandas without that reader raises too."""
    read = getattr(getattr(getattr(chunks, "_engine", None), "_reader", None), "read", None)
    if read is None:
        raise _Unsure("pandas without the C reader the fast reader reads its blocks from")
    while True:
        try:
            block = read(rows)
        except StopIteration:
            return
        columns = [block.get(i) for i in range(len(block))]
        if len(columns) != width or not all(_object_column(c, columns[0]) for c in columns):
            raise _Unsure("a block of rows pandas read otherwise than the header says")
        yield cast("list[NDArray[np.object_]]", columns)


def _object_column(column: object, first: object) -> bool:
    """Whether a column pandas parsed is a contiguous object array as long as the first."""
    return (
        isinstance(column, np.ndarray)
        and isinstance(first, np.ndarray)
        and column.dtype == object
        and column.shape == first.shape
        and column.flags.c_contiguous
    )


def fast_offer_table(path: Path, gpus: Mapping[str, GpuSpec], content: Hash | None = None) -> OfferTable | None:
    """The offers of a CSV file as read_offer_table reads them, parsed by pandas' C parser; None
    where it cannot vouch for that (no pandas, a file the csv module may read otherwise, a row
    Offer refuses, a duplicate offer): read_offer_table then reads the file and words any error.
    `content`, if given, is fed every byte of the file as it is read (it then hashes the bytes the
    table was read from)."""
    try:
        pd = importlib.import_module("pandas")
    except ImportError:
        return None
    try:
        with open(path, "rb") as f:
            header = _plain_header(f)
            if header is None or len(set(header)) != len(header) or not set(OFFER_COLUMNS) <= set(header):
                return None
            if content is not None:  # the bytes up to the data, read again: the header must be theirs
                at = f.tell()
                f.seek(0)
                prefix = f.read(at)
                if _plain_header(io.BytesIO(prefix)) != header:
                    return None
                content.update(prefix)
            with _StrictBytes(f, csv.field_size_limit(), content) as source:
                return _fast_table(pd, source, header, gpus)
    except Exception:  # whatever went wrong, the csv path reads the file and says what
        return None


def _fast_table(pd: Any, source: _StrictBytes, header: list[str], gpus: Mapping[str, GpuSpec]) -> OfferTable | None:
    rules = cell_rules(gpus, lambda g: not hardware_gaps(g))
    known = {i: name for i, name in enumerate(header) if name in rules}
    built = ColumnBuilder()

    def factorize(values: list[object]) -> tuple[NDArray[np.intp], Sequence[object]]:
        column = np.empty(len(values), dtype=object)
        column[:] = values
        at, firsts = pd.factorize(column, use_na_sentinel=False)
        return at, firsts

    # Fields that may hold a distinct value per offer are made distinct once, at the end.
    built.vocabs |= {name: Appended(factorize) for name in _MANY_VALUES}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", pd.errors.ParserWarning)  # any doubt pandas states declines
        # Every column, not `usecols`: with it, pandas drops the cells of a row longer than the header.
        chunks = pd.read_csv(
            source,
            header=None,
            names=list(range(len(header))),
            index_col=False,
            dtype=object,
            na_filter=False,
            keep_default_na=False,
            engine="c",
            encoding="utf-8",
            encoding_errors="strict",
            sep=",",
            quotechar='"',
            doublequote=True,
            escapechar=None,
            skipinitialspace=False,
            skip_blank_lines=True,
            comment=None,
            chunksize=(rows := min(_PARSE_ROWS, _FAST_CHUNK_ROWS)),
            low_memory=False,
        )
        blocks: list[list[NDArray[np.object_]]] = []  # parsed, not yet checked
        n = 0  # their rows
        for block in itertools.chain(_parsed(chunks, len(header), rows), [None]):
            if block is not None:
                blocks.append(block)
                n += block[0].shape[0]
                if n < _FAST_CHUNK_ROWS:
                    continue
            if not blocks:
                break
            cells = {name: _distinct(pd, [b[i] for b in blocks]) for i, name in known.items()}
            blocks.clear()
            chunk = encode_chunk(cells, n, rules, built.vocabs)
            n = 0
            for j in np.flatnonzero(chunk.doubt).tolist():
                row = {name: str(distinct[rows[j]]) for name, (distinct, rows) in cells.items()}
                try:
                    offer = _offer_from_row(row, "", gpus)
                except CatalogError:
                    return None
                chunk.set(j, offer, built.vocabs)
            built.add(chunk)
    if source.unsure:
        return None
    table = built.table()
    return None if has_duplicate(table.keys()) else table


def stale_offers(offers: Iterable[Offer], max_age_days: int, today: dt.date | None = None) -> list[Offer]:
    """Offers whose price is older than `max_age_days`."""
    today = today or dt.date.today()
    return [o for o in offers if (today - o.price_date).days > max_age_days]


def deep_discounts(offers: Iterable[Offer], limit: float = MAX_PLAUSIBLE_DISCOUNT) -> list[Offer]:
    """Offers whose interruptible price is more than `limit` (a fraction) under their on-demand price."""
    return [o for o in offers if (o.interruptible_discount or 0.0) > limit]


def _bundled_offers(gpus: Mapping[str, GpuSpec]) -> list[Offer]:
    return parse_offers(_read_text("offers.csv"), "bundled offers.csv", gpus)
