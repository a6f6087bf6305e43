"""Throughput accuracy against measured runs (../shared/data/measured.csv).

    python benchmarks/throughput_accuracy.py [--fit] [--rows]

Evaluates every measured row with a tokens/s figure that states enough of its configuration
(model, GPU, method, sequence length, micro-batch, gradient checkpointing, GPU count) and prints,
per source, per method and per GPU count, the median and 90th-percentile absolute relative error
of predicted tokens/s per GPU, overall and on the held-out half (odd ids; coefficients are fitted
on even ids). It also checks that the predicted ordering of GPU types matches the measured one
for every job measured on more than one GPU type.

How rows are read (MEASURED.md):
- Qwen README: tokens/s = 8 x seq x GPUs / (s/it), padded tokens (so padded tokens are compared);
  micro-batch 1, gradient accumulation 8, A100-SXM4-80G; Q-LoRA is a GPTQ-int4 base (compared as a
  4-bit base); multi-GPU runs use DeepSpeed; "2 nodes x 2 GPUs" is 2 nodes with an unstated network.
- LLM Foundry MPT: pretraining throughput with full sequences (a proxy for full fine-tuning at the
  same per-token compute); FSDP full shard; nodes of 8 GPUs; 1600 Gb/s RoCE for the A100 nodes as
  stated, 3200 Gb/s assumed for the H100 nodes (not stated in the source).
- LLaMA-Factory and ms-swift rows are skipped: gradient checkpointing, or tokens per sample, not stated.
"""

from __future__ import annotations

import argparse
import csv
import itertools
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Literal, cast

import numpy as np
from memory_accuracy import DEFAULT_CSV, _archs, _stats

from ftsolve.catalog import ModelArch, load_catalog
from ftsolve.solver import _coefficients as k
from ftsolve.solver._estimate import TimeEstimate, estimate_time
from ftsolve.solver._memory import MemoryOptions

Method = Literal["full", "lora", "qlora"]


@dataclass(frozen=True)
class Case:
    id: int
    source: str
    model: str
    arch: ModelArch
    method: str
    gpu: str
    n_gpus: int
    nodes: int
    sharding: str
    seq_len: int
    micro_batch: int
    grad_accum: int
    ckpt: bool
    inter_node_gbit: float | None
    measured: float  # tokens/s per GPU
    lora_rank: int = 64
    lora_targets: str = "all-linear"
    quant_kernel: str | None = None  # the 4-bit base's kernel where it is not bitsandbytes
    flash_attention: bool = True
    host_speed: float = 1.0  # the host CPU's, where the source names it (k.HOST_SPEED_BY_CPU)


def _host_speed(notes: str) -> float:
    """The single-thread speed of the host CPU a row's notes name ("Host CPU: ..."); the reference
    host's (1.0) where they name none."""
    named = [cpu for cpu in k.HOST_SPEED_BY_CPU if f"Host CPU: {cpu}" in notes]
    return k.HOST_SPEED_BY_CPU[named[0]].value if named else 1.0


def _gpu(text: str) -> str | None:
    t = text.lower()
    if "rtx 4090" in t:
        return "rtx-4090"
    if "h100" in t:
        return "h100-sxm"
    if "a100" in t and "40" in t:
        return "a100-sxm-40gb"
    if "a100" in t and "80" in t:
        return "a100-sxm-80gb"
    return None


def cases(path: Path) -> list[tuple[Case | None, str]]:
    archs = _archs()
    archs.update({f"mpt-{s}": archs[f"mpt-{s}"] for s in ("1b", "3b", "7b", "13b", "30b", "70b")})
    out: list[tuple[Case | None, str]] = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            out.append(_case(row, archs))
    return out


_EVALUATED = (
    "qwen_readme_profiling",
    "llmfoundry_mpt_throughput",
    "vectorlm_reference_throughput",
    "optimum_benchmark_training_llamas",
)


# Sources that state their configuration but whose rate the model does not read yet, and why.
_NOT_YET = {
    "universal_llm_trainer": "a smoothed tqdm s/it of its own loop, 1.6-5.5x below the model's rate for reasons "
    "not yet read (docs/stacks.md)",
}


def _model_name(text: str) -> str:
    """A row's model as the architecture table names it: optimum-benchmark's rows name Hub
    repositories (NousResearch/Llama-2-7b-hf, TheBloke/Llama-2-7B-GPTQ) of the Llama-2 shapes."""
    name = text.strip().lower()
    if "/" in name and "llama-2" in name:
        name = name.split("/")[-1].removesuffix("-gptq").removesuffix("-hf")
    return name


def _case(row: dict[str, str], archs: dict[str, ModelArch]) -> tuple[Case | None, str]:
    src = row["source_key"]
    tps = row["tokens_per_s_per_gpu"]
    if not tps:
        return None, "no tokens/s figure"
    if row["kind"] != "measured":
        return None, "estimate"
    if src in _NOT_YET:
        return None, f"{src}: {_NOT_YET[src]}"
    if src not in _EVALUATED:
        return None, f"{src}: checkpointing, tokens per sample or the parallelism not stated"
    arch = archs.get(_model_name(row["model"]))
    gpu = _gpu(row["gpu_type"])
    if arch is None or gpu is None:
        return None, "architecture or GPU not known"
    method = row["method"].split(" ")[0]
    n = int(row["num_gpus"] or 1)
    shard_text = row["sharding"].lower()
    mpt = src == "llmfoundry_mpt_throughput"
    nodes = max(n // 8, 1) if mpt else (2 if "2 nodes" in shard_text else 1)
    sharding = "none" if n == 1 else "zero3" if ("zero3" in shard_text or "fsdp" in shard_text) else "zero2"
    if n == 1 and ("zero" in shard_text or "finetune_ds" in shard_text):
        # As memory_accuracy reads them: Qwen's single-GPU DeepSpeed runs keep ZeRO's hooks.
        sharding = "zero3" if ("zero3" in shard_text or "finetune_ds" in shard_text) else "zero2"
    vectorlm = src == "vectorlm_reference_throughput"
    optimum = src == "optimum_benchmark_training_llamas"
    gbit = (1600.0 if "1600" in row["gpu_type"] else 3200.0) if mpt else None
    accum = int(float(row["grad_accum"] or (1 if mpt else 8)))
    return Case(
        id=int(row["id"]),
        source=src,
        model=row["model"],
        arch=arch,
        method=method,
        gpu=gpu,
        n_gpus=n,
        nodes=nodes,
        sharding=sharding,
        seq_len=int(float(row["seq_len"])),
        micro_batch=int(float(row["micro_batch_size"])),
        grad_accum=accum,
        ckpt=row["grad_ckpt"].lower().startswith("yes"),
        inter_node_gbit=gbit,
        measured=float(tps),
        # VectorLM's and optimum-benchmark's LoRA configs set r=8 and leave the targets to PEFT's
        # default for Llama (q, v).
        lora_rank=8 if vectorlm or optimum else 64,
        lora_targets="qv" if vectorlm or optimum else "all-linear",
        quant_kernel="gptq" if "gptq" in row["weight_precision"].lower() else None,
        flash_attention=not row["flash_attn"].lower().startswith("no"),
        host_speed=_host_speed(row["notes"]),
    ), ""


def _estimator(c: Case) -> partial[TimeEstimate]:
    """estimate_time with the row's configuration filled in (the Qwen ZeRO runs use DeepSpeed)."""
    qwen = c.source.startswith("qwen")
    opts = MemoryOptions.for_stack(
        "deepspeed" if c.sharding != "none" and qwen else "hf",
        # Qwen's Q-LoRA base is GPTQ-int4, as are optimum-benchmark's GPTQ rows.
        quant_kernel="gptq" if (qwen and c.method == "qlora") or c.quant_kernel == "gptq" else None,
        lora_targets=c.lora_targets,
        flash_attention=c.flash_attention,
        # optimum-benchmark loads the 4-bit model and wraps it with PEFT directly: no
        # prepare_model_for_kbit_training (data/MEASURED.md).
        kbit_upcast=not c.source.startswith("optimum_benchmark"),
    )
    return partial(
        estimate_time,
        c.arch,
        c.gpu,
        method=cast("Method", c.method),
        seq_len=c.seq_len,
        micro_batch=c.micro_batch,
        grad_accum=c.grad_accum,
        n_gpus=c.n_gpus,
        nodes=c.nodes,
        sharding=c.sharding,
        gradient_checkpointing=c.ckpt,
        lora_rank=c.lora_rank,
        options=opts,
        inter_node_gbit_per_s=c.inter_node_gbit,
        host_speed=c.host_speed,
    )


def predict(c: Case) -> float:
    return _estimator(c)().tokens_per_s_per_gpu


NAMES = (
    "UTILIZATION_BY_ARCH[Ampere]",
    "UTILIZATION_BY_ARCH[Hopper]",
    "PER_LAYER_PASS_S",
    "ZERO_LAYER_PASS_S",
)


@dataclass(frozen=True)
class Coefficients:
    """The fitted throughput constants as the linear model sees them: seconds per unit of each
    feature (1/utilization for the compute columns)."""

    per_feature: tuple[float, float, float, float]

    @classmethod
    def physical(cls) -> Coefficients:
        """Values before any data informs them (used for what a fold's sources cannot inform, except
        an architecture's utilization, which `fit` derives from the other's as the library does):
        physics.md §8 utilization 0.50 on Ampere and 0.42 on Hopper (mid of the published MFU
        ranges), about 20 kernel launches of 10 µs per layer and pass, no ZeRO hook latency.
        Dequantization is not fitted: its traffic is derived per kernel (DEQUANT_BYTES_PER_PARAM)."""
        return cls((1 / 0.50, 1 / 0.42, 2e-4, 0.0))

    @classmethod
    def current(cls) -> Coefficients:
        u = k.UTILIZATION_BY_ARCH
        return cls(
            (
                1 / u["Ampere"].value,
                1 / u["Hopper"].value,
                k.PER_LAYER_PASS_S.value,
                k.ZERO_LAYER_PASS_S.value,
            )
        )


@dataclass(frozen=True)
class Features:
    x: np.ndarray  # seconds per step per unit of each coefficient
    fixed: float  # exposed communication + optimizer step
    measured_step: float


def _features(c: Case) -> Features:
    """Linear features of the step time: compute at u=1 on Ampere and on Hopper, layer passes,
    ZeRO hooks; plus the fixed seconds (communication, optimizer, and dequantization at its
    derived traffic)."""
    saved = (k.PER_LAYER_PASS_S, dict(k.DEQUANT_BYTES_PER_PARAM), k.ZERO_LAYER_PASS_S)

    def run(launch: float, zero: float, dequant: bool = False) -> TimeEstimate:
        k.PER_LAYER_PASS_S = replace(saved[0], value=launch)
        k.ZERO_LAYER_PASS_S = replace(saved[2], value=zero)
        for kernel, coef in saved[1].items():
            k.DEQUANT_BYTES_PER_PARAM[kernel] = coef if dequant else replace(coef, value=0.0)
        return _estimator(c)(utilization=1.0)

    try:
        base = run(0.0, 0.0)
        launch = run(1.0, 0.0).compute_s - base.compute_s
        zero = run(0.0, 1.0).compute_s - base.compute_s
        dequant = run(0.0, 0.0, dequant=True).compute_s - base.compute_s
    finally:
        k.PER_LAYER_PASS_S, k.ZERO_LAYER_PASS_S = saved[0], saved[2]
        k.DEQUANT_BYTES_PER_PARAM.update(saved[1])
    # A GPU other than the fitted architectures' reference GPUs runs at the library's utilization
    # for it (k.utilization_for: scaled by its matmul efficiency), expressed here in units of the
    # column's fitted utilization at the library's values; other architectures than Hopper go to
    # the Ampere column.
    real_arch = load_catalog(user=False).gpu(c.gpu).architecture
    hopper = real_arch == "Hopper"
    arch = "Hopper" if hopper else "Ampere"
    compute = base.compute_s * k.UTILIZATION_BY_ARCH[arch].value / k.utilization_for(c.gpu, real_arch).value
    x = np.array([0.0 if hopper else compute, compute if hopper else 0.0, launch, zero])
    measured_step = base.tokens_per_step / c.n_gpus / c.measured
    return Features(x, base.exposed_communication_s + base.optimizer_s + dequant, measured_step)


def fit(feats: list[Features], prior: Coefficients) -> Coefficients:
    """Least squares of the relative step-time error over the columns the rows inform; the
    others keep their prior value. Coefficients stay positive."""
    x = np.array([f.x for f in feats])
    y = np.array([f.measured_step - f.fixed for f in feats])
    w = 1.0 / np.array([f.measured_step for f in feats])
    informed = np.abs(x).sum(axis=0) > 0
    p = np.array(prior.per_feature)
    y = y - x[:, ~informed] @ p[~informed]
    sol = p.copy()
    sol[informed] = np.maximum(np.linalg.lstsq(x[:, informed] * w[:, None], y * w, rcond=None)[0], 1e-9)
    # An architecture the fold has no runs on takes what the library gives an architecture without
    # fitted runs: the fitted utilization per unit of matmul efficiency (k.utilization_for).
    eff = {arch: k.MATMUL_EFFICIENCY[gpu].value for arch, gpu in k.UTILIZATION_REFERENCE_GPU.items()}
    for col, arch, other_col, other in ((0, "Ampere", 1, "Hopper"), (1, "Hopper", 0, "Ampere")):
        if not informed[col] and informed[other_col]:
            sol[col] = sol[other_col] * eff[other] / eff[arch]
    return Coefficients(tuple(float(v) for v in sol))  # type: ignore[arg-type]


@contextmanager
def _library_at(coef: Coefficients) -> Iterator[None]:
    """The library's constants set to `coef` for the duration (derived utilizations follow)."""
    u_a, u_h, launch, zero = coef.per_feature
    fitted = dict(k.UTILIZATION_BY_ARCH_FITTED)
    by_arch = dict(k.UTILIZATION_BY_ARCH)
    saved = (k.PER_LAYER_PASS_S, k.ZERO_LAYER_PASS_S)
    try:
        for arch, inverse in (("Ampere", u_a), ("Hopper", u_h)):
            k.UTILIZATION_BY_ARCH_FITTED[arch] = k.UTILIZATION_BY_ARCH[arch] = replace(fitted[arch], value=1 / inverse)
        k.PER_LAYER_PASS_S = replace(saved[0], value=launch)
        k.ZERO_LAYER_PASS_S = replace(saved[1], value=zero)
        yield
    finally:
        k.UTILIZATION_BY_ARCH_FITTED.update(fitted)
        k.UTILIZATION_BY_ARCH.update(by_arch)
        k.PER_LAYER_PASS_S, k.ZERO_LAYER_PASS_S = saved


def _predicted_tps(c: Case, coef: Coefficients) -> float:
    """What the library predicts for the row with the fold's constants: the linear features only
    fit them; the prediction keeps what they linearize (exposed communication, which depends on
    the compute time, and each GPU's utilization rule)."""
    with _library_at(coef):
        return predict(c)


def leave_one_source_out(rows: list[Case], feats: list[Features]) -> tuple[list[float], dict[str, Coefficients]]:
    """Predicted tokens/s of every row with the coefficients fitted on the other sources."""
    preds = [0.0] * len(rows)
    folds = {}
    for source in sorted({c.source for c in rows}):
        train = [f for c, f in zip(rows, feats, strict=True) if c.source != source]
        coef = fit(train, Coefficients.physical())
        folds[source] = coef
        for i, c in enumerate(rows):
            if c.source == source:
                preds[i] = _predicted_tps(c, coef)
    return preds, folds


def _table(title: str, rows: list[Case], preds: list[float]) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for c, p in zip(rows, preds, strict=True):
        err = p / c.measured - 1.0
        for key in (f"method {c.method}", f"source {c.source}", f"gpus {c.n_gpus}", f"gpu {c.gpu}", "all"):
            groups[key].append(err)
    print(f"\n{title}")
    print(f"{'group':34s} {'n':>5s} {'median':>7s} {'p90':>7s} {'signed':>7s}")
    for key in sorted(groups, key=lambda s: (s == "all", s)):
        print(f"{key:34s} {_stats(groups[key])}")
    return groups


def _ordering(rows: list[Case], preds: list[float]) -> tuple[int, int]:
    by_job: dict[tuple[str, str, int, int, int, int], list[tuple[str, float, float]]] = defaultdict(list)
    for c, p in zip(rows, preds, strict=True):
        by_job[(c.model.lower(), c.method, c.seq_len, c.n_gpus, c.micro_batch, c.grad_accum)].append(
            (c.gpu, c.measured, p)
        )
    agree = total = 0
    for job, runs in sorted(by_job.items()):
        for (g1, m1, p1), (g2, m2, p2) in itertools.combinations(runs, 2):
            if g1 == g2:
                continue
            total += 1
            agree += (m1 > m2) == (p1 > p2)
            if (m1 > m2) != (p1 > p2):
                print(
                    f"  ordering differs for {job}: measured {g1} {m1:.0f} vs {g2} {m2:.0f}; "
                    f"predicted {p1:.0f} vs {p2:.0f}"
                )
    return agree, total


def summary(rows: list[Case], preds: list[float]) -> dict[str, tuple[float, float, int]]:
    out = {}
    for key in ("full", "lora", "qlora", "all"):
        e = [abs(p / c.measured - 1) for c, p in zip(rows, preds, strict=True) if key in ("all", c.method)]
        out[key] = (float(np.median(e)), float(np.percentile(e, 90)), len(e)) if e else (0.0, 0.0, 0)
    return out


def bands(rows: list[Case], preds: list[float]) -> dict[str, float]:
    """The 90th percentile of |error| per method and GPU (`method/gpu`, with at least 5 rows), per
    method and overall: the band each time estimate states (k.TIME_BANDS). The rows' stacks are HF
    and DeepSpeed only, so there are no per-stack bands."""
    groups: dict[str, list[float]] = defaultdict(list)
    for c, p in zip(rows, preds, strict=True):
        for key in (f"{c.method}/{c.gpu}", c.method, "all"):
            groups[key].append(abs(p / c.measured - 1))
    return {key: round(float(np.percentile(e, 90)), 3) for key, e in sorted(groups.items()) if len(e) >= 5}


def evaluate(path: Path, show_rows: bool = False) -> dict[str, tuple[float, float, int]]:
    evaluated = cases(path)
    skipped: dict[str, int] = defaultdict(int)
    for case, reason in evaluated:
        if case is None:
            skipped[reason] += 1
    rows = [c for c, _ in evaluated if c is not None]
    feats = [_features(c) for c in rows]
    loso, folds = leave_one_source_out(rows, feats)
    in_sample = [predict(c) for c in rows]
    if show_rows:
        for c, p, q in zip(rows, loso, in_sample, strict=True):
            print(
                f"  {c.id:4d} {c.model[:12]:12s} {c.method:5s} {c.gpu:14s} n={c.n_gpus:2d} s={c.seq_len:5d} "
                f"b={c.micro_batch:2d} ckpt={int(c.ckpt)} measured {c.measured:8.0f} LOSO {p:8.0f} "
                f"({100 * (p / c.measured - 1):+.0f}%) in-sample {q:8.0f}"
            )
    _table("leave-one-source-out (headline): fit on every other source, predict this one", rows, loso)
    _table("in sample (secondary): the library's coefficients, fitted on all sources", rows, in_sample)
    print("\nper-fold coefficients (" + ", ".join(NAMES) + "):")
    for source, coef in folds.items():
        u_a, u_h, launch, zero = coef.per_feature
        print(f"  without {source:30s} u {1 / u_a:.3f} / {1 / u_h:.3f}, {launch:.5f} s, {zero:.5f} s")
    agree, total = _ordering(rows, loso)
    print("not evaluated: " + "; ".join(f"{n} {r}" for r, n in sorted(skipped.items(), key=lambda kv: -kv[1])))
    s = summary(rows, loso)
    print(f"bands (p90 of |leave-one-source-out error|): {bands(rows, loso)}")
    print(
        "LOSO tokens/s: "
        + ", ".join(f"{m} {100 * s[m][0]:.1f}%/{100 * s[m][1]:.1f}% (n={s[m][2]})" for m in s)
        + f"; GPU-type ordering {agree} of {total} pairs right; fitted constants {len(NAMES)}"
    )
    return s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--fit", action="store_true", help="fit on every source and print the coefficients")
    ap.add_argument("--rows", action="store_true")
    args = ap.parse_args()
    if args.fit:
        rows = [c for c, _ in cases(args.csv) if c is not None]
        coef = fit([_features(c) for c in rows], Coefficients.physical())
        u_a, u_h, launch, zero = coef.per_feature
        print(f"fit on {len(rows)} rows:")
        for name, value in zip(NAMES, (1 / u_a, 1 / u_h, launch, zero), strict=True):
            print(f"  {name} = {value:.5g}")
    else:
        evaluate(args.csv, args.rows)


if __name__ == "__main__":
    main()
