"""Offers as columns: what a catalog holds, read from CSV without a pydantic object per row.

A catalog of a million offers is a million rows the solver reads as arrays (OfferArrays); only the
few offers a plan shows become `Offer` objects. `OfferTable` is that column store: each field of
an offer is an array of codes into the field's distinct values (numbers: a float array, nan for
None), and indexing it builds the `Offer` from values that were already checked.

The checks are Offer's own rules, read from its field declarations and the shared functions of
_models.py (ONE_LINE_FIELDS, country_code, latest_price_date, to_usd). A cell the column checks
are not sure of, a row that breaks a rule between fields, or a row with any other doubt goes
through `Offer` itself (_load._offer_from_row), so a refused row gets the one message Offer gives,
and a row Offer accepts keeps Offer's values: the column checks may be stricter, never looser.
"""

from __future__ import annotations

import datetime as dt
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import annotated_types
import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog._currency import CURRENCIES, rate_on
from ftsolve.catalog._models import (
    ONE_LINE_FIELDS,
    PRICE_KINDS,
    Billing,
    GpuSpec,
    Offer,
    country_code,
    is_one_line,
    latest_price_date,
    to_usd,
)

F = NDArray[np.float64]
I = NDArray[np.int64]
Codes = NDArray[np.int32]

# Offer fields kept as floats (nan: None); gpus_per_node is an int64 column; the rest are coded.
FLOAT_FIELDS = (
    "on_demand_usd_per_gpu_hour",
    "interruptible_usd_per_gpu_hour",
    "storage_usd_per_gb_month",
    "interruption_rate_per_hour",
    "usd_per_unit",
)
CODED_FIELDS = tuple(f for f in Offer.model_fields if f not in FLOAT_FIELDS and f != "gpus_per_node")
KEY_FIELDS = ("provider", "tier", "instance_type", "region")  # Offer.key, in its order


class _Vocab:
    """The distinct values of one field while a table is built, each with its code."""

    def __init__(self, values: Iterable[object] = ()) -> None:
        self.values: list[object] = []
        self.index: dict[object, int] = {}
        for v in values:
            self.code(v)

    def code(self, value: object) -> int:
        # One field's values have one type (str, bool, date, or None), so True never meets 1.
        found = self.index.get(value)
        if found is None:
            found = self.index[value] = len(self.values)
            self.values.append(value)
        return found


@dataclass(frozen=True, eq=False)
class OfferTable(Sequence[Offer]):
    """Offers as columns, in catalog order; a read-only sequence of `Offer` built on access."""

    codes: Mapping[str, Codes]  # per CODED_FIELDS name
    values: Mapping[str, tuple[object, ...]]  # the distinct values the codes point to
    numbers: Mapping[str, F]  # per FLOAT_FIELDS name, nan for None
    gpus_per_node: I
    _made: dict[int, Offer] = field(default_factory=dict, repr=False)  # offers already built

    @classmethod
    def of(cls, offers: Iterable[Offer]) -> OfferTable:
        """The columns of offers already made (their objects are kept: indexing returns them)."""
        if isinstance(offers, OfferTable):
            return offers
        items = list(offers)
        vocabs = {name: _Vocab() for name in CODED_FIELDS}
        codes = {
            name: np.fromiter((v.code(getattr(o, name)) for o in items), np.int32, len(items))
            for name, v in vocabs.items()
        }
        numbers = {
            name: np.array([np.nan if getattr(o, name) is None else getattr(o, name) for o in items], np.float64)
            for name in FLOAT_FIELDS
        }
        gpn = np.array([o.gpus_per_node for o in items], dtype=np.int64)
        values = {name: tuple(v.values) for name, v in vocabs.items()}
        return cls(codes, values, numbers, gpn, dict(enumerate(items)))

    def __len__(self) -> int:
        return int(self.gpus_per_node.shape[0])

    @overload
    def __getitem__(self, i: int) -> Offer: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[Offer, ...]: ...
    def __getitem__(self, i: int | slice) -> Offer | tuple[Offer, ...]:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        n = len(self)
        j = int(i) + n if int(i) < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError("offer index out of range")
        made = self._made.get(j)
        if made is None:
            made = self._made[j] = self._build(j)
        return made

    def __iter__(self) -> Iterator[Offer]:
        # Not kept: iterating a million offers must not keep a million objects alive.
        for j in range(len(self)):
            made = self._made.get(j)
            yield made if made is not None else self._build(j)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OfferTable({len(self)} offers)"

    def _build(self, j: int) -> Offer:
        data: dict[str, Any] = {name: self.values[name][self.codes[name][j]] for name in CODED_FIELDS}
        for name in FLOAT_FIELDS:
            x = float(self.numbers[name][j])
            data[name] = None if x != x else x
        data["gpus_per_node"] = int(self.gpus_per_node[j])
        # Every value passed Offer's rules when the table was read (or came from an Offer).
        return Offer.model_construct(**data)

    def column(self, name: str) -> list[object]:
        """One coded field's value per offer."""
        values = self.values[name]
        return [values[c] for c in self.codes[name].tolist()]

    def keys(self) -> NDArray[np.int64]:
        """An integer per offer, equal for offers with one `Offer.key` (within this table)."""
        cols = [self.codes[name].astype(np.int64) for name in KEY_FIELDS]
        dims = tuple(max(len(self.values[name]), 1) for name in KEY_FIELDS)
        if float(np.prod(np.array(dims, dtype=np.float64))) < 2.0**62:
            out: I = np.ravel_multi_index(tuple(cols), dims).astype(np.int64)
            return out
        return np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)

    def take(self, idx: I) -> OfferTable:
        """The offers `idx`, in that order (the value lists are shared)."""
        idx = np.asarray(idx, dtype=np.int64)
        made = {k: self._made[int(j)] for k, j in enumerate(idx.tolist()) if int(j) in self._made}
        return OfferTable(
            {n: c[idx] for n, c in self.codes.items()},
            self.values,
            {n: c[idx] for n, c in self.numbers.items()},
            self.gpus_per_node[idx],
            made,
        )


def concat(tables: Sequence[OfferTable]) -> OfferTable:
    """The offers of several tables, in order, with one list of values per field."""
    if len(tables) == 1:
        return tables[0]
    codes: dict[str, Codes] = {}
    values: dict[str, tuple[object, ...]] = {}
    for name in CODED_FIELDS:
        vocab = _Vocab()
        parts = []
        for t in tables:
            remap = np.array([vocab.code(v) for v in t.values[name]], dtype=np.int32)
            parts.append(remap[t.codes[name]] if remap.size else t.codes[name])
        codes[name] = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
        values[name] = tuple(vocab.values)
    numbers = {n: np.concatenate([t.numbers[n] for t in tables]) for n in FLOAT_FIELDS}
    gpn = np.concatenate([t.gpus_per_node for t in tables])
    made: dict[int, Offer] = {}
    start = 0
    for t in tables:
        made |= {start + j: o for j, o in t._made.items()}
        start += len(t)
    return OfferTable(codes, values, numbers, gpn, made)


def merge_layers(tables: Sequence[OfferTable]) -> OfferTable:
    """Later layers override earlier offers with the same key; an overriding offer takes the place
    of its last occurrence (the order a dict gets from pop-then-insert)."""
    every = concat(tables)
    keys = every.keys()
    n = keys.shape[0]
    if n == 0:
        return every
    _, last_rev = np.unique(keys[::-1], return_index=True)
    keep = np.sort(n - 1 - last_rev)
    return every if keep.shape[0] == n else every.take(keep)


def first_duplicate(keys: I) -> tuple[int, int] | None:
    """(position, position of its first occurrence) of the first offer whose key came before."""
    if keys.shape[0] < 2:
        return None
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    firsts = first[inverse.reshape(-1)]
    later = np.flatnonzero(firsts != np.arange(keys.shape[0]))
    if later.size == 0:
        return None
    pos = int(later[0])
    return pos, int(firsts[pos])


# --- the column checks: Offer's rules, read from its declarations ---------------------------------


def _bounds(name: str) -> tuple[float, bool, float]:
    """(lower bound, whether it is excluded, upper bound) of a number field of Offer."""
    lo, strict, hi = -np.inf, False, np.inf
    for m in Offer.model_fields[name].metadata:
        if isinstance(m, annotated_types.Gt):
            lo, strict = float(typing.cast(float, m.gt)), True
        elif isinstance(m, annotated_types.Ge):
            lo, strict = float(typing.cast(float, m.ge)), False
        elif isinstance(m, annotated_types.Le):
            hi = float(typing.cast(float, m.le))
    return lo, strict, hi


def _lengths(name: str) -> tuple[int, int]:
    lo, hi = 0, 10**9
    for m in Offer.model_fields[name].metadata:
        if isinstance(m, annotated_types.MinLen):
            lo = m.min_length
        elif isinstance(m, annotated_types.MaxLen):
            hi = m.max_length
    return lo, hi


def within(name: str, x: F) -> NDArray[np.bool_]:
    """Where the values of number field `name` keep Offer's bounds (nan: None, always kept)."""
    lo, strict, hi = _bounds(name)
    ok = (x > lo) if strict else (x >= lo)
    out: NDArray[np.bool_] = np.isnan(x) | (np.isfinite(x) & ok & (x <= hi))
    return out


_BAD = object()  # a cell the column checks leave to Offer


def _plain_number(cell: str) -> float | object:
    # Digits with at most one point read the same in Python and in pydantic; anything else
    # (signs, exponents, "inf", "1_000") is left to Offer.
    if not cell:
        return np.nan
    if cell.isascii() and cell.replace(".", "", 1).isdigit():
        return float(cell)
    return _BAD


def _text_rule(name: str) -> Callable[[str], object]:
    lo, hi = _lengths(name)
    one_line = name in ONE_LINE_FIELDS

    def check(value: str) -> object:
        if not lo <= len(value) <= hi or (one_line and not is_one_line(value)) or value[:1] == "'":
            return _BAD  # a leading apostrophe may quote a formula (offers_to_csv): Offer's reader
        return value

    return check


_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0", "")
_BILLINGS = typing.get_args(Billing)


def _flag(default: str) -> Callable[[str], object]:
    def check(value: str) -> object:
        text = value.lower() or default
        return text in _TRUE if text in _TRUE + _FALSE else _BAD

    return check


def _date(value: str) -> object:
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        return _BAD
    return day if day <= latest_price_date() else _BAD


def _country(value: str) -> object:
    try:
        return country_code(value)
    except ValueError:
        return _BAD


def _choice(choices: Iterable[str], default: str | None, upper: bool = False) -> Callable[[str], object]:
    allowed = frozenset(choices)

    def check(value: str) -> object:
        text = (value.upper() if upper else value) or default
        return text if text is None or text in allowed else _BAD

    return check


def cell_rules(gpus: Mapping[str, GpuSpec], plannable: Callable[[GpuSpec], bool]) -> dict[str, Callable[[str], object]]:
    """Per CSV column: a stripped cell -> its Offer value, or _BAD when Offer must decide. Defaults
    between fields (source_gpu_name, interruptible_price_kind, currency conversion) come later."""
    rules: dict[str, Callable[[str], object]] = {name: _text_rule(name) for name in ONE_LINE_FIELDS}
    notes = _text_rule("notes")
    rules_sgn = rules["source_gpu_name"]
    tier, region = rules["tier"], rules["region"]
    rules |= {
        "tier": lambda v: tier(v or "default"),
        "region": lambda v: region(v or "default"),
        "source_gpu_name": lambda v: rules_sgn(v) if v else "",
        "gpu": lambda v: v if v in gpus and plannable(gpus[v]) else _BAD,
        "notes": notes,
        "billing": _choice(_BILLINGS, "per-hour"),
        "country": _country,
        "price_date": _date,
        "price_date_estimated": _flag("false"),
        "launchable": _flag("true"),
        "price_kind": _choice(PRICE_KINDS, "list"),
        "interruptible_price_kind": _choice(PRICE_KINDS, None),
        "currency": _choice(CURRENCIES, "USD", upper=True),
    }
    for name in FLOAT_FIELDS:
        rules[name] = _plain_number
    rules["gpus_per_node"] = lambda v: float(v) if v.isascii() and v.isdigit() and v[:1] != "0" else _BAD
    return rules


@dataclass
class ColumnBuilder:
    """The columns of a table being read, chunk by chunk, with one list of values per field."""

    vocabs: dict[str, _Vocab] = field(default_factory=lambda: {n: _Vocab() for n in CODED_FIELDS})
    codes: dict[str, list[Codes]] = field(default_factory=lambda: {n: [] for n in CODED_FIELDS})
    numbers: dict[str, list[F]] = field(default_factory=lambda: {n: [] for n in FLOAT_FIELDS})
    gpn: list[I] = field(default_factory=list)

    def add(self, chunk: Chunk, upto: int | None = None) -> None:
        for name in CODED_FIELDS:
            self.codes[name].append(chunk.codes[name][:upto])
        for name in FLOAT_FIELDS:
            self.numbers[name].append(chunk.numbers[name][:upto])
        self.gpn.append(chunk.gpn[:upto])

    def table(self) -> OfferTable:
        def cat(parts: list[Any], dtype: type) -> Any:
            return np.concatenate(parts) if parts else np.zeros(0, dtype)

        codes, values = {}, {}
        for name, parts in self.codes.items():
            codes[name], values[name] = _used(cat(parts, np.int32), self.vocabs[name].values)
        return OfferTable(
            codes, values, {n: cat(c, np.float64) for n, c in self.numbers.items()}, cat(self.gpn, np.int64)
        )


def _used(codes: Codes, values: list[object]) -> tuple[Codes, tuple[object, ...]]:
    """Codes into only the values some offer has (a default's placeholder, a refused cell and an
    overridden one leave values no offer has)."""
    used = np.zeros(len(values), dtype=bool)
    used[codes] = True
    if used.all():
        return codes, tuple(values)
    remap = np.cumsum(used, dtype=np.int32) - 1
    return remap[codes].astype(np.int32), tuple(v for v, u in zip(values, used.tolist(), strict=True) if u)


@dataclass
class Chunk:
    """Some rows of a file as codes into a builder's values; `doubt`: rows Offer must decide."""

    codes: dict[str, Codes]
    numbers: dict[str, F]
    gpn: I
    doubt: NDArray[np.bool_]

    def set(self, i: int, offer: Offer, vocabs: Mapping[str, _Vocab]) -> None:
        """Row i as Offer made it."""
        for name in CODED_FIELDS:
            self.codes[name][i] = vocabs[name].code(getattr(offer, name))
        for name in FLOAT_FIELDS:
            value = getattr(offer, name)
            self.numbers[name][i] = np.nan if value is None else value
        self.gpn[i] = offer.gpus_per_node


def encode_chunk(
    cells: Mapping[str, Sequence[str]],
    n: int,
    rules: Mapping[str, Callable[[str], object]],
    vocabs: Mapping[str, _Vocab],
) -> Chunk:
    """A chunk's raw cells (column name -> cells; absent columns read as empty) as codes and
    numbers, with the defaults between fields and the rules across fields applied."""
    doubt = np.zeros(n, dtype=bool)
    codes: dict[str, Codes] = {}
    raw: dict[str, F] = {}
    for name, rule in rules.items():
        col = cells.get(name)
        # Each distinct cell is checked once; the rows map to it at C speed.
        seen = {c: rule(c.strip()) for c in dict.fromkeys(col if col is not None else ("",))}
        bad = [c for c, v in seen.items() if v is _BAD]
        if name in CODED_FIELDS:
            vocab = vocabs[name]
            lut = {c: -1 if v is _BAD else vocab.code(v) for c, v in seen.items()}
            codes[name] = (
                np.fromiter(map(lut.__getitem__, col), np.int32, n)
                if col is not None
                else np.full(n, lut[""], np.int32)
            )
            if bad:
                doubt |= codes[name] < 0
        else:
            flut: dict[str, float] = {c: np.nan if v is _BAD else typing.cast(float, v) for c, v in seen.items()}
            raw[name] = (
                np.fromiter(map(flut.__getitem__, col), np.float64, n) if col is not None else np.full(n, flut[""])
            )
            if bad and col is not None:
                doubt |= np.fromiter(map(frozenset(bad).__contains__, col), bool, n)
            elif bad:
                doubt |= True
    gpn_f = raw.pop("gpus_per_node")
    gpn = np.clip(np.nan_to_num(gpn_f, nan=0.0), -1, 1e9).astype(np.int64)  # out of range: doubt below
    lo, _, hi = _bounds("gpus_per_node")
    doubt |= (gpn < lo) | (gpn > hi)
    chunk = Chunk(codes, raw, gpn, doubt)
    _between_fields(chunk, vocabs)
    return chunk


def _per_row(vocab: _Vocab, fn: Callable[[object], object], codes: Codes, dtype: type, refused: object) -> NDArray[Any]:
    """fn of each row's value; `refused` where the cell was refused (code -1: the last entry)."""
    lut: NDArray[Any] = np.array([*(fn(v) for v in vocab.values), refused], dtype=dtype)
    out: NDArray[Any] = lut[codes]
    return out


def _between_fields(chunk: Chunk, vocabs: Mapping[str, _Vocab]) -> None:
    """Defaults that name another field, currency conversion and the rules across fields."""
    codes, nums, doubt = chunk.codes, chunk.numbers, chunk.doubt
    ok = ~doubt
    # source_gpu_name defaults to the gpu, interruptible_price_kind to price_kind.
    for target, source in (("source_gpu_name", "gpu"), ("interruptible_price_kind", "price_kind")):
        empty = vocabs[target].code("" if target == "source_gpu_name" else None)
        use = ok & (codes[target] == empty)
        if use.any():
            to = _per_row(vocabs[source], vocabs[target].code, codes[source], np.int32, -1)
            codes[target] = np.where(use, to, codes[target])
    # Prices quoted in another currency: converted at the price date's rate, as Offer does.
    currency = vocabs["currency"].values
    foreign = _per_row(vocabs["currency"], lambda c: c != "USD", codes["currency"], bool, False)
    for i in np.flatnonzero(ok & foreign & np.isnan(nums["usd_per_unit"])).tolist():
        day = vocabs["price_date"].values[codes["price_date"][i]]
        try:
            rate = rate_on(typing.cast(Any, currency[codes["currency"][i]]), typing.cast(dt.date, day)).usd_per_unit
        except ValueError:
            doubt[i] = True
            continue
        for name in ("on_demand_usd_per_gpu_hour", "interruptible_usd_per_gpu_hour", "storage_usd_per_gb_month"):
            x = float(nums[name][i])
            if x == x:
                nums[name][i] = to_usd(x, rate)
        nums["usd_per_unit"][i] = rate
    for name in FLOAT_FIELDS:
        doubt |= ~within(name, nums[name])
    od, spot = nums["on_demand_usd_per_gpu_hour"], nums["interruptible_usd_per_gpu_hour"]
    doubt |= np.isnan(od) & np.isnan(spot)  # neither price
    doubt |= spot > od  # nan compares False
    launchable = _per_row(vocabs["launchable"], lambda v: v is True, codes["launchable"], bool, False)
    reason = _per_row(vocabs["not_launchable_reason"], bool, codes["not_launchable_reason"], bool, False)
    doubt |= launchable == reason
