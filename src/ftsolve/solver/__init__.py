"""Job spec, estimators, candidate grid, engines and plans."""

from ftsolve.solver._api import check_plan, plan
from ftsolve.solver._campaign import (
    Campaign,
    CampaignConflict,
    CampaignPlan,
    CampaignRelaxation,
    Capacity,
    Quotas,
    Run,
    ScheduledRun,
    check_campaign,
    load_campaign,
    plan_campaign,
)
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
    "Campaign",
    "CampaignConflict",
    "CampaignPlan",
    "CampaignRelaxation",
    "Capacity",
    "CompareRow",
    "CostItem",
    "Extreme",
    "FrontierPoint",
    "Infeasibility",
    "JobSpec",
    "MemoryBreakdown",
    "Plan",
    "PlanSet",
    "Quotas",
    "Relaxation",
    "Run",
    "ScheduledRun",
    "TimeBreakdown",
    "check_campaign",
    "check_plan",
    "compare",
    "load_campaign",
    "pareto",
    "plan",
    "plan_campaign",
]
