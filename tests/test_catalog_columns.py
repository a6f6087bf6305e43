"""The column catalog (issue 15 item 6): offers read into columns, Offer objects built on access."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import ftsolve
from ftsolve._errors import CatalogError
from ftsolve.catalog._arrays import OfferArrays
from ftsolve.catalog._columns import OfferTable
from ftsolve.catalog._load import _offer_from_row, _read_text, _table, load_gpus, read_offer_table
from ftsolve.cli._main import cli

GPUS = load_gpus()
TEXT = _read_text("offers.csv")
HEADER = TEXT.splitlines()[1]
COL = {name: i for i, name in enumerate(HEADER.split(","))}
GOOD = "aws,t,i1,h100-sxm,H100,8,3.5,1.2,list,,per-hour,us-east-1,US,true,,,,2026-01-05,false,src,,USD,"


def _eager(text: str, origin: str = "f.csv") -> list[ftsolve.Offer]:
    """Every row through Offer itself, as the catalog read offers before the columns."""
    return [_offer_from_row(row, f"{origin}, row {line}", GPUS) for line, row in _table(text, origin)[1]]


def test_the_bundled_catalog_reads_the_same_as_one_offer_per_row() -> None:
    table = read_offer_table(TEXT, "bundled offers.csv", GPUS)
    eager = _eager(TEXT)
    assert len(table) == len(eager) and list(table) == eager
    assert [o.model_dump() for o in table] == [o.model_dump() for o in eager]
    assert table[0] == eager[0] and table[-1] == eager[-1] and table[1:3] == tuple(eager[1:3])
    assert table[5] is table[5]  # built once when indexed
    with pytest.raises(IndexError):
        table[len(table)]
    a, b = OfferArrays.of(eager), offer_arrays_of(table)
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name


def offer_arrays_of(table: OfferTable) -> OfferArrays:
    return ftsolve.Catalog(gpus=GPUS, offers=table, models={}).arrays


def test_a_catalog_of_offer_objects_keeps_them() -> None:
    offers = _eager(TEXT)[:3]
    cat = ftsolve.Catalog(gpus=GPUS, offers=tuple(offers), models={})
    assert cat.offers[1] is offers[1] and cat.offers == tuple(offers)


# Rows that break one rule each, with the cell that breaks it; both readers must refuse them alike.
BAD_CELLS = [
    ("gpus_per_node", "0"),
    ("gpus_per_node", "65"),
    ("gpus_per_node", "2.5"),
    ("gpus_per_node", "08x"),
    ("gpus_per_node", ""),
    ("on_demand_usd_per_gpu_hour", "-1"),
    ("on_demand_usd_per_gpu_hour", "1e9"),
    ("on_demand_usd_per_gpu_hour", "nan"),
    ("on_demand_usd_per_gpu_hour", "inf"),
    ("on_demand_usd_per_gpu_hour", "abc"),
    ("on_demand_usd_per_gpu_hour", "1_001"),
    ("on_demand_usd_per_gpu_hour", "1001"),
    ("interruptible_usd_per_gpu_hour", "9.0"),  # above on-demand
    ("provider", ""),
    ("provider", "a\tb"),
    ("provider", "x" * 201),
    ("instance_type", ""),
    ("gpu", "no-such-gpu"),
    ("price_kind", "cheap"),
    ("billing", "per-day"),
    ("country", "Germany"),
    ("launchable", "maybe"),
    ("not_launchable_reason", "reason"),  # a reason on a launchable offer
    ("storage_usd_per_gb_month", "0"),
    ("interruption_rate_per_hour", "61"),
    ("price_date", "2026-13-01"),
    ("price_date", "2999-01-01"),
    ("price_date_estimated", "sometimes"),
    ("source", ""),
    ("currency", "JPY"),
    ("usd_per_unit", "-2"),
]


@pytest.mark.parametrize(("col", "cell"), BAD_CELLS)
def test_a_bad_row_is_refused_alike_by_both_readers(col: str, cell: str) -> None:
    cells = GOOD.split(",")
    cells[COL[col]] = cell
    text = f"{HEADER}\n{GOOD.replace('i1', 'i0')}\n{','.join(cells)}\n"
    with pytest.raises(CatalogError) as eager:
        _eager(text)
    with pytest.raises(CatalogError) as columns:
        read_offer_table(text, "f.csv", GPUS)
    assert str(columns.value) == str(eager.value)
    assert "\n" not in str(columns.value) and "f.csv, row 3" in str(columns.value)


@pytest.mark.parametrize("cell", ["1.", ".5", "001", " 1.5 "])
def test_numbers_offer_accepts_read_the_same(cell: str) -> None:
    cells = GOOD.split(",")
    cells[COL["interruptible_usd_per_gpu_hour"]] = cell
    text = f"{HEADER}\n{','.join(cells)}\n"
    assert list(read_offer_table(text, "f.csv", GPUS)) == _eager(text)


def test_euro_prices_and_defaults_read_the_same() -> None:
    cells = GOOD.split(",")
    for name, value in (("currency", "eur"), ("source_gpu_name", ""), ("launchable", "no")):
        cells[COL[name]] = value
    cells[COL["not_launchable_reason"]] = "closed"
    text = f"{HEADER}\n{','.join(cells)}\n"
    assert list(read_offer_table(text, "f.csv", GPUS)) == _eager(text)


def test_a_duplicate_before_a_bad_row_is_the_error() -> None:
    bad = GOOD.replace("i1", "i2").replace(",8,", ",0,")
    text = f"{HEADER}\n{GOOD}\n{GOOD}\n{bad}\n"
    with pytest.raises(CatalogError, match=r"row 3: duplicate offer"):
        read_offer_table(text, "f.csv", GPUS)


def test_a_user_file_overrides_by_key_and_a_bad_one_exits_2(tmp_path: Path) -> None:
    bundled = ftsolve.load_catalog(user=False)
    first = bundled.offers[0]
    path = tmp_path / "mine.csv"
    row = GOOD.replace("aws,t,i1", f"{first.provider},{first.tier},{first.instance_type}").replace(
        "us-east-1", first.region
    )
    path.write_text(f"{HEADER}\n{row}\n")
    cat = ftsolve.load_catalog(path, user=False)
    assert len(cat.offers) == len(bundled.offers) and cat.offers[-1].on_demand_usd_per_gpu_hour == 3.5
    assert cat.offers[-1].key == first.key and cat.offers[0] == bundled.offers[1]
    path.write_text(f"{HEADER}\n{row.replace(',8,', ',0,')}\n")
    result = CliRunner().invoke(cli, ["catalog", "validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}, row 2: field gpus_per_node" in result.output
