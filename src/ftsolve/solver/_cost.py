"""Expected total cost and finish time of a run by market (physics.md §10, prices-and-spot.md).

Four markets:
- on-demand: deterministic time; billed with the provider's granularity.
- interruptible: Poisson preemptions, checkpoint interval chosen per plan; the finish quantile is
  the exact compound distribution's (see _risk.py), so the stated confidence is what it says.
- fallback: interruptible for the first fraction f of the work, which ends with a checkpoint
  write (the handover), then resumed from it on on-demand capacity for the rest. f is the largest
  multiple of 1/20 whose finish time at the job's confidence still meets the deadline: a static
  split decided up front.
- adaptive: interruptible capacity until the switch rule of _risk.py moves the run to on-demand
  capacity, so that on-demand is used only on the unlucky runs and every run meets the deadline
  (the safety net of "Can't Be Late", NSDI 2024, taken at preemptions). Its expected cost and finish
  quantile are computed analytically (_risk.adaptive_phase).
Both fallbacks are offered only where interruptible capacity alone misses the deadline (unless the
user rules plain interruptible capacity out); where both are priced for the same offer and
configuration, the dearer one is dropped, and an adaptive run dearer than on-demand capacity is
not offered. All costs are exact for the model, so they can be checked by simulation
(benchmarks/spot_montecarlo.py).

With a budget confidence the cost is also quoted at that quantile (_budget_phase), and each plan
can be re-priced as planned at another preemption rate (rate_sensitivity).

Trial runs and failed attempts are priced on the plan's own market and configuration: each
trial costs a start-up plus its fraction of the run; a failed attempt costs a start-up plus half
a run on average (failures are assumed uniform over the run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import numpy as np
from numpy.typing import NDArray

from ftsolve.solver import _items
from ftsolve.solver._items import Spend
from ftsolve.solver._risk import Segments, adaptive_at, adaptive_phase, checkpoint_count, phase_at, phase_quantiles
from ftsolve.solver._rows import unique_rows

F = NDArray[np.float64]
I = NDArray[np.int64]
B = NDArray[np.bool_]

OD, SPOT, FALLBACK, ADAPTIVE = 0, 1, 2, 3  # positions in _job.MARKETS
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
    # One optimizer step in hours: a checkpoint can only be written between steps, so no interval
    # is shorter (None: no floor).
    step_h: F | None = None

    def take(self, idx: I) -> RunInputs:
        cols = {f.name: getattr(self, f.name)[idx] for f in fields(self) if f.name not in ("offer_facts", "step_h")}
        step = None if self.step_h is None else self.step_h[idx]
        return RunInputs(**cols, offer_facts={k: v[idx] for k, v in self.offer_facts.items()}, step_h=step)


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
    budget_cents: I  # the cost at the budget's confidence; the expected cost where none is asked
    switch_threshold_h: F  # adaptive: θ, the hours lost to preemptions after which it switches; nan elsewhere
    switch_probability: F  # P(the run resumes on on-demand capacity)


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
    step_h: F  # the shortest checkpoint interval: one optimizer step (0: none)

    @classmethod
    def of(cls, r: RunInputs) -> Timing:
        step = r.step_h if r.step_h is not None else np.zeros(r.work_h.shape[0])
        return cls(**{f.name: getattr(r, f.name) for f in fields(cls) if f.name != "step_h"}, step_h=step)

    def take(self, idx: I) -> Timing:
        return Timing(*(getattr(self, f.name)[idx] for f in fields(self)))


def spot_phase(work: F, r: Timing, confidence: float, handover: B | None = None) -> tuple[F, F, F, F]:
    """Interruptible phase of `work` hours: interval, mean, confidence-quantile, checkpoint writes.

    `handover`: rows whose phase ends by handing the run to on-demand capacity (a static split),
    which needs a checkpoint of the work done: the last segment ends with a write too.
    """
    tail = np.where(handover, r.ckpt_write_h, 0.0) if handover is not None else 0.0
    tau, mean, quantile = phase_quantiles(work, r.rate, r.ckpt_write_h, r.restart_h, confidence, tail, r.step_h)
    writes = checkpoint_count(work, tau) * r.ckpt_write_h + tail
    return tau, mean, quantile, writes


@dataclass(frozen=True)
class SpotPhase:
    """The interruptible part of each candidate's run and what follows it (see _time_part)."""

    fraction: F  # expected share of the work done on interruptible capacity; NOT_OFFERED: dropped
    interval_h: F  # checkpoint interval τ, nan without an interruptible phase
    mean_h: F  # expected wall hours on interruptible capacity after start-up, final save aside
    quantile_h: F  # confidence-quantile of the hours after start-up to the end of training
    writes_h: F  # expected checkpoint writes on interruptible capacity
    switch: F  # P(the run resumes on on-demand capacity)
    threshold_h: F  # adaptive: the failure excess θ beyond which the rule switches; nan otherwise
    # At the budget's confidence (see _budget_phase); the mean and no switch where none is asked.
    budget_h: F  # wall hours on interruptible capacity after start-up, final save aside
    budget_switched: B  # the adaptive run may have switched: its cost is bounded instead

    def take(self, idx: I) -> SpotPhase:
        return SpotPhase(*(getattr(self, f.name)[idx] for f in fields(self)))


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
    budget_confidence: float | None = None,
) -> RunCosts:
    """Cost items (integer cents, one per _items.COST_ITEMS entry), expected and quantile finish
    hours for each candidate.

    standalone_fallback: the user allows the fallbacks but not plain interruptible capacity, so a
    fallback is priced even where interruptible capacity alone would keep the deadline.
    same_time_as: for each candidate, the index of one with the same market and time inputs
    (work, start-up, restart, writes, final save, rate), pointing to itself where it is the one;
    a caller that knows this from how it built the candidates saves sorting them here.
    budget_confidence: the cost is also quoted at this confidence (`budget_cents`; see
    _budget_phase); without it, `budget_cents` is the expected cost.
    """
    phase = _spot_phases(
        r, confidence, deadline_hours, trials, trial_fraction, standalone_fallback, same_time_as, budget_confidence
    )
    s, expected_run, quantile_run = _spend(r, phase, trials, trial_fraction, failure_probability, retention_days)
    items = {item.name: _cents(item.usd(s)) for item in _items.COST_ITEMS}
    total = _sum_items(items)
    budget = total if budget_confidence is None else _sum_items(_item_cents(_budget_spend(s, phase, expected_run)))
    fraction = np.where(_dearer(r, total, s, phase.fraction > 0), NOT_OFFERED, phase.fraction)
    return RunCosts(
        items_cents=items,
        total_cents=total.astype(np.int64),
        expected_hours=s.trial_h + expected_run,
        quantile_hours=s.trial_h + quantile_run,
        checkpoint_interval_h=phase.interval_h,
        checkpoint_hours=phase.writes_h + r.final_save_h,
        rework_hours=s.rework_h,
        spot_fraction=fraction,
        budget_cents=budget,
        switch_threshold_h=np.where(r.market == ADAPTIVE, phase.threshold_h, np.nan),
        switch_probability=np.where(phase.fraction > 0, phase.switch, 0.0),
    )


def _item_cents(s: Spend) -> dict[str, I]:
    return {item.name: _cents(item.usd(s)) for item in _items.COST_ITEMS}


def _sum_items(items: Mapping[str, I]) -> I:
    total = np.zeros(next(iter(items.values())).shape[0], dtype=np.int64)
    for cents in items.values():  # a running sum: stacking the items first costs a copy of them all
        total += cents
    out: I = np.minimum(total, MAX_CENTS)
    return out


def _budget_spend(s: Spend, phase: SpotPhase, expected_run: F) -> Spend:
    """What a run spends at the budget's confidence (_budget_phase): the interruptible phase at its
    quantile instead of its mean; where the adaptive rule may have switched, its dearest run (the
    phase until the latest switch on interruptible capacity, a restart and all the work on
    on-demand, a whole billing step rounded). Trials and failed attempts stay at their expected
    cost."""
    r = s.runs
    extra = np.where(s.on_spot, phase.budget_h - phase.mean_h, 0.0)
    adaptive = s.on_spot & (r.market == ADAPTIVE)
    worst = phase.budget_switched
    writes = np.where(adaptive, checkpoint_count(r.work_h, phase.interval_h) * r.ckpt_write_h, s.checkpoint_writes_h)
    step = _billing_step(r)
    stays_spot = adaptive & ~worst  # an adaptive run that does not switch: interruptible only
    spot_work = np.where(adaptive, r.work_h, s.spot_work_h)
    run_h = r.startup_h + phase.budget_h + np.where(worst, r.restart_h + r.work_h, 0.0) + r.final_save_h
    return dataclasses.replace(
        s,
        spot_work_h=spot_work,
        od_work_h=np.where(stays_spot, 0.0, np.where(worst, r.work_h, s.od_work_h)),
        checkpoint_writes_h=writes,
        rework_h=np.where(adaptive, phase.budget_h - spot_work - writes, s.rework_h + extra),
        switch_h=np.where(adaptive, np.where(worst, r.restart_h, 0.0), s.switch_h),
        ends_on_od=np.where(adaptive, worst.astype(np.float64), s.ends_on_od),
        rounding_h=np.where(adaptive, np.where(worst, step, 0.0), s.rounding_h),
        total_h=s.total_h + np.where(adaptive, run_h - expected_run, extra),
    )


def _dearer(r: RunInputs, total: I, s: Spend, offered: B) -> B:
    """Fallback candidates to drop: an adaptive run dearer than on-demand capacity with the same
    inputs, and of a static and an adaptive fallback with the same inputs (prices, facts, times)
    the dearer one (the static one on a tie: the adaptive one keeps the deadline on every run)."""
    out = np.zeros(total.shape[0], dtype=bool)
    adaptive = offered & (r.market == ADAPTIVE)
    if adaptive.any():
        od_h = r.startup_h + r.work_h + r.final_save_h
        od_usd = (od_h + _rounding(r, od_h)) * s.od_usd_per_h
        run_usd = s.usd_per_h * (s.total_h - s.trial_h - s.failed_h)
        out[adaptive & (run_usd > od_usd + 1e-9)] = True
    idx = np.flatnonzero(offered & ~out & ((r.market == FALLBACK) | (r.market == ADAPTIVE)))
    kinds = r.market[idx] == ADAPTIVE
    if kinds.all() or not kinds.any():
        return out
    cols: list[NDArray[np.generic]] = [r.work_h, r.startup_h, r.restart_h, r.ckpt_write_h, r.final_save_h, r.rate]
    cols += [r.od_usd_per_h, r.spot_usd_per_h, r.per_hour_billing, r.per_minute_billing, r.storage_usd_per_gb_month]
    cols += [r.volume_gb, r.egress_usd_per_gb, r.output_gb, *r.offer_facts.values()]
    _, group = unique_rows(np.nan_to_num(np.stack([np.asarray(c, dtype=np.float64)[idx] for c in cols], axis=1)))
    best = np.full((int(group.max()) + 1, 2), MAX_CENTS + 1, dtype=np.int64)
    np.minimum.at(best, (group, kinds.astype(np.int64)), total[idx])
    both = (best[:, 0] <= MAX_CENTS) & (best[:, 1] <= MAX_CENTS)
    adaptive_wins = best[:, 1] <= best[:, 0]
    out[idx] = both[group] & np.where(kinds, ~adaptive_wins[group], adaptive_wins[group])
    return out


def _spot_phases(
    r: RunInputs,
    confidence: float,
    deadline_hours: float | None,
    trials: int,
    trial_fraction: float,
    standalone_fallback: bool,
    same_time_as: I | None,
    budget_confidence: float | None,
) -> SpotPhase:
    """The interruptible phase of every candidate, computed once per distinct time inputs (many
    candidates share them: the same hardware and configuration at many prices)."""
    if same_time_as is None:
        t = Timing.of(r)
        cols = [t.market.astype(np.float64), t.work_h, t.startup_h, t.restart_h, t.ckpt_write_h, t.final_save_h]
        first, inverse = unique_rows(np.stack([*cols, t.rate, t.step_h], axis=1))
    else:
        first, inverse = _representatives(same_time_as)
    reps = Timing.of(r).take(first)
    part = _time_part(reps, confidence, deadline_hours, trials, trial_fraction, standalone_fallback)
    part.budget_h[:] = part.mean_h
    if budget_confidence is not None:
        _budget_phase(reps, part, budget_confidence)
    return part.take(inverse)


def _billing_step(r: RunInputs) -> F:
    """The hours each offer bills on-demand use in: 1, 1/60, or 0 for per-second billing."""
    out: F = np.where(r.per_hour_billing, 1.0, np.where(r.per_minute_billing, 1.0 / 60.0, 0.0))
    return out


def _rounding(r: RunInputs, od_h: F) -> F:
    """Hours billed beyond `od_h` of on-demand use by the provider's granularity."""
    out: F = np.where(
        r.per_hour_billing,
        np.ceil(od_h - 1e-9) - od_h,
        np.where(r.per_minute_billing, np.ceil(od_h * 60 - 1e-9) / 60 - od_h, 0.0),
    )
    return np.where(od_h > 0, out, 0.0)


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
    ends_on_od = np.where(on_spot, phase.switch, 1.0)  # the share of runs that end on on-demand capacity
    switch = np.where(on_spot, phase.switch * r.restart_h, 0.0)  # resume on on-demand capacity
    rework = np.where(on_spot, np.maximum(phase.mean_h - spot_work - phase.writes_h, 0.0), 0.0)

    spot_h = np.where(on_spot, r.startup_h + phase.mean_h, 0.0) + (1.0 - ends_on_od) * r.final_save_h
    od_h = np.where(on_spot, switch + od_work, r.startup_h + r.work_h) + ends_on_od * r.final_save_h
    expected_run = spot_h + od_h
    quantile_run = r.startup_h + np.where(on_spot, phase.quantile_h, r.work_h) + r.final_save_h

    spot_rate = np.nan_to_num(r.spot_usd_per_h)
    od_rate = np.nan_to_num(r.od_usd_per_h)
    # An adaptive run uses on-demand capacity only when it switches, for a time that varies: half
    # the billing step then, on average.
    varies = r.market == ADAPTIVE
    step = _billing_step(r)
    rounding = np.where(varies, 0.5 * step * phase.switch, _rounding(r, od_h))
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


NOT_OFFERED = -1.0  # spot_fraction of a fallback candidate that is dropped (see _time_part, _dearer)


def _time_part(
    r: Timing,
    confidence: float,
    deadline_hours: float | None,
    trials: int,
    trial_fraction: float,
    standalone_fallback: bool,
) -> SpotPhase:
    """The interruptible phase of each candidate. A fallback is offered only where interruptible
    capacity alone misses the deadline; elsewhere its share is NOT_OFFERED, or, for a standalone
    fallback, 1 (the static split never plans the switch, the adaptive rule may still make it)."""
    n = r.work_h.shape[0]
    od = r.market == OD
    phase = SpotPhase(
        fraction=np.where(od, 0.0, 1.0),
        interval_h=np.full(n, np.nan),
        mean_h=np.zeros(n),
        quantile_h=r.work_h.copy(),
        writes_h=np.zeros(n),
        switch=np.zeros(n),
        threshold_h=np.full(n, np.nan),
        budget_h=np.zeros(n),
        budget_switched=np.zeros(n, dtype=bool),
    )
    # Everything but on-demand first as if all work ran on interruptible capacity (f = 1).
    whole = np.flatnonzero(~od)
    if whole.size:
        t_s, m_s, q_s, w_s = spot_phase(r.work_h[whole], r.take(whole), confidence)
        phase.interval_h[whole], phase.mean_h[whole], phase.quantile_h[whole], phase.writes_h[whole] = (
            t_s,
            m_s,
            q_s,
            w_s,
        )
    fb = np.flatnonzero((r.market == FALLBACK) | (r.market == ADAPTIVE))
    if fb.size == 0:
        return phase
    sub = r.take(fb)
    # Trials run before the final run; reserve their on-demand duration from the deadline.
    reserve = trials * (sub.startup_h + trial_fraction * (sub.work_h + sub.final_save_h))
    alone = sub.startup_h + phase.quantile_h[fb] + sub.final_save_h + reserve
    misses = alone > deadline_hours if deadline_hours is not None else np.zeros(fb.size, dtype=bool)
    phase.fraction[fb] = 1.0 if standalone_fallback else NOT_OFFERED
    static = misses & (sub.market == FALLBACK)
    if static.any():
        _static_split(r, fb[static], phase, confidence, deadline_hours, reserve[static])
    adaptive = (sub.market == ADAPTIVE) & (misses | standalone_fallback) & (deadline_hours is not None)
    if adaptive.any():
        _adaptive(r, fb[adaptive], phase, confidence, float(deadline_hours or 0.0), reserve[adaptive])
    # No interruptible phase: all on-demand (share 0) or not offered.
    off = fb[phase.fraction[fb] <= 0]
    phase.interval_h[off], phase.mean_h[off], phase.writes_h[off], phase.switch[off] = np.nan, 0.0, 0.0, 0.0
    phase.quantile_h[off] = r.work_h[off]
    return phase


def _budget_phase(r: Timing, phase: SpotPhase, q: float) -> None:
    """The interruptible phase at the budget's confidence q (written into `phase`).

    Interruptible and static fallback runs cost more the longer their interruptible phase lasts
    (its hours are billed at one price, the on-demand part is fixed), so their cost quantile is
    their cost with the phase at its q-quantile: exact for the model. An adaptive run that does
    not switch is such a run too: where the q-quantile of the phase without switching stays within
    the rule's threshold (W + nδ + θ), the runs below it never switch and the cost there is exact
    again. Beyond, more than 1 - q of the runs switch, and the cost is bounded by the dearest a run
    can be: on interruptible capacity until the latest switch (W + nδ + θ + R + top) and then all
    the work again on on-demand capacity (flagged in `budget_switched`; see _budget_spend).
    """
    on = phase.fraction > 0
    static = np.flatnonzero(on & (r.market != ADAPTIVE))
    if static.size:
        sub = r.take(static)
        f = phase.fraction[static]
        phase.budget_h[static] = spot_phase(f * sub.work_h, sub, q, handover=f < 1.0)[2]
    ad = np.flatnonzero(on & (r.market == ADAPTIVE))
    if ad.size:
        sub = r.take(ad)
        _, _, whole = phase_quantiles(sub.work_h, sub.rate, sub.ckpt_write_h, sub.restart_h, q, 0.0, sub.step_h)
        tau = phase.interval_h[ad]
        seg = Segments.of(sub.work_h, sub.rate, tau, sub.ckpt_write_h, sub.restart_h)
        limit = sub.work_h + seg.n * sub.ckpt_write_h + phase.threshold_h[ad]
        switched = whole > limit + 1e-12
        phase.budget_h[ad] = np.where(switched, limit + sub.restart_h + seg.top, whole)
        phase.budget_switched[ad] = switched


def _static_split(r: Timing, rows: I, phase: SpotPhase, confidence: float, deadline: float | None, reserve: F) -> None:
    """The static split of the fallback rows `rows` (written into `phase`)."""
    part = r.take(rows)
    f = _fallback_fraction(part, confidence, deadline, reserve)
    phase.fraction[rows] = f
    share = f > 0
    if not share.any():
        return
    idx = rows[share]
    sub = r.take(idx)
    t_s, m_s, q_s, w_s = spot_phase(f[share] * sub.work_h, sub, confidence, handover=f[share] < 1.0)
    od_rest = (1.0 - f[share]) * sub.work_h
    planned = od_rest > 0
    phase.interval_h[idx], phase.mean_h[idx], phase.writes_h[idx] = t_s, m_s, w_s
    phase.quantile_h[idx] = q_s + np.where(planned, sub.restart_h + od_rest, 0.0)
    phase.switch[idx] = planned.astype(np.float64)


def _adaptive(r: Timing, rows: I, phase: SpotPhase, confidence: float, deadline: float, reserve: F) -> None:
    """The adaptive fallback of `rows` (written into `phase`); NOT_OFFERED where the slack does not
    cover one segment (the rule would switch at once: that is on-demand capacity)."""
    sub = r.take(rows)
    slack = deadline - reserve - sub.startup_h - sub.restart_h - sub.work_h - sub.final_save_h
    phase.fraction[rows] = NOT_OFFERED
    keep = slack >= 0  # else on-demand capacity alone misses the deadline
    if not keep.any():
        return
    rows, sub, slack = rows[keep], sub.take(np.flatnonzero(keep)), slack[keep]
    a = adaptive_phase(sub.work_h, sub.rate, sub.ckpt_write_h, sub.restart_h, slack, confidence, sub.step_h)
    ok = a.offered & (a.quantile_h <= slack + sub.restart_h + sub.work_h + 1e-9)
    phase.fraction[rows] = np.where(ok, a.spot_work_h / np.maximum(sub.work_h, 1e-12), NOT_OFFERED)
    phase.interval_h[rows], phase.mean_h[rows], phase.writes_h[rows] = a.interval_h, a.spot_h, a.writes_h
    phase.quantile_h[rows], phase.switch[rows] = a.quantile_h, 1.0 - a.no_switch
    phase.threshold_h[rows] = a.threshold_h


def _fallback_fraction(r: Timing, confidence: float, deadline_hours: float | None, reserve_h: F) -> F:
    """Largest f = j/STEPS (0 < j < STEPS) whose confidence-quantile finish meets the deadline; 0 if none.

    Every share is priced in one pass (the rows are distinct per share there), so that a few rows
    do not pay a pass per step of a bisection.
    """
    n = r.work_h.shape[0]
    if deadline_hours is None or n == 0:
        return np.zeros(n)
    # Where on-demand alone misses the deadline no interruptible share can meet it.
    possible = np.flatnonzero(r.startup_h + r.work_h + r.final_save_h + reserve_h <= deadline_hours)
    out = np.zeros(n)
    if possible.size == 0:
        return out
    j = np.arange(1, FALLBACK_STEPS, dtype=np.float64)
    rows = np.repeat(possible, j.size)
    f = np.tile(j, possible.size) / FALLBACK_STEPS
    sub = r.take(rows)
    _, _, q, _ = spot_phase(sub.work_h * f, sub, confidence, handover=f < 1.0)
    finish = sub.startup_h + q + sub.restart_h + (1 - f) * sub.work_h + sub.final_save_h + reserve_h[rows]
    ok = (finish <= deadline_hours).reshape(possible.size, j.size)
    # The finish grows with f (interruptible work carries rework): the largest share that meets it.
    best = np.where(ok.any(axis=1), j.size - np.argmax(ok[:, ::-1], axis=1), 0)
    out[possible] = best / FALLBACK_STEPS
    return out


def _representatives(same_as: I) -> tuple[I, I]:
    """(the candidates that are their own representative, each candidate's position among them)."""
    is_first = same_as == np.arange(same_as.shape[0])
    first: I = np.nonzero(is_first)[0]
    inverse: I = (np.cumsum(is_first) - 1)[same_as]
    return first, inverse


@dataclass(frozen=True)
class RateCase:
    """A plan as planned (interval, share, switch rule) if preemptions come at another rate."""

    rate_factor: float
    rate_per_hour: float
    cost_usd: float  # expected total
    meets: float  # P(the run ends by the deadline; without one, by the finish quoted at the confidence)


def rate_sensitivity(
    r: RunInputs,
    planned: RunCosts,
    deadline_h: float,
    trials: int,
    trial_fraction: float,
    failure_p: float,
    retention_days: float,
) -> list[RateCase]:
    """One candidate (`r` and `planned`, one row each) at half, the same and double its rate.

    The interruptible phase is recomputed with the rate changed and the plan as planned (its
    interval, share and switch rule; exact for the model: phase_at, adaptive_at), then priced by
    the cost items like any run. `deadline_h`: the job's deadline, or the quoted finish where there
    is none.
    """
    reserve = trials * (r.startup_h + trial_fraction * (r.work_h + r.final_save_h))
    one = np.zeros(len(_RATE_FACTORS), dtype=np.int64)
    rows = r.take(one)
    rows = dataclasses.replace(rows, rate=rows.rate * np.array(_RATE_FACTORS))
    phase, meets = _phase_at(rows, planned, deadline_h - float(reserve[0]))
    s, _, _ = _spend(rows, phase, trials, trial_fraction, failure_p, retention_days)
    cents = _sum_items(_item_cents(s))
    return [
        RateCase(f, float(lam), int(c) / 100, float(m))
        for f, lam, c, m in zip(_RATE_FACTORS, rows.rate, cents, meets, strict=True)
    ]


_RATE_FACTORS = (0.5, 1.0, 2.0)


def _phase_at(r: RunInputs, planned: RunCosts, end_h: float) -> tuple[SpotPhase, F]:
    """The interruptible phase of each row (one candidate at several rates) with the plan's
    interval, share and switch rule, and P(the run ends within end_h)."""
    n = r.work_h.shape[0]
    f = np.full(n, max(float(planned.spot_fraction[0]), 0.0))
    tau, theta = np.full(n, planned.checkpoint_interval_h[0]), np.full(n, planned.switch_threshold_h[0])
    nan = np.full(n, np.nan)
    if r.market[0] == ADAPTIVE and np.isfinite(theta[0]):  # without a deadline it never switches
        slack = end_h - r.startup_h - r.restart_h - r.work_h - r.final_save_h
        out = adaptive_at(r.work_h, r.rate, r.ckpt_write_h, r.restart_h, slack, tau, theta)
        fraction, mean, writes, meets = out.spot_work_h / r.work_h, out.spot_h, out.writes_h, out.meets
        switch = 1.0 - out.no_switch
    else:
        work = f * r.work_h
        tail = np.where(f < 1.0, r.restart_h + r.work_h - work, 0.0)  # the planned on-demand rest
        handover = np.where(f < 1.0, r.ckpt_write_h, 0.0)
        end = end_h - r.startup_h - r.final_save_h - tail
        mean, meets = phase_at(work, r.rate, tau, r.ckpt_write_h, r.restart_h, end, handover)
        fraction, switch = f, (f < 1.0).astype(np.float64)
        writes = checkpoint_count(work, tau) * r.ckpt_write_h + handover
    phase = SpotPhase(fraction, tau, mean, nan, writes, switch, theta, mean, np.zeros(n, dtype=bool))
    return phase, np.clip(meets, 0.0, 1.0)
