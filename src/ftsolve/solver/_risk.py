"""Finish-time distribution and checkpoint interval under preemption (physics.md §10).

Model: preemptions arrive as a Poisson process of rate λ per hour while the job runs. Work is
split into n full segments of τ hours, each followed by a checkpoint write of δ hours (w1 = τ + δ),
and a last segment of w2 ≤ τ hours. A preemption loses the unfinished segment and costs a restart
of R hours (provisioning, download, loading, checkpoint read) during which no preemption is
counted. A segment of w hours is retried until it runs w hours without a preemption, so it fails
F ~ Geometric(p = e^{-λw}) times, each failure losing X ~ Exponential(λ) truncated to [0, w):

    E[segment] = (e^{λw} - 1)(1/λ + R)          (exact for this model)

Distribution. The wall time is W' = W + nδ plus the excess L = Σ_{i≤N} (X_i + R). The count
N = NB(n, p1) + Geometric(p2) is exact (segments fail independently), and given N the losses are
independent of it, so

    P(L ≤ y) = Σ_k P(N = k) · P(kR + S_k ≤ y),     S_k = X_1 + … + X_k,

with P(S_k ≤ s) exact for k ≤ 1 (an atom at zero; a truncated exponential) and, for k ≥ 2, a
normal with the losses' moments clipped to the support [0, k·w]. This keeps the lattice of
restarts (a step of R per preemption) exact, which a moment bound or a saddle point smooths over.
The q-quantile is 0 when P(N = 0) ≥ q (the run without preemptions); otherwise, with K the smallest
k with P(N ≤ k) ≥ q, it lies in [K·R, K·(R + w)]: below, fewer than K preemptions fit; above, every
sum of at most K losses is complete. Only the terms whose step overlaps that bracket vary in it.
A single term is inverted in closed form, several by bisection over multiples of a step fixed by
the row (the staircase defeats interpolation), and every quantile is rounded up to that step, so a
higher confidence never quotes an earlier finish. Checked against a
seeded replay of the model (tests/test_risk.py, benchmarks/spot_montecarlo.py): the simulated
probability of meeting the quantile equals the confidence within the replay's noise.

Adaptive fallback (market "adaptive"). Run on interruptible capacity; at each preemption, resume
there only if the time left before a target deadline D' still covers two restarts, the remaining
work with its checkpoint writes, one more segment and the final save; otherwise resume on
on-demand capacity. Every run then ends by D': when an attempt starts the slack covers a whole
segment, so a preemption in it still leaves time to switch. With D' = D every run meets the
deadline; held to the job's confidence like the other markets, D' is the latest target with which
D is still met at that confidence (bisection), so on-demand capacity serves only the unlucky runs.
Counting the checkpoint writes still to come as spent, the rule reads: switch at the first
preemption whose failure excess passes θ = s' - nδ - w1 (s', the slack of an on-demand run from
the start against D'). So P(no switch) = P(L ≤ θ), and by Wald's identity (attempts are
independent, the rule a stopping time) the expected interruptible time is E[S]·E[full segment] +
P(no switch)·E[last segment], E[S] = Σ_j P(L_j ≤ θ) the full segments completed (L_j, the excess
of the first j). A switched run ends at D' - R - w1 + O - (n - j)·δ, O the failure excess's
overshoot of θ; its distribution follows from the same sums (see _Finish), replayed within ±0.01.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from ftsolve.solver._rows import unique_rows

F = NDArray[np.float64]
I = NDArray[np.int64]

# Candidate checkpoint intervals in hours: 1 minute to 1 week, 64 log-spaced points (a grid step
# is a factor of 1.157), plus "no intermediate checkpoint". The grid is the same for every plan,
# so the chosen interval's expected time can only grow with the preemption rate.
TAU_GRID_HOURS: F = np.geomspace(1.0 / 60.0, 168.0, 64)
TAU_GRID_STEP: float = float(TAU_GRID_HOURS[1] / TAU_GRID_HOURS[0])
# The expected time is a sawtooth in τ (the last segment is partial); its local minima sit near
# intervals that divide the work evenly, W/k, which are searched too.


def checkpoint_count(work_h: F, tau_h: F) -> F:
    """Checkpoints written during `work_h` hours at interval τ: one per segment except the last."""
    out: F = np.maximum(np.ceil(work_h / np.maximum(tau_h, 1e-9) - 1e-9) - 1.0, 0.0)
    return out


def run_time_mean(work_h: F, lam: F, tau_h: F, ckpt_write_h: F, restart_h: F, tail_h: F | float = 0.0) -> F:
    """Expected wall time to finish `work_h` hours: E[S] = (e^{λw} - 1)(1/λ + R) per segment.

    Every segment of τ but the last ends with a checkpoint write; the last (at most τ) does not,
    since the final save is counted separately, unless the phase hands over to on-demand capacity:
    then it ends with a write too (`tail_h`, the write's hours).
    """
    lam = np.maximum(lam, 1e-12)
    tau = np.maximum(tau_h, 1e-9)
    full = checkpoint_count(work_h, tau)
    rest = work_h - full * tau
    scale = 1.0 / lam + restart_h
    m1 = np.expm1(np.minimum(lam * (tau + ckpt_write_h), 300.0)) * scale
    m2 = np.expm1(np.minimum(lam * (rest + tail_h), 300.0)) * scale
    out: F = full * m1 + m2
    return out


def _mean_over_scale(work_h: F, lam: F, tau_h: F, ckpt_write_h: F) -> F:
    """run_time_mean / (1/λ + R): the same ordering over τ (the factor is positive and does not
    depend on τ), computed in place with fewer passes, for the interval search."""
    lam = np.maximum(lam, 1e-12)
    tau = np.maximum(tau_h, 1e-9)
    full = np.ceil(work_h / tau - 1e-9)
    full -= 1.0
    np.maximum(full, 0.0, out=full)  # checkpoint_count
    rest = full * tau
    np.subtract(work_h, rest, out=rest)
    rest *= lam
    np.minimum(rest, 300.0, out=rest)
    np.expm1(rest, out=rest)
    segment = tau + ckpt_write_h
    segment *= lam
    np.minimum(segment, 300.0, out=segment)
    np.expm1(segment, out=segment)
    segment *= full
    segment += rest
    return segment


# How far from Young's interval the search looks: the expected time is smooth and unimodal in τ
# apart from the sawtooth of the last segment, and its minimum sits near Young's sqrt(2δ/λ): the
# search covers a factor of 2.4 either way on the grid and 3.3 for the even splits, which held
# for every plan the Monte Carlo benchmark replays and the property tests draw.
_WINDOW_STEPS = 6
_SPLIT_FACTORS: F = np.geomspace(0.3, 3.0, 15)


def _candidate_intervals(w: F, lam: F, d: F) -> F:
    """Grid points near Young's interval, even splits of the work near it, and the whole work."""
    young = np.sqrt(2.0 * np.maximum(d, 1e-6) / np.maximum(lam, 1e-12))
    centre = np.searchsorted(TAU_GRID_HOURS, young[:, 0])
    cols = np.clip(centre[:, None] + np.arange(-_WINDOW_STEPS, _WINDOW_STEPS + 1), 0, TAU_GRID_HOURS.size - 1)
    grid = TAU_GRID_HOURS[cols]
    splits_k = np.maximum(np.rint(w / young * _SPLIT_FACTORS[None, :]), 1.0)
    splits = w / splits_k
    out: F = np.concatenate([grid, splits, w], axis=1)
    return out


def _interval(w: F, lam: F, d: F, step: F | float = 0.0) -> F:
    """The candidate interval of least expected time, per row (columns of shape (m, 1)); none is
    shorter than one optimizer step (`step`): checkpoints fall between steps."""
    taus = np.maximum(np.minimum(_candidate_intervals(w, lam, d), w), np.minimum(step, w))
    i = np.argmin(_mean_over_scale(w, lam, taus, d), axis=1)[:, None]
    out: F = np.take_along_axis(taus, i, axis=1)[:, 0]
    return out


def best_interval(work_h: F, lam: F, ckpt_write_h: F, restart_h: F) -> tuple[F, F]:
    """Checkpoint interval (grid point or even split) of least expected time, and that time.

    Computed once per distinct (work, rate, write, restart) tuple: many offers share them.
    """
    rows, (w, la, d, r) = _distinct(work_h, lam, ckpt_write_h, restart_h)
    tau = _interval(w[:, None], la[:, None], d[:, None])
    mean = run_time_mean(w, la, tau, d, r)
    return tau[rows], mean[rows]


def _distinct(*columns: F) -> tuple[I, list[F]]:
    """(row -> distinct row, the distinct rows' columns) of columns broadcast to one shape."""
    cols = np.stack(np.broadcast_arrays(*columns), axis=-1).reshape(-1, len(columns))
    first, inverse = unique_rows(cols)
    uniq = cols[first]
    return inverse.reshape(-1), [uniq[:, j] for j in range(len(columns))]


def phase_quantiles(
    work_h: F,
    lam: F,
    ckpt_write_h: F,
    restart_h: F,
    confidence: float,
    tail_h: F | float = 0.0,
    step_h: F | float = 0.0,
) -> tuple[F, F, F]:
    """(checkpoint interval, mean and `confidence`-quantile of the wall time) to finish `work_h`
    hours on interruptible capacity (`tail_h`: a write ending the last segment, see
    run_time_mean); once per distinct row."""
    tail, step = np.asarray(tail_h, dtype=np.float64), np.asarray(step_h, dtype=np.float64)
    rows, (w, la, d, r, t, m) = _distinct(work_h, lam, ckpt_write_h, restart_h, tail, step)
    tau = _interval(w[:, None], la[:, None], d[:, None], m[:, None])
    mean = run_time_mean(w, la, tau, d, r, t)
    seg = Segments.of(w, la, tau, d, r, t)
    quantile = w + seg.n * d + t + excess_quantile(seg, confidence)
    return tau[rows], mean[rows], quantile[rows]


# --- distributions --------------------------------------------------------------------------------


def norm_cdf(z: F) -> F:
    """Standard normal CDF, the logistic approximation 1/(1 + e^{-1.5976z - 0.07056z³}) (Bowling et
    al. 2009, J. Industrial Engineering and Management 2(1)): absolute error below 1.4e-4, far under
    what a replay can tell, in a handful of passes (the mixture evaluates it many times)."""
    e = np.minimum(-z * (1.5976 + 0.07056 * z * z), 700.0)
    out: F = 1.0 / (1.0 + np.exp(e))
    return out


_PPF_A: tuple[float, ...] = (
    -3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
    -3.066479806614716e01, 2.506628277459239e00,
)  # fmt: skip
_PPF_B: tuple[float, ...] = (
    -5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
    -1.328068155288572e01, 1.0,
)  # fmt: skip
_PPF_C: tuple[float, ...] = (
    -7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
    4.374664141464968e00, 2.938163982698783e00,
)  # fmt: skip
_PPF_D: tuple[float, ...] = (
    7.784695709041462e-03,
    3.224671290700398e-01,
    2.445134137142996e00,
    3.754408661907416e00,
    1.0,
)


def _horner(coefs: tuple[float, ...], x: F) -> F:
    out = np.full_like(x, coefs[0])
    for c in coefs[1:]:
        out = out * x + c
    return out


def norm_ppf(u: F) -> F:
    """Inverse standard normal CDF (Acklam's rational approximation: relative error below 1.2e-9)."""
    p = np.clip(u, 1e-300, 1.0 - 1e-16)
    c = p - 0.5
    central = c * _horner(_PPF_A, c * c) / _horner(_PPF_B, c * c)
    tail_p = np.minimum(p, 1.0 - p)
    s = np.sqrt(-2.0 * np.log(tail_p))
    tail = _horner(_PPF_C, s) / _horner(_PPF_D, s)
    out: F = np.where(np.abs(c) <= 0.5 - 0.02425, central, np.where(c < 0, tail, -tail))
    return out


def _loss_moments(lam: F, w: F) -> tuple[F, F]:
    """Mean and variance of an Exponential(λ) loss truncated to [0, w)."""
    lw = lam * w
    small = lw < 1e-4
    q = np.where(small, 1.0, -np.expm1(-lw))
    p = 1.0 - q
    inv = 1.0 / lam
    mean = np.where(small, w * (0.5 - lw / 12.0), inv - w * p / q)
    ex2 = np.where(
        small, w * w * (1.0 / 3.0 - lw / 12.0), (2.0 * inv**2 - p * (w**2 + 2.0 * w * inv + 2.0 * inv**2)) / q
    )
    return mean, np.maximum(ex2 - mean**2, 1e-18 * np.maximum(w, 1e-9) ** 2)


def _trunc_exp_cdf(s: F, lam: F, w: F) -> F:
    """P(X ≤ s) for X ~ Exponential(λ) truncated to [0, w) (uniform where λw is negligible)."""
    x = np.clip(s, 0.0, w)
    lw = lam * w
    exp_form = np.expm1(-lam * x) / np.where(lw > 1e-12, np.expm1(-np.maximum(lw, 1e-12)), 1.0)
    out: F = np.where(lw > 1e-12, exp_form, x / np.maximum(w, 1e-300))
    return np.where(s >= w, 1.0, out)


@dataclass(frozen=True)
class Segments:
    """The interruptible phase of one distinct run per row (see the module doc)."""

    n: F  # full segments, each ending with a checkpoint write
    write: F  # δ
    w1: F  # their length τ + δ
    w2: F  # the last segment's length, at most τ
    lam: F
    restart: F
    q1: F  # P(a full segment fails), 1 - e^{-λ w1}
    q2: F  # the same for the last segment
    top: F  # the longest segment: a loss is below it
    failures_mean: F  # E[N]
    failures_var: F
    loss_mean: F  # a loss's moments, mixed over segments by their share of failures
    loss_var: F
    full_mean: F  # a loss in a full segment (the adaptive rule's threshold uses these)
    full_var: F
    single_last: F  # P(the failure is in the last segment | N = 1)

    @classmethod
    def of(cls, work_h: F, lam: F, tau_h: F, write_h: F, restart_h: F, tail_h: F | float = 0.0) -> Segments:
        """`tail_h`: a checkpoint write ending the last segment (a handover to on-demand capacity)."""
        tau = np.maximum(tau_h, 1e-9)
        lam = np.maximum(lam, 1e-12)
        n = checkpoint_count(work_h, tau)
        w1, w2 = tau + write_h, np.maximum(work_h - n * tau, 0.0) + tail_h
        l1, l2 = np.minimum(lam * w1, 300.0), np.minimum(lam * w2, 300.0)
        q1, q2 = -np.expm1(-l1), -np.expm1(-l2)
        e1, e2 = n * np.expm1(l1), np.expm1(l2)  # expected failures: q/p per segment
        mean_n = e1 + e2
        var_n = e1 * np.exp(l1) + e2 * np.exp(l2)  # q/p² per segment
        last = np.where(mean_n > 0, e2 / np.where(mean_n > 0, mean_n, 1.0), 1.0)
        m1, v1 = _loss_moments(lam, w1)
        m2, v2 = _loss_moments(lam, w2)
        m = (1.0 - last) * m1 + last * m2
        v = (1.0 - last) * (v1 + m1**2) + last * (v2 + m2**2) - m**2
        d1 = n * q1 + q2
        single_last = np.where(d1 > 0, q2 / np.where(d1 > 0, d1, 1.0), 1.0)
        top = np.where(n > 0, w1, w2)
        full_m, full_v = np.where(n > 0, m1, m2), np.where(n > 0, v1, v2)
        return cls(
            n,
            write_h,
            w1,
            w2,
            lam,
            restart_h,
            q1,
            q2,
            top,
            mean_n,
            var_n,
            m,
            np.maximum(v, 1e-30),
            full_m,
            full_v,
            single_last,
        )

    def take(self, idx: I) -> Segments:
        return Segments(*(getattr(self, f.name)[idx] for f in fields(self)))

    def __len__(self) -> int:
        return int(self.n.shape[0])


# Terms of the mixture: at least count_support (the tail beyond holds under 1e-6 of the mass);
# rows are padded to the next size (few sizes: each is a pass of its own); beyond the last, the
# count is so large that its steps are smoothed and a normal approximation of the excess is used.
_TERMS = (8, 32, 128, 512)
# The mass a quantile may leave beyond the terms it sums (the quantile is then that much more
# confident than asked, never less).
_TAIL = 1e-6


def count_support(seg: Segments) -> F:
    """Failure counts to sum for the tail beyond to hold under _TAIL of the mass: mean + 7 sd + 4
    where the count is near normal, and at least the geometric tail's length where a segment is
    likely to fail again and again (P(G >= k) = q^k for the retries of one segment)."""
    q = np.clip(np.maximum(seg.q1, seg.q2), 1e-300, 1.0 - 1e-12)
    geometric = np.log(_TAIL / 10.0) / np.log(q)
    out: F = np.ceil(seg.failures_mean + 7.0 * np.sqrt(seg.failures_var) + 4.0 + np.where(q > 0.01, geometric, 0.0))
    return out


def _failure_pmf(seg: Segments, terms: int) -> F:
    """P(N = k) for k < terms: NB(n, p1) convolved with Geometric(p2), shape (rows, terms)."""
    return _geometric_convolution(_negative_binomial(seg, seg.n, terms), seg.q2)


def _negative_binomial(seg: Segments, m: F, terms: int) -> F:
    """P(f failures in m full segments) for f < terms (m of any shape, broadcast against the rows
    first): e^{-λ·w1·m} · C(m + f - 1, f) · q1^f, built in logarithms (huge m would overflow)."""
    col = (-1,) + (1,) * (m.ndim - 1)
    f = np.arange(1, terms, dtype=np.float64)
    ratio = (m[..., None] + f - 1.0) / f * seg.q1.reshape(col)[..., None]
    logs = np.empty((*m.shape, terms))
    logs[..., 0] = -(seg.lam * seg.w1).reshape(col) * m
    logs[..., 1:] = logs[..., :1] + np.cumsum(np.log(np.maximum(ratio, 1e-300)), axis=-1)
    out: F = np.exp(np.maximum(logs, -745.0))
    return out


def _geometric_convolution(a: F, q: F) -> F:
    """b_k = (1 - q) Σ_{i≤k} a_i q^{k-i}: a scaled running sum where q^{-k} stays finite, else the
    first terms of the sum (q is then so small that the rest is below 1e-17 of the total)."""
    terms = a.shape[1]
    log_q = np.log(np.maximum(q, 1e-300))[:, None]
    i = np.arange(terms, dtype=np.float64)[None, :]
    scaled = -log_q * (terms - 1) <= 600.0
    safe_log = np.where(scaled, log_q, 0.0)
    out = np.exp(i * safe_log) * np.cumsum(a * np.exp(-i * safe_log), axis=1)
    if not scaled.all():
        lags = int(np.ceil(40.0 * (terms - 1) / 600.0)) + 1
        short = a.copy()
        for lag in range(1, min(lags, terms)):
            short[:, lag:] += a[:, :-lag] * np.exp(lag * log_q)
        out = np.where(scaled, out, short)
    result: F = (1.0 - q)[:, None] * out
    return result


def _column(a: F, ndim: int) -> F:
    """Per-row values shaped (rows, 1, ...) to broadcast against an array of `ndim` dimensions."""
    out: F = a.reshape((-1,) + (1,) * (ndim - 1))
    return out


def _loss_sum_cdf(seg: Segments, k: F, s: F, full_only: bool = False) -> F:
    """P(S_k ≤ s) for k losses (k and s broadcast against the rows, shape (rows, ...)): exact for
    k ≤ 1, a normal clipped to [0, k·top] beyond. `full_only`: losses of full segments only."""
    mean = _column(seg.full_mean if full_only else seg.loss_mean, s.ndim)
    var = _column(seg.full_var if full_only else seg.loss_var, s.ndim)
    top = _column(seg.top, s.ndim)
    g = norm_cdf((s - k * mean) / np.sqrt(np.maximum(k, 1.0) * var))
    g = np.where(s >= k * top, 1.0, np.where(s <= 0.0, 0.0, g))
    one = np.broadcast_to(k == 1, g.shape)
    if one.any():
        rows = np.broadcast_to(np.arange(len(seg)).reshape((-1,) + (1,) * (s.ndim - 1)), g.shape)[one]
        last = _single_last(seg, full_only)[rows]
        g[one] = _single_loss_cdf(np.broadcast_to(s, g.shape)[one], seg.lam[rows], seg.w1[rows], seg.w2[rows], last)
    return g


def _single_last(seg: Segments, full_only: bool) -> F:
    """P(the only failure is in the last segment): for full segments only, where there are none."""
    out: F = np.where(seg.n > 0, 0.0, 1.0) if full_only else seg.single_last
    return out


def _single_loss_cdf(s: F, lam: F, w1: F, w2: F, last: F) -> F:
    """P(X ≤ s) for the loss of the only failure: in a full segment, or (share `last`) in the last
    one, which is no longer (w2 ≤ w1 where there are full segments)."""
    e = -np.expm1(-lam * np.clip(s, 0.0, w1))
    c1 = np.maximum(-np.expm1(-lam * w1), 1e-300)
    c2 = np.maximum(-np.expm1(-lam * w2), 1e-300)
    out: F = np.where(s >= w2, last, e * last / c2) + e * (1.0 - last) / c1
    return np.where(s >= w1, 1.0, np.minimum(out, 1.0))


def _single_loss_ppf(seg: Segments, u: F) -> F:
    """Inverse of _single_loss_cdf (mixed): for s ≤ w2 both segments contribute, above only the full."""
    lam = seg.lam
    c1 = np.maximum(-np.expm1(-lam * seg.w1), 1e-300)
    c2 = np.maximum(-np.expm1(-lam * seg.w2), 1e-300)
    last = seg.single_last
    both = np.where(seg.n > 0, (1.0 - last) / c1, 0.0) + last / c2
    at_w2 = np.where(seg.n > 0, (1.0 - last) * c2 / c1, 0.0) + last
    low = np.minimum(u / both, 1.0)
    high = np.minimum((u - last) * c1 / np.maximum(1.0 - last, 1e-300), 1.0)
    x = np.where(u <= at_w2, low, high)
    out: F = np.where(x >= 1.0, seg.top, -np.log1p(-np.minimum(x, 1.0 - 1e-16)) / lam)
    return np.minimum(out, seg.top)


def _mixture_rows(seg: Segments) -> list[tuple[I, int]]:
    """(rows, terms) groups for the mixture over the failure count; rows beyond the largest size are
    left out (the caller approximates them)."""
    size = np.searchsorted(np.array(_TERMS, dtype=np.float64), count_support(seg))
    return [(np.flatnonzero(size == b), terms) for b, terms in enumerate(_TERMS) if np.any(size == b)]


def _excess_moments(seg: Segments) -> tuple[F, F]:
    """Mean and standard deviation of the excess L (compound sum)."""
    jump = seg.restart + seg.loss_mean
    var = seg.failures_mean * seg.loss_var + seg.failures_var * jump**2
    return seg.failures_mean * jump, np.sqrt(var)


@dataclass(frozen=True)
class _Mixture:
    """P(L ≤ y) for rows of one distinct run each: the failure-count probabilities, computed once."""

    seg: Segments
    mean: F  # the excess's moments: the normal approximation for counts beyond the mixture's sizes
    sd: F
    groups: tuple[tuple[I, Segments, F], ...]  # rows, their segments, P(N = k)

    @classmethod
    def of(cls, seg: Segments) -> _Mixture:
        mean, sd = _excess_moments(seg)
        groups = []
        for rows, terms in _mixture_rows(seg):
            sub = seg.take(rows)
            groups.append((rows, sub, _failure_pmf(sub, terms)))
        return cls(seg, mean, sd, tuple(groups))

    def cdf(self, y: F) -> F:
        """P(L ≤ y) per row (y of shape (rows,) or (rows, points))."""
        out = norm_cdf((y - _column(self.mean, y.ndim)) / _column(np.maximum(self.sd, 1e-300), y.ndim))
        for rows, sub, pmf in self.groups:
            k = np.arange(pmf.shape[1], dtype=np.float64)
            g = _loss_sum_cdf(sub, k, y[rows][..., None] - k * _column(sub.restart, y.ndim + 1))
            out[rows] = np.sum(pmf.reshape(pmf.shape[0], *(1,) * (y.ndim - 1), pmf.shape[1]) * g, axis=-1)
        result: F = np.where(y >= 0.0, out, 0.0)
        return result


def excess_cdf(seg: Segments, y: F) -> F:
    """P(L ≤ y) per row (y of shape (rows,) or (rows, points)): the mixture over the failure count."""
    return _Mixture.of(seg).cdf(y)


def excess_quantile(seg: Segments, confidence: float) -> F:
    """The smallest y with P(L ≤ y) ≥ confidence, per row."""
    mean, sd = _excess_moments(seg)
    out = np.maximum(mean + sd * NormalDist().inv_cdf(confidence), 0.0)
    # Where the run without preemptions is likely enough, the quantile is that run.
    p0 = np.exp(-seg.lam * (seg.n * seg.w1 + seg.w2))
    none = p0 >= confidence
    out[none] = 0.0
    # Where one preemption is, and a restart outlasts a segment (a second one cannot end before
    # the first has ended for sure), only the single loss varies: invert it, P(N = 1) in closed form.
    p1 = p0 * (seg.n * seg.q1 + seg.q2)
    first = np.flatnonzero(~none & (p0 + p1 >= confidence) & (seg.restart >= seg.top))
    if first.size:
        u = (confidence - p0[first]) / p1[first]
        out[first] = seg.restart[first] + _single_loss_ppf(seg.take(first), u)
    rest = ~none
    rest[first] = False
    busy = np.flatnonzero(rest)
    windows: dict[bool, list[_Window]] = {True: [], False: []}
    for terms in _TERMS:  # as many terms as the count's tail needs, rows that need more go on
        if busy.size == 0:
            break
        sub = seg.take(busy)
        pmf = _failure_pmf(sub, terms)
        cum = np.cumsum(pmf, axis=1)
        enough = np.flatnonzero(cum[:, -1] >= 1.0 - _TAIL)
        rows, busy = busy[enough], np.delete(busy, enough)
        if rows.size == 0:
            continue
        sub, pmf, cum = sub.take(enough), pmf[enough], cum[enough]
        reached = cum >= confidence
        kq = np.where(reached[:, -1], np.argmax(reached, axis=1), terms - 1)
        k_lo, k_hi = _window_bounds(sub, kq, terms)
        below = np.take_along_axis(cum, (k_lo - 1)[:, None], axis=1)[:, 0]
        one = np.flatnonzero(k_hi == k_lo)
        if one.size:  # a single term varies: invert it
            u = (confidence - below[one]) / pmf[one, kq[one]]
            k = kq[one].astype(np.float64)
            out[rows[one]] = k * sub.restart[one] + _loss_sum_ppf(sub.take(one), k, u)
        width = k_hi - k_lo + 1
        for narrow in (True, False):  # the common narrow windows apart, not padded to the widest
            some = np.flatnonzero((width > 1) & ((width <= _NARROW) == narrow))
            if some.size:
                size = int(2 ** np.ceil(np.log2(width[some].max())))
                win = _Window.of(
                    rows[some], sub.take(some), pmf[some], kq[some], k_lo[some], k_hi[some], below[some], size
                )
                windows[narrow].append(win)
    step = _lattice_step(seg)
    for parts in windows.values():
        if parts:
            win = _Window.joined(parts)
            target = np.full(win.rows.size, confidence)
            out[win.rows] = lattice_first_reaching(win.cdf, win.lo, win.hi, target, step[win.rows])
    # Every quantile on its row's lattice, the closed forms too: the same quantile function rounded
    # up the same way, so a higher confidence never quotes an earlier finish.
    result: F = np.ceil(out / step - 1e-9) * step
    return result


def _lattice_step(seg: Segments) -> F:
    """The resolution of a row's quantile: a power of two hours near 1e-5 of the excess's mean plus
    four deviations (under 2 minutes for a week of work), fixed by the row, not by the confidence."""
    mean, sd = _excess_moments(seg)
    scale = np.maximum(1e-5 * (mean + 4.0 * sd + seg.restart + seg.top), 2.0**-40)
    out: F = np.exp2(np.floor(np.log2(scale)))
    return out


def lattice_first_reaching(cdf: Callable[[F], F], lo: F, hi: F, target: F, step: F) -> F:
    """The smallest multiple y of `step` in [lo, hi + step) with cdf(y) ≥ target, per row, for an
    increasing `cdf` (rows by columns in, the same shape out) with cdf(hi) ≥ target: bisection over
    the multiples. A staircase cdf (restarts are a lattice) defeats interpolation; bisection on a
    grid fixed by the row returns the quantile rounded up, which is monotone in the target."""
    a = np.floor(lo / step) - 1.0  # cdf(a·step) < target is assumed for the lower end
    b = np.ceil(hi / step)
    # Eight points a pass (a 9-ary search): a third of bisection's passes for the same answer.
    cuts = np.arange(1, _SECTIONS, dtype=np.float64)[None, :] / _SECTIONS
    while np.any(b - a > 1.0):
        span = (b - a)[:, None]
        points = np.minimum(a[:, None] + np.maximum(np.floor(span * cuts), 1.0), b[:, None])
        ok = cdf(points * step[:, None]) >= target[:, None]
        hit = ok.any(axis=1)
        first = np.argmax(ok, axis=1)
        rows = np.arange(a.shape[0])
        below = np.where(first > 0, points[rows, np.maximum(first - 1, 0)], a)
        b = np.where(hit, points[rows, first], b)
        a = np.where(hit, below, points[:, -1])
    out: F = b * step
    return out


_SECTIONS = 9


_NARROW = 4


def _window_bounds(seg: Segments, kq: I, terms: int) -> tuple[I, I]:
    """(k_lo, k_hi): over [kq·R, kq·(R + top)] the terms below k_lo are complete (within 1e-12 for
    the normal ones) and those above k_hi have not started; kq (≥ 1) is inside."""
    k = np.arange(terms, dtype=np.float64)[None, :]
    r, top = seg.restart[:, None], seg.top[:, None]
    lo, hi = kq[:, None] * r, kq[:, None] * (r + top)
    spread = 7.0 * np.sqrt(k * seg.loss_var[:, None])
    centre = k * seg.loss_mean[:, None]
    complete = lo - k * r >= np.where(k >= 2, np.minimum(k * top, centre + spread), k * top)
    started = hi - k * r > np.where(k >= 2, np.maximum(centre - spread, 0.0), 0.0)
    k_lo = np.minimum(np.argmin(complete, axis=1), kq)
    k_hi = np.maximum(np.where(started[:, -1], terms, np.argmin(started, axis=1)) - 1, kq)
    return k_lo.astype(np.int64), k_hi.astype(np.int64)


@dataclass(frozen=True)
class _Window:
    """Terms k_lo..k_lo+J-1 of the excess mixture for some rows (the others are 0 or 1 over the
    bracket [kq·R, kq·(R + top)]), with what their CDF needs precomputed."""

    rows: I  # where the rows go in the caller's output
    lo: F
    hi: F
    below: F  # mass of the complete terms
    weights: F  # (rows, J): P(N = k) inside the window, 0 beyond k_hi
    shift: F  # k·R
    mean: F  # k·E[X]
    inv_sd: F
    top: F  # k·top: the sum of k losses is below it
    single: tuple[I, I, F, F, F, F]  # (row, column, λ, w1, w2, P(last)) where k = 1

    @classmethod
    def of(cls, rows: I, seg: Segments, pmf: F, kq: I, k_lo: I, k_hi: I, below: F, size: int) -> _Window:
        cols = k_lo[:, None] + np.arange(size)[None, :]
        weights = np.take_along_axis(pmf, np.minimum(cols, pmf.shape[1] - 1), axis=1) * (cols <= k_hi[:, None])
        k = cols.astype(np.float64)
        r1, c1 = np.nonzero(cols == 1)
        r, top = seg.restart[:, None], seg.top[:, None]
        return cls(
            rows=rows,
            lo=kq * seg.restart,
            hi=kq * (seg.restart + seg.top),
            below=below,
            weights=weights,
            shift=k * r,
            mean=k * seg.loss_mean[:, None],
            inv_sd=1.0 / np.sqrt(k * seg.loss_var[:, None]),
            top=k * top,
            single=(r1, c1, seg.lam[r1], seg.w1[r1], seg.w2[r1], seg.single_last[r1]),
        )

    @classmethod
    def joined(cls, parts: list[_Window]) -> _Window:
        """One window of the rows of several (padded to the widest with terms of no weight)."""
        if len(parts) == 1:
            return parts[0]
        size = max(p.weights.shape[1] for p in parts)
        parts = [p.padded(size) for p in parts]
        offsets = np.cumsum([0] + [p.rows.size for p in parts[:-1]])
        single = tuple(
            np.concatenate([p.single[j] + (off if j == 0 else 0) for p, off in zip(parts, offsets, strict=True)])
            for j in range(6)
        )
        cat = {f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls) if f.name != "single"}
        return cls(**cat, single=single)  # type: ignore[arg-type]

    def padded(self, size: int) -> _Window:
        extra = size - self.weights.shape[1]
        if extra == 0:
            return self

        def pad(a: F, value: float) -> F:
            out: F = np.pad(a, ((0, 0), (0, extra)), constant_values=value)
            return out

        return _Window(
            self.rows,
            self.lo,
            self.hi,
            self.below,
            pad(self.weights, 0.0),
            pad(self.shift, 0.0),
            pad(self.mean, 0.0),
            pad(self.inv_sd, 1.0),
            pad(self.top, 0.0),
            self.single,
        )

    def cdf(self, y: F) -> F:
        """P(L ≤ y) for y of shape (rows, points)."""
        s = y[:, :, None] - self.shift[:, None, :]
        g = norm_cdf((s - self.mean[:, None, :]) * self.inv_sd[:, None, :])
        g = np.where(s >= self.top[:, None, :], 1.0, np.where(s <= 0.0, 0.0, g))
        r1, c1, lam, w1, w2, last = self.single
        if r1.size:
            g[r1, :, c1] = _single_loss_cdf(s[r1, :, c1], lam[:, None], w1[:, None], w2[:, None], last[:, None])
        out: F = self.below[:, None] + np.sum(self.weights[:, None, :] * g, axis=2)
        return out


def _loss_sum_ppf(seg: Segments, k: F, u: F) -> F:
    """Inverse of _loss_sum_cdf (mixed losses) for one k per row."""
    normal = k * seg.loss_mean + np.sqrt(np.maximum(k, 1.0) * seg.loss_var) * norm_ppf(u)
    normal = np.clip(normal, 0.0, k * seg.top)
    out: F = np.where(k == 1, _single_loss_ppf(seg, u), normal)
    return out


_GRID: F = np.linspace(0.0, 1.0, 9)
_REFINE = 4


def first_reaching(cdf: Callable[[F], F], lo: F, hi: F, target: F) -> F:
    """The smallest y in [lo, hi] with cdf(y) ≥ target, per row, for increasing `cdf` (rows by
    columns in, the same shape out) with cdf(hi) ≥ target: the grid cell where it is reached, then
    regula falsi (Illinois) in it. Returns the cell's upper end, so cdf(result) ≥ target."""
    y = lo[:, None] + (hi - lo)[:, None] * _GRID[None, :]
    v = cdf(y)
    hit = v >= target[:, None]
    i = np.where(hit[:, -1], np.argmax(hit, axis=1), _GRID.size - 1)
    rows = np.arange(lo.shape[0])
    b, fb = y[rows, i], v[rows, i] - target
    a, fa = y[rows, np.maximum(i - 1, 0)], v[rows, np.maximum(i - 1, 0)] - target
    kept = np.zeros(lo.shape[0], dtype=np.int8)
    for _ in range(_REFINE):
        span = fb - fa
        c = np.where(span > 0, b - fb * (b - a) / np.where(span > 0, span, 1.0), 0.5 * (a + b))
        c = np.clip(c, a, b)
        fc = cdf(c[:, None])[:, 0] - target
        right = fc >= 0
        fa = np.where(right & (kept == 1), 0.5 * fa, fa)  # Illinois: the end kept twice moves
        fb = np.where(~right & (kept == -1), 0.5 * fb, fb)
        a, fa = np.where(right, a, c), np.where(right, fa, fc)
        b, fb = np.where(right, c, b), np.where(right, fc, fb)
        kept = np.where(right, 1, -1).astype(np.int8)
    out: F = np.where(i == 0, lo, b)
    return out


# --- the adaptive fallback -------------------------------------------------------------------------


@dataclass(frozen=True)
class AdaptivePhase:
    """The adaptive policy's interruptible phase per row (hours; see the module doc)."""

    interval_h: F
    switch_slack_h: F  # the slack the rule targets: a deadline this much after an on-demand run's end
    no_switch: F  # P(the run finishes on interruptible capacity)
    spot_h: F  # expected interruptible wall hours after start-up, final save aside
    spot_work_h: F  # expected work done there and kept
    writes_h: F  # expected checkpoint writes there
    quantile_h: (
        F  # confidence-quantile of the run's end after start-up (on-demand rest and switch incl.), final save aside
    )
    offered: NDArray[np.bool_]  # the slack covers one segment: otherwise the policy is plain on-demand
    threshold_h: F  # θ: the failure excess beyond which the rule switches to on-demand capacity


_SLACK_STEPS = 6


def adaptive_phase(
    work_h: F, lam: F, write_h: F, restart_h: F, slack_h: F, confidence: float, step_h: F | float = 0.0
) -> AdaptivePhase:
    """The adaptive policy for `work_h` hours when an on-demand run from the start would finish
    `slack_h` hours before the deadline (after one restart); once per distinct row.

    The rule keeps every run within the deadline it targets. Held to the same confidence as the
    other markets, it targets a later one: the latest (by bisection over [slack, slack + R + τ +
    δ + nδ], beyond which even the switched runs end late) with which the real deadline is still
    met at the confidence. Runs that switch late may then miss it, at most 1 - confidence of them.
    """
    rows, (w, la, d, r, s0, m) = _distinct(
        work_h, lam, write_h, restart_h, slack_h, np.asarray(step_h, dtype=np.float64)
    )
    tau = _interval(w[:, None], la[:, None], d[:, None], m[:, None])
    seg = Segments.of(w, la, tau, d, r)
    target = min(confidence + _SWITCH_MARGIN, 1.0)
    lo, hi = s0.copy(), s0 + r + seg.top + seg.n * d
    model = _Switching.of(seg, hi - seg.n * d - seg.top)
    for _ in range(_SLACK_STEPS):
        mid = 0.5 * (lo + hi)
        # The real deadline sits at o = s0 - mid + R + top on the targeted rule's scale.
        ok = model.finish(mid, at=s0 - mid + r + seg.top).value >= target
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    finish = model.finish(lo)
    spot_h, spot_work, writes = _adaptive_spend(seg, w, tau, finish)
    o = first_reaching(finish.cdf, -seg.n * d - finish.theta, r + seg.top, np.full(len(seg), target))
    # At most the real deadline: met at the confidence where the bisection moved the target, by
    # every run where it did not.
    quantile = np.minimum(lo + w + np.minimum(o - seg.top, r), s0 + w + r)
    return AdaptivePhase(
        interval_h=tau[rows],
        switch_slack_h=lo[rows],
        no_switch=finish.no_switch[rows],
        spot_h=spot_h[rows],
        spot_work_h=spot_work[rows],
        writes_h=writes[rows],
        quantile_h=quantile[rows],
        offered=finish.offered[rows],
        threshold_h=finish.theta[rows],
    )


def _adaptive_spend(seg: Segments, w: F, tau: F, finish: _Finish) -> tuple[F, F, F]:
    """(interruptible wall hours, work kept there, checkpoint writes there) expected of an adaptive
    run: by Wald's identity over the full segments done before a switch (see the module doc)."""
    done = _full_segments_done(seg, finish.theta)
    r = seg.restart
    scale = 1.0 / seg.lam + r
    m1 = np.expm1(np.minimum(seg.lam * seg.w1, 300.0)) * scale
    m2 = np.expm1(np.minimum(seg.lam * seg.w2, 300.0)) * scale
    stays = finish.no_switch
    spot_h = done * m1 + stays * m2 - r * (1.0 - stays)  # the switch's restart is on-demand
    spot_work = tau * (done - seg.n * stays) + w * stays
    writes = seg.write * done
    return np.maximum(spot_h, spot_work + writes), spot_work, writes


@dataclass(frozen=True)
class RuleOutcome:
    """An adaptive rule, fixed by its interval and threshold, at some preemption rate."""

    no_switch: F
    spot_h: F  # expected interruptible wall hours after start-up, final save aside
    spot_work_h: F
    writes_h: F
    meets: F  # P(the run ends by the deadline)


def adaptive_at(work_h: F, lam: F, write_h: F, restart_h: F, slack_h: F, tau_h: F, threshold_h: F) -> RuleOutcome:
    """What an adaptive plan (its interval τ and threshold θ as planned) spends and how often it
    keeps the deadline, `slack_h` after an on-demand run from the start, if preemptions come at
    rate `lam`: a plan's sensitivity to the rate it assumed."""
    seg = Segments.of(work_h, lam, tau_h, write_h, restart_h)
    target = threshold_h + seg.n * write_h + seg.top  # the slack the rule targets
    model = _Switching.of(seg, threshold_h)
    finish = model.finish(target, at=slack_h - target + restart_h + seg.top)
    spot_h, spot_work, writes = _adaptive_spend(seg, work_h, tau_h, finish)
    return RuleOutcome(finish.no_switch, spot_h, spot_work, writes, np.clip(finish.value, 0.0, 1.0))


def phase_at(work_h: F, lam: F, tau_h: F, write_h: F, restart_h: F, end_h: F, tail_h: F | float = 0.0) -> tuple[F, F]:
    """(expected wall hours, P(done within `end_h` hours)) of an interruptible phase with the
    interval as planned, if preemptions come at rate `lam` (`tail_h` as in phase_quantiles)."""
    seg = Segments.of(work_h, lam, tau_h, write_h, restart_h, tail_h)
    mean = run_time_mean(work_h, lam, tau_h, write_h, restart_h, tail_h)
    return mean, excess_cdf(seg, end_h - work_h - seg.n * write_h - tail_h)


def _tolerated_terms(seg: Segments, theta: F) -> list[tuple[I, int]]:
    """(rows, terms) groups: failure counts up to the most the threshold tolerates (θ/R) and up to
    what the count's distribution holds (count_support)."""
    need = np.minimum(np.floor(theta / np.maximum(seg.restart, 1e-12)) + 2.0, count_support(seg))
    size = np.minimum(np.searchsorted(np.array(_TERMS, dtype=np.float64), need), len(_TERMS) - 1)
    return [(np.flatnonzero(size == b), terms) for b, terms in enumerate(_TERMS) if np.any(size == b)]


_NODES = 24


def _full_segments_done(seg: Segments, theta: F) -> F:
    """E[S] = Σ_{j=1..n} P(L_j ≤ θ): full segments completed before a switch (L_j, the failure
    excess of the first j). Exact sum up to 24 segments, else Gauss-Legendre over j (smooth in j)."""
    out = np.zeros(len(seg))
    x, wgt = np.polynomial.legendre.leggauss(_NODES)
    for rows, terms in _tolerated_terms(seg, theta):
        sub = seg.take(rows)
        n = sub.n[:, None]
        exact = n <= _NODES
        j = np.where(exact, np.arange(1, _NODES + 1)[None, :], 0.5 + (x[None, :] + 1.0) * n / 2.0)
        weight = np.where(exact, np.arange(1, _NODES + 1)[None, :] <= n, wgt[None, :] * n / 2.0)
        f = np.arange(terms, dtype=np.float64)
        alive = _loss_sum_cdf(sub, f[None, :], theta[rows, None] - f[None, :] * sub.restart[:, None], full_only=True)
        nb = _negative_binomial(sub, np.broadcast_to(j, (rows.size, _NODES)), terms)
        out[rows] = np.sum(weight * np.sum(nb * alive[:, None, :], axis=2), axis=1)
    return out


# The switched runs' finish rests on approximations (normal sums of losses, a linear density
# where the overshoot is counted back); replayed, they miss the simulated probability by up to
# ±0.01: the quantile is taken at this much more confidence, on the safe side.
_SWITCH_MARGIN = 0.005


@dataclass(frozen=True)
class _Switching:
    """What the end of an adaptive run needs whatever slack its rule targets (thresholds up to
    `theta`): the excess's mixture, groups of failure counts, their unspent-write weights."""

    seg: Segments
    mixture: _Mixture
    groups: tuple[tuple[I, Segments, int, F, F], ...]  # rows, their segments, counts, weights, shifts

    @classmethod
    def of(cls, seg: Segments, theta: F) -> _Switching:
        groups = []
        for rows, terms in _tolerated_terms(seg, np.maximum(theta, 0.0)):
            sub = seg.take(rows)
            groups.append((rows, sub, terms, *_unspent_writes(sub, terms)))
        return cls(seg, _Mixture.of(seg), tuple(groups))

    def finish(self, slack: F, at: F | None = None) -> _Finish:
        """The end's distribution when the rule targets `slack`; with `at` (o per row), its CDF
        there is evaluated along the way (then in `value`), which saves a pass."""
        raw = slack - self.seg.n * self.seg.write - self.seg.top
        theta = np.maximum(raw, 0.0)
        no_switch = self.mixture.cdf(theta)
        value = np.zeros(0) if at is None else self.mixture.cdf(np.minimum(theta + at, theta))
        parts = []
        for rows, sub, terms, all_weights, shifts in self.groups:
            ks = _likely_counts(sub, theta[rows], terms, all_weights)
            weights = np.take_along_axis(all_weights, ks[:, :, None], axis=1)
            crossing = _Crossing.of(sub, theta[rows], ks, shifts.shape[1])
            points = (sub.restart + sub.top)[:, None]
            if at is not None:
                points = np.concatenate([points, at[rows, None]], axis=1)
            both = _switched(crossing, weights, shifts, points)
            scale = (1.0 - no_switch[rows]) / np.maximum(both[:, 0], 1e-300)
            if at is not None:
                value[rows] += scale * both[:, 1]
            parts.append((rows, crossing, weights, shifts, scale))
        return _Finish(self.mixture, theta, no_switch, raw >= 0.0, tuple(parts), value)


@dataclass(frozen=True)
class _Finish:
    """The end of an adaptive run targeting a slack s (θ = s - nδ - top): P(it ends by
    s + W - top + o after start-up), final save aside, for o in [-nδ - θ, R + top].

    A run without a switch ends at o = L - θ. A run switched at failure k + 1 ends at o = O - U:
    O in (0, R + top) is the failure excess's overshoot of θ, U = (n - j)·δ the checkpoint writes
    not spent (j full segments done; U = 0 if the failure is in the last segment). The switched
    part is scaled to its exact total, 1 - P(no switch): its terms count losses of full segments.
    Only the 16 failure counts around the likeliest switching one are kept (the rest hold a
    negligible share where there are more).
    """

    mixture: _Mixture
    theta: F
    no_switch: F
    offered: NDArray[np.bool_]  # θ ≥ 0: the slack covers one segment
    parts: tuple[tuple[I, _Crossing, F, F, F], ...]  # rows, crossing, weights, shifts, scale
    value: F  # the CDF at the point _Switching.finish was given, if any

    def cdf(self, o: F) -> F:
        out = self.mixture.cdf(np.minimum(self.theta[:, None] + o, self.theta[:, None]))
        for rows, crossing, weights, shifts, scale in self.parts:
            out[rows] += scale[:, None] * _switched(crossing, weights, shifts, o[rows])
        return out


def _likely_counts(seg: Segments, theta: F, terms: int, weights: F) -> I:
    """(rows, up to 16) failure counts k around the likeliest switch at failure k + 1."""
    if terms <= _COUNTS:
        every: I = np.broadcast_to(np.arange(terms), (len(seg), terms)).copy()
        return every
    k = np.arange(terms + 1, dtype=np.float64)[None, :]
    walk = _loss_sum_cdf(seg, k, theta[:, None] - k * seg.restart[:, None], full_only=True)
    mass = (walk[:, :-1] - walk[:, 1:]) * weights.sum(axis=2)
    start = np.clip(np.argmax(mass, axis=1) - _COUNTS // 2, 0, terms - _COUNTS)
    out: I = start[:, None] + np.arange(_COUNTS)[None, :]
    return out


_COUNTS = 16


def _switched(crossing: _Crossing, weights: F, shifts: F, o: F) -> F:
    """Σ over counts k and unspent-write nodes of P(switch at failure k + 1, O - U ≤ o)."""
    reach = np.clip(o[:, :, None, None] + shifts[:, None, None, :], 0.0, None)
    # The overshoot is below R plus the final loss's truncation: beyond, nothing changes.
    step = crossing.within(crossing.capped(reach))
    out: F = np.sum(weights[:, None, :, :] * step, axis=(2, 3))
    return out


@dataclass(frozen=True)
class _Crossing:
    """P(E_k ≤ θ < E_{k+1} ≤ θ + o) for the failure excess E_k after k failures (full segments),
    the (k + 1)-th loss truncated at `final`: τ + δ at the unspent-write nodes of full segments,
    w2 at the last node (the failure in the last segment)."""

    seg: Segments
    theta: F  # (rows, 1, 1, 1)
    k: F  # (rows, 1, k, 1)
    final: F  # (rows, 1, 1, nodes)
    final_mean: F
    final_var: F
    at_theta: F  # P(E_{k+1} ≤ θ)
    start: F  # where E_k can first exceed θ: max(θ, kR), E_k ≥ kR
    at_start: F  # P(E_k ≤ start)
    density_k: F  # the density of E_k just above `start`

    @classmethod
    def of(cls, seg: Segments, theta: F, counts: I, nodes: int) -> _Crossing:
        k = counts.astype(np.float64)[:, None, :, None]
        th = theta[:, None, None, None]
        final = np.repeat(seg.top[:, None], nodes, axis=1)
        final[:, -1] = seg.w2
        final = final[:, None, None, :]
        mean, var = _loss_moments(seg.lam[:, None, None, None], final)
        none = np.zeros(0)
        c = cls(seg, th, k, final, mean, var, none, none, none, none)
        kr = k * seg.restart[:, None, None, None]
        start = np.maximum(th, kr)
        density = c.density(np.maximum(start - kr, 1e-12))
        return cls(seg, th, k, final, mean, var, c.next_walk(th), start, c.walk(start), density)

    def walk(self, y: F) -> F:
        """P(E_k ≤ y)."""
        return _loss_sum_cdf(self.seg, self.k, y - self.k * self.seg.restart[:, None, None, None], full_only=True)

    def next_walk(self, y: F) -> F:
        """P(E_{k+1} ≤ y): k full-segment losses and the final one (exact alone, else normal)."""
        seg, k = self.seg, self.k
        s = y - (k + 1.0) * seg.restart[:, None, None, None]
        lam = seg.lam[:, None, None, None]
        alone = _trunc_exp_cdf(s, lam, self.final)
        var = k * seg.full_var[:, None, None, None] + self.final_var
        z = (s - k * seg.full_mean[:, None, None, None] - self.final_mean) / np.sqrt(var)
        top = k * seg.top[:, None, None, None] + self.final
        normal = np.where(s >= top, 1.0, np.where(s <= 0.0, 0.0, norm_cdf(z)))
        out: F = np.where(k == 0, alone, normal)
        return out

    def density(self, s: F) -> F:
        """The density of S_k (full-segment losses) at s, as _loss_sum_cdf models it."""
        seg, k = self.seg, self.k
        lam, top = seg.lam[:, None, None, None], seg.top[:, None, None, None]
        var = np.maximum(k, 1.0) * seg.full_var[:, None, None, None]
        z = (s - k * seg.full_mean[:, None, None, None]) / np.sqrt(var)
        normal = np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi * var)
        single = lam * np.exp(-lam * np.clip(s, 0.0, top)) / np.maximum(-np.expm1(-lam * top), 1e-300)
        inside = (s > 0.0) & (s < k * top)
        out: F = np.where(inside, np.where(k == 1, single, normal), 0.0)
        return out

    def capped(self, o: F) -> F:
        out: F = np.minimum(o, self.seg.restart[:, None, None, None] + self.final)
        return out

    def within(self, o: F) -> F:
        r = self.seg.restart[:, None, None, None]
        # P(E_k > θ, E_{k+1} ≤ θ + o): E_k in (start, θ + o - R] and the final loss below what is
        # left, with the density of E_k linear over that window (its value at the start, its mass).
        end = self.theta + np.clip(o - r, 0.0, None)
        a = np.maximum(end - self.start, 0.0)
        mass = np.where(a > 0, self.walk(end) - self.at_start, 0.0)
        first, second = _loss_integrals(self.seg.lam[:, None, None, None], self.final, a)
        safe = np.where(a > 0, a, 1.0)
        slope = 2.0 * (mass - self.density_k * a) / (safe * safe)
        back = np.clip(self.density_k * first + slope * second, 0.0, mass)
        out: F = np.maximum(self.next_walk(self.theta + o) - self.at_theta - back, 0.0)
        return out


def _loss_integrals(lam: F, w: F, a: F) -> tuple[F, F]:
    """(∫_0^a P(X ≤ v) dv, ∫_0^a (a - v) P(X ≤ v) dv) for a loss X truncated at w (P = 1 beyond)."""
    c = np.maximum(-np.expm1(-lam * w), 1e-300)
    b = np.minimum(a, w)
    lb = lam * b
    small = lb < 1e-3
    e = -np.expm1(-lb) / lam  # (1 - e^{-λb})/λ
    first = np.where(small, lam * b * b * (0.5 - lb / 6.0), b - e) / c
    second = np.where(small, lam * b**3 * (1.0 / 6.0 - lb / 24.0), 0.5 * b * b - b / lam + e / lam) / c
    beyond = a - b  # where P(X ≤ v) = 1
    out: tuple[F, F] = (first + beyond, second + beyond * first + 0.5 * beyond * beyond)
    return out


_WRITE_NODES = 16


def _unspent_writes(seg: Segments, terms: int) -> tuple[F, F]:
    """(weights (rows, k, nodes), shifts (rows, nodes)): U = (n - j)·δ jointly with failure k + 1
    happening. j < m exactly when the first m full segments hold more than k failures (NB(m, p1));
    j is binned by s = ceil(n / 16) segments, each bin at its mean U; the last node holds the
    failures in the last segment (U = 0)."""
    span = np.maximum(np.ceil(seg.n / _WRITE_NODES), 1.0)
    b = np.arange(_WRITE_NODES + 1, dtype=np.float64)[None, :]
    at = np.maximum(seg.n[:, None] - b * span[:, None], 0.0)  # m = n - b·s: bin b holds j in [m_{b+1}, m_b)
    nb = _negative_binomial(seg, at, terms)
    below = np.clip(1.0 - np.cumsum(nb, axis=2), 0.0, 1.0).transpose(0, 2, 1)  # P(j < m), (rows, k, nodes)
    weights = np.zeros_like(below)
    weights[:, :, :-1] = below[:, :, :-1] - below[:, :, 1:]
    happens = 1.0 - np.cumsum(_failure_pmf(seg, terms), axis=1)  # P(N ≥ k + 1)
    weights[:, :, -1] = np.maximum(happens - below[:, :, 0], 0.0)  # in the last segment: U = 0
    mean_j = 0.5 * (at[:, :-1] + at[:, 1:]) - 0.5  # the bin's j values, evenly weighted
    shifts = np.zeros_like(at)
    shifts[:, :-1] = (seg.n[:, None] - mean_j) * seg.write[:, None]
    return weights, shifts
