"""Campaigns: several fine-tuning runs planned together under one budget, one calendar and the GPU
quotas they share, solved as one CP-SAT model (docs/cpsat.md).

A campaign names its runs (each a job: JobSpec fields, or `like: <run>` with overrides), their
order (`after`), earliest starts and due hours, and the limits they share: a budget, a deadline,
GPUs held at once per provider, GPU type and region, and nodes per offer. A portfolio (a team's
month of independent jobs, each with its own due hour) is the same thing without `after`.

`plan_campaign` is a short pipeline: each run's candidate table (`build_candidates`), reduced to
the rows that can matter (`_Candidates`); the shared limits in model units (`_Limit`); one
`ChoiceProblem` with a `Timeline`, solved by `CpSatEngine`; the answer as a `CampaignPlan`, or, when
no campaign meets the limits, a `CampaignConflict` naming the limits and runs in conflict and
the smallest change of each that yields a campaign. `check_campaign` re-checks an answer from
its plans alone, without the solver.

The model (CpSatEngine's docstring has the notation): one choice table per run, its rows the run's
candidates (the job's own constraints met), each with key = expected total cost in integer cents,
duration_min = ⌈60 × the finish at the job's confidence⌉ (p90 by default), and the GPUs, nodes and
limited names (provider, GPU type, region, capacity entry; -1 where unlimited) the quotas read.
Rows are reduced by dominance (no cheaper-or-equal, no-shorter row with the same limited names and
no more GPUs or nodes) to at most MAX_ROWS_PER_RUN. The budget is a `Budget` on cost cents; each
quota kind a `Quota` over the timeline (window START) on GPUs by that name, each capacity entry one
on nodes; the `Timeline` has each run's earliest start (release), due hour, `after` pairs and the
deadline as horizon (without one, the end of all runs one after another, which never binds).
Objective: the sum of keys, then the finish (or the reverse), then the rows' preference order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ftsolve._errors import InvalidJobSpec, UnknownCatalogEntry
from ftsolve._files import JOB_FILE_MAX_BYTES, load_yaml, read_text_file
from ftsolve._tomllib import tomllib
from ftsolve._units import parse_count, parse_hours, parse_usd
from ftsolve.catalog import Catalog, Offer, config_json_path, load_catalog, load_config_json
from ftsolve.solver._api import plan_from_row
from ftsolve.solver._engines import (
    START,
    Budget,
    Choice,
    ChoiceProblem,
    ChoiceTable,
    CpSatEngine,
    Quota,
    SharedLimit,
    Timeline,
    presolve_dominance,
)
from ftsolve.solver._explain import diagnose
from ftsolve.solver._grid import CandidateTable, build_candidates
from ftsolve.solver._job import MARKETS, JobSpec, describe_validation_error
from ftsolve.solver._memory import METHOD_NAMES
from ftsolve.solver._plans import Plan
from ftsolve.solver._rows import order_by

I = NDArray[np.int64]
B = NDArray[np.bool_]

SCHEMA_VERSION = 1
# As JobSpec's deadline: ten years of hours. Times inside the model are whole minutes.
HOURS_MAX = 87_600
MINUTES_PER_HOUR = 60
# Rows per run the model keeps at most (after dominance): a few hundred keep 30 runs fast.
MAX_ROWS_PER_RUN = 300
RUN_FIELDS = ("like", "after", "earliest_start_hours", "due_hours")
QuotaKind = Literal["provider", "gpu", "region"]
QUOTA_KINDS: tuple[QuotaKind, ...] = ("provider", "gpu", "region")
_Count = Annotated[int, Field(ge=0, le=1_000_000)]
_UNIT_PARSERS: dict[str, Callable[[str, str], float]] = {"count": parse_count, "hours": parse_hours, "usd": parse_usd}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


# --- What a user describes -------------------------------------------------------------------


class Run(_Frozen):
    """One run of a campaign: its job, the runs it waits for, and when it may run (hours on the
    campaign's clock, which starts at 0)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="the run's name")
    job: JobSpec
    after: tuple[str, ...] = Field(default=(), description="runs that must end before this one starts")
    earliest_start_hours: float = Field(
        default=0.0, ge=0, le=HOURS_MAX, description="the run starts no earlier", json_schema_extra={"unit": "hours"}
    )
    due_hours: float | None = Field(
        default=None,
        gt=0,
        le=HOURS_MAX,
        description="the run ends by this hour (a portfolio job's own deadline)",
        json_schema_extra={"unit": "hours"},
    )


class Quotas(_Frozen):
    """GPUs all runs together may hold at once, by provider, by GPU type and by region."""

    provider: dict[str, _Count] = Field(default_factory=dict, description="e.g. {lambda: 8}")
    gpu: dict[str, _Count] = Field(default_factory=dict, description="canonical GPU ids, e.g. {h100-sxm: 16}")
    region: dict[str, _Count] = Field(default_factory=dict, description="e.g. {us-east-1: 8}")

    @field_validator("provider", "region")
    @classmethod
    def _lower(cls, v: dict[str, int]) -> dict[str, int]:
        return {name.strip().lower(): n for name, n in v.items()}


class Capacity(_Frozen):
    """How many nodes of an offer exist: the runs together hold at most `nodes` of the offers that
    match (provider and instance type, and the region and tier where given) at any time."""

    provider: str = Field(min_length=1)
    instance_type: str = Field(min_length=1)
    region: str | None = None
    tier: str | None = None
    nodes: _Count

    def matches(self, offer: Offer) -> bool:
        return (
            offer.provider.lower() == self.provider.lower()
            and offer.instance_type == self.instance_type
            and (self.region is None or offer.region.lower() == self.region.lower())
            and (self.tier is None or offer.tier == self.tier)
        )

    @property
    def label(self) -> str:
        where = "/".join(x for x in (self.region, self.tier) if x)
        return f"{self.provider} {self.instance_type}{' ' + where if where else ''}"


class Campaign(_Frozen):
    """Runs planned together: one budget, one deadline and shared quotas over one calendar."""

    schema_version: Literal[1] = 1
    runs: tuple[Run, ...] = Field(min_length=1, max_length=200)
    budget_usd: float | None = Field(
        default=None, gt=0, le=1e9, description="most all runs may cost together", json_schema_extra={"unit": "usd"}
    )
    deadline_hours: float | None = Field(
        default=None,
        gt=0,
        le=HOURS_MAX,
        description="every run ends within this many hours of the start",
        json_schema_extra={"unit": "hours"},
    )
    objective: Literal["cost", "finish"] = Field(
        default="cost", description="cost: least expected total cost, then earliest finish; finish: the reverse"
    )
    quotas: Quotas = Field(default_factory=Quotas)
    capacity: tuple[Capacity, ...] = Field(default=(), description="nodes of an offer that exist")

    @model_validator(mode="after")
    def _consistent(self) -> Campaign:
        names = [r.name for r in self.runs]
        seen = {n for n in names if names.count(n) > 1}
        if seen:
            raise ValueError(f"run names must be distinct ({sorted(seen)[0]!r} twice)")
        for r in self.runs:
            unknown = [a for a in r.after if a not in names]
            if unknown:
                raise ValueError(f"run {r.name!r} comes after {unknown[0]!r}, which is not a run")
            if r.due_hours is not None and r.due_hours <= r.earliest_start_hours:
                raise ValueError(f"run {r.name!r} is due before its earliest start")
        cycle = _cycle({r.name: r.after for r in self.runs})
        if cycle:
            raise ValueError(f"runs wait for each other in a circle: {' -> '.join(cycle)}")
        return self

    @classmethod
    def from_mapping(cls, data: object, origin: str = "campaign", base: Path | None = None) -> Campaign:
        """A campaign from a file's mapping (see `campaign_schema`): runs by name with flat job
        fields, `like`, `defaults` and units (50M, 36h, $500); one InvalidJobSpec line when wrong."""
        if not isinstance(data, dict):
            raise InvalidJobSpec(f"{origin}: expected a mapping with runs (see `ftsolve schema campaign`)")
        fields = dict(data)
        defaults = fields.pop("defaults", {}) or {}
        if not isinstance(defaults, dict):
            raise InvalidJobSpec(f"{origin}: defaults must map JobSpec fields to values")
        fields["runs"] = _runs_from_file(fields.get("runs"), defaults, origin, base or Path("."))
        try:
            return cls.model_validate(_with_units(fields, cls))
        except ValidationError as exc:
            raise InvalidJobSpec(f"{origin}: {describe_validation_error(exc)}") from None
        except InvalidJobSpec as exc:
            raise InvalidJobSpec(f"{origin}: {exc}") from None


def _cycle(after: Mapping[str, tuple[str, ...]]) -> list[str]:
    """A circle of `after` (names, the first repeated at the end), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str]:
        state[name] = 1
        for prev in after.get(name, ()):
            if state.get(prev) == 1:
                return [*path[path.index(prev) :], prev] if prev in path else [name, prev]
            if prev not in state:
                found = visit(prev, [*path, prev])
                if found:
                    return found
        state[name] = 2
        return []

    for name in after:
        if name not in state:
            found = visit(name, [name])
            if found:
                return found
    return []


def _runs_from_file(raw: object, defaults: dict[str, Any], origin: str, base: Path) -> list[dict[str, Any]]:
    """The file's runs (a mapping by name, or a list of mappings with `name`) as Run fields."""
    if isinstance(raw, dict):
        entries = {str(name): entry for name, entry in raw.items()}
    elif isinstance(raw, list) and all(isinstance(e, dict) and "name" in e for e in raw):
        entries = {str(e["name"]): {k: v for k, v in e.items() if k != "name"} for e in raw}
    else:
        raise InvalidJobSpec(f"{origin}: runs must map each run's name to its fields")
    out = []
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise InvalidJobSpec(f"{origin}: run {name[:40]!r} must be a mapping of fields")
        unknown = [str(k) for k in entry if k not in RUN_FIELDS and k not in JobSpec.model_fields]
        if unknown:
            raise InvalidJobSpec(
                f"{origin}: run {name[:40]!r}: unknown field {unknown[0][:40]!r}; a run's fields are JobSpec's "
                f"(ftsolve schema job) and {', '.join(RUN_FIELDS)}"
            )
        job = _job_fields(name, entries, defaults, origin, ())
        try:
            spec = JobSpec.build(**_with_units(_with_config(job, base), JobSpec))
        except InvalidJobSpec as exc:
            raise InvalidJobSpec(f"{origin}: run {name[:40]!r}: {exc}") from None
        run: dict[str, Any] = {"name": name, "job": spec}
        try:
            run |= _with_units({k: entry[k] for k in ("earliest_start_hours", "due_hours") if k in entry}, Run)
        except InvalidJobSpec as exc:
            raise InvalidJobSpec(f"{origin}: run {name[:40]!r}: {exc}") from None
        if "after" in entry:
            after = entry["after"]
            run["after"] = [after] if isinstance(after, str) else after
        out.append(run)
    return out


def _job_fields(
    name: str, entries: dict[str, Any], defaults: dict[str, Any], origin: str, chain: tuple[str, ...]
) -> dict[str, Any]:
    """A run's job fields: the defaults, or the fields of the run it is `like`, under its own."""
    if name in chain:
        raise InvalidJobSpec(f"{origin}: runs are `like` each other in a circle: {' -> '.join([*chain, name])}")
    entry = entries[name]
    like = entry.get("like")
    if like is None:
        fields = dict(defaults)
    elif not isinstance(like, str) or like not in entries:
        raise InvalidJobSpec(f"{origin}: run {name[:40]!r} is like {str(like)[:40]!r}, which is not a run")
    else:
        fields = _job_fields(like, entries, defaults, origin, (*chain, name))
    return fields | {k: v for k, v in entry.items() if k not in RUN_FIELDS}


def _with_units(fields: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """The fields with values written with a unit (50M, 36h, $500) as numbers, by the unit each
    field of `model` declares."""
    out = dict(fields)
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        unit = extra.get("unit")
        if isinstance(out.get(name), str) and isinstance(unit, str):
            out[name] = _UNIT_PARSERS[unit](out[name], name)
    return out


def _with_config(fields: dict[str, Any], base: Path) -> dict[str, Any]:
    model = fields.get("model")
    config = config_json_path(model, base) if isinstance(model, str) else None
    # A config.json is read relative to the campaign file, as a job file's is.
    return fields if config is None else fields | {"model": load_config_json(config)}


def load_campaign(path: str | Path) -> Campaign:
    """Read a campaign file (YAML, or TOML by its .toml suffix); one InvalidJobSpec line when wrong."""
    p = Path(path)
    text = read_text_file(p, "campaign file", InvalidJobSpec, JOB_FILE_MAX_BYTES)
    if p.suffix.lower() == ".toml":
        try:
            data: Any = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, ValueError) as exc:
            raise InvalidJobSpec(f"{p}: not valid TOML ({str(exc).splitlines()[0][:80]})") from None
    else:
        data = load_yaml(text, str(p), InvalidJobSpec)
    return Campaign.from_mapping(data, str(p), p.parent)


_UNIT_WORDS = {"count": "a count like 50M or 1.2B", "hours": "hours like 36h, 90m or 2d", "usd": "USD like $1.2k"}


def _unit_strings(props: dict[str, Any]) -> dict[str, Any]:
    """Fields with a unit also take a string with the unit written out (50M, 36h, $500)."""
    out = {}
    for name, prop in props.items():
        unit = prop.get("unit")
        words = {k: prop[k] for k in ("title", "description", "unit") if k in prop}
        text = {"type": "string", "description": _UNIT_WORDS.get(str(unit), "")}
        out[name] = {"anyOf": [prop, text], **words} if unit else prop
    return out


def campaign_schema() -> dict[str, Any]:
    """JSON Schema of a campaign file: Campaign's fields, `defaults`, and runs by name whose
    fields are JobSpec's (all optional, as `like` and `defaults` may give them) and Run's own."""
    schema = Campaign.model_json_schema()
    job = JobSpec.model_json_schema()
    defs = schema.setdefault("$defs", {})
    defs.update(job.get("$defs", {}))
    run = defs.pop("Run")
    props = dict(job["properties"])
    props.update({k: v for k, v in run["properties"].items() if k not in ("name", "job")})
    props["like"] = {"type": "string", "description": "the run whose job fields this one starts from"}
    props["after"] = {"anyOf": [props["after"], {"type": "string"}], "description": props["after"]["description"]}
    defs["RunEntry"] = {
        "type": "object",
        "title": "Run",
        "description": "a run: JobSpec fields (ftsolve schema job), like, after, earliest_start_hours, due_hours",
        "properties": _unit_strings(props),
        "additionalProperties": False,
    }
    schema["properties"] = _unit_strings(schema["properties"])
    schema["properties"]["runs"] = {
        "type": "object",
        "description": "runs by name",
        "additionalProperties": {"$ref": "#/$defs/RunEntry"},
        "minProperties": 1,
    }
    schema["properties"]["defaults"] = {
        "type": "object",
        "description": "JobSpec fields every run starts from",
        "properties": _unit_strings(job["properties"]),
        "additionalProperties": False,
    }
    schema["description"] = (Campaign.__doc__ or "").strip() + " Numbers may carry units: 50M, 36h, $500."
    return schema


# --- What the planner returns ----------------------------------------------------------------


class ScheduledRun(_Frozen):
    """One run's plan and its place on the campaign's calendar (hours from the start)."""

    name: str
    plan: Plan
    start_hours: float
    end_hours: float = Field(description="start plus the plan's finish at its job's confidence")
    after: tuple[str, ...]
    alone_cost_usd: float = Field(description="the cheapest plan this run has on its own, ignoring shared limits")


class CampaignRelaxation(_Frozen):
    """The smallest change of one shared limit that yields a campaign, and that campaign."""

    limit: str
    change: str
    value: float = Field(description="the limit's new value, in its unit")
    unit: Literal["usd", "hours", "gpus", "nodes"]
    total_cost_usd: float
    finish_hours: float


class CampaignConflict(_Frozen):
    """Why no campaign meets the limits: the limits (and runs) in conflict, and what would fix it."""

    summary: str
    limits: tuple[str, ...] = Field(description="shared limits that together admit no campaign (minimal)")
    alone: bool = Field(description="each of `limits` admits no campaign even by itself")
    runs: tuple[str, ...] = Field(description="runs that cannot be planned, or that the conflicting limits hold")
    relaxations: tuple[CampaignRelaxation, ...]


class CampaignPlan(_Frozen):
    """A campaign's runs with their plans and times, the totals, and how sure the solver is."""

    schema_version: int = SCHEMA_VERSION
    status: Literal["optimal", "feasible", "infeasible", "unknown"]
    objective: Literal["cost", "finish"]
    runs: tuple[ScheduledRun, ...] = Field(description="in order of start; empty without a campaign")
    total_cost_usd: float | None
    finish_hours: float | None
    gap: float | None = Field(description="relative optimality gap of the objective's first term (0: proven)")
    solve_seconds: float
    candidates: dict[str, int] = Field(description="rows per run in the model, after dominance")
    notes: tuple[str, ...] = ()
    conflict: CampaignConflict | None = None


# --- Stage 1: each run's candidates, reduced --------------------------------------------------


@dataclass(frozen=True)
class _Candidates:
    """One run's candidate table and the rows the model keeps (a ChoiceTable over them)."""

    run: Run
    table: CandidateTable
    rows: I  # indices into `table`, in the choice table's order
    choice: ChoiceTable
    undominated: int  # rows left by dominance, before the cap
    alone: int | None  # the run's cheapest plan on its own (row of `table`)


@dataclass(frozen=True)
class _Ids:
    """Integer ids of the names the limits hold: a provider, GPU or region with a quota."""

    provider: dict[str, int]
    gpu: dict[str, int]
    region: dict[str, int]

    def of(self, kind: str) -> dict[str, int]:
        out: dict[str, int] = getattr(self, kind)
        return out


def _ids(campaign: Campaign, catalog: Catalog) -> _Ids:
    known = {
        "provider": sorted({o.provider.lower() for o in catalog.offers}),
        "gpu": sorted(catalog.gpus),
        "region": sorted({o.region.lower() for o in catalog.offers}),
    }
    ids: dict[str, dict[str, int]] = {}
    for kind in QUOTA_KINDS:
        names = sorted(getattr(campaign.quotas, kind))
        for name in names:
            if name not in known[kind]:
                raise UnknownCatalogEntry("GPU" if kind == "gpu" else kind, name, known[kind])
        ids[kind] = {name: i for i, name in enumerate(names)}
    for i, cap in enumerate(campaign.capacity):
        if not any(cap.matches(o) for o in catalog.offers):
            raise InvalidJobSpec(f"capacity entry {i + 1} ({cap.label}) matches no offer in the catalog")
    return _Ids(ids["provider"], ids["gpu"], ids["region"])


def _columns(t: CandidateTable, campaign: Campaign, ids: _Ids) -> dict[str, I]:
    """The integer columns the limits read, per candidate of `t`: minutes, cents, GPUs, nodes and
    the id of each limited name (-1: not limited)."""
    arr, offer = t.offer_arrays, t.offer_idx
    hours = np.where(np.isfinite(t.quantile_hours), t.quantile_hours, 0.0)
    cols: dict[str, I] = {
        "cost_cents": t.total_cents.astype(np.int64),
        "duration_min": np.ceil(np.minimum(hours, HOURS_MAX) * MINUTES_PER_HOUR - 1e-9).astype(np.int64),
        "gpus": t.n_gpus.astype(np.int64),
        "nodes": t.nodes.astype(np.int64),
    }
    for kind, values in (("provider", arr.provider), ("gpu", arr.gpu), ("region", arr.region)):
        lookup = ids.of(kind)
        per_offer = np.array([lookup.get(str(v).lower(), -1) for v in values], dtype=np.int64)
        cols[kind] = per_offer[offer]
    for i, cap in enumerate(campaign.capacity):
        per_offer = np.array([cap.matches(o) for o in t.offers], dtype=np.int64)
        cols[f"capacity{i}"] = per_offer[offer]
    return cols


def _row_name(t: CandidateTable, i: int) -> str:
    o = t.offers[int(t.offer_idx[i])]
    method, market = METHOD_NAMES[int(t.method[i])], MARKETS[int(t.market[i])]
    return f"{int(t.n_gpus[i])}x {o.gpu} {method} {market} {o.provider}/{o.region} #{i}"


def _candidates(campaign: Campaign, catalog: Catalog, ids: _Ids, limits: tuple[SharedLimit, ...]) -> list[_Candidates]:
    """Each run's candidates, reduced by dominance under the campaign's limits to at most
    MAX_ROWS_PER_RUN rows. Runs with the same job share one candidate table."""
    built: dict[str, CandidateTable] = {}
    out = []
    for run in campaign.runs:
        key = run.job.model_dump_json()
        t = built[key] = built.get(key) or build_candidates(run.job, catalog)
        feasible = t.feasible() & np.isfinite(t.quantile_hours)
        tie = np.empty(len(t), dtype=np.int64)
        tie[order_by(t.total_cents, t.tie_rank)] = np.arange(len(t))
        full = ChoiceTable(run.name, t.total_cents.astype(np.int64), feasible, tie, columns=_columns(t, campaign, ids))
        # The timeline's duration column makes a shorter row better (presolve_dominance).
        timeline = Timeline(horizon=0)
        reduced = presolve_dominance(ChoiceProblem((full,), limits, timeline)).tables[0]
        rows = _capped(reduced, [c for c in full.columns if c in QUOTA_KINDS or c.startswith("capacity")])
        choice = ChoiceTable(
            run.name,
            full.key[rows],
            np.ones(rows.size, dtype=bool),
            tie[rows],
            columns={name: col[rows] for name, col in full.columns.items()},
            row_names=[_row_name(t, int(i)) for i in rows],
        )
        order = full.order()
        alone = int(order[feasible[order]][0]) if feasible.any() else None
        out.append(_Candidates(run, t, rows, choice, int(reduced.feasible.sum()), alone))
    return out


def _capped(table: ChoiceTable, profile_columns: list[str]) -> I:
    """At most MAX_ROWS_PER_RUN of the table's feasible rows: the cost-duration frontier, then
    the best rows of each profile (the limited names a row uses) in turn, cheapest first."""
    order = table.order()
    order = order[table.feasible[order]]
    if order.size <= MAX_ROWS_PER_RUN:
        return np.sort(order)
    duration = table.columns["duration_min"][order]
    frontier = duration < np.minimum.accumulate(np.concatenate([[np.iinfo(np.int64).max], duration[:-1]]))
    if profile_columns:
        profile = np.stack([table.columns[c][order] for c in profile_columns], axis=1)
        label = np.unique(profile, axis=0, return_inverse=True)[1].reshape(-1)
    else:
        label = np.zeros(order.size, dtype=np.int64)
    # Rank of each row within its profile, in preference order: 0 for each profile's best.
    turn = np.zeros(order.size, dtype=np.int64)
    for g in np.unique(label):
        members = np.flatnonzero(label == g)
        turn[members] = np.arange(members.size)
    pick = np.lexsort((np.arange(order.size), turn, ~frontier))[:MAX_ROWS_PER_RUN]
    return np.sort(order[pick])


# --- Stage 2: the shared limits in model units ------------------------------------------------


@dataclass(frozen=True)
class _Limit:
    """One shared limit in model units (cents, minutes, GPUs or nodes), named as users see it."""

    label: str
    kind: Literal["budget", "deadline", "due", "provider", "gpu", "region", "capacity"]
    target: str  # the run (due), the limited name (quotas) or the capacity entry's index
    value: int


def _minutes(hours: float) -> int:
    return math.floor(hours * MINUTES_PER_HOUR + 1e-9)


def _limits_of(campaign: Campaign) -> tuple[_Limit, ...]:
    out = []
    if campaign.budget_usd is not None:
        out.append(_Limit("budget", "budget", "", math.floor(campaign.budget_usd * 100 + 1e-6)))
    if campaign.deadline_hours is not None:
        out.append(_Limit("deadline", "deadline", "", _minutes(campaign.deadline_hours)))
    out += [_Limit(f"due {r.name}", "due", r.name, _minutes(r.due_hours)) for r in campaign.runs if r.due_hours]
    for kind in QUOTA_KINDS:
        caps: dict[str, int] = getattr(campaign.quotas, kind)
        out += [_Limit(f"{kind} quota {name}", kind, name, n) for name, n in sorted(caps.items())]
    out += [_Limit(f"capacity {c.label}", "capacity", str(i), c.nodes) for i, c in enumerate(campaign.capacity)]
    return tuple(out)


def _shared(limits: Iterable[_Limit], ids: _Ids) -> tuple[SharedLimit, ...]:
    """The budget and the quotas over the timeline, as the engine's shared limits."""
    limits = tuple(limits)
    out: list[SharedLimit] = [Budget(lim.value) for lim in limits if lim.kind == "budget"]
    window = (START, "duration_min")
    for kind in QUOTA_KINDS:
        caps = {ids.of(kind)[lim.target]: lim.value for lim in limits if lim.kind == kind}
        if caps:
            out.append(Quota("gpus", by=kind, limits=caps, window=window, name=f"{kind} quota"))
    for lim in limits:
        if lim.kind == "capacity":
            out.append(Quota("nodes", by=f"capacity{lim.target}", limits={1: lim.value}, window=window, name=lim.label))
    return tuple(out)


# --- Stage 3: one choice problem on a timeline, solved ----------------------------------------


@dataclass(frozen=True)
class _Model:
    """The campaign as the engine sees it: a choice table per run, the calendar, the ids."""

    campaign: Campaign
    runs: list[_Candidates]
    ids: _Ids
    release: dict[str, int]
    after: tuple[tuple[str, str], ...]
    serial: int  # an end every run can make, one after another: the horizon without a deadline

    def problem(self, limits: Iterable[_Limit], minimize: Literal["key", "finish"]) -> ChoiceProblem:
        limits = tuple(limits)
        deadline = [lim.value for lim in limits if lim.kind == "deadline"]
        timeline = Timeline(
            horizon=deadline[0] if deadline else self.serial,
            release=self.release,
            due={lim.target: lim.value for lim in limits if lim.kind == "due"},
            after=self.after,
            minimize=minimize,
        )
        return ChoiceProblem(tuple(c.choice for c in self.runs), _shared(limits, self.ids), timeline)

    def solve(
        self, limits: Iterable[_Limit], minimize: Literal["key", "finish"], time_limit_s: float, first: bool = False
    ) -> Choice:
        # One worker and a fixed seed: an answer reached within the limit repeats; one cut short by
        # the clock may not (CP-SAT's deterministic time runs about 10x slower than the clock here).
        engine = CpSatEngine(seed=0, time_limit_s=time_limit_s, first_solution=first)
        return engine.solve(self.problem(limits, minimize))


def _model(campaign: Campaign, catalog: Catalog, limits: tuple[_Limit, ...]) -> _Model:
    ids = _ids(campaign, catalog)
    runs = _candidates(campaign, catalog, ids, _shared(limits, ids))
    release = {r.name: math.ceil(r.earliest_start_hours * MINUTES_PER_HOUR - 1e-9) for r in campaign.runs}
    longest = sum(int(c.choice.columns["duration_min"].max(initial=0)) for c in runs)
    after = tuple((first, r.name) for r in campaign.runs for first in r.after)
    return _Model(campaign, runs, ids, release, after, max(release.values()) + longest)


def plan_campaign(campaign: Campaign, catalog: Catalog | None = None, *, time_limit_s: float = 8.0) -> CampaignPlan:
    """Plan every run of `campaign` together: one plan and one start per run, at the least
    expected total cost (then the earliest finish; the reverse with objective "finish") within
    the shared budget, deadline, quotas and capacities, after the runs each waits for.

    `time_limit_s` bounds the search (wall clock); a search cut short returns status "feasible"
    with its gap (the same file may then get another answer of similar cost on another run).
    Without any campaign, status "infeasible" with a `conflict` that names the limits and runs in
    conflict and the smallest relaxation of each.
    """
    if not 0 < time_limit_s <= 3600:
        raise InvalidJobSpec(f"invalid time limit {time_limit_s}: expected seconds in (0, 3600]")
    catalog = catalog if catalog is not None else load_catalog()
    limits = _limits_of(campaign)
    model = _model(campaign, catalog, limits)
    minimize: Literal["key", "finish"] = "key" if campaign.objective == "cost" else "finish"
    choice = model.solve(limits, minimize, time_limit_s)
    candidates = {c.run.name: int(c.rows.size) for c in model.runs}
    notes = _notes(model)
    if choice.status in ("optimal", "feasible"):
        return _answer(model, choice, candidates, notes)
    conflict = _conflict(model, limits, catalog, time_limit_s) if choice.status == "infeasible" else None
    return CampaignPlan(
        status=choice.status,
        objective=campaign.objective,
        runs=(),
        total_cost_usd=None,
        finish_hours=None,
        gap=None,
        solve_seconds=round(choice.wall_s, 3),
        candidates=candidates,
        notes=notes,
        conflict=conflict,
    )


def _notes(model: _Model) -> tuple[str, ...]:
    out = [
        "each run lasts its plan's finish at its job's confidence (p90 by default), rounded up to whole "
        "minutes; runs are priced at their expected cost"
    ]
    for c in model.runs:
        if c.undominated > c.rows.size:
            out.append(
                f"run {c.run.name}: {c.rows.size} of its {c.undominated} undominated candidates kept "
                "(the cost-time frontier, then the cheapest of each quota profile); optimal over those"
            )
    return tuple(out)


# --- Stage 4: the answer ---------------------------------------------------------------------


def _hours(minutes: int) -> float:
    return round(minutes / MINUTES_PER_HOUR, 6)


def _answer(model: _Model, choice: Choice, candidates: dict[str, int], notes: tuple[str, ...]) -> CampaignPlan:
    runs = []
    for c, row, start in zip(model.runs, choice.rows, choice.starts, strict=True):
        assert row is not None and start is not None  # every run is mandatory
        runs.append(_scheduled(c, row, start))
    order = {r.name: i for i, r in enumerate(model.campaign.runs)}
    runs.sort(key=lambda r: (r.start_hours, order[r.name]))
    assert choice.objective is not None and choice.finish is not None
    if model.campaign.objective == "cost":
        gap = choice.gap
    else:
        bound = choice.finish_bound
        gap = None if bound is None else (choice.finish - bound) / max(1, choice.finish)
    if choice.status != "optimal" and gap == 0:
        then = "finish" if model.campaign.objective == "cost" else "cost"
        notes = (*notes, f"the {model.campaign.objective} is proven best; the {then} among such campaigns is not")
    return CampaignPlan(
        status="optimal" if choice.status == "optimal" else "feasible",
        objective=model.campaign.objective,
        runs=tuple(runs),
        total_cost_usd=choice.objective / 100,
        finish_hours=_hours(choice.finish),
        gap=None if gap is None else round(gap, 6),
        solve_seconds=round(choice.wall_s, 3),
        candidates=candidates,
        notes=notes,
    )


def _scheduled(c: _Candidates, row: int, start: int) -> ScheduledRun:
    t, i = c.table, int(c.rows[row])
    duration = int(c.choice.columns["duration_min"][row])
    plan = plan_from_row(c.run.job, t, i, 1, i)
    assert c.alone is not None  # a run with a row has a plan of its own
    return ScheduledRun(
        name=c.run.name,
        plan=plan.model_copy(update={"why": _why(c, i)}),
        start_hours=_hours(start),
        end_hours=_hours(start + duration),
        after=c.run.after,
        alone_cost_usd=int(t.total_cents[c.alone]) / 100,
    )


def _why(c: _Candidates, i: int) -> str:
    t, best = c.table, c.alone
    assert best is not None
    if i == best:
        return "this run's cheapest plan on its own: the shared limits leave it free"
    d_cost = (int(t.total_cents[i]) - int(t.total_cents[best])) / 100
    d_hours = float(t.quantile_hours[i] - t.quantile_hours[best])
    o = t.offers[int(t.offer_idx[best])]
    alone = f"{int(t.n_gpus[best])}x {o.gpu} {METHOD_NAMES[int(t.method[best])]} ({o.provider})"
    return (
        f"{d_cost:+.2f} USD, {d_hours:+.1f} h vs this run's cheapest plan on its own ({alone}), "
        "which the shared limits or the campaign's finish ruled out"
    )


# --- When no campaign meets the limits -------------------------------------------------------

_UNITS: dict[str, Literal["usd", "hours", "gpus", "nodes"]] = {
    "budget": "usd",
    "deadline": "hours",
    "due": "hours",
    "provider": "gpus",
    "gpu": "gpus",
    "region": "gpus",
    "capacity": "nodes",
}


def _conflict(model: _Model, limits: tuple[_Limit, ...], catalog: Catalog, time_limit_s: float) -> CampaignConflict:
    """The runs that have no plan of their own; else the shared limits that admit no campaign each
    by itself, or else a minimal set of them that admits none together (a deletion filter: drop
    each limit in turn while the rest still admits none), with each one's smallest relaxation."""
    lonely = [c for c in model.runs if c.rows.size == 0]
    if lonely:
        why = [
            f"run {c.run.name}: {diagnose(c.run.job, c.table, lambda j: build_candidates(j, catalog)).summary}"
            for c in lonely
        ]
        return CampaignConflict(
            summary=f"{len(lonely)} of the runs have no feasible plan even on their own; {'; '.join(why)}",
            limits=(),
            alone=False,
            runs=tuple(c.run.name for c in lonely),
            relaxations=(),
        )

    def infeasible(subset: Iterable[_Limit]) -> bool:
        return model.solve(subset, "key", time_limit_s, first=True).status == "infeasible"

    alone = [lim for lim in limits if infeasible((lim,))]
    conflict = alone or _minimal_conflict(limits, infeasible)
    relaxations = tuple(r for lim in conflict if (r := _relax(model, limits, lim, time_limit_s)) is not None)
    runs = _runs_held(model, conflict)
    names = ", ".join(lim.label for lim in conflict)
    fixes = "; ".join(
        f"{r.change} (campaign {r.total_cost_usd:.2f} USD, finish {r.finish_hours:.1f} h)" for r in relaxations
    )
    head = f"no campaign meets {names} {'(each alone)' if len(alone) > 1 else 'alone' if alone else 'together'}"
    return CampaignConflict(
        summary=f"{head}; runs held: {', '.join(runs)}" + (f"; smallest changes: {fixes}" if fixes else ""),
        limits=tuple(lim.label for lim in conflict),
        alone=bool(alone),
        runs=runs,
        relaxations=relaxations,
    )


def _minimal_conflict(limits: tuple[_Limit, ...], infeasible: Callable[[Iterable[_Limit]], bool]) -> list[_Limit]:
    kept = list(limits)
    for lim in limits:
        rest = [m for m in kept if m is not lim]
        if infeasible(rest):
            kept = rest
    return kept


def _relax(model: _Model, limits: tuple[_Limit, ...], lim: _Limit, time_limit_s: float) -> CampaignRelaxation | None:
    """The smallest value of `lim` that admits a campaign under the other limits (None: dropping it
    is not enough), found by solving without it and, for a due hour or quota, bisecting."""
    others = [m for m in limits if m is not lim]
    free = model.solve(others, "finish" if lim.kind == "deadline" else "key", time_limit_s)
    if free.objective is None or free.finish is None:
        return None
    if lim.kind == "budget":
        value, final = free.objective, free
    elif lim.kind == "deadline":
        value, final = free.finish, free
    else:
        lo, hi = lim.value, _used(model, free, lim)
        while hi - lo > 1:  # lo admits no campaign, hi does
            mid = (lo + hi) // 2
            trial = [*others, _Limit(lim.label, lim.kind, lim.target, mid)]
            if model.solve(trial, "key", time_limit_s, first=True).status in ("optimal", "feasible"):
                hi = mid
            else:
                lo = mid
        value = hi
        final = model.solve([*others, _Limit(lim.label, lim.kind, lim.target, hi)], "key", time_limit_s)
        if final.objective is None or final.finish is None:
            return None
    unit = _UNITS[lim.kind]
    shown = value / 100 if unit == "usd" else value / MINUTES_PER_HOUR if unit == "hours" else float(value)
    change = {
        "budget": f"raise the budget to {shown:.2f} USD",
        "deadline": f"move the deadline to {shown:.2f} h",
        "due": f"let run {lim.target} end by {shown:.2f} h",
        "capacity": f"have {value} nodes of {lim.label.removeprefix('capacity ')}",
    }.get(lim.kind, f"allow {value} GPUs at once on {lim.kind} {lim.target}")
    assert final.objective is not None and final.finish is not None
    return CampaignRelaxation(
        limit=lim.label,
        change=change,
        value=round(shown, 6),
        unit=unit,
        total_cost_usd=final.objective / 100,
        finish_hours=_hours(final.finish),
    )


def _used(model: _Model, choice: Choice, lim: _Limit) -> int:
    """What `choice` needs of a due hour (the run's end) or a quota (its peak use over time)."""
    spans = []
    for c, row, start in zip(model.runs, choice.rows, choice.starts, strict=True):
        assert row is not None and start is not None
        spans.append((c, row, start, start + int(c.choice.columns["duration_min"][row])))
    if lim.kind == "due":
        return next(end for c, _, _, end in spans if c.run.name == lim.target)
    column, by = ("nodes", f"capacity{lim.target}") if lim.kind == "capacity" else ("gpus", lim.kind)
    value = 1 if lim.kind == "capacity" else model.ids.of(lim.kind)[lim.target]
    use = [(s, e, int(c.choice.columns[column][r])) for c, r, s, e in spans if c.choice.columns[by][r] == value]
    return max((sum(u for s, e, u in use if s <= tau < e) for tau, _, _ in use), default=0)


def _runs_held(model: _Model, conflict: list[_Limit]) -> tuple[str, ...]:
    """The runs a conflict involves: every run for a budget or deadline; a due run and the runs it
    waits for; the runs that have candidates under a quota or capacity."""
    held: set[str] = set()
    after = {r.name: r.after for r in model.campaign.runs}
    for lim in conflict:
        if lim.kind in ("budget", "deadline"):
            held |= set(after)
        elif lim.kind == "due":
            todo = [lim.target]
            while todo:
                name = todo.pop()
                if name not in held:
                    held.add(name)
                    todo += after[name]
        else:
            by = f"capacity{lim.target}" if lim.kind == "capacity" else lim.kind
            value = 1 if lim.kind == "capacity" else model.ids.of(lim.kind)[lim.target]
            held |= {c.run.name for c in model.runs if np.any(c.choice.columns[by] == value)}
    return tuple(r.name for r in model.campaign.runs if r.name in held)


# --- An independent check --------------------------------------------------------------------


def check_campaign(campaign: Campaign, result: CampaignPlan, catalog: Catalog | None = None) -> list[str]:
    """Re-check a campaign's answer from its plans alone (no solver): every run once, each after
    the runs it waits for and within its earliest start and due hour, the deadline, the budget,
    the totals, and every quota and capacity at every start. With `catalog`, each plan is also
    re-checked against its job (`check_plan`). Returns the violations (empty when valid)."""
    from ftsolve.solver._api import check_plan

    if result.status not in ("optimal", "feasible"):
        return []
    out: list[str] = []
    got = {r.name: r for r in result.runs}
    if sorted(got) != sorted(r.name for r in campaign.runs) or len(got) != len(result.runs):
        return [f"runs {sorted(got)} differ from the campaign's {sorted(r.name for r in campaign.runs)}"]
    eps = 1e-6
    for spec in campaign.runs:
        r = got[spec.name]
        length = r.end_hours - r.start_hours
        if not r.plan.time.quantile_hours - 1e-3 <= length <= r.plan.time.quantile_hours + 1 / 60 + 1e-3:
            out.append(f"run {r.name} lasts {length:.4f} h, its plan {r.plan.time.quantile_hours:.4f} h")
        if r.start_hours < spec.earliest_start_hours - eps:
            out.append(f"run {r.name} starts at {r.start_hours} h, before its earliest start")
        if spec.due_hours is not None and r.end_hours > spec.due_hours + eps:
            out.append(f"run {r.name} ends at {r.end_hours} h, after its due hour {spec.due_hours}")
        if campaign.deadline_hours is not None and r.end_hours > campaign.deadline_hours + eps:
            out.append(f"run {r.name} ends at {r.end_hours} h, after the deadline")
        out += [f"run {r.name} starts before {a} ends" for a in spec.after if got[a].end_hours > r.start_hours + eps]
        if catalog is not None:
            out += [f"run {r.name}: {p}" for p in check_plan(spec.job, catalog, r.plan)]
    cents = sum(round(r.plan.total_cost_usd * 100) for r in result.runs)
    if result.total_cost_usd is None or cents != round(result.total_cost_usd * 100):
        out.append(f"total {result.total_cost_usd} differs from the runs' sum {cents / 100:.2f}")
    if campaign.budget_usd is not None and cents > math.floor(campaign.budget_usd * 100 + 1e-6):
        out.append(f"cost {cents / 100:.2f} USD exceeds the budget {campaign.budget_usd}")
    if result.finish_hours is None or abs(result.finish_hours - max(r.end_hours for r in result.runs)) > eps:
        out.append(f"finish {result.finish_hours} is not the last end")
    return out + _quota_violations(campaign, result.runs)


def _quota_violations(campaign: Campaign, runs: tuple[ScheduledRun, ...]) -> list[str]:
    """Each quota and capacity, summed over the runs under way at every start."""
    names: dict[str, Callable[[ScheduledRun], str]] = {
        "provider": lambda r: r.plan.offer.provider.lower(),
        "gpu": lambda r: r.plan.gpu,
        "region": lambda r: r.plan.offer.region.lower(),
    }
    held: list[tuple[str, int, list[int]]] = []  # (label, limit, use per run)
    for kind in QUOTA_KINDS:
        for name, cap in getattr(campaign.quotas, kind).items():
            use = [r.plan.n_gpus if names[kind](r) == name else 0 for r in runs]
            held.append((f"{kind} quota {name}", cap, use))
    for c in campaign.capacity:
        held.append((f"capacity {c.label}", c.nodes, [r.plan.nodes if c.matches(r.plan.offer) else 0 for r in runs]))
    out = []
    for label, cap, use in held:
        for tau in sorted({r.start_hours for r in runs}):
            total = sum(u for r, u in zip(runs, use, strict=True) if r.start_hours <= tau < r.end_hours)
            if total > cap:
                out.append(f"{label}: {total} in use at {tau} h, over {cap}")
    return out
