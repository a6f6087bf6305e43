from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from ftsolve._errors import InvalidJobSpec, NoFeasiblePlan, UnsafeOutput
from ftsolve._exports import EXPORTERS, export_files, render_export
from ftsolve._files import write_atomically
from ftsolve.catalog import load_catalog
from ftsolve.cli._common import LazyCommands, errors, one_line, plain
from ftsolve.cli._options import GroupedCommand, job_from_options, job_options
from ftsolve.cli._render import (
    progress_bar,
    render_compare,
    render_explain,
    render_infeasible,
    render_markdown,
    render_pareto,
    render_plans,
    write_plot,
)
from ftsolve.solver import Infeasibility, JobSpec, PlanSet, plan
from ftsolve.solver._campaign import campaign_schema
from ftsolve.solver._money import money
from ftsolve.solver._sweeps import compare, pareto

# Command name -> "module:attribute" of the commands imported on first use.
LAZY_COMMANDS = {
    "catalog": "ftsolve.cli._catalog:catalog_group",
    "models": "ftsolve.cli._catalog:models_group",
    "estimate": "ftsolve.cli._estimate:estimate_group",
    "campaign": "ftsolve.cli._campaign:campaign_cmd",
    "probe": "ftsolve.cli._probe:probe_cmd",
    "calibrate": "ftsolve.cli._probe:calibrate_cmd",
}


def _plans_or_exit(o: dict[str, Any], top: int, within: float | None) -> PlanSet:
    job = job_from_options(o)
    catalog = load_catalog(o["offers"])
    try:
        return plan(job, catalog, engine=o["engine"], top=top, within=within)
    except NoFeasiblePlan as exc:
        _exit_infeasible(exc, o["json"])


def _exit_infeasible(exc: NoFeasiblePlan, as_json: bool) -> NoReturn:
    if as_json:
        click.echo(exc.infeasibility.model_dump_json(indent=2))
    else:
        render_infeasible(exc.infeasibility)
    sys.exit(exc.exit_code)


def _warn_stale(result: PlanSet, max_age_days: int) -> None:
    today = dt.date.today()
    for p in result.plans:
        age = (today - p.price_date).days
        if age > max_age_days:
            click.echo(
                f"warning: plan {p.rank}'s price is {age} days old ({p.price_date}, {plain(p.offer.provider)}); "
                "refresh it with `ftsolve catalog update` or `ftsolve catalog import`",
                err=True,
            )


class OneLineErrorGroup(click.Group):
    """click prints a usage error on three lines (usage, hint, error); ftsolve's errors are one.

    The commands outside planning (catalog, models, estimate, campaign, probe, calibrate) are
    imported when first named: `ftsolve plan` never loads them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(self.commands, LAZY_COMMANDS)

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any
    ) -> Any:
        if extra.pop("standalone_mode", True) is False:
            return super().main(args, prog_name, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.ClickException as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if isinstance(exc, click.UsageError) and exc.ctx else ""
            click.echo(f"Error: {one_line(exc.format_message())}{hint}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except BrokenPipeError:
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=OneLineErrorGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="ftsolve")
def cli() -> None:
    """Plan LLM fine-tuning on rented GPUs: what to rent, how to train, what it really costs."""


@cli.command("plan", cls=GroupedCommand)
@job_options
@click.option("--top", type=int, default=5, help="Number of plans (5).")
@click.option("--within", type=float, help="Every plan within this share of the best: 0.05.")
@click.option("--markdown", is_flag=True, help="Print a Markdown table.")
@click.option("--wide", is_flag=True, help="Show every column, however wide.")
@errors
def plan_cmd(top: int, within: float | None, markdown: bool, wide: bool, **o: Any) -> None:
    """Rank plans for a job. Exit 0: plans, 1: none feasible, 2: bad input."""
    result = _plans_or_exit(o, top, within)
    if o["json"]:
        click.echo(result.model_dump_json(indent=2))
    elif markdown:
        click.echo(render_markdown(result))
    else:
        render_plans(result, wide=wide)
    _warn_stale(result, o["max_age_days"])


@cli.command("explain", cls=GroupedCommand)
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


@cli.command("export", cls=GroupedCommand)
@click.argument("kind", type=click.Choice(list(EXPORTERS)), metavar="KIND")
@job_options
@click.option("--rank", type=int, multiple=True, help="Plan to export (1); repeat with --out DIR.")
@click.option("--out", "out_arg", metavar="PATH", help="FILE.yaml/.json, or DIR: a folder per plan.")
@errors
def export_cmd(kind: str, rank: tuple[int, ...], out_arg: str | None, **o: Any) -> None:
    """Write a plan's config. KIND: skypilot (a task with the configs it runs), accelerate,
    axolotl, torchtune or transformers (TrainingArguments JSON)."""
    if out_arg is not None and not out_arg.strip():
        raise InvalidJobSpec("--out needs a file (.yaml, .json) or a folder name")
    out = None if out_arg is None else Path(out_arg)
    ranks = tuple(dict.fromkeys(rank or (1,)))
    single = out is None or out.suffix.lower() in (".yaml", ".yml", ".json")
    if single and len(ranks) > 1:
        raise InvalidJobSpec("several --rank values need --out DIR (one folder per plan)")
    result = _plans_or_exit({**o, "json": False}, max(*ranks, 5), None)
    for r in ranks:
        if r < 1 or r > len(result.plans):
            raise InvalidJobSpec(f"invalid rank {r}: there are {len(result.plans)} plans")
    catalog = load_catalog(o["offers"])
    if single:
        text = render_export(kind, result.plans[ranks[0] - 1], result.job, catalog)
        if out is None:
            click.echo(text, nl=False)
        else:
            write_atomically(out, text)
            click.echo(f"wrote {out}")
        return
    assert out is not None
    # Every folder's files are made before any is written: a refused plan leaves nothing behind.
    folders = {r: export_files(kind, result.plans[r - 1], result.job, catalog) for r in ranks}
    for r, files in folders.items():
        folder = out / f"plan-{r}"
        if folder.is_symlink():
            raise UnsafeOutput(f"{folder} is a symbolic link; give --out a folder of your own")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UnsafeOutput(f"{folder}: cannot create the folder ({exc.strerror or type(exc).__name__})") from None
        for name, text in files.items():
            write_atomically(folder / name, text)
        click.echo(f"wrote {folder}: {', '.join(files)}")


@cli.command("schema")
@click.argument("what", type=click.Choice(["job", "plan", "infeasible", "campaign"]))
def schema_cmd(what: str) -> None:
    """Print the JSON Schema of the job input, the plan output, the no-plan explanation, or a campaign file."""
    schema = {
        "job": JobSpec.model_json_schema,
        "plan": PlanSet.model_json_schema,
        "infeasible": Infeasibility.model_json_schema,
        "campaign": campaign_schema,
    }[what]()
    click.echo(json.dumps(schema, indent=2))


@cli.command("compare", cls=GroupedCommand)
@job_options
@click.option("--by", type=click.Choice(["gpu", "method"]), default="gpu", show_default=True)
@errors
def compare_cmd(by: str, **o: Any) -> None:
    """The same job side by side across GPU types (or methods): fits or not, hours, cost, what stops it."""
    job = job_from_options(o)
    rows = compare(job, load_catalog(o["offers"]), by="gpu" if by == "gpu" else "method")
    if o["json"]:
        click.echo(json.dumps([r.model_dump() for r in rows], indent=2))
    else:
        render_compare(rows, by, money(job))


@cli.command("pareto", cls=GroupedCommand)
@job_options
@click.option("--sweep", type=click.Choice(["deadline", "budget"]), default="deadline", show_default=True)
@click.option("--points", type=int, default=12, show_default=True, help="Values of the swept limit.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Write the frontier as SVG (or PNG).")
@errors
def pareto_cmd(sweep: str, points: int, plot: Path | None, **o: Any) -> None:
    """Expected cost against finish time: the frontier over a swept deadline (or budget)."""
    job = job_from_options(o)
    catalog = load_catalog(o["offers"])
    try:
        with progress_bar(points, enabled=not o["json"]) as advance:
            frontier = pareto(
                job, catalog, sweep="deadline" if sweep == "deadline" else "budget", points=points, on_point=advance
            )
    except NoFeasiblePlan as exc:
        _exit_infeasible(exc, o["json"])
    if o["json"]:
        click.echo(json.dumps([p.model_dump() for p in frontier], indent=2))
    else:
        render_pareto(frontier, sweep, money(job))
    if plot is not None:
        write_plot(plot, frontier, job)
        click.echo(f"wrote {plot}")


def main() -> None:
    cli(prog_name="ftsolve")
