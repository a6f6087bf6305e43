from __future__ import annotations

import datetime as dt
import sys

import click

from ftsolve._errors import NoFeasiblePlan
from ftsolve._units import parse_count, parse_hours, parse_usd
from ftsolve.catalog import load_catalog
from ftsolve.cli._catalog import catalog_group, models_group
from ftsolve.cli._common import errors
from ftsolve.cli._estimate import estimate_group
from ftsolve.cli._render import render_infeasible, render_plans
from ftsolve.solver import JobSpec, plan
from ftsolve.solver._memory import OPTIMIZERS


def _csv(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    return items or None


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="ftsolve")
def cli() -> None:
    """Plan LLM fine-tuning on rented GPUs: what to rent, how to train, what it really costs."""


@cli.command("plan")
@click.option("--model", required=True, help="Model preset, e.g. llama-3.1-8b.")
@click.option("--tokens", required=True, help="Tokens to train on, all epochs: 50M, 1.2B.")
@click.option("--seq-len", required=True, type=int, help="Sequence length in tokens.")
@click.option("--global-batch", type=int, default=16, show_default=True, help="Sequences per optimizer step.")
@click.option("--methods", default="full,lora,qlora", show_default=True, help="Allowed methods.")
@click.option(
    "--optimizer",
    type=click.Choice(list(OPTIMIZERS)),
    default="adamw",
    show_default=True,
    help="Optimizer-state regime.",
)
@click.option("--lora-rank", type=int, default=16, show_default=True)
@click.option("--deadline", help="Deadline: 24h, 90m, 2d.")
@click.option("--budget", help="Budget in USD: 300, $1.2k.")
@click.option(
    "--confidence",
    type=float,
    default=0.9,
    show_default=True,
    help="Probability the deadline must hold with.",
)
@click.option(
    "--markets",
    default="on-demand,interruptible,fallback",
    show_default=True,
    help="fallback = interruptible first, then on-demand to keep the deadline.",
)
@click.option("--trials", type=int, default=0, show_default=True, help="Trial runs before the final run.")
@click.option(
    "--trial-fraction", type=float, default=0.05, show_default=True, help="Share of the data per trial."
)
@click.option(
    "--eval-fraction",
    type=float,
    default=0.0,
    show_default=True,
    help="Evaluation tokens as a share of training tokens.",
)
@click.option(
    "--real-token-fraction",
    type=float,
    default=1.0,
    show_default=True,
    help="Share of real tokens (padding lowers it; 1.0 when packed).",
)
@click.option(
    "--failure-prob",
    type=float,
    default=0.0,
    show_default=True,
    help="Probability a run fails and is restarted.",
)
@click.option("--provider", "providers", help="Allowed providers, comma-separated.")
@click.option("--region", "regions", help="Allowed regions, comma-separated.")
@click.option("--country", "countries", help="Allowed ISO country codes, comma-separated.")
@click.option("--eu-only", is_flag=True, help="Only offers in EU/EEA countries.")
@click.option("--gpu", "gpus", help="Allowed GPU ids, comma-separated (e.g. h100-sxm,a100-sxm-80gb).")
@click.option("--max-gpus", type=int, default=64, show_default=True)
@click.option("--max-nodes", type=int, default=4, show_default=True)
@click.option(
    "--offers", "offers_path", type=click.Path(dir_okay=False), help="Extra offers CSV (overrides bundled)."
)
@click.option("--engine", type=click.Choice(["scan", "cpsat"]), default="scan", show_default=True)
@click.option(
    "--max-age-days",
    type=int,
    default=180,
    show_default=True,
    help="Warn when a plan's price is older than this.",
)
@click.option("--top", type=int, default=5, show_default=True, help="Number of plans.")
@click.option("--json", "as_json", is_flag=True, help="Print the plans as JSON.")
@errors
def plan_cmd(
    model: str,
    tokens: str,
    seq_len: int,
    global_batch: int,
    methods: str,
    optimizer: str,
    lora_rank: int,
    deadline: str | None,
    budget: str | None,
    confidence: float,
    markets: str,
    trials: int,
    trial_fraction: float,
    eval_fraction: float,
    real_token_fraction: float,
    failure_prob: float,
    providers: str | None,
    regions: str | None,
    countries: str | None,
    eu_only: bool,
    gpus: str | None,
    max_gpus: int,
    max_nodes: int,
    offers_path: str | None,
    engine: str,
    max_age_days: int,
    top: int,
    as_json: bool,
) -> None:
    """Rank plans for a fine-tuning job by expected total cost."""
    job = JobSpec.build(
        model=model.lower(),
        train_tokens=parse_count(tokens),
        seq_len=seq_len,
        global_batch_size=global_batch,
        methods=_csv(methods),
        optimizer=optimizer,
        lora_rank=lora_rank,
        deadline_hours=parse_hours(deadline) if deadline else None,
        budget_usd=parse_usd(budget) if budget else None,
        deadline_confidence=confidence,
        markets=_csv(markets),
        trial_runs=trials,
        trial_fraction=trial_fraction,
        failure_probability=failure_prob,
        eval_fraction=eval_fraction,
        real_token_fraction=real_token_fraction,
        providers=_csv(providers),
        regions=_csv(regions),
        countries=_csv(countries),
        eu_only=eu_only,
        gpus=_csv(gpus),
        max_gpus=max_gpus,
        max_nodes=max_nodes,
    )
    catalog = load_catalog(offers_path)
    try:
        result = plan(job, catalog, engine=engine, top=top)
    except NoFeasiblePlan as exc:
        if as_json:
            click.echo(exc.infeasibility.model_dump_json(indent=2))
        else:
            render_infeasible(exc.infeasibility)
        sys.exit(1)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        render_plans(result)
    today = dt.date.today()
    for p in result.plans:
        age = (today - p.price_date).days
        if age > max_age_days:
            click.echo(
                f"warning: plan {p.rank}'s price is {age} days old ({p.price_date}, {p.offer.provider}); "
                "refresh it with `ftsolve catalog import`",
                err=True,
            )


cli.add_command(catalog_group)
cli.add_command(estimate_group)
cli.add_command(models_group)


def main() -> None:
    cli(prog_name="ftsolve")
