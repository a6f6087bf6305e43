"""Measured against predicted: each measurement's correction, and one correction per
(GPU type, stack, method) from all of its measurements.

Throughput: factor = measured tokens/s / the model's tokens/s for the configuration that ran.
Planning multiplies the model's tokens/s by it (every part of the step shrinks or grows alike:
the model's utilization and overheads together), so the configuration that ran is predicted at
exactly its measured tokens/s.

Memory: the model's peak is static + max(b · d, step) (b sequences per micro-batch, d the dynamic
bytes per sequence: activations, logits and what grows with them; step the optimizer step's
temporaries beyond what backward frees). The scale s solves measured = static + s · b · d for
the metric the run reported (max_memory_reserved where given, else max_memory_allocated), so the
configuration that ran is predicted at exactly its measured peak; planning multiplies the
dynamic part by s. Where the static part alone exceeds the measurement, s is held at its lower
bound; where the optimizer step makes the peak, the measurement says nothing of d and s stays 1;
the record says so.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ftsolve._calibration._records import Measurement
from ftsolve._calibration._store import Calibration, Correction, StoredRecord
from ftsolve.catalog import Catalog, ModelArch, load_catalog
from ftsolve.solver import _coefficients as k
from ftsolve.solver._estimate import MemoryEstimate, estimate_memory, estimate_time

MEMORY_SCALE_BOUNDS = (0.25, 4.0)
MEASURED_BAND = k.Coefficient(
    0.05,
    "relative band of a value measured on the same GPU type (one record)",
    "assumption: run-to-run spread of tokens/s and of peak memory on one card and software stack; "
    "several records widen it to their own spread",
)
TRANSFER_BAND = k.Coefficient(
    0.15,
    "relative band added where a correction is carried to another GPU type",
    "assumption: what the model's ratio between GPU types misses (clocks, kernels per architecture); "
    "the throughput benchmark's leave-one-source-out error across cards is of this order",
)


def record_id(m: Measurement) -> str:
    """A short digest of the measurement: the same record calibrated twice counts once. A run on the
    reference host, of an architecture without a softcapped head, digests as it did before RunConfig
    had a host speed and ModelArch a logit_softcap."""
    config: dict[str, Any] = {}
    if m.config.host_speed == 1.0:
        config["host_speed"] = True
    if isinstance(m.config.model, ModelArch) and not m.config.model.logit_softcap:
        config["model"] = {"logit_softcap": True}
    exclude = {"config": config} if config else None
    return hashlib.sha256(m.model_dump_json(exclude=exclude).encode("utf-8")).hexdigest()[:16]


def fit_measurement(m: Measurement, catalog: Catalog | None = None) -> StoredRecord:
    """The model's prediction for the configuration that ran, and the corrections that make the
    prediction meet the measurement."""
    catalog = catalog if catalog is not None else load_catalog(user=False)
    c = m.config
    opts = c.options()
    common = {
        "method": c.method,
        "seq_len": c.seq_len,
        "grad_accum": c.grad_accum,
        "n_gpus": c.n_gpus,
        "sharding": c.sharding,
        "gradient_checkpointing": c.gradient_checkpointing,
        "weight_precision": c.weight_precision,
        "lora_rank": c.lora_rank,
        "options": opts,
        "catalog": catalog,
    }
    model = c.model
    predicted_tps = factor = None
    if m.tokens_per_s is not None:
        # With the run's host speed: the factor then holds what the host does not explain.
        timing = {"micro_batch": c.micro_batch, "nodes": c.nodes, "host_speed": c.host_speed}
        est = estimate_time(model, m.gpu, **timing, **common)  # type: ignore[arg-type]
        predicted_tps = est.tokens_per_s
        factor = m.tokens_per_s / predicted_tps
    metric = "reserved" if m.peak_reserved_gib is not None else None
    metric = metric or ("allocated" if m.peak_allocated_gib is not None else None)
    predicted_mem = scale = None
    notes: list[str] = []
    if metric is not None:
        measured = m.peak_reserved_gib if metric == "reserved" else m.peak_allocated_gib
        assert measured is not None
        # Without the optimizer step's temporaries the model is linear in b: the dynamic part per
        # sequence is the step between b and b + 1 sequences, the static part what is left at b.
        def value(est: MemoryEstimate) -> float:
            return est.reserved_gib if metric == "reserved" else est.allocated_gib

        at_b = estimate_memory(model, micro_batch=c.micro_batch, **common)  # type: ignore[arg-type]
        linear = common | {"options": replace(opts, optimizer_step="fused")}
        lin_b = estimate_memory(model, micro_batch=c.micro_batch, **linear)  # type: ignore[arg-type]
        lin_next = estimate_memory(model, micro_batch=c.micro_batch + 1, **linear)  # type: ignore[arg-type]
        dynamic = c.micro_batch * (value(lin_next) - value(lin_b))
        static = value(lin_b) - dynamic
        predicted_mem = value(at_b)
        low, high = MEMORY_SCALE_BOUNDS
        raw = (measured - static) / dynamic if dynamic > 0 else 1.0
        scale = min(max(raw, low), high)
        step = at_b.optimizer_step_gib
        if raw < low:
            notes.append(
                f"the model's static memory ({static:.1f} GiB) is near or above the measured peak "
                f"({measured:.1f} GiB): the activation scale is held at {low}"
            )
        elif step > 0 and measured <= static + step:
            scale = 1.0
            notes.append(
                f"the optimizer step's temporaries ({step:.1f} GiB) make the predicted peak and the measured one "
                f"({measured:.1f} GiB) is within them: the activation scale stays 1"
            )
        elif raw > high:
            notes.append(f"the measured peak needs an activation scale of {raw:.2f}; held at {high}")
    return StoredRecord(
        id=record_id(m),
        measurement=m,
        predicted_tokens_per_s=predicted_tps,
        predicted_memory_gib=predicted_mem,
        memory_metric=metric,
        throughput_factor=factor,
        memory_scale=scale,
        notes=tuple(notes),
    )


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _band(values: Sequence[float], center: float) -> float:
    """The measured band: the records' largest deviation from their mean, at least MEASURED_BAND."""
    spread = max(abs(v / center - 1.0) for v in values)
    return round(max(MEASURED_BAND.value, spread), 4)


def correction_of(records: Sequence[StoredRecord]) -> Correction:
    """One (GPU type, stack, method)'s correction from all of its records: geometric means."""
    first = records[0].measurement
    factors = [r.throughput_factor for r in records if r.throughput_factor is not None]
    scales = [r.memory_scale for r in records if r.memory_scale is not None]
    tf = _geomean(factors) if factors else None
    ms = _geomean(scales) if scales else None
    return Correction(
        gpu=first.gpu,
        stack=first.stack,
        method=first.config.method,
        throughput_factor=None if tf is None else round(tf, 6),
        throughput_band=None if tf is None else _band(factors, tf),
        memory_scale=None if ms is None else round(ms, 6),
        memory_band=None if ms is None else _band(scales, ms),
        date=max(r.measurement.date for r in records),
        records=tuple(sorted(records, key=lambda r: (r.measurement.date, r.id))),
    )


def refitted(cal: Calibration) -> Calibration:
    """The calibration with every record fitted again against this ftsolve's model. A stored
    factor is the measurement over the prediction of the ftsolve that calibrated it; where a later
    one predicts that configuration otherwise (a mechanism added, a constant refitted), keeping the
    factor would count the change twice. A record the model can no longer predict (its
    configuration is refused now) keeps its stored factors; a correction none of whose records
    changed is kept as stored."""
    if not cal.corrections:
        return cal
    catalog = load_catalog(user=False)
    out = []
    for c in cal.corrections:
        records = tuple(_refit(r, catalog) for r in c.records)
        out.append(c if records == c.records else correction_of(records))
    return cal.model_copy(update={"corrections": tuple(out)})


def _refit(r: StoredRecord, catalog: Catalog) -> StoredRecord:
    try:
        new = fit_measurement(r.measurement, catalog)
    except Exception:  # a best effort: a record this model cannot fit stays as the older one fitted it
        return r
    numbers = ("predicted_tokens_per_s", "predicted_memory_gib", "throughput_factor", "memory_scale")
    same = all(_close(getattr(new, name), getattr(r, name)) for name in numbers)
    return r if same and (new.memory_metric, new.notes) == (r.memory_metric, r.notes) else new


def _close(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9))


def merge(cal: Calibration, fitted: Sequence[StoredRecord], *, replace: bool = False) -> Calibration:
    """The calibration with `fitted` records added (a record already stored counts once) and the
    corrections they touch refitted; `replace` drops the earlier records of those corrections."""
    touched = {r.measurement.key for r in fitted}
    records: dict[tuple[str, str, str], dict[str, StoredRecord]] = {}
    for c in cal.corrections:
        if replace and c.key in touched:
            continue
        records[c.key] = {r.id: r for r in c.records}
    for r in fitted:
        records.setdefault(r.measurement.key, {})[r.id] = r
    kept = {c.key: c for c in cal.corrections if c.key not in touched}
    fresh = {key: correction_of(list(rs.values())) for key, rs in records.items() if key in touched}
    ordered = sorted({**kept, **fresh}.values(), key=lambda c: c.key)
    return cal.model_copy(update={"corrections": tuple(ordered)})


def forget(cal: Calibration, selector: str) -> tuple[Calibration, list[Correction]]:
    """(the calibration without the corrections `selector` names, those removed): `all`, a GPU
    type, `gpu/stack` or `gpu/stack/method`."""
    parts = tuple(p.strip().lower() for p in selector.split("/"))
    if parts == ("all",):
        return cal.model_copy(update={"corrections": ()}), list(cal.corrections)
    removed = [c for c in cal.corrections if c.key[: len(parts)] == parts]
    kept = tuple(c for c in cal.corrections if c not in removed)
    return cal.model_copy(update={"corrections": kept}), removed
