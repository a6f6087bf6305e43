"""The planner's library entry points: `plan` and the solver-independent `check_plan`."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
from numpy.typing import NDArray

from ftsolve._calibration import Calibration, calibration_assumptions, load_calibration, tokens_per_s_band
from ftsolve._errors import InvalidJobSpec, NoFeasiblePlan
from ftsolve.catalog import MAX_PLAUSIBLE_DISCOUNT, Catalog, Offer, load_catalog, provider_defaults
from ftsolve.solver import _coefficients as k
from ftsolve.solver._compat import GPU_RULES, TIMING_RULES, OnGpu
from ftsolve.solver._cost import RunCosts, rate_sensitivity
from ftsolve.solver._engines import ENGINES
from ftsolve.solver._explain import diagnose
from ftsolve.solver._grid import CandidateTable, build_candidates
from ftsolve.solver._items import item_specs, storage_source
from ftsolve.solver._job import MARKETS, JobSpec
from ftsolve.solver._memory import METHOD_NAMES, QUANT_NAMES, SHARD_NAMES, sharded_master
from ftsolve.solver._money import money
from ftsolve.solver._objectives import OBJECTIVES, objective_key, preference_terms
from ftsolve.solver._plans import (
    CostItem,
    MemoryBreakdown,
    MicroBatchChoice,
    Plan,
    PlanSet,
    RateCase,
    TimeBreakdown,
)
from ftsolve.solver._stacks import STACKS


def plan(
    job: JobSpec,
    catalog: Catalog | None = None,
    *,
    engine: str = "scan",
    top: int = 5,
    diverse: bool = True,
    within: float | None = None,
) -> PlanSet:
    """Ranked plans for `job`, best first by the job's objective (expected total cost by default).

    With `within` (e.g. 0.05) every plan within that fraction of the best is returned, not only
    one per GPU type, method and market. Raises NoFeasiblePlan (with the diagnosis) when no
    candidate meets every constraint.
    """
    if top < 1:
        raise InvalidJobSpec(f"invalid top: must be at least 1 (got {top})")
    if engine not in ENGINES:
        raise InvalidJobSpec(f"invalid engine {engine!r}: choose one of {', '.join(ENGINES)}")
    if within is not None and not 0 <= within <= 10:
        raise InvalidJobSpec(f"invalid within: expected a fraction such as 0.05 (got {within})")
    catalog = catalog if catalog is not None else load_catalog()
    diverse = diverse and within is None
    # Pruning dominated twins is exact for one plan per diversity group, not for plain top-k.
    table = build_candidates(job, catalog, prune=diverse)
    feasible = table.feasible()
    key, tie = objective_key(job, table)
    limit = top if within is None else max(top, 200)
    chosen = ENGINES[engine]().rank(key, tie, table.group, feasible, limit, diverse)
    if not chosen:
        raise NoFeasiblePlan(diagnose(job, table, lambda j: build_candidates(j, catalog)))
    if within is not None:
        chosen = [i for i in chosen if key[i] <= key[chosen[0]] * (1.0 + within) + 1e-9]
    plans = tuple(
        plan_from_row(job, table, i, rank, chosen[0], chosen[rank] if rank < len(chosen) else None)
        for rank, i in enumerate(chosen, start=1)
    )
    dates = [table.offers[int(i)].price_date for i in np.unique(table.offer_idx)]
    return PlanSet(
        job=job,
        model_params_b=table.sizes.total_params / 1e9,
        engine=engine,
        candidates=len(table),
        feasible=int(feasible.sum()),
        plans=plans,
        price_dates=(min(dates), max(dates)),
        rejected=rejected_options(job, table, chosen),
    )


def _regime(job: JobSpec, t: CandidateTable, i: int) -> str:
    """The optimizer regime row i was priced with: the job's, or `adamw` where its backend brings
    back the fp32 master of a model its stack loads in bf16 (_memory.sharded_master)."""
    opts = job.memory_options()
    return "adamw" if sharded_master(opts, t.method[i : i + 1], t.shard[i : i + 1])[0] else opts.optimizer


def plan_from_row(job: JobSpec, t: CandidateTable, i: int, rank: int, best: int, nxt: int | None = None) -> Plan:
    """Candidate i of the table as the plan ranked `rank` (`best` is plan 1, `nxt` the next one)."""
    offer = t.offers[int(t.offer_idx[i])]
    memory = _memory_breakdown(t, i)
    binding = _binding(job, t, i)
    cal = load_calibration() if job.calibration else None
    quant = QUANT_NAMES[int(t.quant[i])]
    # Cards without bf16 (Volta, Turing) train in fp16 with loss scaling.
    dtype_16 = "bf16" if t.gpu_specs[offer.gpu].supports_bf16 else "fp16"
    return Plan(
        rank=rank,
        offer=offer,
        gpu=offer.gpu,
        n_gpus=int(t.n_gpus[i]),
        nodes=int(t.nodes[i]),
        method=METHOD_NAMES[int(t.method[i])],
        weight_precision=dtype_16 if quant == "16-bit" else quant,
        optimizer=_regime(job, t, i),
        sharding=SHARD_NAMES[int(t.shard[i])],
        gradient_checkpointing=bool(t.ckpt[i]),
        micro_batch=int(t.micro_batch[i]),
        grad_accum=int(t.grad_accum[i]),
        global_batch=int(t.global_batch[i]),
        market=MARKETS[int(t.market[i])],
        price_usd_per_gpu_hour=float(t.price_usd_per_gpu_hour[i]),
        price_date=offer.price_date,
        memory=memory,
        time=_time_breakdown(job, t, i, cal),
        cost_items=_cost_items(t, i, offer),
        total_cost_usd=int(t.total_cents[i]) / 100,
        cost_at_confidence_usd=None if job.budget_confidence is None else int(t.budget_cents[i]) / 100,
        rate_sensitivity=_rate_sensitivity(job, t, i),
        micro_batch_choice=_micro_batch_choice(t, i),
        binding_constraints=binding,
        slack=_slack(job, t, i),
        why=_why(job, t, i, rank, best, nxt, binding),
        assumptions=_assumptions(job, t, i, offer, memory, cal),
    )


def _memory_breakdown(t: CandidateTable, i: int) -> MemoryBreakdown:
    return MemoryBreakdown(
        components_gib={n: round(v, 3) for n, v in t.memory_gib(i).items()},
        peak_gib=round(float(t.peak_gib[i]), 3),
        usable_gib=round(float(t.usable_gib[i]), 3),
        card_gib=round(t.gpu_specs[t.offers[int(t.offer_idx[i])].gpu].memory_gib, 3),
        band=round(float(t.memory_band[i]), 3),
        headroom_gib=round(float(t.usable_gib[i] - t.peak_gib[i] * (1.0 + t.memory_band[i])), 3),
    )


def _time_breakdown(job: JobSpec, t: CandidateTable, i: int, cal: Calibration | None) -> TimeBreakdown:
    spot = MARKETS[int(t.market[i])] != "on-demand"
    gpu = t.offers[int(t.offer_idx[i])].gpu
    return TimeBreakdown(
        tokens_per_s=round(float(t.tokens_per_s[i]), 1),
        tokens_per_s_band=round(
            tokens_per_s_band(job, gpu, METHOD_NAMES[int(t.method[i])], cal, t.gpu_specs[gpu]), 3
        ),
        step_s=round(float(t.step_s[i]), 4),
        training_hours=round(float(t.train_hours[i]), 4),
        evaluation_hours=round(float(t.eval_hours[i]), 4),
        startup_hours=round(float(t.startup_hours[i]), 4),
        checkpoint_hours=round(float(t.checkpoint_hours[i]), 4),
        preemption_rework_hours=round(float(t.rework_hours[i]), 4),
        expected_hours=round(float(t.expected_hours[i]), 4),
        quantile_hours=round(float(t.quantile_hours[i]), 4),
        confidence=job.deadline_confidence,
        checkpoint_interval_hours=round(float(t.tau_hours[i]), 4) if spot and t.spot_fraction[i] > 0 else None,
        interruptible_fraction=round(float(t.spot_fraction[i]), 4),
        interruption_rate_per_hour=round(float(t.interruption_rate_per_hour[i]), 4) if spot else None,
        switch_probability=round(float(t.run_costs.switch_probability[i]), 4) if spot else None,
        switch_after_lost_hours=_switch_threshold(t, i),
    )


def _micro_batch_choice(t: CandidateTable, i: int) -> MicroBatchChoice:
    """The chosen micro-batch against the largest that fits (the pair's physics, before halving)."""
    pair, ph = int(t.pair[i]), t.physics
    largest = int(ph.largest_micro_batch[pair])
    peak = ph.memory.terms.take(np.array([pair])).peak_bytes(np.array([max(largest, 1)]))
    return MicroBatchChoice(
        chosen=int(t.micro_batch[i]),
        largest_fitting=largest,
        largest_speedup_pct=round(100.0 * (float(ph.largest_speedup[pair]) - 1.0), 2),
        largest_peak_gib=round(float(peak[0]) / k.GIB, 3),
    )


def _switch_threshold(t: CandidateTable, i: int) -> float | None:
    """The adaptive rule's threshold; None elsewhere, and where it never switches (no deadline)."""
    theta = float(t.run_costs.switch_threshold_h[i])
    return round(theta, 4) if MARKETS[int(t.market[i])] == "adaptive" and math.isfinite(theta) else None


def _rate_sensitivity(job: JobSpec, t: CandidateTable, i: int) -> tuple[RateCase, ...]:
    """The plan at half and double its preemption rate (interruptible plans only)."""
    row = int(t.input_row[i])
    if MARKETS[int(t.market[i])] == "on-demand" or row < 0 or t.spot_fraction[i] <= 0:
        return ()
    one = np.array([i])
    costs = RunCosts(
        items_cents={},
        **{f.name: getattr(t.run_costs, f.name)[one] for f in fields(RunCosts) if f.name != "items_cents"},
    )
    end_h = job.deadline_hours if job.deadline_hours is not None else float(t.quantile_hours[i])
    inputs = t.run_inputs.take(np.array([row]))
    cases = rate_sensitivity(
        inputs, costs, end_h, job.trial_runs, job.trial_fraction, job.failure_probability, job.retention_days
    )
    return tuple(
        RateCase(
            rate_factor=c.rate_factor,
            interruption_rate_per_hour=round(c.rate_per_hour, 4),
            cost_usd=c.cost_usd,
            meets_deadline=round(c.meets, 4),
        )
        for c in cases
    )


def _cost_items(t: CandidateTable, i: int, offer: Offer) -> tuple[CostItem, ...]:
    """The candidate's non-zero cost items, in registry order, each with its detail and source."""
    specs = item_specs()
    return tuple(
        CostItem(name=name, usd=int(c[i]) / 100, detail=specs[name].detail, source=specs[name].source(offer))
        for name, c in t.cost_items_cents.items()
        if int(c[i]) != 0
    )


def _assumptions(
    job: JobSpec, t: CandidateTable, i: int, offer: Offer, memory: MemoryBreakdown, cal: Calibration | None
) -> tuple[str, ...]:
    defaults = provider_defaults(offer.provider)
    market = MARKETS[int(t.market[i])]
    out = [
        "coefficients: ftsolve.solver._coefficients (physics.md, fitted on measured.csv where stated)",
        f"provisioning {defaults.provisioning_minutes:g} min: {defaults.provisioning_source}",
        f"price {offer.price_date.isoformat()}{' (estimated date)' if offer.price_date_estimated else ''}"
        f": {offer.source}",
    ]
    used = "on-demand" if market == "on-demand" else "interruptible"
    kind = offer.price_kind if used == "on-demand" else offer.interruptible_price_kind
    if market in ("fallback", "adaptive") and "estimate" in (offer.price_kind, offer.interruptible_price_kind):
        kind = "estimate"
    if kind == "estimate":
        out.append(
            f"the {used} price is an estimate (derived, converted or of unknown date): check the provider's "
            "current price before you launch"
        )
    discount = offer.interruptible_discount
    if market != "on-demand" and discount is not None and discount > MAX_PLAUSIBLE_DISCOUNT:
        out.append(
            f"interruptible price {discount:.0%} under on-demand: more often a floor or a stale snapshot than a "
            "price one pays; check it before you launch"
        )
    if market != "on-demand" and offer.interruption_rate_per_hour is None:
        out.append(f"interruption rate {defaults.interruption_rate_per_hour:.3g}/h: {defaults.interruption_source}")
    if offer.storage_usd_per_gb_month is None:
        out.append(f"storage price: {storage_source(offer)}")
    if market == "fallback":
        out.append(
            f"fallback: the first {t.spot_fraction[i]:.0%} of the work on interruptible capacity, then the "
            "last checkpoint resumed on on-demand (static split; on-demand capacity keeps the deadline)"
        )
    theta = _switch_threshold(t, i)
    if theta is not None:
        out.append(
            "adaptive: on interruptible capacity; at a preemption it resumes on on-demand capacity once the hours "
            f"lost to preemptions (restarts and work redone) exceed {theta:.2f} h, which "
            f"{float(t.run_costs.switch_probability[i]):.0%} of runs reach"
        )
    if job.offload_optimizer or job.offload_params:
        out.append(
            "CPU offload: the memory counts offloaded state as off the GPU; the time does not include "
            "the CPU optimizer step or the PCIe transfers, so it is optimistic"
        )
    whole_gib = memory.components_gib.get("unsharded_gradients", 0.0)
    if int(t.grad_accum[i]) > 1 and whole_gib > 0:
        out.append(
            f"FSDP accumulates under no_sync (the accelerate and Lightning default): {whole_gib:.1f} GiB of "
            "gradients stay unsharded until the step; syncing every micro-batch (accelerate's "
            "sync_each_batch) saves that memory for more communication"
        )
    if job.host_speed != 1.0:
        out.append(
            f"host CPU at {job.host_speed:g}x the single-thread speed of an {k.REFERENCE_HOST} (--host-speed): "
            f"{k.PER_LAYER_PASS_S.value * 1e3 / job.host_speed:.2f} ms of launch overhead per layer and pass"
        )
    if job.trial_runs or job.failure_probability:
        out.append("trial runs and failed attempts are priced as scaled copies of the final run on the same plan")
    out.extend(calibration_assumptions(job, offer.gpu, METHOD_NAMES[int(t.method[i])], cal, t.gpu_specs[offer.gpu]))
    return tuple(out)


def _slack(job: JobSpec, t: CandidateTable, i: int) -> dict[str, float]:
    slack = {"memory_gib": round(float(t.usable_gib[i] - t.peak_gib[i] * (1.0 + t.memory_band[i])), 3)}
    if job.deadline_hours is not None:
        slack["deadline_hours"] = round(job.deadline_hours - float(t.quantile_hours[i]), 4)
    if job.budget_usd is not None:
        slack["budget_usd"] = round(job.budget_usd - int(t.budget_cents[i]) / 100, 2)
    return slack


def _binding(job: JobSpec, t: CandidateTable, i: int) -> tuple[str, ...]:
    """Constraints with less than 10% slack."""
    out = []
    if t.peak_gib[i] > 0.9 * t.usable_gib[i]:
        out.append("memory")
    if job.deadline_hours is not None and t.quantile_hours[i] > 0.9 * job.deadline_hours:
        out.append("deadline")
    if job.budget_usd is not None and t.budget_cents[i] > 90 * job.budget_usd:
        out.append("budget")
    return tuple(out)


def _label(t: CandidateTable, i: int) -> str:
    o = t.offers[int(t.offer_idx[i])]
    method, market = METHOD_NAMES[int(t.method[i])], MARKETS[int(t.market[i])]
    return f"{int(t.n_gpus[i])}x {o.gpu} {method} {market} ({o.provider})"


def _why(
    job: JobSpec, t: CandidateTable, i: int, rank: int, best: int, nxt: int | None, binding: tuple[str, ...]
) -> str:
    tight = f"; tight: {', '.join(binding)}" if binding else ""
    cost_i, hours_i = int(t.total_cents[i]) / 100, float(t.expected_hours[i])
    beats = ""
    if nxt is not None:
        d_cost = int(t.total_cents[nxt]) / 100 - cost_i
        d_h = float(t.expected_hours[nxt]) - hours_i
        beats = f"; beats #{rank + 1} ({_label(t, nxt)}) by {money(job)(d_cost, sign=True)}, {d_h:+.1f} h"
        if d_cost < 0:
            beats += _preferred(job, t, i, nxt)
    what = OBJECTIVES[job.objective].why(job)
    if rank == 1:
        return f"{what} among {int(t.feasible().sum())} feasible candidates{beats}{tight}"
    d_cost = cost_i - int(t.total_cents[best]) / 100
    pct = 100 * d_cost / max(int(t.total_cents[best]) / 100, 0.01)
    diffs = []
    ob, oi = t.offers[int(t.offer_idx[best])], t.offers[int(t.offer_idx[i])]
    if ob.gpu != oi.gpu:
        diffs.append(f"{oi.gpu} instead of {ob.gpu}")
    if t.method[i] != t.method[best]:
        diffs.append(METHOD_NAMES[int(t.method[i])])
    if t.market[i] != t.market[best]:
        diffs.append(MARKETS[int(t.market[i])])
    d_h = hours_i - float(t.expected_hours[best])
    speed = f"{abs(d_h):.1f} h {'faster' if d_h < 0 else 'slower'}"
    what = ", ".join(diffs) or "another offer"
    return f"{money(job)(d_cost, sign=True)} ({pct:+.0f}%) vs plan 1 with {what}; {speed}{beats}{tight}"


def _preferred(job: JobSpec, t: CandidateTable, i: int, j: int) -> str:
    """Why plan i ranks above the cheaper plan j: the preferences j pays for."""
    terms = preference_terms(job, t)
    reasons = [name for name, extra in terms.items() if extra[j] > extra[i]]
    return f" (preferred within {job.tie_tolerance:.0%}: {', '.join(reasons)})" if reasons else ""


def _failure(job: JobSpec, t: CandidateTable, rows: NDArray[np.int64]) -> str:
    """The nearest miss among `rows` (candidates of one offer), per method, in words."""
    parts = []
    for m in sorted({int(x) for x in t.method[rows]}):
        r = rows[t.method[rows] == m]
        name = METHOD_NAMES[m]
        compat = r[t.masks["compatibility"][r] & t.masks["quota"][r]]
        if compat.size == 0:
            parts.append(f"{name}: {_unsupported(t, r)}")
            continue
        fit = compat[t.masks["memory"][compat]]
        if fit.size == 0:
            need = t.peak_gib[compat] * (1.0 + t.memory_band[compat])
            j = int(np.argmin(need))
            parts.append(f"needs {need[j]:.1f} GiB of {t.usable_gib[compat[j]]:.1f} GiB with {name} (peak + headroom)")
            continue
        on_time = fit[t.masks["deadline"][fit]]
        if on_time.size == 0 and job.deadline_hours is not None:
            j = fit[np.argmin(t.quantile_hours[fit])]
            parts.append(
                f"with {name} it fits but misses the deadline by {t.quantile_hours[j] - job.deadline_hours:.1f} h"
            )
            continue
        ok = on_time[t.masks["budget"][on_time]]
        if ok.size == 0 and job.budget_usd is not None:
            j = on_time[np.argmin(t.total_cents[on_time])]
            parts.append(f"with {name} it costs {money(job)(int(t.total_cents[j]) / 100)}, over the budget")
            continue
        j = ok[np.argmin(t.total_cents[ok])]
        cost, hours = money(job)(int(t.total_cents[j]) / 100), float(t.expected_hours[j])
        parts.append(f"with {name} it is feasible at {cost}, {hours:.1f} h")
    return "; ".join(parts)


def _unsupported(t: CandidateTable, rows: NDArray[np.int64]) -> str:
    """Why none of `rows` (one offer, one method) is compatible and within quota: missing catalog
    data, a kernel the GPU lacks, or the user's quota, named as such."""
    compatible = rows[t.masks["compatibility"][rows]]
    if compatible.size:
        return "more GPUs than your quota allows"
    spec = t.gpu_specs[t.offers[int(t.offer_idx[rows[0]])].gpu]
    timed = spec.tensor_tflops is not None and spec.memory_bandwidth_gb_per_s is not None
    on_gpu = OnGpu(
        t.quant[rows],
        np.full(rows.shape, spec.vendor == "nvidia"),
        np.full(rows.shape, timed),
        np.full(rows.shape, spec.supports_bf16),
        STACKS[t.job.stack].requires_bf16,
    )
    broken = [rule.reason for rule in GPU_RULES + TIMING_RULES if not rule.holds(on_gpu).any()]
    return "; ".join(broken) if broken else "not supported on this GPU"


def rejected_options(job: JobSpec, t: CandidateTable, chosen: list[int]) -> tuple[str, ...]:
    """One line each for the cheapest-per-hour offer and the fastest option when they did not win."""
    if len(t) == 0:
        return ()
    lines = []
    chosen_offers = {int(t.offer_idx[i]) for i in chosen}
    chosen_gpus = {t.offers[o].gpu for o in chosen_offers}
    cheapest = int(t.offer_idx[np.argmin(t.price_usd_per_gpu_hour)])
    if t.offers[cheapest].gpu not in chosen_gpus:
        o = t.offers[cheapest]
        rows = np.nonzero(t.offer_idx == cheapest)[0]
        lines.append(
            f"{o.gpu} ({o.provider} {o.region}, "
            f"{money(job)(float(np.min(t.price_usd_per_gpu_hour[rows])))}/GPU-h, "
            f"cheapest per hour): {_failure(job, t, rows)}"
        )
    runnable = np.nonzero(t.masks["compatibility"] & t.masks["quota"] & t.masks["memory"])[0]
    m = money(job)
    if runnable.size:
        fastest = int(runnable[np.argmin(t.expected_hours[runnable])])
        if fastest not in chosen:
            reasons = [c for c in ("deadline", "budget") if not t.masks[c][fastest]]
            fast_usd, best_usd = int(t.total_cents[fastest]) / 100, int(t.total_cents[chosen[0]]) / 100
            why = f"fails {' and '.join(reasons)}" if reasons else f"costs {m(fast_usd)} vs {m.value(best_usd):.2f}"
            lines.append(f"fastest option {_label(t, fastest)}: {float(t.expected_hours[fastest]):.1f} h, {why}")
    return tuple(lines)


def check_plan(job: JobSpec, catalog: Catalog, p: Plan) -> list[str]:
    """Re-verify a plan from the estimators alone; returns the violations (empty when valid).

    Independent of the engine that chose the plan: it rebuilds the candidate table for the
    plan's offer only and checks every constraint and the cost arithmetic.
    """
    one = Catalog(gpus=catalog.gpus, offers=(p.offer,), models=catalog.models)
    narrow = job.model_copy(
        update={
            "providers": None,
            "regions": None,
            "countries": None,
            "eu_only": False,
            "gpus": None,
            "methods": (p.method,),
            "markets": (p.market,),
        }
    )
    t = build_candidates(narrow, one)
    match = np.nonzero(
        (t.nodes == p.nodes)
        & (np.array([METHOD_NAMES[m] for m in t.method]) == p.method)
        & (np.array([SHARD_NAMES[s] for s in t.shard]) == p.sharding)
        & (t.ckpt == int(p.gradient_checkpointing))
        & (
            np.array([QUANT_NAMES[q] for q in t.quant])
            == (p.weight_precision if p.weight_precision not in ("bf16", "fp16") else "16-bit")
        )
    )[0]
    if match.size != 1:
        return [f"plan configuration not found among {len(t)} candidates of its offer"]
    i = int(match[0])
    problems = []
    if not t.masks["compatibility"][i]:
        problems.append("configuration not supported on this GPU")
    need = t.peak_gib[i] * (1.0 + t.memory_band[i])
    if need > t.usable_gib[i] + 1e-9:
        problems.append(f"memory {need:.2f} GiB with headroom exceeds usable {t.usable_gib[i]:.2f} GiB")
    if not t.masks["memory"][i]:
        problems.append("memory constraint fails")
    if job.deadline_hours is not None and t.quantile_hours[i] > job.deadline_hours:
        problems.append(f"finish {t.quantile_hours[i]:.2f} h exceeds deadline {job.deadline_hours} h")
    if job.budget_usd is not None and int(t.budget_cents[i]) > math.floor(job.budget_usd * 100 + 1e-6):
        problems.append(f"cost {int(t.budget_cents[i]) / 100:.2f} exceeds budget {job.budget_usd}")
    quoted = p.cost_at_confidence_usd
    if job.budget_confidence is not None and (quoted is None or round(quoted * 100) != int(t.budget_cents[i])):
        problems.append(f"recomputed cost at {job.budget_confidence:.0%} {int(t.budget_cents[i]) / 100:.2f} differs")
    if int(t.total_cents[i]) != round(p.total_cost_usd * 100):
        problems.append(f"recomputed cost {int(t.total_cents[i]) / 100:.2f} differs from plan {p.total_cost_usd:.2f}")
    if round(sum(c.usd for c in p.cost_items) * 100) != round(p.total_cost_usd * 100):
        problems.append("cost items do not sum to the total")
    effective = p.micro_batch * p.grad_accum * p.n_gpus
    if effective != p.global_batch or not job.global_batch_size <= effective <= job.global_batch_size * (
        1.0 + job.batch_tolerance
    ):
        problems.append(f"micro-batch x accumulation x GPUs = {effective}, not the global batch the job allows")
    return problems + _figure_problems(p)


def _figure_problems(p: Plan) -> list[str]:
    """Every cost, time and memory figure of a plan is finite and not negative."""
    figures: dict[str, float | None] = {
        "total_cost_usd": p.total_cost_usd,
        "price_usd_per_gpu_hour": p.price_usd_per_gpu_hour,
        **{f"cost {c.name}": c.usd for c in p.cost_items},
        **{f"time {name}": v for name, v in p.time.model_dump().items() if isinstance(v, float)},
        **{f"memory {name}": v for name, v in p.memory.components_gib.items()},
        "memory peak_gib": p.memory.peak_gib,
        **{f"slack {name}": v for name, v in p.slack.items()},
        "cost_at_confidence_usd": p.cost_at_confidence_usd,
        **{f"rate x{c.rate_factor:g} {name}": v for c in p.rate_sensitivity for name, v in c.model_dump().items()},
    }
    return [
        f"{name} is {value!r}"
        for name, value in figures.items()
        if value is not None and (not math.isfinite(value) or value < 0)
    ]
