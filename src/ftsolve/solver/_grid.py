"""The candidate table: every (offer, node count, training configuration, market) with its
estimates and one feasibility mask per registered constraint (_constraints.CONSTRAINTS).

Built by a staged pipeline (_pipeline.py): rows → physics per (hardware setup, configuration) →
candidates → run inputs; then priced here (runnable candidates only) and ranked for ties.
Physics depends only on the hardware and the configuration, so per-candidate figures of it are
gathered from the pairs when first read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog import Catalog, GpuSpec, ModelArch, Offer, OfferArrays
from ftsolve.solver import _coefficients as k
from ftsolve.solver import _constraints
from ftsolve.solver._compat import CONFIGS
from ftsolve.solver._cost import ADAPTIVE, FALLBACK, OD, SPOT, RunCosts, RunInputs, price_runs
from ftsolve.solver._estimate import resolve_arch
from ftsolve.solver._job import MARKETS, JobSpec
from ftsolve.solver._memory import ModelSizes
from ftsolve.solver._pipeline import (
    Candidates,
    Physics,
    Rows,
    Runs,
    ScopeReport,
    candidates,
    launchable_node_counts,
    offer_rows,
    pair_physics,
    planning_arrays,
    run_inputs,
    same_time_rows,
)
from ftsolve.solver._rows import dense_labels, order_by

F = NDArray[np.float64]
I = NDArray[np.int64]
B = NDArray[np.bool_]

__all__ = [
    "CONFIGS",
    "CONSTRAINTS",
    "CandidateTable",
    "ScopeReport",
    "build_candidates",
    "launchable_node_counts",
    "resolve_model",
]

# The constraints' names in registry order (explanations iterate them); the registry itself,
# with labels and masks, is _constraints.CONSTRAINTS.
CONSTRAINTS: tuple[str, ...] = _constraints.constraint_names()


def resolve_model(job: JobSpec, catalog: Catalog) -> ModelArch:
    """The job's architecture: given, a preset, or a config.json path (as estimates resolve it)."""
    return resolve_arch(job.model, catalog)[0]


@dataclass(frozen=True, eq=False)
class CandidateTable:
    """Flat arrays, one entry per candidate. Built by `build_candidates`; read-only."""

    job: JobSpec
    offers: Sequence[Offer]  # the catalog's: columns, an Offer built when read
    offer_arrays: OfferArrays  # the catalog's offer columns (index them with offer_idx)
    gpu_specs: Mapping[str, GpuSpec]
    arch: ModelArch
    sizes: ModelSizes
    scope: ScopeReport
    physics: Physics  # per (hardware setup, configuration) pair
    offer_idx: I
    nodes: I
    n_gpus: I
    cfg: I
    market: I
    pair: I  # the candidate's (hardware setup, configuration) pair: physics depends on nothing else
    compatible: B  # the GPU can run the configuration
    runnable: B  # compatible and fits in memory: only these have a time and a cost
    micro_batch: I  # 0 where not even one sequence fits
    startup_hours: F
    checkpoint_hours: F
    rework_hours: F
    expected_hours: F
    quantile_hours: F
    tau_hours: F
    spot_fraction: F
    interruption_rate_per_hour: F
    cost_items_cents: dict[str, I]
    total_cents: I
    run_costs: RunCosts  # every pricing figure per candidate (the arrays above are its columns)
    run_inputs: RunInputs  # the pricing inputs of the priced candidates
    input_row: I  # each candidate's row in run_inputs, -1 where it is not priced
    budget_cents: I  # the cost the budget is judged on: at its confidence, else the expected one
    tie_rank: I
    group: I
    assumptions: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.offer_idx.shape[0])

    @cached_property
    def masks(self) -> dict[str, B]:
        """One mask per registered constraint, in registry order: the candidates that meet it."""
        return {c.name: c.mask(self.job, self) for c in _constraints.CONSTRAINTS}

    def feasible(self, ignore: tuple[str, ...] = ()) -> B:
        out = np.ones(len(self), dtype=bool)
        for name, mask in self.masks.items():
            if name not in ignore:
                out &= mask
        return out

    @cached_property
    def pair_memory_gib(self) -> dict[str, F]:
        """Memory components per pair: static parts, then dynamic ones incl. the margin."""
        m = self.physics.memory
        parts = m.terms.parts(np.maximum(m.micro_batch, 1))
        return {name: v / k.GIB for name, v in parts.items()}

    def memory_gib(self, i: int) -> dict[str, float]:
        """Candidate i's memory per GPU by component (they sum to its peak)."""
        p = int(self.pair[i])
        return {name: float(v[p]) for name, v in self.pair_memory_gib.items()}

    def _per_pair(self, values: NDArray[Any]) -> NDArray[Any]:
        out: NDArray[Any] = values[self.pair]
        return out

    @cached_property
    def method(self) -> I:
        return self._per_config(0)

    @cached_property
    def quant(self) -> I:
        return self._per_config(1)

    @cached_property
    def shard(self) -> I:
        return self._per_config(2)

    @cached_property
    def ckpt(self) -> I:
        return self._per_config(3)

    def _per_config(self, column: int) -> I:
        out: I = CONFIGS[self.cfg, column]
        return out

    @cached_property
    def grad_accum(self) -> I:
        return self._per_pair(self.physics.memory.grad_accum)

    @cached_property
    def peak_gib(self) -> F:
        return self._per_pair(self.physics.memory.peak_bytes) / k.GIB

    @cached_property
    def usable_gib(self) -> F:
        return self._per_pair(self.physics.memory.usable_bytes) / k.GIB

    @cached_property
    def memory_band(self) -> F:
        """Headroom kept above the predicted peak, as a share of it."""
        return self._per_pair(self.physics.memory.band)

    @cached_property
    def global_batch(self) -> I:
        """Micro-batch x accumulation x GPUs: the batch each candidate really trains with."""
        return self._per_pair(self.physics.memory.global_batch)

    @cached_property
    def tokens_per_s(self) -> F:
        return self._per_pair(self.physics.step.tokens_per_s)

    @cached_property
    def step_s(self) -> F:
        return self._per_pair(self.physics.step.step_s)

    @cached_property
    def exposed_comm_s(self) -> F:
        return self._per_pair(self.physics.step.exposed_comm_s)

    @cached_property
    def train_hours(self) -> F:
        return self._per_pair(self.physics.train_h)

    @cached_property
    def eval_hours(self) -> F:
        return self._per_pair(self.physics.eval_h)

    @cached_property
    def price_usd_per_gpu_hour(self) -> F:
        arr = self.offer_arrays
        out: F = np.where(self.market == SPOT, arr.interruptible[self.offer_idx], arr.on_demand[self.offer_idx])
        return out


def build_candidates(job: JobSpec, catalog: Catalog, *, prune: bool = True) -> CandidateTable:
    """Score every candidate of the job against the catalog.

    With `prune` (the default), offers dominated by a cheaper identical twin are not scored; the
    ranked plans are the same either way (see _pipeline._market_rows), the candidate counts smaller.
    """
    arch = resolve_model(job, catalog)
    opts = job.memory_options()
    sizes = ModelSizes.of(arch, job.lora_rank, job.lora_targets, opts.framework)
    arr = planning_arrays(job, catalog)
    rows = offer_rows(job, catalog, arr, prune)
    physics = pair_physics(job, opts, sizes, rows.hardware)
    c = candidates(rows, physics)
    runs = run_inputs(job, opts, sizes, arr, c, physics)
    priced = _price(job, c, runs, _same_time_as(arr, rows, c))
    c, startup_h, rate = priced.candidates, priced.startup_h, priced.rate
    costs = priced.costs
    tie_rank, group = _ranks(rows, c, len(catalog.offers))
    return CandidateTable(
        job=job,
        offers=catalog.offers,
        offer_arrays=arr,
        gpu_specs=catalog.gpus,
        arch=arch,
        sizes=sizes,
        scope=rows.scope,
        physics=physics,
        offer_idx=c.offer,
        nodes=c.nodes,
        n_gpus=c.n_gpus,
        cfg=c.cfg,
        market=c.market,
        pair=c.pair,
        compatible=physics.compatible[c.pair],
        runnable=c.runnable,
        micro_batch=physics.memory.micro_batch[c.pair],
        startup_hours=startup_h,
        checkpoint_hours=costs.checkpoint_hours,
        rework_hours=costs.rework_hours,
        expected_hours=costs.expected_hours,
        quantile_hours=costs.quantile_hours,
        tau_hours=costs.checkpoint_interval_h,
        spot_fraction=costs.spot_fraction,
        interruption_rate_per_hour=np.where(c.market != OD, rate, 0.0),
        cost_items_cents=costs.items_cents,
        total_cents=costs.total_cents.astype(np.int64),
        budget_cents=costs.budget_cents.astype(np.int64),
        run_costs=costs,
        run_inputs=priced.inputs,
        input_row=priced.input_row,
        tie_rank=tie_rank,
        group=group,
    )


def _same_time_as(arr: OfferArrays, rows: Rows, c: Candidates) -> I:
    """For each candidate, the first candidate with the same time inputs: the same row class
    (hardware setup, market, time facts; see same_time_rows) and configuration make the same work,
    start-up, restart, writes and rate."""
    rep_row, row_class = same_time_rows(arr, rows)
    first = np.full((rows.offer.shape[0], len(CONFIGS)), -1, dtype=np.int64)
    first[c.row, c.cfg] = np.arange(len(c))
    # The first row of a class holds the first candidate of each configuration: rows come in order.
    same: I = first[rep_row[row_class[c.row]], c.cfg]
    return same


@dataclass(frozen=True)
class _Priced:
    """Stage 5: the candidates that stay (a fallback nobody needs goes), with their costs."""

    candidates: Candidates
    startup_h: F
    rate: F
    costs: RunCosts
    inputs: RunInputs  # of the runnable candidates, whether they stay or not
    input_row: I  # each candidate's row there, -1 where it is not priced


def _price(job: JobSpec, c: Candidates, runs: Runs, same_time_as: I | None) -> _Priced:
    """Price the runnable candidates; the others get no cost and an infinite finish time."""
    idx = runs.priced
    sub_same = None
    if same_time_as is not None:
        # Runnability follows the hardware and configuration, so a representative shares it.
        sub_same = (np.cumsum(c.runnable) - 1)[same_time_as[idx]]
    sub = price_runs(
        runs.inputs,
        job.deadline_confidence,
        job.deadline_hours,
        job.trial_runs,
        job.trial_fraction,
        job.failure_probability,
        job.retention_days,
        standalone_fallback="interruptible" not in job.markets,
        same_time_as=sub_same,
        budget_confidence=job.budget_confidence,
    )
    startup_h, rate = runs.startup_h, runs.rate
    # The spot-then-on-demand fallback is offered only where interruptible capacity alone misses
    # the deadline (NOT_OFFERED) and some work can still go to it (a zero share is on-demand).
    useless = ((runs.inputs.market == FALLBACK) | (runs.inputs.market == ADAPTIVE)) & (sub.spot_fraction <= 0)
    if useless.any():
        stays = np.ones(len(c), dtype=bool)
        stays[idx[useless]] = False
        keep = np.flatnonzero(stays)  # integer indices: one scan of the mask, not one per array
        c, startup_h, rate = c.take(keep), startup_h[keep], rate[keep]
        sub = _take_costs(sub, np.flatnonzero(~useless))
        idx = (np.cumsum(stays) - 1)[idx[~useless]]
    input_row = np.full(len(c), -1, dtype=np.int64)
    input_row[idx] = np.flatnonzero(~useless) if useless.any() else np.arange(idx.shape[0])
    return _Priced(c, startup_h, rate, _spread(sub, idx, len(c)), runs.inputs, input_row)


def _take_costs(costs: RunCosts, idx: I) -> RunCosts:
    return RunCosts(
        items_cents={name: v[idx] for name, v in costs.items_cents.items()},
        **{name: getattr(costs, name)[idx] for name in costs.__dataclass_fields__ if name != "items_cents"},
    )


def _spread(sub: RunCosts, idx: I, n: int) -> RunCosts:
    """Costs of the candidates at `idx` placed in a table of n: the others cost nothing and never
    finish."""

    def spread(values: NDArray[Any], fill: float) -> NDArray[Any]:
        out = np.full(n, fill, dtype=values.dtype)
        out[idx] = values
        return out

    return RunCosts(
        items_cents={name: spread(v, 0) for name, v in sub.items_cents.items()},
        total_cents=spread(sub.total_cents, 0),
        expected_hours=spread(sub.expected_hours, np.inf),
        quantile_hours=spread(sub.quantile_hours, np.inf),
        checkpoint_interval_h=spread(sub.checkpoint_interval_h, np.nan),
        checkpoint_hours=spread(sub.checkpoint_hours, 0.0),
        rework_hours=spread(sub.rework_hours, 0.0),
        spot_fraction=spread(sub.spot_fraction, 0.0),
        budget_cents=spread(sub.budget_cents, 0),
        switch_threshold_h=spread(sub.switch_threshold_h, np.nan),
        switch_probability=spread(sub.switch_probability, 0.0),
    )


def _ranks(rows: Rows, c: Candidates, n_offers: int) -> tuple[I, I]:
    """(tie rank, diversity group) per candidate. Ties go to fewer GPUs, then market, catalog order
    and configuration order; a group is one GPU type, method and market."""
    tie = order_by((c.n_gpus * len(MARKETS) + c.market) * n_offers + c.offer, c.cfg)
    tie_rank = np.empty_like(tie)
    tie_rank[tie] = np.arange(tie.shape[0])
    group = dense_labels((rows.gpu_id[c.offer] * 3 + CONFIGS[c.cfg, 0]) * len(MARKETS) + c.market)
    return tie_rank, group
