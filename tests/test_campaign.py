"""Campaigns (issue 19): runs planned together under one budget, calendar and shared quotas.

The engine's timeline and the campaign planner are checked against exhaustive enumeration: every
row per table (run), and every active schedule (a serial schedule over every order of the runs
that respects precedence, which holds an optimal schedule for any objective that grows with the
ends). Answers are re-checked by independent checkers at every instant.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import ftsolve
from ftsolve import Campaign, CampaignPlan, Catalog, JobSpec, Offer, check_campaign, load_campaign, plan_campaign
from ftsolve._errors import ChoiceProblemError, InvalidJobSpec, UnknownCatalogEntry
from ftsolve._tomllib import tomllib
from ftsolve.cli import cli
from ftsolve.solver._campaign import campaign_schema
from ftsolve.solver._engines import START, Budget, Choice, ChoiceProblem, ChoiceTable, CpSatEngine, Quota, Timeline
from ftsolve.solver._grid import build_candidates

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


# --- An exact answer by enumeration -----------------------------------------------------------


@dataclass(frozen=True)
class Row:
    key: int
    length: int
    holds: tuple[tuple[str, int], ...] = ()  # (limited resource, amount held while running)
    cost: int = 0  # what the budget counts


@dataclass(frozen=True)
class Instance:
    rows: list[list[Row | None]]  # per table; None: an optional table that does not run
    release: list[int]
    latest_end: list[int]
    after: list[tuple[int, int]]
    caps: dict[str, int]
    budget: int | None = None


def _fit(placed: list[tuple[int, int, Row]], est: int, row: Row, caps: dict[str, int]) -> int:
    """The earliest start from `est` where `row` fits under the caps beside the placed rows."""
    for start in sorted({est} | {e for _, e, _ in placed if e > est}):
        points = [start, *(s for s, _, _ in placed if start < s < start + row.length)]
        if all(
            sum(dict(r.holds).get(name, 0) for s, e, r in placed if s <= p < e) + amount <= caps[name]
            for p in points
            for name, amount in row.holds
        ):
            return start
    raise AssertionError("the last end always fits a row that fits alone")


def earliest_finish(inst: Instance, combo: tuple[Row | None, ...]) -> int | None:
    """The least finish of the chosen rows over all active schedules that meet every end limit."""
    n = len(combo)
    if any(r is not None and any(a > inst.caps[name] for name, a in r.holds) for r in combo):
        return None
    best = None
    for order in itertools.permutations(range(n)):
        position = {t: i for i, t in enumerate(order)}
        if any(position[a] > position[b] for a, b in inst.after):
            continue
        placed: list[tuple[int, int, Row]] = []
        end: dict[int, int] = {}
        ok = True
        for t in order:
            est = max([inst.release[t], *(end[a] for a, b in inst.after if b == t)])
            row = combo[t]
            if row is None:  # runs for no time, at its earliest start
                end[t] = est
                continue
            start = _fit(placed, est, row, inst.caps)
            end[t] = start + row.length
            if end[t] > inst.latest_end[t]:
                ok = False
                break
            placed.append((start, end[t], row))
        if ok:
            finish = max([end[t] for t in range(n) if combo[t] is not None], default=0)
            best = finish if best is None else min(best, finish)
    return best


def exact(inst: Instance, finish_first: bool = False) -> tuple[int, int] | None:
    """(Σ key, finish), least first by key (or by finish), over every row choice and schedule."""
    best: tuple[int, int] | None = None
    for combo in itertools.product(*inst.rows):
        key = sum(r.key for r in combo if r is not None)
        cost = sum(r.cost for r in combo if r is not None)
        if inst.budget is not None and cost > inst.budget:
            continue
        finish = earliest_finish(inst, combo)
        if finish is None:
            continue
        score = (finish, key) if finish_first else (key, finish)
        best = score if best is None or score < best else best
    if best is None:
        return None
    return (best[1], best[0]) if finish_first else best


# --- The engine's timeline against enumeration --------------------------------------------------


@st.composite
def timed_problems(draw: st.DrawFn) -> ChoiceProblem:
    k = draw(st.integers(2, 3))
    tables = []
    for i in range(k):
        n = draw(st.integers(1, 3))
        ints = st.lists
        optional = draw(st.booleans()) and draw(st.booleans())
        key = draw(ints(st.integers(0, 20), min_size=n, max_size=n))
        tables.append(
            ChoiceTable(
                name=f"run{i}",
                key=np.array([v - 12 if optional else v for v in key], dtype=np.int64),
                feasible=np.ones(n, dtype=bool),
                tie_rank=np.array(draw(st.permutations(list(range(n)))), dtype=np.int64),
                columns={
                    "cost_cents": np.array(key, dtype=np.int64),
                    "duration_min": np.array(draw(ints(st.integers(1, 4), min_size=n, max_size=n)), dtype=np.int64),
                    "gpus": np.array(draw(ints(st.sampled_from([1, 2, 4]), min_size=n, max_size=n)), dtype=np.int64),
                    "provider": np.array(draw(ints(st.integers(0, 1), min_size=n, max_size=n)), dtype=np.int64),
                },
                optional=optional,
            )
        )
    names = [t.name for t in tables]
    timeline = Timeline(
        horizon=draw(st.integers(5, 12)),
        release={name: draw(st.integers(0, 3)) for name in names if draw(st.booleans())},
        due={name: draw(st.integers(3, 10)) for name in names if draw(st.booleans()) and draw(st.booleans())},
        after=tuple((names[a], names[b]) for a in range(k) for b in range(a + 1, k) if draw(st.booleans())),
        minimize=draw(st.sampled_from(["key", "finish"])),
    )
    caps = {p: draw(st.sampled_from([2, 4, 6])) for p in range(2) if draw(st.booleans())}
    limits: list[Budget | Quota] = [Quota("gpus", by="provider", limits=caps, window=(START, "duration_min"))]
    if draw(st.booleans()):
        limits.append(Budget(draw(st.integers(10, 45))))
    return ChoiceProblem(tuple(tables), tuple(limits), timeline)


def _instance(problem: ChoiceProblem) -> Instance:
    tl = problem.timeline
    assert tl is not None
    quota = next(q for q in problem.limits if isinstance(q, Quota))
    budget = next((b.limit for b in problem.limits if isinstance(b, Budget)), None)
    rows: list[list[Row | None]] = []
    for t in problem.tables:
        options: list[Row | None] = [None] if t.optional else []
        for r in range(len(t)):
            p = int(t.columns["provider"][r])
            holds = ((f"p{p}", int(t.columns["gpus"][r])),) if p in quota.limits else ()
            length = int(t.columns["duration_min"][r])
            options.append(Row(int(t.key[r]), length, holds, int(t.columns["cost_cents"][r])))
        rows.append(options)
    index = {t.name: i for i, t in enumerate(problem.tables)}
    return Instance(
        rows=rows,
        release=[tl.release.get(t.name, 0) for t in problem.tables],
        latest_end=[tl.end_limit(t.name) for t in problem.tables],
        after=[(index[a], index[b]) for a, b in tl.after],
        caps={f"p{p}": cap for p, cap in quota.limits.items()},
        budget=budget,
    )


def _check_choice(problem: ChoiceProblem, choice: Choice) -> None:
    """Independently: precedence, release, due, horizon, budget and quotas at every instant."""
    tl = problem.timeline
    assert tl is not None
    index = {t.name: i for i, t in enumerate(problem.tables)}
    ends = {}
    for t, r, s in zip(problem.tables, choice.rows, choice.starts, strict=True):
        assert (r is None) == (s is None) and (r is not None or t.optional)
        if r is not None and s is not None:
            ends[t.name] = s + int(t.columns["duration_min"][r])
            assert tl.release.get(t.name, 0) <= s and ends[t.name] <= tl.end_limit(t.name)
    for a, b in tl.after:
        sb = choice.starts[index[b]]
        if a in ends and sb is not None:
            assert sb >= ends[a]
    assert choice.finish == max(ends.values(), default=0)
    quota = next(q for q in problem.limits if isinstance(q, Quota))
    for tau in range(tl.horizon + 1):
        for p, cap in quota.limits.items():
            used = sum(
                int(t.columns["gpus"][r])
                for t, r, s in zip(problem.tables, choice.rows, choice.starts, strict=True)
                if r is not None and s is not None and t.columns["provider"][r] == p
                if s <= tau < ends[t.name]
            )
            assert used <= cap, (tau, p, used, cap)
    for lim in problem.limits:
        if isinstance(lim, Budget):
            chosen = [(t, r) for t, r in zip(problem.tables, choice.rows, strict=True) if r is not None]
            assert sum(int(t.columns["cost_cents"][r]) for t, r in chosen) <= lim.limit


@settings(max_examples=40, deadline=None)
@given(timed_problems())
def test_timeline_equals_enumeration(problem: ChoiceProblem) -> None:
    tl = problem.timeline
    assert tl is not None
    best = exact(_instance(problem), finish_first=tl.minimize == "finish")
    choice = CpSatEngine().solve(problem)
    if best is None:
        assert choice.status == "infeasible"
        return
    assert choice.status == "optimal"
    assert (choice.objective, choice.finish) == best
    _check_choice(problem, choice)
    assert CpSatEngine(presolve=False).solve(problem).objective == choice.objective


def test_timeline_validation() -> None:
    t = ChoiceTable("a", np.array([1]), np.ones(1, dtype=bool), columns={"duration_min": np.array([2])})
    with pytest.raises(ChoiceProblemError, match="names table"):
        ChoiceProblem((t,), (), Timeline(horizon=5, after=(("a", "b"),)))
    with pytest.raises(ChoiceProblemError, match="needs a timeline"):
        ChoiceProblem((t,), (Quota("duration_min", by="duration_min", window=(START, "duration_min")),))
    with pytest.raises(ChoiceProblemError, match="at least 0"):
        ChoiceProblem((t,), (), Timeline(horizon=-1))
    with pytest.raises(ChoiceProblemError, match="duration column"):
        ChoiceProblem((t,), (), Timeline(horizon=5, duration="minutes"))


def test_a_quota_over_time_makes_runs_take_turns() -> None:
    # Two runs of 8 GPUs on one provider with 8 GPUs of quota: one after the other; a horizon too
    # short for both makes one of them take the slower, cheaper-to-fit 4-GPU row.
    def run(name: str) -> ChoiceTable:
        return ChoiceTable(
            name,
            np.array([10, 14], dtype=np.int64),
            np.ones(2, dtype=bool),
            columns={
                "duration_min": np.array([3, 5], dtype=np.int64),
                "gpus": np.array([8, 4], dtype=np.int64),
                "provider": np.zeros(2, dtype=np.int64),
            },
        )

    quota = Quota("gpus", by="provider", limits={0: 8}, window=(START, "duration_min"))
    roomy = CpSatEngine().solve(ChoiceProblem((run("a"), run("b")), (quota,), Timeline(horizon=6)))
    assert (roomy.rows, roomy.objective, roomy.finish) == ((0, 0), 20, 6)
    assert sorted(s for s in roomy.starts if s is not None) == [0, 3]
    tight = CpSatEngine().solve(ChoiceProblem((run("a"), run("b")), (quota,), Timeline(horizon=5)))
    assert (sorted(r for r in tight.rows if r is not None), tight.objective, tight.finish) == ([1, 1], 28, 5)


# --- Campaigns against enumeration on a small catalog -------------------------------------------


def _offer(provider: str, gpu: str, n: int, usd: float, region: str) -> Offer:
    return Offer(
        provider=provider,
        tier="t",
        instance_type=f"{gpu}-x{n}",
        gpu=gpu,
        source_gpu_name=gpu,
        gpus_per_node=n,
        on_demand_usd_per_gpu_hour=usd,
        region=region,
        country="US",
        price_date=dt.date(2026, 1, 1),
        source="test",
    )


@cache
def small_catalog() -> Catalog:
    base = ftsolve.load_catalog()
    offers = (
        _offer("alpha", "h100-sxm", 8, 2.5, "east"),
        _offer("alpha", "l40s", 1, 0.9, "east"),
        _offer("beta", "a100-sxm-80gb", 4, 1.6, "west"),
        _offer("beta", "h100-sxm", 1, 2.9, "west"),
    )
    return Catalog(gpus=base.gpus, offers=offers, models=base.models)


JOBS = {
    "small": {"model": "qwen3-4b", "train_tokens": 20_000_000, "seq_len": 1024},
    "mid": {"model": "llama-3.1-8b", "train_tokens": 30_000_000, "seq_len": 1024},
    "tiny": {"model": "qwen3-4b", "train_tokens": 5_000_000, "seq_len": 1024},
}
COMMON = {"methods": ["lora"], "markets": ["on-demand"], "max_nodes": 1}


@st.composite
def campaigns(draw: st.DrawFn) -> Campaign:
    k = draw(st.integers(2, 3))
    runs = {}
    for i in range(k):
        entry: dict[str, object] = dict(JOBS[draw(st.sampled_from(sorted(JOBS)))])
        entry["after"] = [f"r{j}" for j in range(i) if draw(st.booleans())]
        if draw(st.booleans()) and draw(st.booleans()):
            entry["earliest_start_hours"] = draw(st.sampled_from([0.1, 0.25]))
        if draw(st.booleans()) and draw(st.booleans()):
            entry["due_hours"] = draw(st.sampled_from([0.5, 0.8, 1.2]))
        runs[f"r{i}"] = entry
    quotas: dict[str, dict[str, int]] = {
        "provider": {p: draw(st.sampled_from([1, 4, 8, 9])) for p in ("alpha", "beta") if draw(st.booleans())}
    }
    if draw(st.booleans()):
        quotas["gpu"] = {"h100-sxm": draw(st.sampled_from([8, 9]))}
    data: dict[str, object] = {"runs": runs, "quotas": quotas, "defaults": COMMON}
    if draw(st.booleans()):
        data["capacity"] = [{"provider": "alpha", "instance_type": "h100-sxm-x8", "nodes": 1}]
    if draw(st.booleans()):
        data["deadline_hours"] = draw(st.sampled_from([0.6, 1.0, 1.5, 3.0]))
    if draw(st.booleans()):
        data["budget_usd"] = draw(st.sampled_from([3, 6, 12]))
    data["objective"] = draw(st.sampled_from(["cost", "finish"]))
    return Campaign.from_mapping(data)


def campaign_instance(c: Campaign, catalog: Catalog) -> Instance:
    """The campaign as enumeration sees it, straight from each run's candidate table."""
    rows: list[list[Row | None]] = []
    caps = {
        f"{kind} {name}": cap for kind in ("provider", "gpu", "region") for name, cap in getattr(c.quotas, kind).items()
    }
    caps |= {f"capacity {i}": cap.nodes for i, cap in enumerate(c.capacity)}
    for run in c.runs:
        t = build_candidates(run.job, catalog)
        options: list[Row | None] = []
        for i in np.flatnonzero(t.feasible() & np.isfinite(t.quantile_hours)):
            o = t.offers[int(t.offer_idx[i])]
            held = {f"provider {o.provider}": int(t.n_gpus[i]), f"gpu {o.gpu}": int(t.n_gpus[i])}
            held |= {f"region {o.region}": int(t.n_gpus[i])}
            held |= {f"capacity {j}": int(t.nodes[i]) for j, cap in enumerate(c.capacity) if cap.matches(o)}
            length = math.ceil(float(t.quantile_hours[i]) * 60 - 1e-9)
            holds = tuple((k, v) for k, v in held.items() if k in caps)
            options.append(Row(int(t.total_cents[i]), length, holds, int(t.total_cents[i])))
        rows.append(options)
    deadline = math.floor(c.deadline_hours * 60 + 1e-9) if c.deadline_hours else 10**9
    return Instance(
        rows=rows,
        release=[math.ceil(r.earliest_start_hours * 60 - 1e-9) for r in c.runs],
        latest_end=[min(deadline, math.floor(r.due_hours * 60 + 1e-9) if r.due_hours else deadline) for r in c.runs],
        after=[([r.name for r in c.runs].index(a), i) for i, r in enumerate(c.runs) for a in r.after],
        caps=caps,
        budget=math.floor(c.budget_usd * 100 + 1e-6) if c.budget_usd else None,
    )


def _instants_ok(c: Campaign, result: CampaignPlan) -> None:
    """Every quota at every minute of the campaign, and every `after`, from the plans alone."""
    spans = {r.name: (round(r.start_hours * 60), round(r.end_hours * 60), r) for r in result.runs}
    for run in c.runs:
        assert all(spans[a][1] <= spans[run.name][0] for a in run.after)
    last = max(e for _, e, _ in spans.values())
    for tau in range(last + 1):
        live = [r for s, e, r in spans.values() if s <= tau < e]
        for name, cap in c.quotas.provider.items():
            assert sum(r.plan.n_gpus for r in live if r.plan.offer.provider == name) <= cap
        for name, cap in c.quotas.gpu.items():
            assert sum(r.plan.n_gpus for r in live if r.plan.gpu == name) <= cap
        for capacity in c.capacity:
            assert sum(r.plan.nodes for r in live if capacity.matches(r.plan.offer)) <= capacity.nodes


@settings(max_examples=25, deadline=None)
@given(campaigns())
def test_campaign_equals_enumeration(c: Campaign) -> None:
    catalog = small_catalog()
    best = exact(campaign_instance(c, catalog), finish_first=c.objective == "finish")
    result = plan_campaign(c, catalog)
    if best is None:
        assert result.status == "infeasible" and not result.runs and result.conflict is not None
        return
    assert result.status == "optimal", result.conflict
    assert result.total_cost_usd is not None and result.finish_hours is not None
    assert (round(result.total_cost_usd * 100), round(result.finish_hours * 60)) == best
    assert check_campaign(c, result) == []
    _instants_ok(c, result)


@settings(max_examples=10, deadline=None)
@given(campaigns())
def test_planning_alone_never_beats_the_campaign(c: Campaign) -> None:
    """Each run's own cheapest plan costs at most its campaign plan; when those plans fit the
    shared limits together, the campaign costs exactly their sum."""
    c = c.model_copy(update={"objective": "cost"})
    result = plan_campaign(c, small_catalog())
    if not result.runs:
        return
    alone = sum(r.alone_cost_usd for r in result.runs)
    assert all(r.alone_cost_usd <= r.plan.total_cost_usd for r in result.runs)
    free = c.model_copy(update={"budget_usd": None, "deadline_hours": None, "quotas": ftsolve.Quotas(), "capacity": ()})
    free = free.model_copy(update={"runs": tuple(r.model_copy(update={"due_hours": None}) for r in c.runs)})
    relaxed = plan_campaign(free, small_catalog())
    assert relaxed.total_cost_usd is not None and math.isclose(relaxed.total_cost_usd, alone)
    assert result.total_cost_usd is not None and result.total_cost_usd >= alone - 1e-9


def test_same_campaign_same_answer() -> None:
    c = load_campaign(EXAMPLES / "campaign.yaml")
    first, second = plan_campaign(c), plan_campaign(c)
    assert first.model_dump(exclude={"solve_seconds"}) == second.model_dump(exclude={"solve_seconds"})


# --- Explanations -------------------------------------------------------------------------------


def _two_runs(**limits: object) -> Campaign:
    runs = {"a": dict(JOBS["mid"]), "b": dict(JOBS["mid"])}
    return Campaign.from_mapping({"runs": runs, "defaults": COMMON, **limits})


@pytest.mark.parametrize(
    ("limits", "label", "unit"),
    [
        ({"budget_usd": 1}, "budget", "usd"),
        ({"deadline_hours": 0.05}, "deadline", "hours"),
    ],
)
def test_a_limit_that_alone_admits_no_campaign_is_named_with_its_relaxation(
    limits: dict[str, object], label: str, unit: str
) -> None:
    c = _two_runs(**limits)
    result = plan_campaign(c, small_catalog())
    assert result.status == "infeasible" and result.conflict is not None
    assert result.conflict.limits == (label,) and result.conflict.alone
    assert result.conflict.runs == ("a", "b")
    (fix,) = result.conflict.relaxations
    assert fix.unit == unit
    # Applying the relaxation yields exactly the campaign it promised.
    field = "budget_usd" if unit == "usd" else "deadline_hours"
    relaxed = plan_campaign(c.model_copy(update={field: fix.value}), small_catalog())
    assert relaxed.status == "optimal" and relaxed.total_cost_usd == fix.total_cost_usd


def test_a_quota_and_deadline_in_conflict_are_named_together() -> None:
    # Each run alone fits the deadline on 8 alpha H100s, but the quota lets only one of them hold
    # them at a time: neither the quota nor the deadline alone is the problem, both together are.
    fast = {**COMMON, "providers": ["alpha"], "gpus": ["h100-sxm"]}
    c = Campaign.from_mapping({"runs": {"a": dict(JOBS["mid"]), "b": dict(JOBS["mid"])}, "defaults": fast})
    alone = plan_campaign(c, small_catalog())
    assert alone.finish_hours is not None
    longest = max(r.end_hours - r.start_hours for r in alone.runs)
    tight = c.model_copy(
        update={"deadline_hours": round(longest * 1.5, 2), "quotas": ftsolve.Quotas(provider={"alpha": 8})}
    )
    result = plan_campaign(tight, small_catalog())
    assert result.status == "infeasible" and result.conflict is not None
    assert set(result.conflict.limits) == {"deadline", "provider quota alpha"} and not result.conflict.alone
    fixes = {r.limit: r for r in result.conflict.relaxations}
    assert fixes["provider quota alpha"].value == 16 and fixes["provider quota alpha"].unit == "gpus"
    assert fixes["deadline"].value >= 2 * longest - 1 / 60


def test_a_run_without_a_plan_of_its_own_is_named() -> None:
    c = Campaign.from_mapping(
        {"runs": {"a": {**JOBS["mid"], "deadline_hours": 0.01}, "b": JOBS["small"]}, "defaults": COMMON}
    )
    result = plan_campaign(c, small_catalog())
    assert result.status == "infeasible" and result.conflict is not None
    assert result.conflict.runs == ("a",) and "run a" in result.conflict.summary


# --- Files, the command line and the schema ------------------------------------------------------


def run_cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.output


def test_example_campaigns_plan_and_meet_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = campaign_schema()
    for path in sorted(EXAMPLES.glob("*.yaml")) + sorted(EXAMPLES.glob("*.toml")):
        text = path.read_text()
        data = yaml.safe_load(text) if path.suffix == ".yaml" else tomllib.loads(text)
        jsonschema.validate(data, schema)
        c = load_campaign(path)
        result = plan_campaign(c)
        assert result.status == "optimal" and check_campaign(c, result, ftsolve.load_catalog()) == []


def test_campaign_command_text_and_json() -> None:
    path = str(EXAMPLES / "campaign.yaml")
    code, out = run_cli("campaign", path)
    assert code == 0 and "Campaign: 4 runs" in out and "probe" in out and "optimal" in out, out
    code, out = run_cli("campaign", path, "--json")
    data = json.loads(out)
    assert code == 0 and data["status"] == "optimal" and data["runs"][0]["name"] == "probe"
    final = next(r for r in data["runs"] if r["name"] == "final")
    assert all(
        next(r for r in data["runs"] if r["name"] == a)["end_hours"] <= final["start_hours"] for a in final["after"]
    )
    code, out = run_cli("schema", "campaign")
    assert code == 0 and "RunEntry" in json.loads(out)["$defs"]


def test_an_infeasible_campaign_exits_1_with_the_conflict(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("budget_usd: 0.01\nruns:\n  a: {model: qwen3-4b, train_tokens: 5M, seq_len: 1024}\n")
    code, out = run_cli("campaign", str(path))
    assert code == 1 and "budget" in out and "raise the budget to" in out, out
    code, out = run_cli("campaign", str(path), "--json")
    assert code == 1 and json.loads(out)["conflict"]["limits"] == ["budget"]


def _bad_files() -> Iterator[tuple[str, str, str]]:
    ok = "runs:\n  a: {model: qwen3-4b, train_tokens: 5M, seq_len: 1024}\n"
    yield "c.yaml", "runs: [unclosed", "not valid YAML"
    yield "c.toml", "runs = [", "not valid TOML"
    yield "c.yaml", "- a\n- b\n", "expected a mapping"
    yield "c.yaml", "budget_usd: 5\n", "runs must map"
    yield "c.yaml", ok + "budgets: 5\n", "budgets"
    yield "c.yaml", ok.replace("seq_len", "seqlen"), "unknown field 'seqlen'"
    yield "c.yaml", ok + "  b: {like: c}\n", "is like 'c', which is not a run"
    yield "c.yaml", ok + "  b: {like: b}\n", "in a circle"
    yield "c.yaml", ok + "  b: {like: a, after: [b]}\n", "in a circle"
    yield "c.yaml", ok + "  b: {like: a, after: [z]}\n", "'z', which is not a run"
    yield "c.yaml", ok + "quotas: {provider: {lambdaa: 8}}\n", "lambda"
    yield "c.yaml", ok + "quotas: {gpu: {h100: -1}}\n", "greater than or equal to 0"
    yield "c.yaml", ok.replace("5M", "five"), "invalid train_tokens"
    yield "c.yaml", ok + "deadline_hours: soon\n", "invalid deadline_hours"
    yield "c.yaml", ok + "capacity: [{provider: x, instance_type: y, nodes: 1}]\n", "matches no offer"


@pytest.mark.parametrize(("name", "text", "message"), list(_bad_files()))
def test_bad_campaign_files_exit_2_with_one_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, out = run_cli("campaign", str(path))
    assert code == 2 and message in out and len(out.strip().splitlines()) == 1, out
    assert "Traceback" not in out


def test_runs_are_like_each_other_with_overrides_defaults_and_units(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'budget_usd = "$50"\n[defaults]\nmarkets = ["on-demand"]\n'
        '[runs.final]\nmodel = "qwen3-4b"\ntrain_tokens = "50M"\nseq_len = 1024\nafter = "probe"\n'
        '[runs.probe]\nlike = "final"\ntrain_tokens = "1M"\nearliest_start_hours = "30m"\ndue_hours = "2d"\n'
    )
    c = load_campaign(path)
    final, probe = c.runs
    assert c.budget_usd == 50 and final.after == ("probe",) and probe.after == ()
    assert probe.job == final.job.model_copy(update={"train_tokens": 1_000_000})
    assert final.job.markets == ("on-demand",) and probe.earliest_start_hours == 0.5 and probe.due_hours == 48
    with pytest.raises(InvalidJobSpec, match="run 'probe'"):
        Campaign.from_mapping({"runs": {"probe": {"like": "x"}, "x": {"model": "qwen3-4b"}}})


def test_library_errors_for_names_outside_the_catalog() -> None:
    c = _two_runs(quotas={"gpu": {"h100sxm": 8}})
    with pytest.raises(UnknownCatalogEntry, match="h100-sxm"):
        plan_campaign(c, small_catalog())
    with pytest.raises(InvalidJobSpec, match="time limit"):
        plan_campaign(_two_runs(), small_catalog(), time_limit_s=0)


def test_a_job_alone_and_as_a_campaign_of_one_agree() -> None:
    job = JobSpec(**JOBS["mid"], methods=("lora",), markets=("on-demand",), max_nodes=1)
    best = ftsolve.plan(job, small_catalog(), top=1).plans[0]
    result = plan_campaign(Campaign(runs=(ftsolve.Run(name="only", job=job),)), small_catalog())
    assert result.total_cost_usd == best.total_cost_usd and result.runs[0].plan.offer == best.offer


def test_a_run_left_out_does_not_fence_the_others_in() -> None:
    # Found by a random example: run1 may only follow run0 and is due before run0 can end, so it
    # stays out; its precedence was enforced anyway and made the whole problem infeasible.
    def run(name: str) -> ChoiceTable:
        return ChoiceTable(
            name,
            np.array([-12, -12]),
            np.ones(2, dtype=bool),
            columns={
                "cost_cents": np.array([0, 0]),
                "duration_min": np.array([1, 1]),
                "gpus": np.array([1, 1]),
                "provider": np.array([0, 0]),
            },
            optional=True,
        )

    timeline = Timeline(horizon=5, release={"run0": 3}, due={"run1": 3}, after=(("run0", "run1"),))
    quota = Quota("gpus", by="provider", limits={}, window=(START, "duration_min"))
    problem = ChoiceProblem((run("run0"), run("run1")), (quota,), timeline)
    choice = CpSatEngine().solve(problem)
    assert choice.status == "optimal"
    assert (choice.objective, choice.finish) == exact(_instance(problem), finish_first=False) == (-12, 4)


def test_a_run_left_out_keeps_the_runs_around_it_in_order() -> None:
    # Found by a random example: run0 -> run1 (optional, left out: it costs more than it gives)
    # -> run2. Leaving run1 out let run2 start beside run0, as if run2 no longer depended on it.
    def run(name: str, key: int, optional: bool) -> ChoiceTable:
        return ChoiceTable(
            name,
            np.array([key]),
            np.ones(1, dtype=bool),
            columns={
                "cost_cents": np.array([0]),
                "duration_min": np.array([1]),
                "gpus": np.array([1]),
                "provider": np.array([0]),
            },
            optional=optional,
        )

    timeline = Timeline(horizon=5, after=(("run0", "run1"), ("run1", "run2")))
    quota = Quota("gpus", by="provider", limits={}, window=(START, "duration_min"))
    problem = ChoiceProblem((run("run0", 0, False), run("run1", 1, True), run("run2", 0, False)), (quota,), timeline)
    choice = CpSatEngine().solve(problem)
    assert choice.status == "optimal" and choice.rows[1] is None
    assert (choice.objective, choice.finish) == exact(_instance(problem)) == (0, 2)
    _check_choice(problem, choice)
    assert choice.starts[2] is not None and choice.starts[2] >= 1
