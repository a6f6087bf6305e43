"""Explanations: why a plan ranks where it does, and what to relax when nothing is feasible."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import combinations

import numpy as np

from ftsolve.solver._grid import CONSTRAINTS, CandidateTable
from ftsolve.solver._job import METHODS, JobSpec
from ftsolve.solver._plans import Infeasibility, Relaxation

_NAMES = {
    "compatibility": "hardware/software compatibility",
    "quota": "your GPU quotas",
    "memory": "memory fit",
    "bounded": "a finite cost and time (under 10^12 USD and 10^6 hours)",
    "deadline": "the deadline",
    "budget": "the budget",
}


def minimal_conflicts(table: CandidateTable) -> list[tuple[str, ...]]:
    """All minimal sets of constraints that no candidate satisfies together (exact, 2^k masks)."""
    names = [c for c in CONSTRAINTS if c in table.masks]
    found: list[tuple[str, ...]] = []
    for size in range(1, len(names) + 1):
        for subset in combinations(names, size):
            if any(set(f) <= set(subset) for f in found):
                continue
            together = np.logical_and.reduce([table.masks[c] for c in subset])
            if not together.any():
                found.append(subset)
    return found


def diagnose(
    job: JobSpec,
    table: CandidateTable,
    rebuild: Callable[[JobSpec], CandidateTable],
) -> Infeasibility:
    """Explain an infeasible job: the conflicts, and the smallest relaxation of each requirement."""
    if len(table) == 0:
        return _empty_scope(job, table)
    ruled_out = {c: int((~m).sum()) for c, m in table.masks.items()}
    conflicts = minimal_conflicts(table)
    relaxations: list[Relaxation] = []

    others = table.feasible(ignore=("deadline",))
    if job.deadline_hours is not None and others.any():
        need = float(np.min(table.quantile_hours[others]))
        need_up = np.ceil(need * 10) / 10
        ok = others & (table.quantile_hours <= need_up)
        cost = float(np.min(table.total_cents[ok])) / 100
        relaxations.append(
            Relaxation(
                constraint="deadline",
                change=f"deadline >= {need_up:.1f} h",
                value=need_up,
                plan_cost_usd=cost,
            )
        )
    others = table.feasible(ignore=("budget",))
    if job.budget_usd is not None and others.any():
        need = float(np.min(table.total_cents[others])) / 100
        relaxations.append(
            Relaxation(constraint="budget", change=f"budget >= {need:.2f} USD", value=need, plan_cost_usd=need)
        )

    def attempt(constraint: str, change: str, update: Mapping[str, object], value: float | None = None) -> bool:
        """Rebuild with one requirement relaxed; record it when that yields a plan."""
        trial = rebuild(job.model_copy(update=dict(update)))
        ok = trial.feasible()
        if ok.any():
            cost = float(np.min(trial.total_cents[ok])) / 100
            relaxations.append(Relaxation(constraint=constraint, change=change, value=value, plan_cost_usd=cost))
        return bool(ok.any())

    for method in (m for m in METHODS if m not in job.methods):
        attempt("methods", f"allow {method}", {"methods": (*job.methods, method)})
    if len(job.markets) < 2:
        other = "interruptible" if job.markets == ("on-demand",) else "on-demand"
        attempt("markets", f"allow {other}", {"markets": ("on-demand", "interruptible")})
    # More GPUs: the smallest power-of-two cap that yields a plan.
    cap = job.max_gpus
    while cap < 1024:
        cap *= 2
        update = {"max_gpus": cap, "max_nodes": max(job.max_nodes, -(-cap // 8))}
        if attempt("max_gpus", f"max_gpus >= {cap}", update, float(cap)):
            break
    if job.gpu_quota:
        attempt("gpu_quota", "raise or drop the GPU quotas", {"gpu_quota": None})
    # Scope filters the user set, dropped one at a time.
    for field_name in ("providers", "regions", "countries", "gpus"):
        if getattr(job, field_name) is not None:
            attempt(field_name, f"drop the {field_name} filter", {field_name: None})
    if job.eu_only:
        attempt("eu_only", "allow offers outside the EU/EEA", {"eu_only": False})

    parts = [" + ".join(_NAMES[c] for c in conf) for conf in conflicts]
    summary = f"no plan meets every requirement: {'; '.join(parts) or 'constraints'} cannot all hold"
    if len(conflicts) == 1 and len(conflicts[0]) == 1:
        only = _NAMES[conflicts[0][0]]
        summary = f"no plan meets every requirement: {only} rules out all {len(table)} candidates"
    if relaxations:
        summary += ". Relax one of: " + ", or ".join(
            r.change + (f" (plan costs {r.plan_cost_usd:.2f} USD)" if r.plan_cost_usd is not None else "")
            for r in relaxations
        )
    elif "memory" in {c for conf in conflicts for c in conf}:
        summary += ". To fix: allow more GPUs (--max-gpus), a QLoRA method, or GPUs with more memory"
    return Infeasibility(
        summary=summary,
        candidates=len(table),
        ruled_out_by=ruled_out,
        conflicts=tuple(conflicts),
        relaxations=tuple(relaxations),
    )


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
