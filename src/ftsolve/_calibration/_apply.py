"""Corrections as plans use them.

On a GPU type with its own correction for the job's stack and method, the measured values rule:
tokens/s and the dynamic memory are multiplied by that GPU's factors, so the configuration that
ran is planned at what it measured, and the memory headroom shrinks to the measured band. On
another GPU type the correction carries over through the physics: the model's prediction for
that card times the same factor (the ratio of the model's predictions between the cards is
kept), with a band widened by TRANSFER_BAND, and the model's own headroom. Where several GPU
types have corrections, a card without its own takes their geometric mean.

The planner's physics runs per hardware setup, which knows a GPU's figures, not its name: a
setup is a calibrated card's when it has that card's figures (dense 16-bit peak, memory
bandwidth, memory), which is all the model distinguishes a GPU type by.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from ftsolve._calibration._fit import TRANSFER_BAND
from ftsolve._calibration._store import Calibration, Correction, load_calibration
from ftsolve.catalog import GpuSpec, load_gpus
from ftsolve.solver import _coefficients as k
from ftsolve.solver._estimate import TimeEstimate
from ftsolve.solver._hardware import Hardware, usable_gib
from ftsolve.solver._job import JobSpec
from ftsolve.solver._memory import METHOD_NAMES, MemoryOptions, MemoryTerms
from ftsolve.solver._throughput import StepTime

F = NDArray[np.float64]
I = NDArray[np.int64]
Quantity = Literal["throughput", "memory"]
_WHAT = {
    "probe": "probe",
    "trainer-state": "Trainer log",
    "torchtune": "torchtune log",
    "axolotl": "axolotl log",
    "table": "measurements",
}


@dataclass(frozen=True)
class Applied:
    """One quantity's correction as a plan on `gpu` uses it."""

    quantity: Quantity
    value: float  # x tokens/s, or x the dynamic memory
    band: float  # relative
    measured: bool  # on this GPU type itself; else carried from `sources`
    sources: tuple[Correction, ...]


def _value(c: Correction, quantity: Quantity) -> tuple[float | None, float | None]:
    if quantity == "throughput":
        return c.throughput_factor, c.throughput_band
    return c.memory_scale, c.memory_band


def applied(cal: Calibration, gpu: str, stack: str, method: str, quantity: Quantity) -> Applied | None:
    """The correction of `quantity` for a plan on `gpu` with this stack and method, if any."""
    own = cal.find(gpu, stack, method)
    if own is not None:
        value, band = _value(own, quantity)
        if value is not None:
            return Applied(quantity, value, band or 0.0, True, (own,))
    others = [
        c
        for c in cal.corrections
        if c.stack == stack and c.method == method and c.gpu != gpu and _value(c, quantity)[0] is not None
    ]
    if not others:
        return None
    values = [float(_value(c, quantity)[0] or 1.0) for c in others]
    value = math.exp(sum(math.log(v) for v in values) / len(values))
    band = max(float(_value(c, quantity)[1] or 0.0) for c in others) + TRANSFER_BAND.value
    return Applied(quantity, value, round(band, 4), False, tuple(others))


# --- the planner's physics ---------------------------------------------------------------------


@dataclass(frozen=True)
class PairCorrections:
    """Per (hardware setup, configuration) pair: the factors the physics applies."""

    throughput: F  # x tokens/s (1 without a correction)
    dynamic: F  # x the dynamic (per-sequence) memory
    band_cap: F  # the measured memory band; NaN where nothing was measured on the pair's GPU

    @classmethod
    def none(cls, n: int) -> PairCorrections:
        return cls(np.ones(n), np.ones(n), np.full(n, np.nan))

    def terms(self, terms: MemoryTerms) -> MemoryTerms:
        """The memory terms with their dynamic part scaled."""
        if np.all(self.dynamic == 1.0):
            return terms
        return dataclasses.replace(terms, per_sample={n: v * self.dynamic for n, v in terms.per_sample.items()})

    def band(self, band: F) -> F:
        """The headroom band, shrunk to the measured band where the pair's GPU was measured."""
        out: F = np.where(np.isnan(self.band_cap), band, np.minimum(band, self.band_cap))
        return out

    def step(self, st: StepTime) -> StepTime:
        """The step with every time divided and tokens/s (and the utilization it implies)
        multiplied by the throughput factor."""
        if np.all(self.throughput == 1.0):
            return st
        f = self.throughput
        update: dict[str, F] = {}
        for fld in dataclasses.fields(st):
            value = getattr(st, fld.name)
            if fld.name in ("tokens_per_s", "utilization"):
                update[fld.name] = value * f
            elif fld.name.endswith("_s"):
                update[fld.name] = value / f
        return dataclasses.replace(st, **update)


def _calibrated_specs(cal: Calibration) -> list[tuple[str, GpuSpec]]:
    """The calibrated GPU types the catalog knows, in the order a setup is matched to them."""
    gpus = load_gpus()
    return [(name, gpus[name]) for name in sorted({c.gpu for c in cal.corrections}) if name in gpus]


def _same_figures(spec: GpuSpec, peak_tflops: F, bandwidth: F, usable_bytes: F) -> NDArray[np.bool_]:
    """Where hardware has the GPU type's figures (peak, bandwidth, usable memory): one type's
    calibration applies to every GPU that has them, whatever the offer calls it."""
    out: NDArray[np.bool_] = (
        (peak_tflops == (spec.tensor_tflops or 1.0))
        & (bandwidth == (spec.memory_bandwidth_gb_per_s or 1.0))
        & np.isclose(usable_bytes, usable_gib(spec) * k.GIB)
    )
    return out


def _setup_gpus(cal: Calibration, hw: Hardware) -> NDArray[np.object_]:
    """Per hardware setup, the calibrated GPU type it is ('' for none): the first with its figures."""
    names: NDArray[np.object_] = np.full(len(hw), "", dtype=object)
    for name, spec in _calibrated_specs(cal):
        same = _same_figures(spec, hw.peak_tflops, hw.memory_bandwidth_gb_per_s, hw.usable_bytes)
        names[same & (names == "")] = name
    return names


def _calibrated_as(cal: Calibration, gpu: str, spec: GpuSpec | None = None) -> str:
    """The calibrated GPU type an estimate or plan on `gpu` (of figures `spec`, else the bundled
    table's) takes its corrections from, as the planner matches it (_setup_gpus); '' for none."""
    spec = spec if spec is not None else load_gpus().get(gpu)
    if spec is None:
        return ""
    figures = (np.array(spec.tensor_tflops or 1.0), np.array(spec.memory_bandwidth_gb_per_s or 1.0))
    usable = np.array(usable_gib(spec) * k.GIB)
    return next((name for name, other in _calibrated_specs(cal) if _same_figures(other, *figures, usable)), "")


def pair_corrections(job: JobSpec, opts: MemoryOptions, hw: Hardware, hi: I, cfg: I) -> PairCorrections:
    """The factors for each (setup hi[i], configuration cfg[i]) pair from the user's calibrations
    ($FTSOLVE_HOME/calibration.json); none when the job says `calibration: false`."""
    n = int(hi.shape[0])
    if not job.calibration:
        return PairCorrections.none(n)
    cal = load_calibration()
    if not cal.corrections:
        return PairCorrections.none(n)
    out = PairCorrections.none(n)
    setup_gpu = _setup_gpus(cal, hw)[hi]
    method = cfg[:, 0]
    user_margin = getattr(job, "memory_margin", None) is not None
    for gpu in sorted(set(setup_gpu.tolist())):
        for m, name in enumerate(METHOD_NAMES):
            rows = (setup_gpu == gpu) & (method == m)
            if not rows.any():
                continue
            speed = applied(cal, gpu, opts.stack, name, "throughput")
            memory = applied(cal, gpu, opts.stack, name, "memory")
            if speed is not None:
                out.throughput[rows] = speed.value
            if memory is not None:
                out.dynamic[rows] = memory.value
                if memory.measured and not user_margin:
                    out.band_cap[rows] = memory.band
    return out


# --- what a plan or an estimate says -------------------------------------------------------------


def _origin(c: Correction, quantity: Quantity) -> str:
    r = c.latest(quantity)
    return f"your {_WHAT[r.measurement.kind]} of {r.measurement.date.isoformat()} on {c.gpu}"


def tokens_per_s_band(
    job: JobSpec, gpu: str, method: str, cal: Calibration | None = None, spec: GpuSpec | None = None
) -> float:
    """The band of a plan's tokens/s: its calibration's where one applies to this GPU (matched as
    the planner matches it), stack and method, else the model's validated band (k.time_band)."""
    if not job.calibration:
        return k.time_band(method, gpu)
    cal = cal if cal is not None else load_calibration()
    stack = job.memory_options().stack
    speed = applied(cal, _calibrated_as(cal, gpu, spec), stack, method, "throughput") if cal.corrections else None
    return speed.band if speed is not None else k.time_band(method, gpu)


def calibration_assumptions(
    job: JobSpec, gpu: str, method: str, cal: Calibration | None = None, spec: GpuSpec | None = None
) -> list[str]:
    """The assumption lines of a plan on `gpu` (of figures `spec`) with `method` that used a calibration."""
    if not job.calibration:
        return []
    cal = cal if cal is not None else load_calibration()
    if not cal.corrections:
        return []
    stack = job.memory_options().stack
    out = []
    as_gpu = _calibrated_as(cal, gpu, spec)
    speed = applied(cal, as_gpu, stack, method, "throughput")
    if speed is not None and speed.measured:
        out.append(
            f"tokens/s from {_origin(speed.sources[0], 'throughput')} (x{speed.value:.2f} the model, "
            f"±{speed.band:.0%}; `ftsolve calibrate --list`)"
        )
    elif speed is not None:
        origins = "; ".join(_origin(c, "throughput") for c in speed.sources)
        out.append(
            f"tokens/s x{speed.value:.2f} the model from {origins}, carried to {gpu} through the model "
            f"(±{speed.band:.0%})"
        )
    memory = applied(cal, as_gpu, stack, method, "memory")
    if memory is not None and memory.measured:
        out.append(
            f"activation memory x{memory.value:.2f} the model from {_origin(memory.sources[0], 'memory')}; "
            f"headroom at most the measured ±{memory.band:.0%}"
        )
    elif memory is not None:
        origins = "; ".join(_origin(c, "memory") for c in memory.sources)
        out.append(f"activation memory x{memory.value:.2f} the model from {origins}, carried to {gpu}")
    return out


def correct_time_estimate(est: TimeEstimate, stack: str, cal: Calibration | None = None) -> TimeEstimate:
    """A time estimate with the user's throughput correction for its GPU, stack and method applied
    (the estimate as it is where there is none)."""
    cal = cal if cal is not None else load_calibration()
    speed = applied(cal, _calibrated_as(cal, est.gpu), stack, est.method, "throughput") if cal.corrections else None
    if speed is None:
        return est
    f = speed.value
    times = ("compute_s", "communication_s", "exposed_communication_s", "optimizer_s", "step_s")
    update: dict[str, float | None] = {name: getattr(est, name) / f for name in times}
    update |= {
        "tokens_per_s": est.tokens_per_s * f,
        "tokens_per_s_per_gpu": est.tokens_per_s_per_gpu * f,
        "utilization": est.utilization * f,
        "hours": None if est.hours is None else est.hours / f,
        "error_band": speed.band,
    }
    return est.model_copy(update=update)
