"""Job spec, estimators, candidate grid, engines and plans."""

from ftsolve.solver._api import check_plan, plan
from ftsolve.solver._job import JobSpec
from ftsolve.solver._plans import (
    CostItem,
    Extreme,
    Infeasibility,
    MemoryBreakdown,
    Plan,
    PlanSet,
    Relaxation,
    TimeBreakdown,
)
from ftsolve.solver._sweeps import CompareRow, FrontierPoint, compare, pareto

__all__ = [
    "CompareRow",
    "CostItem",
    "Extreme",
    "FrontierPoint",
    "Infeasibility",
    "JobSpec",
    "MemoryBreakdown",
    "Plan",
    "PlanSet",
    "Relaxation",
    "TimeBreakdown",
    "check_plan",
    "compare",
    "pareto",
    "plan",
]
