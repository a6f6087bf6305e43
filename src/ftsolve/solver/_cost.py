"""Expected total cost and finish time of a run by market (physics.md §10, prices-and-spot.md).

Three markets:
- on-demand: deterministic time; billed with the provider's granularity.
- interruptible: Poisson preemptions, checkpoint interval chosen per plan (see _risk.py).
- fallback: interruptible for the first fraction f of the work, then the last checkpoint is
  resumed on on-demand capacity for the rest. f is the largest multiple of 1/20 whose finish time
  at the job's confidence still meets the deadline, so the deadline is kept by on-demand
  capacity and the slack is spent on cheap interruptible hours. It is a static split, simpler
  than the adaptive Uniform Progress policy of "Can't Be Late" (NSDI 2024) that it approximates;
  its cost is exact for the model, so it can be checked by simulation.

Trial runs and failed attempts are priced on the plan's own market and configuration: each
trial costs a start-up plus its fraction of the run; a failed attempt costs a start-up plus half
a run on average (failures are assumed uniform over the run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import numpy as np
from numpy.typing import NDArray

from ftsolve.solver import _items
from ftsolve.solver._items import Spend
from ftsolve.solver._risk import best_interval, cantelli_quantile, checkpoint_count
from ftsolve.solver._rows import unique_rows

F = NDArray[np.float64]
I = NDArray[np.int64]
B = NDArray[np.bool_]

OD, SPOT, FALLBACK = 0, 1, 2
FALLBACK_STEPS = 20


@dataclass(frozen=True)
class RunInputs:
    """Per-candidate inputs, all arrays of one length (hours, USD, GB)."""

    market: I
    work_h: F
    startup_h: F
    restart_h: F
    ckpt_write_h: F
    final_save_h: F
    rate: F  # interruption rate per hour for the whole job
    od_usd_per_h: F  # all GPUs together
    spot_usd_per_h: F
    per_hour_billing: B
    per_minute_billing: B
    storage_usd_per_gb_month: F
    volume_gb: F
    egress_usd_per_gb: F
    output_gb: F
    # Per-offer facts the cost items declare (_items.CostItemSpec.offer_facts), by OfferArrays column.
    offer_facts: Mapping[str, F] = field(default_factory=dict)


@dataclass(frozen=True)
class RunCosts:
    items_cents: dict[str, I]
    total_cents: I
    expected_hours: F
    quantile_hours: F
    checkpoint_interval_h: F
    checkpoint_hours: F
    rework_hours: F
    spot_fraction: F


# Beyond these a figure means no real plan (a 405B model on one small card for a century): such
# candidates are masked out ("bounded"), and their cents are clipped here, before the cast, so that
# a sum of items can never wrap int64 into a negative cost.
MAX_CENTS = 10**14  # 1e12 USD
MAX_HOURS = 1e6  # 114 years


def _cents(x: F) -> I:
    """USD -> integer cents; non-finite or out-of-range values become MAX_CENTS, never a wrapped int."""
    cents = x * 100.0
    clipped = np.where(np.isfinite(cents), np.clip(cents, -float(MAX_CENTS), float(MAX_CENTS)), float(MAX_CENTS))
    out: I = np.rint(clipped).astype(np.int64)
    return out


def bounded(total_cents: I, expected_hours: F, quantile_hours: F) -> B:
    """Candidates whose cost and times are finite and below the limits above."""
    out: B = (
        (total_cents < MAX_CENTS)
        & np.isfinite(expected_hours)
        & (expected_hours < MAX_HOURS)
        & np.isfinite(quantile_hours)
        & (quantile_hours < MAX_HOURS)
    )
    return out


@dataclass(frozen=True)
class Timing:
    """The time inputs of RunInputs: all that the interruptible phase and the fallback split read."""

    market: I
    work_h: F
    startup_h: F
    restart_h: F
    ckpt_write_h: F
    final_save_h: F
    rate: F

    @classmethod
    def of(cls, r: RunInputs) -> Timing:
        return cls(*(getattr(r, f.name) for f in fields(cls)))

    def take(self, idx: I) -> Timing:
        return Timing(*(getattr(self, f.name)[idx] for f in fields(self)))


def spot_phase(work: F, r: Timing, confidence: float) -> tuple[F, F, F, F]:
    """Interruptible phase of `work` hours: interval, mean, confidence-quantile, checkpoint writes."""
    tau, mean, var = best_interval(work, r.rate, r.ckpt_write_h, r.restart_h)
    writes = checkpoint_count(work, tau) * r.ckpt_write_h
    return tau, mean, cantelli_quantile(mean, var, confidence), writes


@dataclass(frozen=True)
class SpotPhase:
    """The interruptible part of each candidate's run (see _time_part)."""

    fraction: F  # share f of the work; NOT_OFFERED for a fallback that is not offered
    interval_h: F  # checkpoint interval τ, nan without an interruptible phase
    mean_h: F  # wall hours of the interruptible phase after start-up
    quantile_h: F  # the same at the job's confidence
    writes_h: F  # checkpoint writes in it


def price_runs(
    r: RunInputs,
    confidence: float,
    deadline_hours: float | None,
    trials: int,
    trial_fraction: float,
    failure_probability: float,
    retention_days: float,
    standalone_fallback: bool = False,
    same_time_as: I | None = None,
) -> RunCosts:
    """Cost items (integer cents, one per _items.COST_ITEMS entry), expected and quantile finish
    hours for each candidate.

    standalone_fallback: the user allows the fallback but not plain interruptible capacity, so a
    fallback is priced even where interruptible capacity alone would keep the deadline.
    same_time_as: for each candidate, the index of one with the same market and time inputs
    (work, start-up, restart, writes, final save, rate), pointing to itself where it is the one;
    a caller that knows this from how it built the candidates saves sorting them here.
    """
    phase = _spot_phases(r, confidence, deadline_hours, trials, trial_fraction, standalone_fallback, same_time_as)
    s, expected_run, quantile_run = _spend(r, phase, trials, trial_fraction, failure_probability, retention_days)
    items = {item.name: _cents(item.usd(s)) for item in _items.COST_ITEMS}
    total = np.zeros(r.work_h.shape[0], dtype=np.int64)
    for cents in items.values():  # a running sum: stacking the items first costs a copy of them all
        total += cents
    total = np.minimum(total, MAX_CENTS)
    return RunCosts(
        items_cents=items,
        total_cents=total.astype(np.int64),
        expected_hours=s.trial_h + expected_run,
        quantile_hours=s.trial_h + quantile_run,
        checkpoint_interval_h=phase.interval_h,
        checkpoint_hours=phase.writes_h + r.final_save_h,
        rework_hours=s.rework_h,
        spot_fraction=phase.fraction,
    )


def _spot_phases(
    r: RunInputs,
    confidence: float,
    deadline_hours: float | None,
    trials: int,
    trial_fraction: float,
    standalone_fallback: bool,
    same_time_as: I | None,
) -> SpotPhase:
    """The interruptible phase of every candidate, computed once per distinct time inputs (many
    candidates share them: the same hardware and configuration at many prices)."""
    if same_time_as is None:
        cols = [r.market.astype(np.float64), r.work_h, r.startup_h, r.restart_h, r.ckpt_write_h, r.final_save_h, r.rate]
        first, inverse = unique_rows(np.stack(cols, axis=1))
    else:
        first, inverse = _representatives(same_time_as)
    reps = Timing.of(r).take(first)
    parts = _time_part(reps, confidence, deadline_hours, trials, trial_fraction, standalone_fallback)
    f, tau, mean, q, writes = (a[inverse] for a in parts)
    return SpotPhase(fraction=f, interval_h=tau, mean_h=mean, quantile_h=q, writes_h=writes)


def _spend(
    r: RunInputs,
    phase: SpotPhase,
    trials: int,
    trial_fraction: float,
    failure_probability: float,
    retention_days: float,
) -> tuple[Spend, F, F]:
    """(what each run spends, its expected and its quantile wall hours without trials)."""
    f = np.maximum(phase.fraction, 0.0)
    on_spot = f > 0
    spot_work = f * r.work_h
    od_work = r.work_h - spot_work
    switch = np.where(on_spot & (od_work > 0), r.restart_h, 0.0)  # resume on on-demand capacity
    rework = np.where(on_spot, np.maximum(phase.mean_h - spot_work - phase.writes_h, 0.0), 0.0)

    spot_h = np.where(on_spot, r.startup_h + phase.mean_h, 0.0)
    od_h = np.where(on_spot, switch + od_work, r.startup_h + r.work_h)
    ends_on_od = od_work > 0
    od_h = od_h + np.where(ends_on_od, r.final_save_h, 0.0)
    spot_h = spot_h + np.where(ends_on_od, 0.0, r.final_save_h)
    expected_run = spot_h + od_h
    quantile_run = np.where(on_spot, r.startup_h + phase.quantile_h, r.startup_h) + switch + od_work + r.final_save_h

    spot_rate = np.nan_to_num(r.spot_usd_per_h)
    od_rate = np.nan_to_num(r.od_usd_per_h)
    rounding = np.where(
        r.per_hour_billing,
        np.ceil(od_h - 1e-9) - od_h,
        np.where(r.per_minute_billing, np.ceil(od_h * 60 - 1e-9) / 60 - od_h, 0.0),
    )
    rounding = np.where(od_h > 0, rounding, 0.0)
    run_usd = spot_h * spot_rate + (od_h + rounding) * od_rate
    per_hour = np.where(expected_run > 0, run_usd / np.maximum(expected_run, 1e-12), 0.0)

    trial_hours = trials * r.startup_h + trials * trial_fraction * (expected_run - r.startup_h)
    fail_hours = failure_probability / (1.0 - failure_probability) * (r.startup_h + 0.5 * (expected_run - r.startup_h))
    spend = Spend(
        runs=r,
        spot_usd_per_h=spot_rate,
        od_usd_per_h=od_rate,
        on_spot=on_spot,
        ends_on_od=ends_on_od,
        spot_work_h=spot_work,
        od_work_h=od_work,
        checkpoint_writes_h=phase.writes_h,
        rework_h=rework,
        switch_h=switch,
        rounding_h=rounding,
        trial_h=trial_hours,
        failed_h=fail_hours,
        usd_per_h=per_hour,
        total_h=expected_run + trial_hours + fail_hours,
        retention_days=retention_days,
    )
    return spend, expected_run, quantile_run


NOT_OFFERED = -1.0  # spot_fraction of a fallback candidate whose interruptible-only twin keeps the deadline


def _time_part(
    r: Timing,
    confidence: float,
    deadline_hours: float | None,
    trials: int,
    trial_fraction: float,
    standalone_fallback: bool,
) -> tuple[F, F, F, F, F]:
    """(interruptible share f, interval τ, mean and quantile wall hours of the interruptible phase,
    checkpoint-write hours) for each candidate. A fallback is offered only where interruptible
    capacity alone misses the deadline; elsewhere its share is NOT_OFFERED, or, for a standalone
    fallback, 1 (the switch to on-demand is never planned, only kept in reserve)."""
    n = r.work_h.shape[0]
    od, fb = r.market == OD, r.market == FALLBACK
    tau = np.full(n, np.nan)
    spot_mean = np.zeros(n)  # wall hours of the interruptible phase after start-up
    spot_q = np.zeros(n)
    writes = np.zeros(n)
    # Everything but on-demand first as if all work ran on interruptible capacity (f = 1).
    f = np.where(od, 0.0, 1.0)
    whole = ~od
    if whole.any():
        t_s, m_s, q_s, w_s = spot_phase(r.work_h[whole], r.take(np.flatnonzero(whole)), confidence)
        tau[whole], spot_mean[whole], spot_q[whole], writes[whole] = t_s, m_s, q_s, w_s
    if fb.any():
        idx = np.nonzero(fb)[0]
        sub = r.take(idx)
        # Trials run before the final run; reserve their on-demand duration from the deadline.
        trial_reserve = trials * (sub.startup_h + trial_fraction * (sub.work_h + sub.final_save_h))
        alone = sub.startup_h + spot_q[idx] + sub.final_save_h + trial_reserve
        misses = alone > deadline_hours if deadline_hours is not None else np.zeros(idx.size, dtype=bool)
        needed = idx[misses]
        f[idx] = 1.0 if standalone_fallback else NOT_OFFERED
        if needed.size:
            part = r.take(needed)
            f[needed] = _fallback_fraction(part, confidence, deadline_hours, trial_reserve[misses])
            share = f[needed] > 0
            if share.any():
                rows = needed[share]
                t_s, m_s, q_s, w_s = spot_phase((f * r.work_h)[rows], r.take(rows), confidence)
                tau[rows], spot_mean[rows], spot_q[rows], writes[rows] = t_s, m_s, q_s, w_s
        # No interruptible phase: all on-demand (share 0) or not offered.
        off = fb & (f <= 0)
        tau[off], spot_mean[off], spot_q[off], writes[off] = np.nan, 0.0, 0.0, 0.0
    return f, tau, spot_mean, spot_q, writes


def _fallback_fraction(r: Timing, confidence: float, deadline_hours: float | None, reserve_h: F) -> F:
    """Largest f = j/STEPS (0 < j < STEPS) whose confidence-quantile finish meets the deadline; 0 if none.

    The finish time grows with f (interruptible work carries rework), so j is found by bisection.
    """
    n = r.work_h.shape[0]
    if deadline_hours is None or n == 0:
        return np.zeros(n)

    lo = np.zeros(n, dtype=np.int64)  # j = 0 (all on-demand) is the fallback of the fallback
    hi = np.full(n, FALLBACK_STEPS - 1, dtype=np.int64)
    # Where on-demand alone misses the deadline no interruptible share can meet it.
    possible = r.startup_h + r.work_h + r.final_save_h + reserve_h <= deadline_hours
    hi[~possible] = 0
    top = np.zeros(n, dtype=bool)
    if possible.any():
        idx = np.nonzero(possible)[0]
        top[idx] = meets_subset(r, idx, hi[idx], confidence, deadline_hours, reserve_h)
    lo[top] = hi[top]
    open_ = lo < hi
    while open_.any():
        mid = (lo + hi + 1) // 2
        idx = np.nonzero(open_)[0]
        ok = meets_subset(r, idx, mid[idx], confidence, deadline_hours, reserve_h)
        lo[idx[ok]] = mid[idx[ok]]
        hi[idx[~ok]] = mid[idx[~ok]] - 1
        open_ = lo < hi
    out: F = lo / FALLBACK_STEPS
    return out


def meets_subset(r: Timing, idx: I, j: I, confidence: float, deadline: float, reserve_h: F) -> B:
    sub = r.take(idx)
    f = j / FALLBACK_STEPS
    _, _, q, _ = spot_phase(sub.work_h * f, sub, confidence)
    finish = sub.startup_h + q + sub.restart_h + (1 - f) * sub.work_h + sub.final_save_h + reserve_h[idx]
    out: B = finish <= deadline
    return out


def _representatives(same_as: I) -> tuple[I, I]:
    """(the candidates that are their own representative, each candidate's position among them)."""
    is_first = same_as == np.arange(same_as.shape[0])
    first: I = np.nonzero(is_first)[0]
    inverse: I = (np.cumsum(is_first) - 1)[same_as]
    return first, inverse
