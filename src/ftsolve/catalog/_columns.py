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

import contextlib
import datetime as dt
import itertools
import operator
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
# A table's codes take the narrowest integer type that holds its number of values: most fields have
# a few distinct values, and a million offers' codes are then 1 byte each, not 4.
TableCodes = NDArray[np.signedinteger[Any]]

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

    def codes(self, values: Sequence[object]) -> Codes:
        """The code of each value, -1 for _BAD; the loops run in C (a column may hold a million
        distinct values)."""
        index, start = self.index, len(self.values)
        fresh = dict.fromkeys(values)
        fresh.pop(_BAD, None)
        new = list(itertools.filterfalse(index.__contains__, fresh))
        index.update(zip(new, range(start, start + len(new)), strict=True))
        self.values.extend(new)
        if len(new) == len(values):  # all new and distinct: no lookups
            return np.arange(start, start + len(new), dtype=np.int32)
        return np.fromiter(map(index.get, values, itertools.repeat(-1)), np.int32, len(values))


# Values -> (the index of each among the distinct ones, the distinct ones in order of appearance).
Distinct = Callable[[list[object]], tuple[NDArray[np.intp], Sequence[object]]]


class Appended(_Vocab):
    """A field's values in arrival order, repeats included, made distinct once when the table is
    made (by `distinct`, e.g. pandas.factorize): for a field of a million mostly distinct values (an
    instance type per offer), a dict lookup per value and chunk costs more than one pass at the end.
    Not for a field whose codes are compared while reading (_between_fields)."""

    def __init__(self, distinct: Distinct) -> None:
        super().__init__()
        self.distinct = distinct

    def code(self, value: object) -> int:
        self.values.append(value)
        return len(self.values) - 1

    def codes(self, values: Sequence[object]) -> Codes:
        start = len(self.values)
        self.values.extend(values)
        out = np.arange(start, start + len(values), dtype=np.int32)
        if _BAD in values:
            out[np.fromiter(map(operator.is_, values, itertools.repeat(_BAD)), bool, len(values))] = -1
        return out


@dataclass(frozen=True, eq=False)
class OfferTable(Sequence[Offer]):
    """Offers as columns, in catalog order; a read-only sequence of `Offer` built on access."""

    codes: Mapping[str, TableCodes]  # per CODED_FIELDS name
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
            name: narrow(np.fromiter((v.code(getattr(o, name)) for o in items), np.int32, len(items)), len(v.values))
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
        dims = tuple(max(len(self.values[name]), 1) for name in KEY_FIELDS)
        if float(np.prod(np.array(dims, dtype=np.float64))) < 2.0**62:
            # np.ravel_multi_index, in place (it checks every code against its bound, twice as slow).
            out: I = self.codes[KEY_FIELDS[0]].astype(np.int64)
            for name, dim in zip(KEY_FIELDS[1:], dims[1:], strict=True):
                out *= dim
                out += self.codes[name]
            return out
        cols = [self.codes[name].astype(np.int64) for name in KEY_FIELDS]
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
    codes: dict[str, TableCodes] = {}
    values: dict[str, tuple[object, ...]] = {}
    # The largest table keeps its codes and values (a user's million offers are not recoded for the
    # bundled thousand); the others' values are found among its values, or added after them.
    big = max(range(len(tables)), key=lambda k: len(tables[k]))
    for name in CODED_FIELDS:
        base = tables[big].values[name]
        others = dict.fromkeys(v for k, t in enumerate(tables) if k != big for v in t.values[name])
        shared = np.flatnonzero(np.fromiter(map(others.__contains__, base), bool, len(base))).tolist()
        where = {base[i]: i for i in shared}
        added = [v for v in others if v not in where]
        where |= zip(added, range(len(base), len(base) + len(added)), strict=True)
        size = len(base) + len(added)
        parts = []
        for k, t in enumerate(tables):
            remap = np.array([where[v] for v in t.values[name]], dtype=np.int32) if k != big else None
            parts.append(t.codes[name] if remap is None or not remap.size else narrow(remap[t.codes[name]], size))
        codes[name] = narrow(np.concatenate(parts) if parts else np.zeros(0, np.int32), size)
        values[name] = (*base, *added)
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
    if not has_duplicate(keys):
        return every
    _, last_rev = np.unique(keys[::-1], return_index=True)
    keep = np.sort(n - 1 - last_rev)
    return every if keep.shape[0] == n else every.take(keep)


def has_duplicate(keys: I) -> bool:
    """Whether two offers share a key (one sort, where first_duplicate needs three)."""
    ordered = np.sort(keys)
    return bool((ordered[1:] == ordered[:-1]).any())


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


@dataclass(frozen=True)
class Numbers:
    """A number column's cells read: their values (nan: empty) and the cells Offer must decide."""

    values: F
    refused: NDArray[np.bool_]


# A column check: the stripped distinct cells of a column -> the Offer value of each (_BAD where
# Offer must decide), or their Numbers. Checks run as maps: a column may hold a million values.
Rule = Callable[[Sequence[str]], "list[object] | Numbers"]


def _each(check: Callable[[str], object]) -> Rule:
    return lambda cells: list(map(check, cells))


def _plain_numbers(cells: Sequence[str]) -> Numbers:
    # Digits with at most one point read the same in Python and in pydantic; anything else
    # (signs, exponents, "inf", "1_000") is left to Offer. An empty cell is no number (nan).
    n = len(cells)
    filled = np.fromiter(map(bool, cells), bool, n)
    # The usual column, at once: of ASCII digits and points only, each filled cell is plain where
    # float() reads it (it refuses "1.2.3" and ".").
    digits = "".join(cells).replace(".", "")
    if (digits.isascii() and digits.isdigit()) or not digits:
        with contextlib.suppress(ValueError):
            return _numbers(cells, filled, np.zeros(n, dtype=bool))
    plain = np.fromiter(map(str.isascii, cells), bool, n)
    plain &= np.fromiter(map(str.isdigit, map(str.replace, cells, *map(itertools.repeat, (".", "", 1)))), bool, n)
    return _numbers(cells, plain, ~plain & filled)


def _gpu_counts(cells: Sequence[str]) -> Numbers:
    # Whole numbers in plain digits, without a leading zero; anything else is left to Offer.
    n = len(cells)
    plain = np.fromiter(map(str.isascii, cells), bool, n) & np.fromiter(map(str.isdigit, cells), bool, n)
    plain &= ~np.fromiter(map(str.startswith, cells, itertools.repeat("0")), bool, n)
    return _numbers(cells, plain, ~plain)


def _numbers(cells: Sequence[str], plain: NDArray[np.bool_], refused: NDArray[np.bool_]) -> Numbers:
    values = np.full(len(cells), np.nan)
    values[plain] = np.fromiter(map(float, itertools.compress(cells, plain)), np.float64, int(plain.sum()))
    return Numbers(values, refused)


def _text_rule(name: str) -> Callable[[Sequence[str]], list[object]]:
    lo, hi = _lengths(name)
    one_line = name in ONE_LINE_FIELDS

    def check(cells: Sequence[str]) -> list[object]:
        n = len(cells)
        size = np.fromiter(map(len, cells), np.int64, n)
        ok = (size >= lo) & (size <= hi)
        # is_one_line holds of a text where it holds of each character: of all cells at once first.
        joined = "".join(cells)
        if one_line and not is_one_line(joined):
            ok &= np.fromiter(map(is_one_line, cells), bool, n)
        # A leading apostrophe may quote a formula (offers_to_csv): Offer's reader takes it off.
        if "'" in joined:
            ok &= ~np.fromiter(map(str.startswith, cells, itertools.repeat("'")), bool, n)
        return list(cells) if ok.all() else [c if k else _BAD for c, k in zip(cells, ok.tolist(), strict=True)]

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


def cell_rules(gpus: Mapping[str, GpuSpec], plannable: Callable[[GpuSpec], bool]) -> dict[str, Rule]:
    """Per CSV column: its stripped distinct cells -> their Offer values (_BAD, or refused, where
    Offer must decide). Defaults between fields (source_gpu_name, interruptible_price_kind,
    currency conversion) come later."""
    text = {name: _text_rule(name) for name in ONE_LINE_FIELDS}
    sgn, tier, region = text["source_gpu_name"], text["tier"], text["region"]
    rules: dict[str, Rule] = dict(text)

    def source_gpu_name(cells: Sequence[str]) -> list[object]:
        return [v if c else "" for c, v in zip(cells, sgn(cells), strict=True)]

    rules |= {
        "tier": lambda cells: tier([c or "default" for c in cells]),
        "region": lambda cells: region([c or "default" for c in cells]),
        "source_gpu_name": source_gpu_name,
        "gpu": _each(lambda v: v if v in gpus and plannable(gpus[v]) else _BAD),
        "notes": _text_rule("notes"),
        "billing": _each(_choice(_BILLINGS, "per-hour")),
        "country": _each(_country),
        "price_date": _each(_date),
        "price_date_estimated": _each(_flag("false")),
        "launchable": _each(_flag("true")),
        "price_kind": _each(_choice(PRICE_KINDS, "list")),
        "interruptible_price_kind": _each(_choice(PRICE_KINDS, None)),
        "currency": _each(_choice(CURRENCIES, "USD", upper=True)),
    }
    for name in FLOAT_FIELDS:
        rules[name] = _plain_numbers
    rules["gpus_per_node"] = _gpu_counts
    return rules


@dataclass
class ColumnBuilder:
    """The columns of a table being read, chunk by chunk, with one list of values per field."""

    vocabs: dict[str, _Vocab] = field(default_factory=lambda: {n: _Vocab() for n in CODED_FIELDS})
    codes: dict[str, list[TableCodes]] = field(default_factory=lambda: {n: [] for n in CODED_FIELDS})
    numbers: dict[str, list[F]] = field(default_factory=lambda: {n: [] for n in FLOAT_FIELDS})
    gpn: list[I] = field(default_factory=list)

    def add(self, chunk: Chunk, upto: int | None = None) -> None:
        for name in CODED_FIELDS:
            self.codes[name].append(narrow(chunk.codes[name][:upto], len(self.vocabs[name].values)))
        for name in FLOAT_FIELDS:
            self.numbers[name].append(chunk.numbers[name][:upto])
        self.gpn.append(chunk.gpn[:upto])

    def table(self) -> OfferTable:
        """The table read so far. Each column is joined in turn, and its parts let go (a million
        offers' columns are not held twice)."""

        def cat(parts: list[Any], dtype: type) -> Any:
            whole = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, dtype)
            parts[:] = [whole]
            return whole

        codes: dict[str, TableCodes] = {}
        values: dict[str, tuple[object, ...]] = {}
        for name, parts in self.codes.items():
            vocab = self.vocabs[name]
            if isinstance(vocab, Appended):
                at, distinct = vocab.distinct(vocab.values)
                parts[:] = [narrow(at[cat(parts, np.int32)], len(distinct))]
                vocab.values = list(distinct)
            codes[name], values[name] = _used(cat(parts, np.int32), vocab.values)
        return OfferTable(
            codes, values, {n: cat(c, np.float64) for n, c in self.numbers.items()}, cat(self.gpn, np.int64)
        )


def narrow(codes: NDArray[np.signedinteger[Any]], n_values: int) -> TableCodes:
    """`codes` (of n_values values, -1 included) in the narrowest integer type that holds them."""
    dtype = np.int8 if n_values < 2**7 else np.int16 if n_values < 2**15 else np.int32
    return codes.astype(dtype, copy=False)


def _used(codes: TableCodes, values: list[object]) -> tuple[TableCodes, tuple[object, ...]]:
    """Codes into only the values some offer has (a default's placeholder, a refused cell and an
    overridden one leave values no offer has)."""
    used = np.zeros(len(values), dtype=bool)
    used[codes] = True
    if used.all():
        return narrow(codes, len(values)), tuple(values)
    remap = np.cumsum(used, dtype=np.int32) - 1
    kept = tuple(v for v, u in zip(values, used.tolist(), strict=True) if u)
    return narrow(remap[codes], len(kept)), kept


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


def distinct_cells(col: Sequence[str]) -> tuple[list[str], Codes]:
    """(the distinct cells of a column, each row's index into them), at C speed."""
    first = dict.fromkeys(col)
    where = dict(zip(first, range(len(first)), strict=True))
    return list(first), np.fromiter(map(where.__getitem__, col), np.int32, len(col))


# A column: its distinct cells (a sequence of str, or an object array of them), each row's index.
Cells = tuple[Sequence[str] | NDArray[np.object_], NDArray[np.integer[Any]]]


def encode_chunk(cells: Mapping[str, Cells], n: int, rules: Mapping[str, Rule], vocabs: Mapping[str, _Vocab]) -> Chunk:
    """A chunk's raw cells (column name -> its distinct cells and each row's index into them;
    absent columns read as empty) as codes and numbers, with the defaults between fields and the
    rules across fields applied. Each distinct cell is checked once; rows map to it at C speed."""
    doubt = np.zeros(n, dtype=bool)
    codes: dict[str, Codes] = {}
    raw: dict[str, F] = {}
    for name, rule in rules.items():
        distinct, rows = cells.get(name) or (("",), np.zeros(n, np.int32))
        checked = rule(list(map(str.strip, distinct)))
        if isinstance(checked, Numbers):
            raw[name] = checked.values[rows]
            if checked.refused.any():
                doubt |= checked.refused[rows]
        else:
            codes[name] = vocabs[name].codes(checked)[rows]
            doubt |= codes[name] < 0
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
