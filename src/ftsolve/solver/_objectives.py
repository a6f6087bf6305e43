"""Objectives: one spec each (key, the integer to minimize over a candidate table, and the phrase a
plan's "why" uses). Adding an objective is one entry here plus the literal in JobSpec."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ftsolve.solver._cost import MAX_HOURS, OD
from ftsolve.solver._memory import QLORA
from ftsolve.solver._rows import order_by

if TYPE_CHECKING:
    from ftsolve.solver._grid import CandidateTable
    from ftsolve.solver._job import JobSpec

I = NDArray[np.int64]
F = NDArray[np.float64]


@dataclass(frozen=True)
class Objective:
    """What "best" means: an integer key per candidate (smaller is better) and its phrase."""

    name: str
    key: Callable[[JobSpec, I, F], I]  # (job, total cents, expected hours) -> key
    why: Callable[[JobSpec], str]


def _capped(hours: F) -> F:
    # Unbounded rows are masked out; capping their hours keeps every key far inside int64.
    out: F = np.where(np.isfinite(hours), np.minimum(hours, MAX_HOURS), MAX_HOURS)
    return out


def _time_key(job: JobSpec, cents: I, hours: F) -> I:
    out: I = np.rint(_capped(hours) * 360_000.0).astype(np.int64)  # centiseconds
    return out


def _weighted_key(job: JobSpec, cents: I, hours: F) -> I:
    out: I = cents + np.rint(job.time_value_usd_per_hour * _capped(hours) * 100.0).astype(np.int64)
    return out


def _cost_key(job: JobSpec, cents: I, hours: F) -> I:
    return cents


OBJECTIVES: dict[str, Objective] = {
    o.name: o
    for o in (
        Objective("cost", _cost_key, lambda job: "cheapest expected total cost"),
        Objective("time", _time_key, lambda job: "earliest expected finish"),
        Objective(
            "weighted",
            _weighted_key,
            lambda job: f"best cost + {job.time_value_usd_per_hour:g} USD per hour of finish",
        ),
    )
}


# What a practitioner prefers when costs are close, each counted as `tie_tolerance` of extra cost:
# LoRA over QLoRA (faster, no quantization error), one node over several (no inter-node network to
# trust; per doubling of nodes), on-demand over interruptible capacity (no preemption to recover).
PREFERENCES = ("LoRA over QLoRA", "fewer nodes", "on-demand over interruptible")


def preference_terms(job: JobSpec, t: CandidateTable) -> dict[str, F]:
    """Each preference's share of extra cost per candidate (0 where the candidate is preferred)."""
    tol = job.tie_tolerance
    qlora_penalized = "lora" in job.methods  # only when LoRA was an option
    return {
        PREFERENCES[0]: tol * ((t.method == QLORA) & qlora_penalized),
        PREFERENCES[1]: tol * np.log2(t.nodes.astype(np.float64)),
        PREFERENCES[2]: tol * (t.market != OD),
    }


def ranking_cents(job: JobSpec, t: CandidateTable) -> I:
    """Expected cost with the preferences added: what the cost objective ranks by."""
    factor = 1.0 + sum(preference_terms(job, t).values(), np.zeros(len(t)))
    out: I = np.rint(t.total_cents * factor).astype(np.int64)
    return out


def objective_key(job: JobSpec, t: CandidateTable) -> tuple[I, I]:
    """(integer key to minimize, tie rank) for the job's objective; ties go to the cheaper plan,
    then to the stable candidate order. Cost-based objectives rank by ranking_cents."""
    key = OBJECTIVES[job.objective].key(job, ranking_cents(job, t), t.expected_hours)
    order = order_by(t.total_cents, t.tie_rank)
    tie = np.empty_like(order)
    tie[order] = np.arange(order.size)
    return key.astype(np.int64), tie.astype(np.int64)


def best_row(job: JobSpec, t: CandidateTable, mask: NDArray[np.bool_] | None = None) -> int | None:
    """The candidate `plan` would rank first among the feasible ones (and `mask`), or None."""
    ok = t.feasible() if mask is None else t.feasible() & mask
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return None
    key, tie = objective_key(job, t)
    return int(rows[order_by(key[rows], tie[rows])[0]])
