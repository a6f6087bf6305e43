"""ftsolve: plan LLM fine-tuning on rented GPUs at the least expected total cost.

>>> import ftsolve
>>> job = ftsolve.JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048)
>>> plans = ftsolve.plan(job)        # PlanSet, best first
"""

from importlib import metadata as _metadata

from ftsolve._errors import (
    CatalogError,
    FtsolveError,
    InvalidJobSpec,
    NoFeasiblePlan,
    UnknownCatalogEntry,
    UnsafeOutput,
)
from ftsolve._exports import export_plan
from ftsolve.catalog import Catalog, GpuSpec, ModelArch, Offer, load_catalog, load_config_json
from ftsolve.solver import (
    Campaign,
    CampaignConflict,
    CampaignPlan,
    CampaignRelaxation,
    Capacity,
    CompareRow,
    CostItem,
    Extreme,
    FrontierPoint,
    Infeasibility,
    JobSpec,
    MemoryBreakdown,
    Plan,
    PlanSet,
    Quotas,
    Relaxation,
    Run,
    ScheduledRun,
    TimeBreakdown,
    check_campaign,
    check_plan,
    compare,
    load_campaign,
    pareto,
    plan,
    plan_campaign,
)
from ftsolve.solver._estimate import MemoryEstimate, TimeEstimate, estimate_memory, estimate_time
from ftsolve.solver._memory import MemoryOptions

try:
    __version__ = _metadata.version("ftsolve")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "Campaign",
    "CampaignConflict",
    "CampaignPlan",
    "CampaignRelaxation",
    "Capacity",
    "Catalog",
    "CatalogError",
    "CompareRow",
    "CostItem",
    "Extreme",
    "FrontierPoint",
    "FtsolveError",
    "GpuSpec",
    "Infeasibility",
    "InvalidJobSpec",
    "JobSpec",
    "MemoryBreakdown",
    "MemoryEstimate",
    "MemoryOptions",
    "ModelArch",
    "NoFeasiblePlan",
    "Offer",
    "Plan",
    "PlanSet",
    "Quotas",
    "Relaxation",
    "Run",
    "ScheduledRun",
    "TimeBreakdown",
    "TimeEstimate",
    "UnknownCatalogEntry",
    "UnsafeOutput",
    "__version__",
    "check_campaign",
    "check_plan",
    "compare",
    "estimate_memory",
    "estimate_time",
    "export_plan",
    "load_campaign",
    "load_catalog",
    "load_config_json",
    "pareto",
    "plan",
    "plan_campaign",
]
