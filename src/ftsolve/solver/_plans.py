"""What the planner returns: plans with their breakdowns, and the diagnosis when none exists."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ftsolve.catalog import Offer
from ftsolve.solver._job import JobSpec

SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    # A plan's figures are finite by construction; a NaN or infinity here is a bug, caught at once.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class MemoryBreakdown(_Frozen):
    """Predicted peak memory per GPU, by component, in GiB."""

    components_gib: dict[str, float]
    peak_gib: float
    usable_gib: float
    card_gib: float
    band: float = Field(description="headroom kept above the peak, as a share of it (the estimate's band)")
    headroom_gib: float = Field(description="usable memory left after the peak and its band")

    @property
    def slack_gib(self) -> float:
        return self.usable_gib - self.peak_gib


class TimeBreakdown(_Frozen):
    """Predicted wall-clock time by phase, in hours."""

    tokens_per_s: float = Field(description="processed tokens per second, all GPUs together")
    tokens_per_s_band: float = Field(
        description="relative band of tokens/s: the calibration's where one applies, else the model's "
        "leave-one-source-out p90 for the method, wider on GPUs no measured run used"
    )
    step_s: float
    training_hours: float
    evaluation_hours: float
    startup_hours: float
    checkpoint_hours: float
    preemption_rework_hours: float
    expected_hours: float
    quantile_hours: float = Field(description="finish time not exceeded with the job's confidence")
    confidence: float
    checkpoint_interval_hours: float | None
    interruptible_fraction: float = Field(description="share of the training work run on interruptible capacity")
    interruption_rate_per_hour: float | None
    switch_probability: float | None = Field(
        default=None, description="interruptible plans: the share of runs that resume on on-demand capacity"
    )
    switch_after_lost_hours: float | None = Field(
        default=None,
        description="adaptive plans: at a preemption, resume on on-demand capacity once the hours lost to "
        "preemptions (restarts and work redone since launch) exceed this",
    )


class MicroBatchChoice(_Frozen):
    """Why the plan's micro-batch: the smallest within a few percent of the largest that fits."""

    chosen: int
    largest_fitting: int = Field(description="the largest micro-batch that fits with headroom and holds the batch")
    largest_speedup_pct: float = Field(description="how much faster the largest one trains, in percent")
    largest_peak_gib: float = Field(description="the predicted peak per GPU at the largest one")


class RateCase(_Frozen):
    """The plan as planned if preemptions came at another rate than assumed."""

    rate_factor: float
    interruption_rate_per_hour: float
    cost_usd: float = Field(description="expected total cost")
    meets_deadline: float = Field(
        description="probability of finishing by the deadline (without one, by the finish quoted at the confidence)"
    )


class CostItem(_Frozen):
    """One line of a plan's expected cost; the items sum to the total to the cent."""

    name: str
    usd: float
    detail: str
    source: str = Field(description="price, date and source behind this line")


class Plan(_Frozen):
    """One complete, runnable decision with its numbers and why it ranks where it does."""

    rank: int
    offer: Offer
    gpu: str
    n_gpus: int
    nodes: int
    method: Literal["full", "lora", "qlora"]
    weight_precision: str
    optimizer: str
    sharding: str
    gradient_checkpointing: bool
    micro_batch: int
    grad_accum: int
    global_batch: int = Field(description="micro-batch x accumulation x GPUs: the batch the run trains with")
    market: Literal["on-demand", "interruptible", "fallback", "adaptive"]
    price_usd_per_gpu_hour: float
    price_date: dt.date
    memory: MemoryBreakdown
    time: TimeBreakdown
    cost_items: tuple[CostItem, ...]
    total_cost_usd: float
    cost_at_confidence_usd: float | None = Field(
        default=None, description="with a budget confidence: the cost at that quantile, which the budget is judged on"
    )
    micro_batch_choice: MicroBatchChoice | None = Field(
        default=None, description="the micro-batch chosen and the largest that fits, with its speed and memory"
    )
    rate_sensitivity: tuple[RateCase, ...] = Field(
        default=(), description="interruptible plans: cost and chance of the deadline at half and double the rate"
    )
    binding_constraints: tuple[str, ...]
    slack: dict[str, float] = Field(description="memory GiB, deadline hours, budget USD left before each limit")
    why: str
    assumptions: tuple[str, ...]


JobValue = float | int | str | bool | tuple[str, ...] | None


class Relaxation(_Frozen):
    """The smallest change to one requirement (or one joint change) that yields a plan, and that
    plan's cost and finish: re-planning with `updates` applied to the job yields exactly it."""

    constraint: str
    change: str
    value: float | None
    plan_cost_usd: float | None
    plan_hours: float | None = Field(default=None, description="the plan's finish at the job's confidence")
    updates: dict[str, JobValue] = Field(default_factory=dict, description="JobSpec fields to change")


class Extreme(_Frozen):
    """One end of the cost-time frontier within the job's caps, ignoring its deadline and budget."""

    label: str
    cost_usd: float
    hours: float = Field(description="finish at the job's confidence")


class Infeasibility(_Frozen):
    """Why no candidate satisfies every constraint."""

    summary: str
    candidates: int
    ruled_out_by: dict[str, int] = Field(description="candidates that fail each constraint")
    conflicts: tuple[tuple[str, ...], ...] = Field(
        description="minimal sets of constraints that no candidate meets together"
    )
    relaxations: tuple[Relaxation, ...]
    frontier: tuple[Extreme, ...] = Field(
        default=(), description="cheapest plan at any deadline and fastest plan at any budget, within the caps"
    )
    notes: tuple[str, ...] = Field(default=(), description="caps that contradict each other, and similar")


class PlanSet(_Frozen):
    """Ranked plans for one job."""

    schema_version: int = SCHEMA_VERSION
    job: JobSpec
    model_params_b: float
    engine: str
    candidates: int
    feasible: int
    plans: tuple[Plan, ...]
    price_dates: tuple[dt.date, dt.date] = Field(description="oldest and newest price date in scope")
    rejected: tuple[str, ...] = Field(
        default=(), description="why the cheapest-per-hour and the fastest options did not win"
    )
