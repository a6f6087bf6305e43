"""Job spec, estimators, candidate grid, engines and plans."""

from ftsolve.solver._api import check_plan, plan
from ftsolve.solver._job import JobSpec
from ftsolve.solver._plans import (
    CostItem,
    Infeasibility,
    MemoryBreakdown,
    Plan,
    PlanSet,
    Relaxation,
    TimeBreakdown,
)

__all__ = [
    "CostItem",
    "Infeasibility",
    "JobSpec",
    "MemoryBreakdown",
    "Plan",
    "PlanSet",
    "Relaxation",
    "TimeBreakdown",
    "check_plan",
    "plan",
]
