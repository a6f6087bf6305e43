"""Constraints: one named object each (name, label, which candidates meet it).

The candidate table holds one mask per entry, in registry order (`CandidateTable.masks`); a plan
is feasible where every mask holds; explanations name a constraint by its label. Adding a
constraint is one entry here (and its test).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ftsolve.solver._cost import bounded
from ftsolve.solver._plans import JobValue

if TYPE_CHECKING:
    from ftsolve.solver._grid import CandidateTable
    from ftsolve.solver._job import JobSpec

B = NDArray[np.bool_]


# (words, JobSpec fields to change, the new limit): the least change of one requirement that lets
# some candidate through. Explanations verify it by re-planning with the fields changed.
Proposal = tuple[str, dict[str, JobValue], float | None]


@dataclass(frozen=True)
class Constraint:
    """A requirement every plan meets, and the relaxation it offers (None: it is met only by
    changing something else, such as the recipe or the hardware)."""

    name: str
    label: str  # how explanations name it
    mask: Callable[[JobSpec, CandidateTable], B]  # the candidates that meet it
    relax: Callable[[JobSpec, CandidateTable], Proposal | None] | None = None


def _quota(job: JobSpec, t: CandidateTable) -> B:
    """Candidates within the user's GPU quota at their provider (no quota: no limit)."""
    ok = np.ones(len(t), dtype=bool)
    if job.gpu_quota:
        provider = t.offer_arrays.provider[t.offer_idx]
        for name, limit in job.gpu_quota.items():
            ok &= (provider != name.lower()) | (t.n_gpus <= limit)
    return ok


# Time and cost exist only where a configuration runs at all: candidates that do not fit or are not
# supported count as meeting the deadline and the budget (memory or compatibility rules them out).
def _bounded(job: JobSpec, t: CandidateTable) -> B:
    out: B = ~t.runnable | bounded(t.total_cents, t.expected_hours, t.quantile_hours)
    return out


def _deadline(job: JobSpec, t: CandidateTable) -> B:
    if job.deadline_hours is None:
        return np.ones(len(t), dtype=bool)
    out: B = ~t.runnable | (t.quantile_hours <= job.deadline_hours)
    return out


def _budget(job: JobSpec, t: CandidateTable) -> B:
    if job.budget_usd is None:
        return np.ones(len(t), dtype=bool)
    out: B = ~t.runnable | (t.budget_cents <= math.floor(job.budget_usd * 100 + 1e-6))
    return out


def _batch(job: JobSpec, t: CandidateTable) -> B:
    """The global batch held: exactly, or within the excess the user allows."""
    out: B = t.global_batch <= job.global_batch_size * (1.0 + job.batch_tolerance) + 1e-9
    return out


def _relax_batch(job: JobSpec, t: CandidateTable) -> Proposal | None:
    others = t.feasible(ignore=("batch",))
    if not others.any():
        return None
    need = math.ceil((float(np.min(t.global_batch[others])) / job.global_batch_size - 1.0) * 100) / 100
    return f"batch_tolerance >= {need:.2f} (a larger effective global batch)", {"batch_tolerance": need}, need


def _relax_deadline(job: JobSpec, t: CandidateTable) -> Proposal | None:
    others = t.feasible(ignore=("deadline",))
    if job.deadline_hours is None or not others.any():
        return None
    need = math.ceil(float(np.min(t.quantile_hours[others])) * 10) / 10
    return f"deadline >= {need:.1f} h", {"deadline_hours": need}, need


def _relax_budget(job: JobSpec, t: CandidateTable) -> Proposal | None:
    others = t.feasible(ignore=("budget",))
    if job.budget_usd is None or not others.any():
        return None
    need = int(np.min(t.budget_cents[others])) / 100
    return f"budget >= {need:.2f} USD", {"budget_usd": need}, need


def _relax_quota(job: JobSpec, t: CandidateTable) -> Proposal | None:
    return ("raise or drop the GPU quotas", {"gpu_quota": None}, None) if job.gpu_quota else None


CONSTRAINTS: tuple[Constraint, ...] = (
    Constraint("compatibility", "hardware/software compatibility", lambda job, t: t.compatible),
    Constraint("quota", "your GPU quotas", _quota, _relax_quota),
    Constraint("memory", "memory fit with headroom", lambda job, t: t.micro_batch >= 1),
    Constraint("batch", "the global batch", _batch, _relax_batch),
    Constraint("bounded", "a finite cost and time (under 10^12 USD and 10^6 hours)", _bounded),
    Constraint("deadline", "the deadline", _deadline, _relax_deadline),
    Constraint("budget", "the budget", _budget, _relax_budget),
)


def constraint_names() -> tuple[str, ...]:
    """The registry's names, in order, read when called (tests may extend it)."""
    return tuple(c.name for c in CONSTRAINTS)


def labels() -> dict[str, str]:
    """How explanations name each constraint."""
    return {c.name: c.label for c in CONSTRAINTS}
