from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable
from typing import Any

import click

from ftsolve._errors import InvalidJobSpec, NoFeasiblePlan
from ftsolve._units import parse_count, parse_hours, parse_usd
from ftsolve.catalog import load_catalog
from ftsolve.cli._catalog import catalog_group, models_group
from ftsolve.cli._common import errors
from ftsolve.cli._estimate import estimate_group
from ftsolve.cli._render import render_explain, render_infeasible, render_plans
from ftsolve.solver import JobSpec, PlanSet, plan
from ftsolve.solver._memory import OPTIMIZERS


def _csv(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    return items or None


def _quota(value: str | None) -> dict[str, int] | None:
    if not value:
        return None
    out = {}
    for part in value.split(","):
        name, _, number = part.partition("=")
        if not number.strip().isdigit():
            raise InvalidJobSpec(f"invalid --quota {value!r}: use provider=GPUs pairs like aws=8,gcp=16")
        out[name.strip().lower()] = int(number)
    return out


# (flag, click keyword arguments). Grouped as they appear in --help.
_JOB_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--model", {"required": True, "help": "Model preset, e.g. llama-3.1-8b."}),
    ("--tokens", {"required": True, "help": "Tokens to train on, all epochs: 50M, 1.2B."}),
    ("--seq-len", {"required": True, "type": int, "help": "Sequence length in tokens."}),
    ("--global-batch", {"type": int, "default": 16, "show_default": True, "help": "Sequences per step."}),
    ("--methods", {"default": "full,lora,qlora", "show_default": True, "help": "Allowed methods."}),
    ("--optimizer", {"type": click.Choice(list(OPTIMIZERS)), "default": "adamw", "show_default": True}),
    ("--lora-rank", {"type": int, "default": 16, "show_default": True}),
    (
        "--real-token-fraction",
        {
            "type": float,
            "default": 1.0,
            "show_default": True,
            "help": "Share of real tokens (padding lowers it).",
        },
    ),
    (
        "--eval-fraction",
        {
            "type": float,
            "default": 0.0,
            "show_default": True,
            "help": "Evaluation tokens as a share of training tokens.",
        },
    ),
    (
        "--trials",
        {"type": int, "default": 0, "show_default": True, "help": "Trial runs before the final run."},
    ),
    (
        "--trial-fraction",
        {"type": float, "default": 0.05, "show_default": True, "help": "Data share per trial."},
    ),
    (
        "--failure-prob",
        {
            "type": float,
            "default": 0.0,
            "show_default": True,
            "help": "Probability a run fails and is restarted.",
        },
    ),
    # constraints
    ("--deadline", {"help": "Deadline: 24h, 90m, 2d."}),
    ("--budget", {"help": "Budget in USD: 300, $1.2k."}),
    (
        "--confidence",
        {
            "type": float,
            "default": 0.9,
            "show_default": True,
            "help": "Probability the deadline must hold with.",
        },
    ),
    (
        "--markets",
        {
            "default": "on-demand,interruptible,fallback",
            "show_default": True,
            "help": "fallback = interruptible first, then on-demand to keep the deadline.",
        },
    ),
    ("--provider", {"help": "Allowed providers, comma-separated."}),
    ("--region", {"help": "Allowed regions, comma-separated."}),
    ("--country", {"help": "Allowed ISO country codes, comma-separated."}),
    ("--eu-only", {"is_flag": True, "help": "Only offers in EU/EEA countries."}),
    ("--gpu", {"help": "Allowed GPU ids, comma-separated (e.g. h100-sxm,a100-sxm-80gb)."}),
    ("--max-gpus", {"type": int, "default": 64, "show_default": True}),
    ("--max-nodes", {"type": int, "default": 4, "show_default": True}),
    ("--quota", {"help": "GPU quotas by provider: aws=8,gcp=16."}),
    (
        "--objective",
        {
            "type": click.Choice(["cost", "time", "weighted"]),
            "default": "cost",
            "show_default": True,
            "help": "Minimum cost, minimum time within budget, or cost + --time-value per hour.",
        },
    ),
    (
        "--time-value",
        {
            "type": float,
            "default": 0.0,
            "show_default": True,
            "help": "USD an hour of earlier finish is worth (objective weighted).",
        },
    ),
    # catalog and output
    ("--offers", {"type": click.Path(dir_okay=False), "help": "Extra offers file (overrides bundled)."}),
    ("--engine", {"type": click.Choice(["scan", "cpsat"]), "default": "scan", "show_default": True}),
    (
        "--max-age-days",
        {
            "type": int,
            "default": 180,
            "show_default": True,
            "help": "Warn when a plan's price is older than this.",
        },
    ),
    ("--json", {"is_flag": True, "help": "Print JSON."}),
]


def job_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for flag, kwargs in reversed(_JOB_OPTIONS):
        fn = click.option(flag, **kwargs)(fn)
    return fn


def job_from_options(o: dict[str, Any]) -> JobSpec:
    """The JobSpec that the shared job flags describe (human units parsed here)."""
    return JobSpec.build(
        model=o["model"].lower(),
        train_tokens=parse_count(o["tokens"]),
        seq_len=o["seq_len"],
        global_batch_size=o["global_batch"],
        methods=_csv(o["methods"]),
        optimizer=o["optimizer"],
        lora_rank=o["lora_rank"],
        real_token_fraction=o["real_token_fraction"],
        eval_fraction=o["eval_fraction"],
        trial_runs=o["trials"],
        trial_fraction=o["trial_fraction"],
        failure_probability=o["failure_prob"],
        deadline_hours=parse_hours(o["deadline"]) if o["deadline"] else None,
        budget_usd=parse_usd(o["budget"]) if o["budget"] else None,
        deadline_confidence=o["confidence"],
        markets=_csv(o["markets"]),
        providers=_csv(o["provider"]),
        regions=_csv(o["region"]),
        countries=_csv(o["country"]),
        eu_only=o["eu_only"],
        gpus=_csv(o["gpu"]),
        max_gpus=o["max_gpus"],
        max_nodes=o["max_nodes"],
        objective=o["objective"],
        time_value_usd_per_hour=o["time_value"],
    )


def _plans_or_exit(o: dict[str, Any], top: int, within: float | None) -> PlanSet:
    job = job_from_options(o)
    catalog = load_catalog(o["offers"])
    try:
        return plan(job, catalog, engine=o["engine"], top=top, within=within)
    except NoFeasiblePlan as exc:
        if o["json"]:
            click.echo(exc.infeasibility.model_dump_json(indent=2))
        else:
            render_infeasible(exc.infeasibility)
        sys.exit(1)


def _warn_stale(result: PlanSet, max_age_days: int) -> None:
    today = dt.date.today()
    for p in result.plans:
        age = (today - p.price_date).days
        if age > max_age_days:
            click.echo(
                f"warning: plan {p.rank}'s price is {age} days old ({p.price_date}, {p.offer.provider}); "
                "refresh it with `ftsolve catalog import`",
                err=True,
            )


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="ftsolve")
def cli() -> None:
    """Plan LLM fine-tuning on rented GPUs: what to rent, how to train, what it really costs."""


@cli.command("plan")
@job_options
@click.option("--top", type=int, default=5, show_default=True, help="Number of plans.")
@click.option("--within", type=float, help="Show every plan within this fraction of the best (0.05 = 5%).")
@errors
def plan_cmd(top: int, within: float | None, **o: Any) -> None:
    """Rank plans for a fine-tuning job (expected total cost by default)."""
    result = _plans_or_exit(o, top, within)
    if o["json"]:
        click.echo(result.model_dump_json(indent=2))
    else:
        render_plans(result)
    _warn_stale(result, o["max_age_days"])


@cli.command("explain")
@job_options
@click.option("--rank", type=int, default=1, show_default=True, help="Which plan to explain.")
@errors
def explain_cmd(rank: int, **o: Any) -> None:
    """Explain one plan in depth: every breakdown, the binding constraints, what lost and why."""
    result = _plans_or_exit(o, max(rank, 5), None)
    if rank < 1 or rank > len(result.plans):
        raise InvalidJobSpec(f"invalid rank {rank}: there are {len(result.plans)} plans")
    chosen = result.plans[rank - 1]
    if o["json"]:
        click.echo(chosen.model_dump_json(indent=2))
    else:
        render_explain(result, chosen)
    _warn_stale(result, o["max_age_days"])


cli.add_command(catalog_group)
cli.add_command(estimate_group)
cli.add_command(models_group)


def main() -> None:
    cli(prog_name="ftsolve")
