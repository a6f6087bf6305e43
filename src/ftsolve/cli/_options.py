"""The job's vocabulary on the command line, generated from `JobSpec`'s fields.

Every field but `model` is one option: the flag is the field name with dashes (`--train-tokens`),
older spellings stay as aliases (`--tokens`, from the field's `cli_aliases`), values in human
units are parsed by the option's type (50M, 24h, $300, as in job files), the help is the field's
title and description, and the default shown is the model's. An option not typed is None and
leaves the field to the job file or to `JobSpec`'s default: a command-line default never
overrides either.
"""

from __future__ import annotations

import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import click
from pydantic.fields import FieldInfo

from ftsolve._errors import InvalidJobSpec
from ftsolve._files import JOB_FILE_MAX_BYTES, load_yaml, read_text_file
from ftsolve._tomllib import tomllib
from ftsolve._units import parse_count, parse_hours, parse_usd
from ftsolve.catalog import load_config_json
from ftsolve.catalog._hf import config_json_path
from ftsolve.solver import JobSpec

FC = TypeVar("FC", bound=Callable[..., Any])
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

# Unit named in a field's metadata -> (parser, metavar, examples).
UNITS: dict[str, tuple[Callable[[str], float], str, str]] = {
    "count": (parse_count, "COUNT", "50M, 1.2B"),
    "hours": (parse_hours, "HOURS", "24h, 90m, 2d"),
    "usd": (parse_usd, "USD", "300, $1.2k"),
}
SECTIONS = {"job": "Job", "recipe": "Training recipe", "constraints": "Constraints", "policy": "More"}
# Sections whose --help lists flag names only (with this lead-in); --help-all describes each.
COMPACT = {
    "Training recipe": "Stack defaults (--help-all):",
    "More": "Host, data, costs, preferences (--help-all):",
}
OTHER_SECTION = "Output and catalog"
# Options that describe the job but are not one field each: the model is a preset (--model) or a
# config.json (--config), and --job reads every field from a file.
_MODEL_PARAMS = ("job", "model", "config")
_HELP_ALL = "ftsolve.help_all"


def _extra(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def field_group(name: str) -> str:
    """The help section of a JobSpec field: job, recipe or constraints."""
    return str(_extra(JobSpec.model_fields[name]).get("group", "job"))


def field_unit(name: str) -> str | None:
    unit = _extra(JobSpec.model_fields[name]).get("unit")
    return None if unit is None else str(unit)


def field_flags(name: str) -> tuple[str, ...]:
    """The field's flag (its name with dashes) first, then the older spellings kept as aliases."""
    aliases = _extra(JobSpec.model_fields[name]).get("cli_aliases", [])
    return ("--" + name.replace("_", "-"), *(str(a) for a in aliases))


FLAG_FIELDS = tuple(name for name in JobSpec.model_fields if name != "model")
# The stack first: the recipe switches not given take its defaults.
RECIPE_FIELDS = tuple(sorted((n for n in FLAG_FIELDS if field_group(n) == "recipe"), key=lambda n: n != "stack"))
_FIELD_ORDER = tuple(sorted(FLAG_FIELDS, key=lambda n: n in RECIPE_FIELDS and n != "stack"))


_ParamType = click.ParamType


# --- Types: human input to field values, one line "Error: ..." and exit 2 when it is not one ---


class UnitValue(_ParamType):
    """A number in human units (50M tokens, 24h, $300), parsed as a job file's value is."""

    def __init__(self, unit: str) -> None:
        self.name = unit
        self._parse = UNITS[unit][0]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except InvalidJobSpec as exc:
            self.fail(str(exc), param, ctx)


class CommaList(_ParamType):
    """Comma-separated values: h100-sxm,l40s."""

    name = "list"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        items = tuple(v.strip() for v in value.split(",") if v.strip())
        if not items:
            self.fail(f"invalid list {value[:40]!r}: give at least one value, comma-separated", param, ctx)
        return items


class ProviderCounts(_ParamType):
    """provider=GPUs pairs: aws=8,gcp=16."""

    name = "quota"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        out: dict[str, int] = {}
        for part in value.split(","):
            provider, _, number = part.partition("=")
            number = number.strip()
            # At most 9 digits: a quota above a billion GPUs is a typo, and int() of 5000 digits raises.
            if not provider.strip() or not (number.isascii() and number.isdigit() and len(number) <= 9):
                self.fail(f"invalid quota {value[:40]!r}: use provider=GPUs pairs like aws=8,gcp=16", param, ctx)
            out[provider.strip().lower()] = int(number)
        return out


def _choices(annotation: Any) -> tuple[str, ...] | None:
    return tuple(typing.get_args(annotation)) if typing.get_origin(annotation) is Literal else None


def _without_none(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation


def _param_type(name: str) -> tuple[_ParamType | None, str | None, str]:
    """(click type, metavar, a note for the full help) for a field; (None, None, '') for a switch."""
    annotation = _without_none(JobSpec.model_fields[name].annotation)
    unit = field_unit(name)
    if unit is not None:
        return UnitValue(unit), UNITS[unit][1], f"Examples: {UNITS[unit][2]}."
    if annotation is bool:
        return None, None, ""
    if annotation is int:
        return click.INT, "INTEGER", ""
    if annotation is float:
        return click.FLOAT, "FLOAT", ""
    choices = _choices(annotation)
    if choices is not None:
        metavar = "[" + "|".join(choices) + "]"
        if len(metavar) <= 16:
            return click.Choice(choices), metavar, ""
        described = all(c in str(JobSpec.model_fields[name].description) for c in choices)
        note = "" if described else f"One of: {', '.join(choices)}."
        return click.Choice(choices), name.rsplit("_", 1)[-1].upper(), note
    origin = typing.get_origin(annotation)
    if origin is tuple:
        item_choices = _choices(typing.get_args(annotation)[0])
        note = f"From: {', '.join(item_choices)}." if item_choices else ""
        return CommaList(), "LIST", ("Comma-separated. " + note).strip()
    if origin is dict:
        return ProviderCounts(), "P=N,...", "Pairs like aws=8,gcp=16."
    if annotation is str:
        return click.STRING, "TEXT", ""
    raise TypeError(f"JobSpec.{name}: no command-line type for {annotation!r}")


def shown_default(name: str) -> str | None:
    """JobSpec's default for a field as help shows it; None where the field is required or unset."""
    info = JobSpec.model_fields[name]
    value = info.get_default()
    if value is None and field_group(name) == "recipe":
        return "the stack's"
    if value is None or info.is_required():
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        annotation = _without_none(info.annotation)
        if set(value) == set(_choices(typing.get_args(annotation)[0]) or ()):
            return "all"
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _sentence(text: str) -> str:
    text = text.strip()
    if text.split(" ", 1)[0].isalpha():  # not "torch.compile" or "embed_tokens"
        text = text[:1].upper() + text[1:]
    return text + ("" if text.endswith(".") else ".")


class FieldOption(click.Option):
    """An option that sets one JobSpec field; it knows the field for the help sections."""

    def __init__(self, *args: Any, field_name: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.field_name = field_name

    def summary_record(self) -> tuple[str, str]:
        """One short line for `--help`: the field's flag and title, with the default."""
        info = JobSpec.model_fields[self.field_name]
        # Numbers need no metavar here: the title says what they count.
        plain = self.metavar in (None, "INTEGER", "FLOAT")
        left = self.opts[0] if plain else f"{self.opts[0]} {self.metavar}"
        if self.secondary_opts:
            left = f"{self.opts[0]} / {self.secondary_opts[0]}"
        unit = field_unit(self.field_name)
        text = str(info.title) + (f": {UNITS[unit][2]}" if unit else "")
        default = shown_default(self.field_name)
        return left, text + (f" ({default})." if default else ".")


def field_option(name: str) -> Callable[[FC], FC]:
    """The click option for JobSpec field `name`: its flag, aliases, type, help and default."""
    info = JobSpec.model_fields[name]
    param_type, metavar, note = _param_type(name)
    help_text = " ".join(x for x in (_sentence(info.description or str(info.title)), note) if x)
    default = shown_default(name)
    if default is not None:
        help_text += f"  [default: {default}]"
    flags = field_flags(name)
    if param_type is None:  # a switch: --x/--no-x, so a flag can also turn off what a job file turned on
        decls = [f"{flag}/--no-{flag.removeprefix('--')}" for flag in flags]
        return click.option(name, *decls, cls=FieldOption, field_name=name, default=None, help=help_text)
    return click.option(
        name, *flags, cls=FieldOption, field_name=name, type=param_type, metavar=metavar, default=None, help=help_text
    )


def field_options(names: tuple[str, ...]) -> Callable[[FC], FC]:
    def decorate(fn: FC) -> FC:
        for name in reversed(names):
            fn = field_option(name)(fn)
        return fn

    return decorate


def _show_all_help(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    ctx.meta[_HELP_ALL] = True
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit()


# Options around the fields: where the job comes from, and the catalog and output.
_MODEL_OPTIONS: list[Decorator] = [
    click.option("--job", type=click.Path(dir_okay=False), help="Job file (YAML/TOML); typed flags override it."),
    click.option("--model", help="Model preset: llama-3.1-8b (here or in --job)."),
    click.option("--config", type=click.Path(path_type=Path), help="Or a local config.json (or its folder)."),
]
_OUTPUT_OPTIONS: list[Decorator] = [
    click.option("--offers", type=click.Path(dir_okay=False), help="Extra offers file (overrides bundled)."),
    click.option("--engine", type=click.Choice(["scan", "cpsat"]), default="scan", help="Solver engine."),
    click.option("--max-age-days", type=int, default=180, help="Warn about older prices (180)."),
    click.option("--json", is_flag=True, help="Print JSON."),
    click.option(
        "--help-all",
        is_flag=True,
        is_eager=True,
        expose_value=False,
        callback=_show_all_help,
        help="Every option, described, and exit.",
    ),
]


def job_options(fn: FC) -> FC:
    """The job's options (one per JobSpec field, plus --job, --model, --config) and the catalog's."""
    fn = field_options(_FIELD_ORDER)(_apply(_OUTPUT_OPTIONS, fn))
    return _apply(_MODEL_OPTIONS, fn)


def _apply(options: list[Decorator], fn: FC) -> FC:
    out: Callable[..., Any] = fn
    for option in reversed(options):
        out = option(out)
    return typing.cast(FC, out)


class GroupedCommand(click.Command):
    """Help in sections that fits one screen: each field's title and default in `--help`, the
    training recipe by name only; `--help-all` gives every option with its description."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        full = bool(ctx.meta.get(_HELP_ALL))
        rows: dict[str, list[tuple[str, str]]] = {title: [] for title in (*SECTIONS.values(), OTHER_SECTION)}
        names: dict[str, list[str]] = {section: [] for section in COMPACT}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            section = _section(param)
            if isinstance(param, FieldOption) and not full:
                if section in COMPACT:
                    names[section].append(param.opts[0])
                    continue
                record = param.summary_record()
            rows[section].append(record)
        for section, records in rows.items():
            if names.get(section):
                _write_names(formatter, section, names[section])
            elif records:
                with formatter.section(section):
                    formatter.write_dl(records)


def _section(param: click.Parameter) -> str:
    if isinstance(param, FieldOption):
        return SECTIONS[field_group(param.field_name)]
    return SECTIONS["job"] if param.name in _MODEL_PARAMS else OTHER_SECTION


def _write_names(formatter: click.HelpFormatter, section: str, flags: list[str]) -> None:
    with formatter.section(section):
        intro = COMPACT[section]
        width = max(formatter.width - formatter.current_indent, 40)
        # In alphabetical order: an index to look a flag up in (and it packs into fewer lines).
        for line in textwrap.wrap(
            " ".join([intro, *sorted(flags)]), width, break_on_hyphens=False, break_long_words=False
        ):
            formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


# --- From the options (and a job file) to a JobSpec ---


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
    for name in _unit_fields():
        if isinstance(out.get(name), str):
            out[name] = UNITS[str(field_unit(name))][0](out[name])
    config = config_json_path(out["model"], p.parent) if isinstance(out.get("model"), str) else None
    if config is not None:
        out["model"] = load_config_json(config)  # relative to the job file, not the working directory
    return out


def _unit_fields() -> Iterator[str]:
    return (name for name in JobSpec.model_fields if field_unit(name) is not None)


def job_from_options(o: dict[str, Any]) -> JobSpec:
    """The JobSpec the job file and the flags describe; a flag typed on the command line wins.

    An option not typed is None (no option has a default of its own), so the job file's value,
    or else JobSpec's default, stands.
    """
    fields: dict[str, Any] = load_job_file(o["job"]) if o.get("job") else {}
    fields |= {name: o[name] for name in FLAG_FIELDS if o.get(name) is not None}
    if o.get("model") is not None:
        fields["model"] = str(o["model"]).lower()
    if o.get("config") is not None:
        if o.get("model") is not None:
            raise InvalidJobSpec("give --model or --config, not both")
        fields["model"] = load_config_json(o["config"])
    for required, flag in (("model", "--model/--config"), ("train_tokens", "--train-tokens"), ("seq_len", "--seq-len")):
        if required not in fields:
            raise InvalidJobSpec(f"missing {required}: pass {flag} or set {required} in the --job file")
    return JobSpec.build(**fields)
