"""Finish-time distribution and checkpoint interval under preemption (physics.md §10).

Model: preemptions arrive as a Poisson process of rate λ per hour while the job runs. Work is
split into segments of τ hours, each followed by a checkpoint write of δ hours. A preemption
loses the unfinished segment and costs a restart of R hours (provisioning, download, loading,
checkpoint read) during which no preemption is counted. One segment of w = τ + δ hours then
takes S = w + Σ_{i≤F} (X_i + R), with F ~ Geometric(p = e^{-λw}) failures and X_i the time to
failure truncated at w, whence

    E[S] = (e^{λw} - 1)(1/λ + R)          (exact for this model)

and Var[S] from the compound-sum formula. Segments are independent, so means and variances
add. The deadline quantile uses Cantelli's one-sided bound, μ + σ·sqrt(q/(1-q)), which holds
for any distribution: the stated confidence is a guarantee under the model, not an estimate.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F = NDArray[np.float64]

# Candidate checkpoint intervals, as multiples of Young's first-order optimum sqrt(2δ/λ):
# 25 log-spaced points from 1/8x to 8x (a grid step is a factor of 1.19), plus "no
# intermediate checkpoint". The interval chosen is the grid point of least expected time.
TAU_GRID_FACTORS: F = np.geomspace(1.0 / 8.0, 8.0, 25)


def _segment_moments(lam: F, w: F, restart: F) -> tuple[F, F]:
    """Mean and variance of the time to complete one segment of w hours (see module doc)."""
    lam = np.maximum(lam, 1e-12)
    lw = np.minimum(lam * w, 300.0)  # keeps p*p above the float64 minimum
    p = np.exp(-lw)
    q = -np.expm1(-lw)  # 1 - p, accurate for small λw
    ef = q / p
    vf = q / (p * p)
    safe_q = np.where(q > 0, q, 1.0)
    ex = np.where(q > 1e-12, 1.0 / lam - w * p / safe_q, w / 2.0)
    ex2 = np.where(
        q > 1e-12,
        (2.0 / lam**2 - p * (w**2 + 2.0 * w / lam + 2.0 / lam**2)) / safe_q,
        w**2 / 3.0,
    )
    var_x = np.maximum(ex2 - ex**2, 0.0)
    mean = w + ef * (ex + restart)
    var = ef * var_x + vf * (ex + restart) ** 2
    return mean, var


def run_time_moments(work_h: F, lam: F, tau_h: F, ckpt_write_h: F, restart_h: F) -> tuple[F, F]:
    """Mean and variance of the wall time to finish `work_h` hours of training.

    Full segments of τ end with a checkpoint write; the last, partial segment does not.
    """
    tau = np.maximum(tau_h, 1e-9)
    full = np.floor(work_h / tau)
    rest = work_h - full * tau
    m1, v1 = _segment_moments(lam, tau + ckpt_write_h, restart_h)
    m2, v2 = _segment_moments(lam, rest, restart_h)
    m2 = np.where(rest > 0, m2, 0.0)
    v2 = np.where(rest > 0, v2, 0.0)
    return full * m1 + m2, full * v1 + v2


def best_interval(work_h: F, lam: F, ckpt_write_h: F, restart_h: F) -> tuple[F, F, F]:
    """Checkpoint interval (grid point) of least expected time, with that time's mean and variance.

    Computed once per distinct (work, rate, write, restart) tuple: many offers share them.
    """
    cols = np.stack(np.broadcast_arrays(work_h, lam, ckpt_write_h, restart_h), axis=-1).reshape(-1, 4)
    uniq, inverse = np.unique(cols, axis=0, return_inverse=True)
    w, la, d, r = (uniq[:, j : j + 1] for j in range(4))
    young = np.sqrt(2.0 * np.maximum(d, 1e-6) / np.maximum(la, 1e-12))
    taus = np.concatenate([young * TAU_GRID_FACTORS[None, :], w], axis=1)
    taus = np.minimum(taus, w)
    mean, var = run_time_moments(w, la, taus, d, r)
    i = np.argmin(mean, axis=1)[:, None]
    rows = inverse.reshape(-1)
    out = [np.take_along_axis(a, i, axis=1)[:, 0][rows] for a in (taus, mean, var)]
    full_shape = np.broadcast(work_h, lam, ckpt_write_h, restart_h).shape
    return out[0].reshape(full_shape), out[1].reshape(full_shape), out[2].reshape(full_shape)


def cantelli_quantile(mean: F, var: F, confidence: float) -> F:
    """Upper bound on the `confidence` quantile valid for any distribution with these moments."""
    out: F = mean + np.sqrt(var) * np.sqrt(confidence / (1.0 - confidence))
    return out
