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

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ftsolve.solver import _coefficients as k
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


def spot_phase(work: F, r: RunInputs, confidence: float) -> tuple[F, F, F, F]:
    """Interruptible phase of `work` hours: interval, mean, confidence-quantile, checkpoint writes."""
    tau, mean, var = best_interval(work, r.rate, r.ckpt_write_h, r.restart_h)
    writes = checkpoint_count(work, tau) * r.ckpt_write_h
    return tau, mean, cantelli_quantile(mean, var, confidence), writes


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
    """Cost items (integer cents), expected and quantile finish hours for each candidate.

    standalone_fallback: the user allows the fallback but not plain interruptible capacity, so a
    fallback is priced even where interruptible capacity alone would keep the deadline.
    same_time_as: for each candidate, the index of one with the same market and time inputs
    (work, start-up, restart, writes, final save, rate), pointing to itself where it is the one;
    a caller that knows this from how it built the candidates saves sorting them here.
    """
    n = r.work_h.shape[0]
    # Time depends on a handful of columns that many candidates share (the same hardware and
    # configuration at many prices): compute it once per distinct combination.
    if same_time_as is None:
        first, inverse = unique_rows(
            np.stack(
                [
                    r.market.astype(np.float64),
                    r.work_h,
                    r.startup_h,
                    r.restart_h,
                    r.ckpt_write_h,
                    r.final_save_h,
                    r.rate,
                ],
                axis=1,
            )
        )
    else:
        first, inverse = _representatives(same_time_as)
    f_u, tau_u, mean_u, q_u, writes_u = _time_part(
        _take_idx(r, first), confidence, deadline_hours, trials, trial_fraction, standalone_fallback
    )
    f_raw, tau, spot_mean, spot_q, writes = (a[inverse] for a in (f_u, tau_u, mean_u, q_u, writes_u))
    f = np.maximum(f_raw, 0.0)
    on_spot = f > 0
    spot_work = f * r.work_h
    od_work = r.work_h - spot_work
    switch = np.where(on_spot & (od_work > 0), r.restart_h, 0.0)  # resume on on-demand capacity
    rework = np.where(on_spot, np.maximum(spot_mean - spot_work - writes, 0.0), 0.0)

    spot_h = np.where(on_spot, r.startup_h + spot_mean, 0.0)
    od_h = np.where(on_spot, switch + od_work, r.startup_h + r.work_h)
    ends_on_od = od_work > 0
    od_h = od_h + np.where(ends_on_od, r.final_save_h, 0.0)
    spot_h = spot_h + np.where(ends_on_od, 0.0, r.final_save_h)
    expected_run = spot_h + od_h
    quantile_run = np.where(on_spot, r.startup_h + spot_q, r.startup_h) + switch + od_work + r.final_save_h

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
    total_hours = expected_run + trial_hours + fail_hours
    storage = r.volume_gb * r.storage_usd_per_gb_month * (total_hours + retention_days * 24.0) / k.HOURS_PER_MONTH
    items = {
        "training": _cents(spot_work * spot_rate + od_work * od_rate),
        "startup": _cents(r.startup_h * np.where(on_spot, spot_rate, od_rate)),
        "checkpoints": _cents(writes * spot_rate + r.final_save_h * np.where(ends_on_od, od_rate, spot_rate)),
        "preemption_rework": _cents(rework * spot_rate),
        "fallback_switch": _cents(switch * od_rate),
        "billing_rounding": _cents(rounding * od_rate),
        "trial_runs": _cents(trial_hours * per_hour),
        "failed_attempts": _cents(fail_hours * per_hour),
        "storage": _cents(storage),
        "egress": _cents(r.output_gb * r.egress_usd_per_gb),
    }
    total = np.zeros(n, dtype=np.int64)
    for cents in items.values():  # a running sum: stacking the items first costs a copy of them all
        total += cents
    total = np.minimum(total, MAX_CENTS)
    return RunCosts(
        items_cents=items,
        total_cents=total.astype(np.int64),
        expected_hours=trial_hours + expected_run,
        quantile_hours=trial_hours + quantile_run,
        checkpoint_interval_h=tau,
        checkpoint_hours=writes + r.final_save_h,
        rework_hours=rework,
        spot_fraction=f_raw,
    )


NOT_OFFERED = -1.0  # spot_fraction of a fallback candidate whose interruptible-only twin keeps the deadline


def _time_part(
    r: RunInputs,
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
        t_s, m_s, q_s, w_s = spot_phase(r.work_h[whole], _take(r, whole), confidence)
        tau[whole], spot_mean[whole], spot_q[whole], writes[whole] = t_s, m_s, q_s, w_s
    if fb.any():
        idx = np.nonzero(fb)[0]
        sub = _take(r, fb)
        # Trials run before the final run; reserve their on-demand duration from the deadline.
        trial_reserve = trials * (sub.startup_h + trial_fraction * (sub.work_h + sub.final_save_h))
        alone = sub.startup_h + spot_q[idx] + sub.final_save_h + trial_reserve
        misses = alone > deadline_hours if deadline_hours is not None else np.zeros(idx.size, dtype=bool)
        needed = idx[misses]
        f[idx] = 1.0 if standalone_fallback else NOT_OFFERED
        if needed.size:
            part = _take_idx(r, needed)
            f[needed] = _fallback_fraction(part, confidence, deadline_hours, trial_reserve[misses])
            share = f[needed] > 0
            if share.any():
                rows = needed[share]
                t_s, m_s, q_s, w_s = spot_phase((f * r.work_h)[rows], _take_idx(r, rows), confidence)
                tau[rows], spot_mean[rows], spot_q[rows], writes[rows] = t_s, m_s, q_s, w_s
        # No interruptible phase: all on-demand (share 0) or not offered.
        off = fb & (f <= 0)
        tau[off], spot_mean[off], spot_q[off], writes[off] = np.nan, 0.0, 0.0, 0.0
    return f, tau, spot_mean, spot_q, writes


def _fallback_fraction(r: RunInputs, confidence: float, deadline_hours: float | None, reserve_h: F) -> F:
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


def meets_subset(r: RunInputs, idx: I, j: I, confidence: float, deadline: float, reserve_h: F) -> B:
    sub = _take_idx(r, idx)
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


def _take_idx(r: RunInputs, idx: I) -> RunInputs:
    return RunInputs(**{name: getattr(r, name)[idx] for name in r.__dataclass_fields__})


def _take(r: RunInputs, mask: B) -> RunInputs:
    return _take_idx(r, np.flatnonzero(mask))  # one scan of the mask, not one per field
