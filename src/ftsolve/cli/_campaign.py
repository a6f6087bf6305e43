"""`ftsolve campaign FILE`: plan several runs together under one budget, calendar and quotas."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ftsolve.catalog import load_catalog
from ftsolve.cli._common import console, errors, plain
from ftsolve.solver._campaign import CampaignConflict, CampaignPlan, load_campaign, plan_campaign


@click.command("campaign")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--offers", type=click.Path(dir_okay=False), help="Extra offers file (overrides bundled).")
@click.option(
    "--time-limit",
    "time_limit_s",
    type=click.FloatRange(0, 3600, min_open=True),
    default=8.0,
    show_default=True,
    help="Seconds the solver may search; a search cut short reports its gap.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@errors
def campaign_cmd(file: Path, offers: str | None, time_limit_s: float, as_json: bool) -> None:
    """Plan the runs of a campaign file together: each run's plan, start and end, under the shared
    budget, deadline and quotas (schema: `ftsolve schema campaign`). Exit 0: a campaign; 1: none
    (the limits in conflict and what to change); 2: bad input."""
    campaign = load_campaign(file)
    result = plan_campaign(campaign, load_catalog(offers), time_limit_s=time_limit_s)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    elif result.conflict is not None:
        render_conflict(result.conflict)
    else:
        render_campaign(result)
    if result.status not in ("optimal", "feasible"):
        sys.exit(1)


def _status(result: CampaignPlan) -> str:
    if result.status == "optimal":
        return "optimal"
    if result.status == "feasible":
        return f"feasible, gap {result.gap:.2%}" if result.gap is not None else "feasible, gap unknown"
    return result.status


def render_campaign(result: CampaignPlan) -> None:
    con = console()
    if not result.runs:
        con.print(f"No campaign found ({_status(result)}) in {result.solve_seconds:.1f} s; try a longer --time-limit")
        return
    first = "cost, then finish" if result.objective == "cost" else "finish, then cost"
    totals = f"{len(result.runs)} runs, {result.total_cost_usd:.2f} USD expected, finish {result.finish_hours:.1f} h"
    solved = f"{_status(result)} ({first}) in {result.solve_seconds:.2f} s"
    con.print(Text.assemble(("Campaign", "bold"), plain(f": {totals}; {solved}")))
    t = Table(show_lines=False)
    for col in ("run", "start h", "end h", "offer", "GPUs", "method", "market", "hours", "cost USD", "alone USD"):
        t.add_column(col, justify="left" if col in ("run", "offer", "method", "market") else "right")
    for r in result.runs:
        p = r.plan
        t.add_row(
            *(
                plain(v)
                for v in (
                    r.name,
                    f"{r.start_hours:.1f}",
                    f"{r.end_hours:.1f}",
                    f"{p.offer.provider} {p.offer.region} {p.gpu}",
                    p.n_gpus,
                    p.method,
                    p.market,
                    f"{p.time.quantile_hours:.1f}",
                    f"{p.total_cost_usd:.2f}",
                    f"{r.alone_cost_usd:.2f}",
                )
            )
        )
    con.print(t)
    for r in result.runs:
        waits = f" (after {', '.join(r.after)})" if r.after else ""
        con.print(plain(f"  {r.name}{waits}: {r.plan.why}"))
    for note in result.notes:
        con.print(plain(f"Note: {note}"))


def render_conflict(conflict: CampaignConflict) -> None:
    con = console()
    if conflict.limits:
        how = "each by itself" if conflict.alone else "together"
        head = f"{', '.join(conflict.limits)} admit no campaign {how}; runs held: {', '.join(conflict.runs)}"
    else:
        head = conflict.summary
    con.print(Text.assemble(("No campaign meets the limits", "bold"), plain(f": {head}")))
    if conflict.relaxations:
        con.print("Smallest changes, each with the other limits kept:")
    for r in conflict.relaxations:
        con.print(plain(f"  {r.change}: campaign {r.total_cost_usd:.2f} USD, finish {r.finish_hours:.1f} h"))
