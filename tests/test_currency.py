"""Prices quoted in euros or pounds and plans shown in them (issue 15): dated rates, conversion at
the price date, and a display currency that changes how a plan reads, never what it costs."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from click.testing import CliRunner

import ftsolve
from ftsolve import CatalogError
from ftsolve.catalog import Offer, load_gpus, parse_offers, rate_on
from ftsolve.catalog._currency import exchange_rates
from ftsolve.cli import cli

GPUS = load_gpus()
HEADER = (
    "provider,tier,instance_type,gpu,gpus_per_node,on_demand_usd_per_gpu_hour,"
    "interruptible_usd_per_gpu_hour,region,price_date,source,currency"
)


def test_a_rate_is_the_newest_on_or_before_the_day() -> None:
    assert rate_on("EUR", dt.date(2026, 10, 7)).usd_per_unit == pytest.approx(1.1177)
    assert rate_on("EUR", dt.date(2026, 10, 29)).usd_per_unit == pytest.approx(1.1177)
    assert rate_on("EUR", dt.date(2020, 1, 1)).date == dt.date(2025, 1, 27)  # before the table: its oldest
    assert rate_on("GBP").date == max(r.date for r in exchange_rates() if r.currency == "GBP")  # the newest
    assert rate_on("USD").usd_per_unit == 1.0


def test_a_price_quoted_in_euros_is_converted_at_its_date_once() -> None:
    text = f"{HEADER}\nhetzner,cloud,g1,h100-sxm,1,2.0,1.0,fsn1,2026-10-08,price page,EUR\n"
    (offer,) = parse_offers(text, "offers.csv", GPUS)
    assert offer.currency == "EUR" and offer.usd_per_unit == pytest.approx(1.1177)
    assert offer.on_demand_usd_per_gpu_hour == pytest.approx(2.0 * 1.1177)
    assert offer.interruptible_usd_per_gpu_hour == pytest.approx(1.1177)
    again = Offer.model_validate(offer.model_dump())  # already converted: its figures stay
    assert again.on_demand_usd_per_gpu_hour == offer.on_demand_usd_per_gpu_hour
    usd = parse_offers(f"{HEADER}\nacme,std,g1,h100-sxm,1,2.0,,r,2026-10-08,page,\n", "offers.csv", GPUS)[0]
    assert usd.currency == "USD" and usd.usd_per_unit is None and usd.on_demand_usd_per_gpu_hour == 2.0


def test_an_unknown_currency_is_refused_naming_the_field() -> None:
    with pytest.raises(CatalogError, match="field currency"):
        parse_offers(f"{HEADER}\nacme,std,g1,h100-sxm,1,2.0,,r,2026-10-08,page,JPY\n", "offers.csv", GPUS)


def test_plans_shown_in_euros_cost_the_same_in_dollars() -> None:
    args = ["plan", "--model", "llama-3.1-8b", "--tokens", "50M", "--seq-len", "2048", "--deadline", "24h"]
    args += ["--top", "3"]
    runner = CliRunner()
    usd = json.loads(runner.invoke(cli, [*args, "--json"]).output)
    eur = runner.invoke(cli, [*args, "--currency", "EUR"], env={"COLUMNS": "160"})
    assert eur.exit_code == 0, eur.output
    rate = rate_on("EUR").usd_per_unit
    assert f"amounts in EUR at {rate:g} USD/EUR" in eur.output
    assert "cost EUR" in eur.output and "cost USD" not in eur.output
    rows = [line.split() for line in eur.output.splitlines() if re.match(r"^\d+\s.*×", line)]
    for row, plan in zip(rows, usd["plans"], strict=True):
        # The euro total is the sum of the items each rounded to the cent (so that they add up), the
        # dollar total rounded once: they may differ by half a cent per item and per total.
        slack = 0.0051 * (len(plan["cost_items"]) + 2)
        assert float(row[-1]) == pytest.approx(plan["total_cost_usd"] / rate, abs=slack)
    out = eur.output
    breakdown = " ".join(out[out.index("Plan 1 cost breakdown (EUR)") : out.index("Plan 1 time")].split())
    items = [float(x) for x in re.findall(r" (\d+\.\d\d)", breakdown.split("=")[0])]
    assert round(sum(items), 2) == float(breakdown.split("=")[1])
    # The JSON keeps dollars whatever the display currency.
    same = json.loads(runner.invoke(cli, [*args, "--json", "--currency", "EUR"]).output)
    assert [p["total_cost_usd"] for p in same["plans"]] == [p["total_cost_usd"] for p in usd["plans"]]


def test_bundled_seeweb_prices_are_read_as_euros_and_converted() -> None:
    seeweb = [o for o in ftsolve.load_catalog(user=False).offers if o.provider == "seeweb"]
    assert seeweb and all(o.currency == "EUR" and o.price_kind == "estimate" for o in seeweb)
    for o in seeweb:
        assert o.usd_per_unit == pytest.approx(rate_on("EUR", o.price_date).usd_per_unit)


@pytest.mark.parametrize("command", ["compare", "pareto"])
def test_compare_and_pareto_show_costs_in_the_display_currency(command: str) -> None:
    args = [command, "--model", "qwen3-4b", "--tokens", "10M", "--seq-len", "512", "--gpus", "h100-sxm,l40s"]
    runner = CliRunner()
    eur = runner.invoke(cli, [*args, "--currency", "EUR"], env={"COLUMNS": "200"})
    usd = runner.invoke(cli, args, env={"COLUMNS": "200"})
    assert eur.exit_code == usd.exit_code == 0, eur.output
    assert "cost EUR" in eur.output and "cost USD" not in eur.output and "cost USD" in usd.output

    def costs(out: str) -> list[float]:
        header = next(line for line in out.splitlines() if "┃" in line and "cost" in line)
        col = next(i for i, h in enumerate(header.split("┃")) if "cost" in h)
        rows = [line.split("│") for line in out.splitlines() if line.startswith("│")]
        return [float(r[col]) for r in rows if r[col].strip() not in ("", "-")]

    rate = rate_on("EUR").usd_per_unit
    assert costs(eur.output) == pytest.approx([c / rate for c in costs(usd.output)], abs=0.006)
