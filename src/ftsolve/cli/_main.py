from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
import yaml

from ftsolve._errors import InvalidJobSpec, NoFeasiblePlan
from ftsolve._exports import EXPORTERS, export_plan
from ftsolve._files import JOB_FILE_MAX_BYTES, load_yaml, read_text_file, write_atomically
from ftsolve._tomllib import tomllib
from ftsolve._units import parse_count, parse_hours, parse_usd
from ftsolve.catalog import load_catalog, load_config_json
from ftsolve.catalog._hf import config_json_path
from ftsolve.cli._catalog import catalog_group, models_group
from ftsolve.cli._common import errors, one_line, plain
from ftsolve.cli._estimate import estimate_group
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
from ftsolve.solver._memory import OPTIMIZERS
from ftsolve.solver._stacks import LOSSES, STACK_NAMES
from ftsolve.solver._sweeps import compare, pareto


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
        if not name.strip() or not (number.strip().isascii() and number.strip().isdigit()):
            raise InvalidJobSpec(f"invalid --quota {value[:40]!r}: use provider=GPUs pairs like aws=8,gcp=16")
        out[name.strip().lower()] = int(number)
    return out


# (flag, click keyword arguments). Grouped as they appear in --help.
_JOB_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--job", {"type": click.Path(dir_okay=False), "help": "Job file (YAML/TOML); flags override it."}),
    ("--model", {"help": "Model preset: llama-3.1-8b (here or in --job)."}),
    ("--config", {"type": click.Path(path_type=Path), "help": "A local config.json (or its folder), not --model."}),
    ("--tokens", {"help": "Tokens to train on, all epochs: 50M, 1.2B."}),
    ("--seq-len", {"type": int, "help": "Sequence length in tokens."}),
    ("--global-batch", {"type": int, "default": 16, "help": "Sequences per step (16)."}),
    ("--methods", {"default": "full,lora,qlora", "help": "Allowed: full,lora,qlora."}),
    (
        "--optimizer",
        {
            "type": click.Choice(list(OPTIMIZERS)),
            "default": "adamw",
            "metavar": "NAME",
            "help": "Optimizer regime (adamw; adamw-bf16, adamw-8bit, ...).",
        },
    ),
    ("--lora-rank", {"type": int, "default": 16, "help": "LoRA rank (16)."}),
    (
        "--stack",
        {
            "type": click.Choice(list(STACK_NAMES)),
            "default": "hf",
            "metavar": "NAME",
            "help": "Training stack: hf, torchtune, unsloth, ... (hf).",
        },
    ),
    ("--loss", {"type": click.Choice(list(LOSSES)), "metavar": "KIND", "help": "fp32-upcast/bf16/chunked/fused."}),
    # Switches that a stack may turn on; a job file sets them false where a stack's default is on.
    ("--optimizer-in-backward", {"is_flag": True, "default": None, "help": "Optimizer step in backward."}),
    ("--activation-offload", {"is_flag": True, "default": None, "help": "Saved activations to CPU."}),
    ("--compile", {"is_flag": True, "default": None, "help": "torch.compile (recorded)."}),
    ("--variable-length", {"is_flag": True, "default": None, "help": "Batches of varying length (not packed)."}),
    ("--real-token-fraction", {"type": float, "default": 1.0, "help": "Share of real tokens (1.0 packed)."}),
    ("--eval-fraction", {"type": float, "default": 0.0, "help": "Evaluation tokens per training token."}),
    ("--trials", {"type": int, "default": 0, "help": "Trial runs before the final run."}),
    ("--trial-fraction", {"type": float, "default": 0.05, "help": "Data share per trial (0.05)."}),
    ("--failure-prob", {"type": float, "default": 0.0, "help": "Probability a run fails, restarts."}),
    # constraints
    ("--deadline", {"help": "Deadline: 24h, 90m, 2d."}),
    ("--budget", {"help": "Budget in USD: 300, $1.2k."}),
    ("--confidence", {"type": float, "default": 0.9, "help": "Deadline must hold with this (0.9)."}),
    ("--markets", {"default": "on-demand,interruptible,fallback", "help": "Allowed markets (all three)."}),
    ("--provider", {"help": "Allowed providers, comma-separated."}),
    ("--region", {"help": "Allowed regions, comma-separated."}),
    ("--country", {"help": "Allowed ISO country codes."}),
    ("--eu-only", {"is_flag": True, "help": "Only offers in EU/EEA countries."}),
    ("--gpu", {"help": "Allowed GPU ids: h100-sxm,l40s."}),
    ("--max-gpus", {"type": int, "default": 64, "help": "Most GPUs (64)."}),
    ("--max-nodes", {"type": int, "default": 4, "help": "Most nodes (4)."}),
    ("--quota", {"help": "GPU quotas by provider: aws=8,gcp=16."}),
    (
        "--objective",
        {
            "type": click.Choice(["cost", "time", "weighted"]),
            "default": "cost",
            "metavar": "GOAL",
            "help": "cost, time (within budget) or weighted.",
        },
    ),
    ("--time-value", {"type": float, "default": 0.0, "help": "USD per hour of earlier finish."}),
    # catalog and output
    ("--offers", {"type": click.Path(dir_okay=False), "help": "Extra offers file (overrides bundled)."}),
    ("--engine", {"type": click.Choice(["scan", "cpsat"]), "default": "scan", "help": "Solver engine."}),
    ("--max-age-days", {"type": int, "default": 180, "help": "Warn about older prices (180)."}),
    ("--json", {"is_flag": True, "help": "Print JSON."}),
]


_GROUPS = {
    "Job": [
        "job",
        "model",
        "config",
        "tokens",
        "seq_len",
        "global_batch",
        "methods",
        "optimizer",
        "lora_rank",
        "stack",
        "loss",
        "optimizer_in_backward",
        "activation_offload",
        "compile",
        "variable_length",
        "real_token_fraction",
        "eval_fraction",
        "trials",
        "trial_fraction",
        "failure_prob",
    ],
    "Constraints": [
        "deadline",
        "budget",
        "confidence",
        "markets",
        "provider",
        "region",
        "country",
        "eu_only",
        "gpu",
        "max_gpus",
        "max_nodes",
        "quota",
        "objective",
        "time_value",
    ],
}


class GroupedCommand(click.Command):
    """Help with the options in sections (job, constraints, output) so it fits on one screen."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[str, list[tuple[str, str]]] = {"Job": [], "Constraints": [], "Output and catalog": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            section = next((g for g, names in _GROUPS.items() if param.name in names), "Output and catalog")
            rows[section].append(record)
        for section, records in rows.items():
            if records:
                with formatter.section(section):
                    formatter.write_dl(records)


def job_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for flag, kwargs in reversed(_JOB_OPTIONS):
        fn = click.option(flag, **kwargs)(fn)
    return fn


# Flag parameter -> (JobSpec field, converter from the flag's value).
_FLAG_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "model": ("model", lambda v: str(v).lower()),
    "tokens": ("train_tokens", parse_count),
    "seq_len": ("seq_len", int),
    "global_batch": ("global_batch_size", int),
    "methods": ("methods", _csv),
    "optimizer": ("optimizer", str),
    "lora_rank": ("lora_rank", int),
    "stack": ("stack", str),
    "loss": ("loss", str),
    "optimizer_in_backward": ("optimizer_in_backward", bool),
    "activation_offload": ("activation_offload", bool),
    "compile": ("compile", bool),
    "variable_length": ("variable_length", bool),
    "real_token_fraction": ("real_token_fraction", float),
    "eval_fraction": ("eval_fraction", float),
    "trials": ("trial_runs", int),
    "trial_fraction": ("trial_fraction", float),
    "failure_prob": ("failure_probability", float),
    "deadline": ("deadline_hours", parse_hours),
    "budget": ("budget_usd", parse_usd),
    "confidence": ("deadline_confidence", float),
    "markets": ("markets", _csv),
    "provider": ("providers", _csv),
    "region": ("regions", _csv),
    "country": ("countries", _csv),
    "eu_only": ("eu_only", bool),
    "gpu": ("gpus", _csv),
    "max_gpus": ("max_gpus", int),
    "max_nodes": ("max_nodes", int),
    "quota": ("gpu_quota", lambda v: _quota(v)),
    "objective": ("objective", str),
    "time_value": ("time_value_usd_per_hour", float),
}
# Job-file values given in human units, parsed like the flags.
_FILE_UNITS: dict[str, Callable[[Any], Any]] = {
    "train_tokens": parse_count,
    "deadline_hours": parse_hours,
    "budget_usd": parse_usd,
}


def load_job_file(path: str) -> dict[str, Any]:
    """A job file's fields (JobSpec names; numbers may carry units: 50M, 36h, $500)."""
    p = Path(path)
    text = read_text_file(p, "job file", InvalidJobSpec, JOB_FILE_MAX_BYTES)
    if p.suffix.lower() == ".toml":
        try:
            data: Any = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: an integer over 4300 digits
            raise InvalidJobSpec(f"{path}: not valid TOML ({str(exc).splitlines()[0][:80]})") from None
    else:
        data = load_yaml(text, str(path), InvalidJobSpec)
    if not isinstance(data, dict):
        raise InvalidJobSpec(f"{path}: expected a mapping of job fields")
    unknown = sorted((str(key) for key in data if key not in JobSpec.model_fields), key=str)
    if unknown:
        shown = str(unknown[0])[:40]
        raise InvalidJobSpec(f"{path}: unknown field {shown!r}; fields are JobSpec's (ftsolve schema job)")
    out = dict(data)
    for field_name, parse in _FILE_UNITS.items():
        if isinstance(out.get(field_name), str):
            out[field_name] = parse(out[field_name])
    config = config_json_path(out["model"], p.parent) if isinstance(out.get("model"), str) else None
    if config is not None:
        out["model"] = load_config_json(config)  # relative to the job file, not the working directory
    return out


def job_from_options(o: dict[str, Any]) -> JobSpec:
    """The JobSpec the job file and the flags describe; flags typed on the command line win."""
    ctx = click.get_current_context()
    fields: dict[str, Any] = load_job_file(o["job"]) if o.get("job") else {}
    for param, (field_name, convert) in _FLAG_FIELDS.items():
        value = o.get(param)
        explicit = ctx.get_parameter_source(param) == click.core.ParameterSource.COMMANDLINE
        if value is None or (field_name in fields and not explicit):
            continue
        fields[field_name] = convert(value)
    if o.get("config") is not None:
        if o.get("model") is not None:
            raise InvalidJobSpec("give --model or --config, not both")
        fields["model"] = load_config_json(o["config"])
    for required, flag in (("model", "--model/--config"), ("train_tokens", "--tokens"), ("seq_len", "--seq-len")):
        if required not in fields:
            raise InvalidJobSpec(f"missing {required}: pass {flag} or set {required} in the --job file")
    return JobSpec.build(**fields)


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
                "refresh it with `ftsolve catalog import`",
                err=True,
            )


class OneLineErrorGroup(click.Group):
    """click prints a usage error on three lines (usage, hint, error); ftsolve's errors are one."""

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


@click.group(
    cls=OneLineErrorGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(package_name="ftsolve")
def cli() -> None:
    """Plan LLM fine-tuning on rented GPUs: what to rent, how to train, what it really costs."""


@cli.command("plan", cls=GroupedCommand)
@job_options
@click.option("--top", type=int, default=5, help="Number of plans (5).")
@click.option("--within", type=float, help="Every plan within this share of the best: 0.05.")
@click.option("--markdown", is_flag=True, help="Print a Markdown table.")
@errors
def plan_cmd(top: int, within: float | None, markdown: bool, **o: Any) -> None:
    """Rank plans for a fine-tuning job. Exit 0: plans; 1: none feasible (explained); 2: bad input."""
    result = _plans_or_exit(o, top, within)
    if o["json"]:
        click.echo(result.model_dump_json(indent=2))
    elif markdown:
        click.echo(render_markdown(result))
    else:
        render_plans(result)
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
@click.argument("kind", type=click.Choice(list(EXPORTERS)))
@job_options
@click.option("--rank", type=int, default=1, show_default=True, help="Which plan to export.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write here instead of stdout.")
@errors
def export_cmd(kind: str, rank: int, out: Path | None, **o: Any) -> None:
    """Write a launch config for a plan: a SkyPilot task, an accelerate config or an axolotl recipe."""
    result = _plans_or_exit({**o, "json": False}, max(rank, 5), None)
    if rank < 1 or rank > len(result.plans):
        raise InvalidJobSpec(f"invalid rank {rank}: there are {len(result.plans)} plans")
    catalog = load_catalog(o["offers"])
    text = yaml.safe_dump(export_plan(kind, result.plans[rank - 1], result.job, catalog), sort_keys=False)
    # The reason names providers from the catalog: one comment line whatever they contain.
    header = f"# ftsolve plan {rank}: {' '.join(result.plans[rank - 1].why.split())}\n"
    if out is None:
        click.echo(header + text, nl=False)
    else:
        write_atomically(out, header + text)
        click.echo(f"wrote {out}")


@cli.command("schema")
@click.argument("what", type=click.Choice(["job", "plan", "infeasible"]))
def schema_cmd(what: str) -> None:
    """Print the JSON Schema of the job input, the plan output, or the no-plan explanation."""
    schema = {
        "job": JobSpec.model_json_schema,
        "plan": PlanSet.model_json_schema,
        "infeasible": Infeasibility.model_json_schema,
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
        render_compare(rows, by)


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
        render_pareto(frontier, sweep)
    if plot is not None:
        write_plot(plot, frontier, job)
        click.echo(f"wrote {plot}")


cli.add_command(catalog_group)
cli.add_command(estimate_group)
cli.add_command(models_group)


def main() -> None:
    cli(prog_name="ftsolve")
