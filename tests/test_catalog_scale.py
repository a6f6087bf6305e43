"""Issue 15 item 6, a million offers: the fast reader (pandas' C parser) reads a file exactly as the
csv reader does, or declines; the array-first planning helpers equal the plain ones they replace."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ftsolve
from ftsolve._errors import CatalogError
from ftsolve.catalog import _cache, _load
from ftsolve.catalog._columns import OfferTable, concat, encode_chunk, merge_layers
from ftsolve.catalog._load import (
    _comment_after_data,
    _read_text,
    fast_offer_table,
    load_gpus,
    read_offer_table,
    user_offer_table,
)
from ftsolve.solver import _pipeline, _rows
from ftsolve.solver._job import EEA_COUNTRIES
from ftsolve.solver._pipeline import planning_arrays, scope_offers, twin_groups
from ftsolve.solver._rows import equal_rows, unique_rows

GPUS = load_gpus()
TEXT = _read_text("offers.csv")
HEADER = TEXT.splitlines()[1]
COL = {name: i for i, name in enumerate(HEADER.split(","))}
GOOD = "aws,t,i1,h100-sxm,H100,8,3.5,1.2,list,,per-hour,us-east-1,US,true,,,,2026-01-05,false,src,,USD,"


def csv_read(path: Path) -> OfferTable:
    """The file as the csv reader reads it (user_offer_table's path below the fast size)."""
    with open(path, encoding="utf-8-sig", newline="\n") as f:
        return read_offer_table(f, str(path), GPUS, _comment_after_data(path))


def outcome(read: Callable[[], OfferTable] | OfferTable) -> object:
    """A reader's result, comparable: every offer's fields, or the error message."""
    try:
        table = read if isinstance(read, OfferTable) else read()
    except CatalogError as exc:
        return ("error", str(exc))
    return [o.model_dump() for o in table]


def row(**cells: str) -> str:
    """GOOD with some cells replaced."""
    out = GOOD.split(",")
    for name, cell in cells.items():
        out[COL[name]] = cell
    return ",".join(out)


def both_readers(path: Path) -> tuple[object, object]:
    """(user_offer_table's outcome with the csv reader, and with the fast reader first)."""
    with mock.patch.object(_load, "FAST_MIN_BYTES", 10**18):
        slow = outcome(lambda: user_offer_table(path, GPUS))
    with mock.patch.object(_load, "FAST_MIN_BYTES", 0):
        fast = outcome(lambda: user_offer_table(path, GPUS))
    return slow, fast


@pytest.fixture
def small_steps() -> Iterator[None]:
    """Chunks of a few rows (parsed two at a time, checked three or more at once) and checks of a
    few bytes: every boundary case gets its turn."""
    with (
        mock.patch.object(_load, "_FAST_CHUNK_ROWS", 3),
        mock.patch.object(_load, "_PARSE_ROWS", 2),
        mock.patch.object(_load, "_CHECK_BYTES", 7),
    ):
        yield


# --- the fast reader equals the csv reader --------------------------------------------------------


@pytest.mark.parametrize("steps", ["default", "small"])
def test_the_bundled_catalog_reads_the_same_fast(tmp_path: Path, steps: str) -> None:
    path = tmp_path / "offers.csv"
    path.write_text(TEXT, encoding="utf-8")
    with (
        mock.patch.object(_load, "_FAST_CHUNK_ROWS", 7 if steps == "small" else _load._FAST_CHUNK_ROWS),
        mock.patch.object(_load, "_PARSE_ROWS", 3 if steps == "small" else _load._PARSE_ROWS),
        mock.patch.object(_load, "_CHECK_BYTES", 61 if steps == "small" else _load._CHECK_BYTES),
    ):
        fast = fast_offer_table(path, GPUS)
    slow = csv_read(path)
    assert fast is not None and len(fast) == len(slow) > 1000
    assert [o.model_dump() for o in fast] == [o.model_dump() for o in slow]
    a, b = (ftsolve.Catalog(gpus=GPUS, offers=t, models={}).arrays for t in (slow, fast))
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name


BAD_CELLS = [
    ("gpus_per_node", "0"),
    ("gpus_per_node", "2.5"),
    ("on_demand_usd_per_gpu_hour", "nan"),
    ("on_demand_usd_per_gpu_hour", "1_001"),
    ("interruptible_usd_per_gpu_hour", "9.0"),
    ("provider", ""),
    ("provider", "a\tb"),
    ("gpu", "no-such-gpu"),
    ("country", "Germany"),
    ("launchable", "maybe"),
    ("price_date", "2999-01-01"),
    ("currency", "JPY"),
]


@pytest.mark.parametrize(("col", "cell"), BAD_CELLS)
def test_a_bad_row_is_refused_with_the_csv_readers_message(tmp_path: Path, col: str, cell: str) -> None:
    cells = GOOD.split(",")
    cells[COL[col]] = cell
    path = tmp_path / "offers.csv"
    path.write_text(f"{HEADER}\n{GOOD.replace('i1', 'i0')}\n{','.join(cells)}\n")
    assert fast_offer_table(path, GPUS) is None  # declined: the csv reader words the error
    slow, fast = both_readers(path)
    assert slow == fast and isinstance(slow, tuple) and slow[0] == "error" and f"{path}, row 3" in slow[1]


SECOND = row(instance_type="i2")
_CUT = SECOND.split("true", 1)[0] + "true", SECOND.split("true", 1)[1]
ODD_FILES = {
    "junk after a closing quote": f"{HEADER}\n{row(source=chr(34) + 'src' + chr(34) + 'x')}\n",
    "a carriage return alone": f"{HEADER}\n{GOOD}\r{SECOND}\n",
    "a NUL": f"{HEADER}\n{row(source='s' + chr(0) + 'rc')}\n",
    "a line of blanks": f"{HEADER}\n{GOOD}\n  \n{SECOND}\n",
    "a comment after the header": f"{HEADER}\n#{GOOD}\n{SECOND}\n",
    "a quote left open": f"{HEADER}\n{row(source=chr(34) + 'src')}\n",
    "a row with more cells": f"{HEADER}\n{GOOD}\n{SECOND},extra\n",
    "a first row with more cells": f"{HEADER}\n{GOOD},extra\n{SECOND}\n",
    # pandas' frames drop one empty extra cell of the first row without a warning; its C reader does not
    "a first row with one more, empty cell": f"{HEADER}\n{GOOD},\n{SECOND}\n",
    "a first row with more cells, a blank line quoted in it": f'{HEADER}\n{GOOD[:-5]}",USD,\n\n{_CUT[0]}"{_CUT[1]}\n',

    "a quoted header": f'"{HEADER}"\n{GOOD}\n',
    "a duplicate offer": f"{HEADER}\n{GOOD}\n{GOOD}\n",
    "a blank first line": f"\n{HEADER}\n{GOOD}\n",
    "a quote inside an unquoted cell": f"{HEADER}\n{row(source='s' + chr(34) + 'rc')}\n",
}


@pytest.mark.parametrize("name", sorted(ODD_FILES))
def test_a_file_pandas_may_read_otherwise_goes_to_the_csv_reader(tmp_path: Path, name: str) -> None:
    path = tmp_path / "offers.csv"
    path.write_bytes(ODD_FILES[name].encode())
    assert fast_offer_table(path, GPUS) is None
    slow, fast = both_readers(path)
    assert slow == fast


QUOTED_NOTE = '"a ""quoted"", multi-line\nnote"'
NUMBERS = {"on_demand_usd_per_gpu_hour": "3.5e0", "interruptible_usd_per_gpu_hour": " 1.2 "}
SAME_FILES = {
    "quoted cells": f"{HEADER}\n{row(notes=QUOTED_NOTE)}\n",
    "windows line ends": f"{HEADER}\r\n{GOOD}\r\n{SECOND}\r\n",
    "a byte order mark and leading comments": f"\ufeff# schema_version: 1\n# more\n{HEADER}\n{GOOD}\n",
    "blank lines": f"{HEADER}\n\n{GOOD}\n\n\n{SECOND}",
    "a short row": f"{HEADER}\n{GOOD}\n{SECOND.rsplit(',', 3)[0]}\n",
    "a short first row": f"{HEADER}\n{GOOD.rsplit(',', 3)[0]}\n{SECOND}\n",
    "cells Offer decides": f"{HEADER}\n{row(**NUMBERS)}\n",
    "a quoted formula": f"{HEADER}\n{row(source=chr(39) + '=src')}\n",
    "euros": f"{HEADER}\n{row(currency='eur')}\n",
    "an extra column": f"{HEADER},mine\n{GOOD},x\n",
}


@pytest.mark.parametrize("name", sorted(SAME_FILES))
@pytest.mark.usefixtures("small_steps")
def test_a_file_both_readers_take_reads_the_same(tmp_path: Path, name: str) -> None:
    path = tmp_path / "offers.csv"
    path.write_bytes(SAME_FILES[name].encode())
    fast = fast_offer_table(path, GPUS)
    assert fast is not None
    assert outcome(fast) == outcome(csv_read(path))
    slow, fast_path = both_readers(path)
    assert slow == fast_path


def test_without_pandas_c_reader_the_csv_reader_reads_the_file(tmp_path: Path) -> None:
    # The fast reader reads the blocks of pandas' (private) C reader; where a pandas has none, its
    # frames are not trusted (they drop an empty extra cell of the first row unnoticed).
    path = tmp_path / "offers.csv"
    path.write_text(f"{HEADER}\n{GOOD}\n{SECOND}\n")
    assert fast_offer_table(path, GPUS) is not None
    parsed = _load._parsed
    with mock.patch.object(_load, "_parsed", lambda chunks, *rest: parsed((f for f in chunks), *rest)):
        assert fast_offer_table(path, GPUS) is None
    slow, fast = both_readers(path)
    assert slow == fast


def test_parsed_chunks_are_checked_together(tmp_path: Path) -> None:
    # pandas parses a few rows at a time (its cells stay in cache); the column checks take several
    # parsed chunks at once, and read as the csv reader does.
    path = tmp_path / "offers.csv"
    path.write_text(HEADER + "\n" + "\n".join(row(instance_type=f"i{k}") for k in range(12)) + "\n")
    sizes: list[int] = []

    def spy(cells: object, n: int, *rest: object) -> object:
        sizes.append(n)
        return encode_chunk(cells, n, *rest)  # type: ignore[arg-type]

    with (
        mock.patch.object(_load, "_PARSE_ROWS", 2),
        mock.patch.object(_load, "_FAST_CHUNK_ROWS", 5),
        mock.patch.object(_load, "encode_chunk", spy),
    ):
        fast = fast_offer_table(path, GPUS)
    assert sizes == [6, 6]
    assert fast is not None and outcome(fast) == outcome(csv_read(path))


def test_a_record_longer_than_the_csv_field_limit_goes_to_the_csv_reader(tmp_path: Path) -> None:
    path = tmp_path / "offers.csv"
    path.write_text(f"{HEADER}\n{GOOD.replace(',src,', ',' + 'x' * 300 + ',')}\n")
    with mock.patch("csv.field_size_limit", return_value=200):
        assert fast_offer_table(path, GPUS) is None


# Pieces of a CSV file, the tricky ones included: the fast reader returns the csv reader's table or
# declines, whatever the mix and wherever its blocks and chunks split the file.
_CELL_EDITS: st.SearchStrategy[Callable[[str], str]] = st.sampled_from(
    [
        lambda c: c,
        lambda c: '"' + c.replace('"', '""') + '"',
        lambda c: '"' + c + ',\nmore"',
        lambda c: '"' + c + '""x"',
        lambda c: '"' + c + '"x',
        lambda c: c + '"',
        lambda c: " " + c,
        lambda c: c + "\r",
        lambda c: '"' + c + '\r\n"',
        lambda c: "#" + c,
        lambda c: c + "\x00",
        lambda c: "",
        lambda c: c + ",",  # one more, empty cell
    ]
)


@st.composite
def csv_files(draw: st.DrawFn) -> str:
    lines = [HEADER]
    for k in range(draw(st.integers(1, 6))):
        cells = GOOD.replace("i1", f"i{draw(st.integers(0, 4)) if draw(st.booleans()) else k}").split(",")
        for _ in range(draw(st.integers(0, 3))):
            i = draw(st.integers(0, len(cells) - 1))
            cells[i] = draw(_CELL_EDITS)(cells[i])
        lines.append(",".join(cells[: draw(st.sampled_from([len(cells), len(cells), len(cells) - 2]))]))
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(st.sampled_from(["", "  ", "#c", ",", '""'])))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    return end.join(lines) + draw(st.sampled_from([end, ""]))


@settings(max_examples=150)
@given(csv_files(), st.integers(1, 40), st.integers(1, 4), st.integers(1, 4))
def test_the_fast_reader_reads_as_the_csv_reader_or_declines(
    text: str, check_bytes: int, chunk_rows: int, parse_rows: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "offers.csv"
        path.write_bytes(text.encode())
        with (
            mock.patch.object(_load, "_CHECK_BYTES", check_bytes),
            mock.patch.object(_load, "_FAST_CHUNK_ROWS", chunk_rows),
            mock.patch.object(_load, "_PARSE_ROWS", parse_rows),
        ):
            fast = fast_offer_table(path, GPUS)
        if fast is not None:
            assert outcome(fast) == outcome(lambda: csv_read(path))


def test_the_bundled_catalog_loads_without_pandas() -> None:
    # pandas is for large user files: the CLI's start-up and the bundled load never import it.
    code = "import sys, ftsolve; ftsolve.load_catalog(user=False); print('pandas' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_large_file_plans_as_the_csv_reader_would(tmp_path: Path) -> None:
    records = list(csv.reader(io.StringIO("".join(x for x in io.StringIO(TEXT) if not x.startswith("#")))))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(records[0])
    for k in range(3):  # three copies of every bundled offer, each its own instance type
        writer.writerows([*r[:2], f"{r[2]}-copy{k}", *r[3:]] for r in records[1:])
    path = tmp_path / "offers.csv"
    path.write_text(out.getvalue())
    job = ftsolve.JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24)
    plans = []
    for fast_from in (10**18, 0):
        with mock.patch.object(_load, "FAST_MIN_BYTES", fast_from):
            catalog = ftsolve.load_catalog(path, user=False)
        assert len(catalog.offers) == 4 * (len(records) - 1)
        plans.append(ftsolve.plan(job, catalog).model_dump_json())
    assert plans[0] == plans[1]


# --- merging layers -------------------------------------------------------------------------------


def test_layers_merge_the_same_whichever_is_largest() -> None:
    bundled = read_offer_table(TEXT, "f.csv", GPUS)
    user = OfferTable.of([o.model_copy(update={"notes": "mine"}) for o in list(bundled)[:5]])  # overrides five
    for layers in ([bundled, user], [user, bundled]):
        expected: dict[str, ftsolve.Offer] = {}
        for table in layers:
            for o in table:
                expected.pop(o.key, None)  # an override takes the place of the key's last occurrence
                expected[o.key] = o
        assert list(merge_layers(layers)) == list(expected.values())
        assert list(concat(layers)) == [o for t in layers for o in t]


# --- planning on arrays ---------------------------------------------------------------------------


def _reference_cheapest(ids: np.ndarray, group: np.ndarray, price: np.ndarray) -> np.ndarray:
    order = np.lexsort((ids, price, group))
    first = np.ones(ids.size, dtype=bool)
    first[1:] = group[order][1:] != group[order][:-1]
    return np.sort(ids[order][first])


def _reference_pareto(ids: np.ndarray, group: np.ndarray, od: np.ndarray, spot: np.ndarray) -> np.ndarray:
    order = np.lexsort((ids, spot, od, group))
    g, s_ = group[order], spot[order]
    shifted = s_ - g * (float(np.nanmax(spot)) + 1.0) * 2.0
    running = np.minimum.accumulate(shifted)
    keep = np.ones(ids.size, dtype=bool)
    keep[1:] = (shifted[1:] < running[:-1]) | (g[1:] != g[:-1])
    return np.sort(ids[order][keep])


def test_pruning_twins_keeps_what_sorting_every_offer_kept() -> None:
    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(1, 60))
        group = rng.integers(0, int(rng.integers(1, 6)), n)
        ids = np.sort(rng.choice(1000, n, replace=False))
        od, spot = rng.integers(1, 6, size=(2, n)).astype(float) / 2  # ties on purpose
        assert np.array_equal(_pipeline._cheapest_per_group(ids, group, od), _reference_cheapest(ids, group, od))
        got = _pipeline._pareto_per_group(ids, group, od, spot)
        assert np.array_equal(got, _reference_pareto(ids, group, od, spot))


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


@pytest.mark.parametrize("mix", [_rows.MIX, np.uint64(0)])  # 0: every row one hash, so the exact fallback
def test_equal_rows_labels_as_unique_rows(mix: np.uint64) -> None:
    rng = np.random.default_rng(11)
    with mock.patch.object(_rows, "MIX", mix):
        for _ in range(300):
            n = int(rng.integers(1, 50))
            cols = [
                rng.integers(-1, 3, n + 3)
                if rng.random() < 0.4
                else rng.choice(np.array([0.0, -0.0, 1.5, -1.0, np.nan, np.inf]), n + 3)
                for _ in range(int(rng.integers(1, 5)))
            ]
            rows = np.sort(rng.choice(n + 3, n, replace=False))
            expected = unique_rows(np.stack([np.nan_to_num(c[rows].astype(float), nan=-1.0) for c in cols], axis=1))[1]
            assert _same_partition(equal_rows(cols, rows), expected)


def test_filters_read_the_coded_text_columns_as_the_strings() -> None:
    catalog = ftsolve.load_catalog(user=False)
    arr = catalog.arrays
    assert list(arr.providers) == sorted({o.provider.lower() for o in catalog.offers})
    assert arr.provider.tolist() == [o.provider.lower() for o in catalog.offers]
    assert arr.country.tolist() == [o.country or "" for o in catalog.offers]
    providers, regions, countries = ("aws", "lambda"), ("us-east-1", "eu-central-1"), ("US", "DE")
    gpus = ("h100-sxm", "a100-80gb", "l40s")
    job = ftsolve.JobSpec(
        model="llama-3.1-8b",
        train_tokens=10**7,
        seq_len=2048,
        providers=providers,
        regions=regions,
        countries=countries,
        gpus=gpus,
    )
    scope, report = scope_offers(job, planning_arrays(job, catalog))
    expected = [
        o.provider.lower() in providers and o.region.lower() in regions and o.country in countries and o.gpu in job.gpus  # type: ignore[operator]
        for o in catalog.offers
    ]
    assert scope.tolist() == expected and report.offers_in_scope == sum(expected) > 0
    eu = ftsolve.JobSpec(model="llama-3.1-8b", train_tokens=10**7, seq_len=2048, eu_only=True)
    eu_scope, _ = scope_offers(eu, planning_arrays(eu, catalog))
    in_eu = [
        o.country in EEA_COUNTRIES and (o.on_demand_usd_per_gpu_hour or o.interruptible_usd_per_gpu_hour)
        for o in catalog.offers
    ]
    assert any(eu_scope) and all(in_eu[i] for i in np.flatnonzero(eu_scope).tolist())
    gid = np.where(eu_scope, arr.gpu_id, -1)
    labels = twin_groups(arr, eu_scope, gid)
    assert (labels[~eu_scope] == -1).all() and (labels[eu_scope] >= 0).all()


# --- the column cache of large files --------------------------------------------------------------


def _many_offers(path: Path, price: str = "3.50") -> None:
    """A file of 300 offers with every kind of value (None, bool, date, text)."""
    lines = [HEADER] + [
        row(instance_type=f"i{k}", on_demand_usd_per_gpu_hour=price, notes=f"n{k % 7}", country="" if k % 3 else "US")
        for k in range(300)
    ]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("FTSOLVE_HOME", str(home))
    monkeypatch.setattr(_load, "CACHE_MIN_BYTES", 0)
    return home / "cache"


def test_a_large_file_is_read_back_from_its_cache_as_it_was_parsed(tmp_path: Path, cache_home: Path) -> None:
    path = tmp_path / "offers.csv"
    _many_offers(path)
    parsed = user_offer_table(path, GPUS)
    assert len(list(cache_home.glob("offers-*.npz"))) == 1
    with (
        mock.patch.object(_load, "fast_offer_table", side_effect=AssertionError("parsed again")),
        mock.patch.object(_load, "_csv_offer_table", side_effect=AssertionError("parsed again")),
    ):
        cached = user_offer_table(path, GPUS)
    assert outcome(cached) == outcome(parsed) == outcome(csv_read(path))
    assert {o.country for o in cached} == {None, "US"} and all(o.launchable is True for o in cached)


@pytest.mark.parametrize(("odd", "prefix", "check_bytes"), [(False, "", None), (False, "lead", 61), (True, "", None)])
def test_a_first_load_hashes_the_bytes_as_the_fast_reader_reads_them(
    tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch, odd: bool, prefix: str, check_bytes: int | None
) -> None:
    # No entry for the file yet: it is read once, not hashed first and then parsed; the key made
    # from the bytes the reader read is the key a later load computes from the file.
    monkeypatch.setattr(_load, "FAST_MIN_BYTES", 0)
    if check_bytes is not None:  # many blocks
        monkeypatch.setattr(_load, "_CHECK_BYTES", check_bytes)
    path = tmp_path / "offers.csv"
    _many_offers(path)
    if prefix:  # a byte-order mark and leading comment lines before the header
        path.write_bytes(b"\xef\xbb\xbf# schema_version: 1\n# more\n" + path.read_bytes())
    if odd:  # a comment line: the fast reader declines, the csv reader reads the file
        path.write_text(path.read_text().replace("\n", "\n# a comment\n", 1))
    with mock.patch.object(_load, "identity", wraps=_cache.identity) as ident:
        parsed = user_offer_table(path, GPUS)
    args, kwargs = ident.call_args
    content = args[2] if len(args) > 2 else kwargs.get("content")
    assert ident.call_count == 1 and (content is None if odd else len(content) == 64)
    with (
        mock.patch.object(_load, "fast_offer_table", side_effect=AssertionError("parsed again")),
        mock.patch.object(_load, "_csv_offer_table", side_effect=AssertionError("parsed again")),
    ):
        cached = user_offer_table(path, GPUS)
    assert outcome(cached) == outcome(parsed) == outcome(csv_read(path))


def test_a_rewritten_file_is_parsed_again_even_at_the_same_size_and_time(tmp_path: Path, cache_home: Path) -> None:
    path = tmp_path / "offers.csv"
    _many_offers(path, price="3.50")
    before = path.stat()
    assert {o.on_demand_usd_per_gpu_hour for o in user_offer_table(path, GPUS)} == {3.5}
    _many_offers(path, price="3.60")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert {o.on_demand_usd_per_gpu_hour for o in user_offer_table(path, GPUS)} == {3.6}
    assert len(list(cache_home.glob("offers-*.npz"))) == 1  # one entry per file, replaced


def test_a_damaged_or_unwritable_cache_only_costs_time(tmp_path: Path, cache_home: Path) -> None:
    path = tmp_path / "offers.csv"
    _many_offers(path)
    expected = outcome(user_offer_table(path, GPUS))
    (entry,) = cache_home.glob("offers-*.npz")
    for damage in (b"not a zip file", entry.read_bytes()[: entry.stat().st_size // 2]):
        entry.write_bytes(damage)
        assert outcome(user_offer_table(path, GPUS)) == expected
    # An entry whose codes point past its values is refused, not trusted.
    with np.load(entry, allow_pickle=False) as npz:
        good = dict(npz.items())
    good["c.provider"] = good["c.provider"] + 5
    with open(entry, "wb") as f:
        np.savez(f, **good)
    assert outcome(user_offer_table(path, GPUS)) == expected
    # A cache folder that cannot be made (a file is in its way): the file is read as ever.
    for child in cache_home.iterdir():
        child.unlink()
    cache_home.rmdir()
    cache_home.write_text("in the way")
    assert outcome(user_offer_table(path, GPUS)) == expected


def test_an_entry_written_by_other_reader_code_is_not_read_back(
    tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ftsolve.catalog import _cache

    path = tmp_path / "offers.csv"
    _many_offers(path)
    user_offer_table(path, GPUS)
    monkeypatch.setattr(_cache, "_reader_digest", lambda: "other code or exchange rates")
    with mock.patch.object(_load, "_csv_offer_table", wraps=_load._csv_offer_table) as parse:
        user_offer_table(path, GPUS)
    assert parse.call_count == 1


def test_the_cache_keeps_the_entries_of_the_files_written_last(tmp_path: Path, cache_home: Path) -> None:
    from ftsolve.catalog import _cache

    for k in range(_cache.KEEP_ENTRIES + 2):
        path = tmp_path / f"offers-{k}.csv"
        _many_offers(path)
        user_offer_table(path, GPUS)
    assert len(list(cache_home.glob("offers-*.npz"))) == _cache.KEEP_ENTRIES


def test_without_a_home_folder_a_large_file_is_read_uncached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FTSOLVE_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(_load, "CACHE_MIN_BYTES", 0)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    path = tmp_path / "offers.csv"
    _many_offers(path)
    assert outcome(user_offer_table(path, GPUS)) == outcome(csv_read(path))
