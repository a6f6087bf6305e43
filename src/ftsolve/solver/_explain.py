"""Explanations for an infeasible job, always with numbers.

The diagnosis gives the minimal sets of constraints that no candidate meets together, then
every single relaxation that yields a plan, each with that plan's cost and finish, in the order
an expert would try them: the deadline and the budget, recipe settings (optimizer, adapter
dtype, loss chunking, activation offload), then hardware and scope (methods, markets, the GPU
cap, quotas, filters). When no change works alone it gives the ends of the cost-time frontier
within the caps and the smallest joint change of deadline, budget and, where the caps block,
GPU cap. Caps that contradict each other are named.

Every quoted relaxation is verified by re-planning with its `updates`: a user who applies it
gets the quoted plan. Searches that cannot help are skipped: a recipe change moves memory, so it
is tried only where some candidate fails on memory alone; more GPUs help memory and time, so
the cap is searched only where one of those blocks, in one wide table rather than by doubling.

Re-planning is incremental with lower bounds (_replan.py): a changed job is scored before
pricing, and only the offers where some candidate's GPU-hours at the cheapest price (and its
hours) are within the limits are priced; a branch that cannot keep them ends unpriced.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
from numpy.typing import NDArray

from ftsolve.solver import _constraints
from ftsolve.solver._grid import CandidateTable
from ftsolve.solver._job import MARKETS, METHODS, JobSpec
from ftsolve.solver._objectives import best_row
from ftsolve.solver._pipeline import least_hours_and_usd
from ftsolve.solver._plans import Extreme, Infeasibility, JobValue, Relaxation
from ftsolve.solver._replan import Rebuild, Replan, Updates, within_limits

B = NDArray[np.bool_]

# The widest caps the diagnosis searches: beyond them a fine-tune is a different project.
WIDE_MAX_GPUS = 1024
WIDE_MAX_NODES = 128
LIMITS = ("deadline", "budget")


def minimal_conflicts(table: CandidateTable) -> list[tuple[str, ...]]:
    """All minimal sets of constraints that no candidate satisfies together (exact, 2^k masks)."""
    names = list(table.masks)  # registry order
    found: list[tuple[str, ...]] = []
    for size in range(1, len(names) + 1):
        for subset in combinations(names, size):
            if any(set(f) <= set(subset) for f in found):
                continue
            together = np.logical_and.reduce([table.masks[c] for c in subset])
            if not together.any():
                found.append(subset)
    return found


def _relax(
    search: Replan, constraint: str, change: str, updates: Updates, value: float | None = None
) -> Relaxation | None:
    """The relaxation, with the plan re-planning yields, or None when it yields none."""
    found = search.best(updates)
    return None if found is None else _relaxation(constraint, change, updates, found[1], found[2], value)


def _relaxation(
    constraint: str, change: str, updates: Updates, t: CandidateTable, i: int, value: float | None = None
) -> Relaxation:
    return Relaxation(
        constraint=constraint,
        change=change,
        value=value,
        plan_cost_usd=int(t.total_cents[i]) / 100,
        plan_hours=round(float(t.quantile_hours[i]), 3),
        updates=updates,
    )


def diagnose(job: JobSpec, table: CandidateTable, rebuild: Rebuild) -> Infeasibility:
    """Explain an infeasible job: the conflicts, what to relax and by how much, with the plans."""
    if len(table) == 0:
        return _empty_scope(job, table)
    conflicts = minimal_conflicts(table)
    search = Replan(job, table, rebuild)
    relaxations = [
        *_limit_relaxations(job, table, search),
        *_recipe_relaxations(job, table, search),
        *_hardware_relaxations(job, conflicts, search),
    ]
    frontier: tuple[Extreme, ...] = ()
    if not relaxations:
        frontier, joint = _frontier_and_joint(job, conflicts, search)
        relaxations += [joint] if joint is not None else []
    return Infeasibility(
        summary=_summary(table, conflicts, relaxations, frontier),
        candidates=len(table),
        ruled_out_by={c: int((~m).sum()) for c, m in table.masks.items()},
        conflicts=tuple(conflicts),
        relaxations=tuple(relaxations),
        frontier=frontier,
        notes=_contradictions(job, table),
    )


def _limit_relaxations(job: JobSpec, table: CandidateTable, search: Replan) -> list[Relaxation]:
    """Each constraint's own relaxation (deadline, budget, quotas): the least change that lets
    some candidate through, verified."""
    out = []
    for c in _constraints.CONSTRAINTS:
        proposal = c.relax(job, table) if c.relax is not None else None
        if proposal is not None:
            change, updates, value = proposal
            found = _relax(search, c.name, change, updates, value)
            out += [found] if found is not None else []
    return out


def _recipe_changes(job: JobSpec) -> list[tuple[str, JobValue, str]]:
    """(field, value, words) of the recipe settings an expert changes first to save memory."""
    opts = job.memory_options()
    adapters = any(m in job.methods for m in ("lora", "qlora"))
    out: list[tuple[str, JobValue, str]] = []
    if "full" in job.methods and opts.optimizer in ("adamw", "adamw-fp32", "adamw-bf16"):
        out.append(("optimizer", "adamw-8bit", "8-bit AdamW"))
    if "full" in job.methods and opts.optimizer in ("adamw", "adamw-fp32"):
        out.append(("optimizer", "adamw-bf16", "pure bf16 AdamW"))
    if adapters and opts.adapter_dtype == "fp32":
        out.append(("adapter_dtype", "bf16", "bf16 adapters"))
    if adapters and opts.optimizer in ("adamw", "adamw-fp32", "adamw-bf16"):
        out.append(("optimizer", "paged-adamw-8bit", "paged 8-bit AdamW"))
    if opts.optimizer_step != "fused" and opts.optimizer in ("adamw", "adamw-fp32", "adamw-bf16"):
        out.append(("optimizer_step", "fused", "a fused AdamW step"))
    if opts.loss in ("fp32-upcast", "bf16"):
        out.append(("loss", "chunked", "chunked cross-entropy"))
    if not opts.activation_offload:
        out.append(("activation_offload", True, "activations offloaded to CPU"))
    return out


def _recipe_relaxations(job: JobSpec, table: CandidateTable, search: Replan) -> list[Relaxation]:
    """Recipe settings alone, else the fewest of them together (one re-plan per trial)."""
    if not (~table.masks["memory"] & _within_limits_bound(job, table)).any():
        return []  # no candidate held back by memory could keep the limits: saving memory cannot help
    changes = _recipe_changes(job)
    found = [r for f, v, words in changes if (r := _relax(search, "recipe", f"use {words}", {f: v})) is not None]
    if found or not changes:
        return found
    bundle = {f: (v, words) for f, v, words in changes}  # one value per field: the later, leaner one
    if _relax(search, "recipe", "", {f: v for f, (v, _) in bundle.items()}) is None:
        return []
    for field in list(bundle):  # drop what the others do not need
        rest = {f: x for f, x in bundle.items() if f != field}
        if rest and _relax(search, "recipe", "", {f: v for f, (v, _) in rest.items()}) is not None:
            bundle = rest
    words = " + ".join(w for _, w in bundle.values())
    joint = _relax(search, "recipe", f"use {words}", {f: v for f, (v, _) in bundle.items()})
    return [joint] if joint is not None else []


def _hardware_relaxations(job: JobSpec, conflicts: list[tuple[str, ...]], search: Replan) -> list[Relaxation]:
    """Methods, markets, the GPU cap, quotas and scope filters, one at a time."""
    trials: list[tuple[str, str, Updates]] = [
        ("methods", f"allow {m}", {"methods": (*job.methods, m)}) for m in METHODS if m not in job.methods
    ]
    trials += [("markets", f"allow {m}", {"markets": (*job.markets, m)}) for m in MARKETS[:2] if m not in job.markets]
    out = [r for c, change, u in trials if (r := _relax(search, c, change, u)) is not None]
    cap = _cap_relaxation(job, conflicts, search)
    out += [cap] if cap is not None else []
    drops: list[tuple[str, str, Updates]] = [
        (f, f"drop the {f} filter", {f: None}) for f in ("providers", "regions", "countries", "gpus")
    ]
    drops += [("eu_only", "allow offers outside the EU/EEA", {"eu_only": False})]
    for constraint, change, updates in drops:
        field = next(iter(updates))
        if getattr(job, field) not in (None, False):
            found = _relax(search, constraint, change, updates)
            out += [found] if found is not None else []
    return out


def _wide(job: JobSpec) -> Updates:
    return {"max_gpus": max(WIDE_MAX_GPUS, job.max_gpus), "max_nodes": max(WIDE_MAX_NODES, job.max_nodes)}


def _within_limits_bound(job: JobSpec, table: CandidateTable) -> B:
    """Candidates that run on the hardware and within the quotas and whose bare training (its
    hours, and its GPU-hours at the cheaper price its market may pay) keeps the limits. Computed
    for every candidate, also those whose memory fails and which are therefore not priced: their
    hours are at a micro-batch of one, so the start-up is left out, and a recipe that frees memory
    may still train them faster. A gate, not a bound: what it lets through is re-planned."""
    arr, o = table.offer_arrays, table.offer_idx
    bare = least_hours_and_usd(
        np.zeros(len(table)), table.train_hours, table.n_gpus, table.market, arr.on_demand[o], arr.interruptible[o]
    )
    out: B = table.masks["compatibility"] & table.masks["quota"] & within_limits(job, *bare)
    return out


def _more_gpus_may_help(job: JobSpec, conflicts: list[tuple[str, ...]], table: CandidateTable) -> bool:
    """False where more GPUs cannot yield a plan: they shard memory and shorten time, but never
    lower the GPU-hours of the work (per-GPU speed only falls as GPUs are added), so where no
    candidate's bare training cost is within the budget, no larger one's is; nor the start-up."""
    if not {"memory", "deadline"} & {c for conf in conflicts for c in conf}:
        return False
    bound = job.model_copy(update={"deadline_hours": None})  # more GPUs do shorten the training
    ok = _within_limits_bound(bound, table)
    if job.deadline_hours is not None:  # but not the start-up: provisioning, download, loading
        ok = ok & (table.startup_hours < job.deadline_hours)
    return bool(ok.any())


def _cap_relaxation(job: JobSpec, conflicts: list[tuple[str, ...]], search: Replan) -> Relaxation | None:
    """The fewest GPUs (then nodes) that yield a plan, read off one table with the widest caps."""
    if not _more_gpus_may_help(job, conflicts, search.base):
        return None
    if _wide(job) == {"max_gpus": job.max_gpus, "max_nodes": job.max_nodes}:
        return None
    _, wide = search.within_reach(_wide(job))
    if wide is None:
        return None
    rows = np.flatnonzero(wide.feasible())
    if rows.size == 0:
        return None
    first = rows[np.lexsort((wide.nodes[rows], wide.n_gpus[rows]))[0]]
    n, nodes = int(wide.n_gpus[first]), int(wide.nodes[first])
    updates: Updates = {"max_gpus": n}
    change = f"max_gpus >= {n}"
    if nodes > job.max_nodes:
        updates["max_nodes"] = nodes
        change += f" and max_nodes >= {nodes}"
    # The job with these caps has the wide table's candidates within them, with the same figures.
    trial = job.model_copy(update=updates)
    i = best_row(trial, wide, (wide.n_gpus <= n) & (wide.nodes <= trial.max_nodes))
    return None if i is None else _relaxation("max_gpus", change, updates, wide, i, float(n))


def _frontier_and_joint(
    job: JobSpec, conflicts: list[tuple[str, ...]], search: Replan
) -> tuple[tuple[Extreme, ...], Relaxation | None]:
    """Cheapest and fastest plans ignoring deadline and budget, and the smallest joint change.

    Within the job's caps where some candidate passes everything but the limits; else within the
    widest caps. "Smallest" is the least uniform stretch: the candidate minimizing the larger of
    (its finish / deadline) and (its cost / budget), cheaper first on a tie."""
    caps: Updates = {}
    _, t = search.table(caps)
    ok = t.feasible(ignore=LIMITS)
    if not ok.any() and _more_gpus_may_help(job, conflicts, t):
        caps = _wide(job)
        _, t = search.table(caps)
        ok = t.feasible(ignore=LIMITS)
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return (), None
    hours, cents, budget_cents = t.quantile_hours[rows], t.total_cents[rows], t.budget_cents[rows]
    within = f" with up to {caps['max_gpus']} GPUs" if caps else " within your caps"
    frontier = tuple(
        Extreme(label=label + within, cost_usd=int(cents[j]) / 100, hours=round(float(hours[j]), 3))
        for label, j in (
            ("cheapest plan at any deadline", int(np.lexsort((hours, cents))[0])),
            ("fastest plan at any budget", int(np.lexsort((cents, hours))[0])),
        )
    )
    stretch = np.maximum(
        hours / job.deadline_hours if job.deadline_hours else 0.0,
        budget_cents / (100 * job.budget_usd) if job.budget_usd else 0.0,
    )
    j = int(np.lexsort((cents, stretch))[0])
    return frontier, _joint(job, caps, t, int(rows[j]), search)


def _joint(job: JobSpec, caps: Updates, t: CandidateTable, i: int, search: Replan) -> Relaxation | None:
    updates: Updates = {}
    words = []
    if caps:
        n, nodes = int(t.n_gpus[i]), int(t.nodes[i])
        updates |= {"max_gpus": max(n, job.max_gpus), "max_nodes": max(nodes, job.max_nodes)}
        words.append(f"max_gpus >= {n}" + (f" and max_nodes >= {nodes}" if nodes > job.max_nodes else ""))
    need_h = math.ceil(float(t.quantile_hours[i]) * 10) / 10
    if job.deadline_hours is not None and need_h > job.deadline_hours:
        updates["deadline_hours"] = need_h
        words.append(f"deadline >= {need_h:.1f} h")
    need_usd = int(t.budget_cents[i]) / 100  # at the budget's confidence where the job asks one
    if job.budget_usd is not None and need_usd > job.budget_usd:
        updates["budget_usd"] = need_usd
        words.append(f"budget >= {need_usd:.2f} USD")
    if not updates:
        return None
    return _relax(search, "+".join(sorted(updates)), " and ".join(words), updates)


def _contradictions(job: JobSpec, table: CandidateTable) -> tuple[str, ...]:
    """Caps that cannot all be reached: more GPUs than the node cap times the largest node."""
    if len(table) == 0:
        return ()
    per_node = max(table.offers[int(i)].gpus_per_node for i in np.unique(table.offer_idx))
    reach = job.max_nodes * per_node
    if job.max_gpus > reach:
        return (
            f"max_gpus {job.max_gpus} cannot be reached: max_nodes {job.max_nodes} x at most {per_node} GPUs "
            f"per node in scope = {reach}",
        )
    return ()


def _plan_words(r: Relaxation) -> str:
    if r.plan_cost_usd is None:
        return r.change
    return f"{r.change} (plan costs {r.plan_cost_usd:.2f} USD, {r.plan_hours or 0:.1f} h)"


def _summary(
    table: CandidateTable,
    conflicts: list[tuple[str, ...]],
    relaxations: list[Relaxation],
    frontier: tuple[Extreme, ...],
) -> str:
    names = _constraints.labels()
    parts = [" + ".join(names[c] for c in conf) for conf in conflicts]
    summary = f"no plan meets every requirement: {'; '.join(parts) or 'constraints'} cannot all hold"
    if len(conflicts) == 1 and len(conflicts[0]) == 1:
        summary = f"no plan meets every requirement: {names[conflicts[0][0]]} rules out all {len(table)} candidates"
    single = [r for r in relaxations if "+" not in r.constraint]
    if single:
        return summary + ". Relax one of: " + ", or ".join(_plan_words(r) for r in single)
    ends = "; ".join(f"{e.label}: {e.cost_usd:.2f} USD, {e.hours:.1f} h" for e in frontier)
    if relaxations:
        return f"{summary}. No single change suffices; {ends}; smallest joint change: {_plan_words(relaxations[0])}"
    if "memory" in {c for conf in conflicts for c in conf}:
        return summary + f". Nothing fits even with {WIDE_MAX_GPUS} GPUs: choose a smaller model or a shorter sequence"
    return summary + (f". {ends}" if ends else "")


def _empty_scope(job: JobSpec, table: CandidateTable) -> Infeasibility:
    scope = table.scope
    if scope.offers_in_scope == 0:
        removed = ", ".join(f"{k} removed {v}" for k, v in scope.removed_by.items())
        summary = (
            f"no offer of the {scope.offers_total} in the catalog passes your filters ({removed}). "
            "To fix: widen --provider/--region/--country/--gpu or allow both markets"
        )
    else:
        summary = (
            f"no candidate configuration: methods {', '.join(job.methods)} on {scope.offers_in_scope} "
            f"offers within max_gpus={job.max_gpus}, max_nodes={job.max_nodes}"
        )
    return Infeasibility(summary=summary, candidates=0, ruled_out_by={}, conflicts=(), relaxations=())
