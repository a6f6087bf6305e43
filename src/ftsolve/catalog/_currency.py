"""Currencies: dated exchange rates (data/exchange_rates.csv) and the conversion to US dollars.

Offers and plans are priced in US dollars. An offer a provider quotes in euros or pounds is read
in its own currency (the `currency` column of an offers file) and converted at the rate of its
price date: the newest rate on or before it, else the oldest the table has. A plan shown in
another currency (`--currency`) is converted at the newest rate, named with its date.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import io
from dataclasses import dataclass
from importlib import resources
from typing import Literal, get_args

Currency = Literal["USD", "EUR", "GBP"]
CURRENCIES: tuple[Currency, ...] = get_args(Currency)


@dataclass(frozen=True)
class Rate:
    """US dollars for one unit of `currency` on `date`, and where the figure comes from."""

    currency: Currency
    usd_per_unit: float
    date: dt.date
    source: str


USD = Rate("USD", 1.0, dt.date(1970, 1, 1), "the catalog's own currency")


@functools.cache
def exchange_rates() -> tuple[Rate, ...]:
    """The bundled rates, oldest first per currency."""
    text = resources.files("ftsolve.catalog").joinpath("data/exchange_rates.csv").read_text(encoding="utf-8")
    rates = [
        Rate(row["currency"], float(row["usd_per_unit"]), dt.date.fromisoformat(row["date"]), row["source"])  # type: ignore[arg-type]
        for row in csv.DictReader(io.StringIO(text))
    ]
    return tuple(sorted(rates, key=lambda r: (r.currency, r.date)))


def rate_on(currency: Currency, day: dt.date | None = None) -> Rate:
    """The rate of `currency` on `day` (the newest on or before it, else the oldest); the newest
    rate when no day is given."""
    if currency == "USD":
        return USD
    known = [r for r in exchange_rates() if r.currency == currency]
    if not known:
        raise ValueError(f"no exchange rate for {currency}")
    if day is None:
        return known[-1]
    before = [r for r in known if r.date <= day]
    return before[-1] if before else known[0]
