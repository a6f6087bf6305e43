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
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Literal, cast

import numpy as np
from memory_accuracy import DEFAULT_CSV, _archs

from ftsolve.catalog import ModelArch
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


def _gpu(text: str) -> str | None:
    t = text.lower()
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


def _case(row: dict[str, str], archs: dict[str, ModelArch]) -> tuple[Case | None, str]:
    src = row["source_key"]
    tps = row["tokens_per_s_per_gpu"]
    if not tps:
        return None, "no tokens/s figure"
    if row["kind"] != "measured":
        return None, "estimate"
    if src not in ("qwen_readme_profiling", "llmfoundry_mpt_throughput"):
        return None, f"{src}: checkpointing or tokens per sample not stated"
    arch = archs.get(row["model"].strip().lower())
    gpu = _gpu(row["gpu_type"])
    if arch is None or gpu is None:
        return None, "architecture or GPU not known"
    method = row["method"].split(" ")[0]
    n = int(row["num_gpus"] or 1)
    shard_text = row["sharding"].lower()
    mpt = src == "llmfoundry_mpt_throughput"
    nodes = max(n // 8, 1) if mpt else (2 if "2 nodes" in shard_text else 1)
    sharding = "none" if n == 1 else "zero3" if ("zero3" in shard_text or "fsdp" in shard_text) else "zero2"
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
    ), ""


def _estimator(c: Case) -> partial[TimeEstimate]:
    """estimate_time with the row's configuration filled in (the Qwen ZeRO runs use DeepSpeed)."""
    opts = MemoryOptions(framework="deepspeed" if c.sharding != "none" and c.source.startswith("qwen") else "hf")
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
        lora_rank=64,
        options=opts,
        inter_node_gbit_per_s=c.inter_node_gbit,
    )


def predict(c: Case) -> float:
    return _estimator(c)().tokens_per_s_per_gpu


def _stats(errors: list[float]) -> str:
    if not errors:
        return f"{0:5d} {'-':>7s} {'-':>7s}"
    a = np.abs(np.array(errors))
    return f"{len(a):5d} {100 * np.median(a):6.1f}% {100 * np.percentile(a, 90):6.1f}%"


def evaluate(path: Path, show_rows: bool = False) -> None:
    groups: dict[str, list[float]] = defaultdict(list)
    held: dict[str, list[float]] = defaultdict(list)
    skipped: dict[str, int] = defaultdict(int)
    by_job: dict[tuple[str, str, int, int], list[tuple[str, float, float]]] = defaultdict(list)
    for case, reason in cases(path):
        if case is None:
            skipped[reason] += 1
            continue
        pred = predict(case)
        err = pred / case.measured - 1.0
        keys = [f"source {case.source}", f"method {case.method}", f"gpus {case.n_gpus}", "all"]
        for key in keys:
            groups[key].append(err)
            if case.id % 2:
                held[key].append(err)
        by_job[(case.model.lower(), case.method, case.seq_len, case.n_gpus)].append((case.gpu, case.measured, pred))
        if show_rows:
            print(
                f"  {case.id:4d} {case.model:10s} {case.method:5s} {case.gpu:14s} n={case.n_gpus:2d} "
                f"s={case.seq_len:5d} b={case.micro_batch:2d} ckpt={int(case.ckpt)} "
                f"measured {case.measured:8.0f} "
                f"predicted {pred:8.0f} ({100 * err:+.0f}%)"
            )
    print(f"{'group':34s} {'all: n':>6s} {'median':>7s} {'p90':>7s}   {'held-out: n':>11s} {'median':>7s} {'p90':>7s}")
    for key in sorted(groups, key=lambda s: (s == "all", s)):
        print(f"{key:34s} {_stats(groups[key])}   {_stats(held[key]):>27s}")
    agree = total = 0
    for job, rows in sorted(by_job.items()):
        gpus = {g for g, _, _ in rows}
        if len(gpus) < 2:
            continue
        for (g1, m1, p1), (g2, m2, p2) in itertools.combinations(rows, 2):
            if g1 == g2:
                continue
            total += 1
            agree += (m1 > m2) == (p1 > p2)
            if (m1 > m2) != (p1 > p2):
                print(
                    f"  ordering differs for {job}: measured {g1} {m1:.0f} vs {g2} {m2:.0f}; "
                    f"predicted {p1:.0f} vs {p2:.0f}"
                )
    print(f"\nGPU-type ordering: {agree} of {total} pairs of the same job ordered as measured")
    print("not evaluated: " + "; ".join(f"{n} {r}" for r, n in sorted(skipped.items(), key=lambda kv: -kv[1])))


def _features(c: Case) -> tuple[list[float], float, float]:
    """Linear features of the step time: ([compute at u=1 on Ampere, on Hopper, layer passes,
    dequant seconds per byte/param], fixed seconds (exposed communication + optimizer), measured step)."""
    saved = (k.PER_LAYER_PASS_S, k.DEQUANT_BYTES_PER_PARAM, k.QLORA_TIME_FACTOR, k.ZERO_LAYER_PASS_S)
    run = partial(_estimator(c), utilization=1.0)
    try:
        k.PER_LAYER_PASS_S = replace(k.PER_LAYER_PASS_S, value=0.0)
        k.DEQUANT_BYTES_PER_PARAM = replace(k.DEQUANT_BYTES_PER_PARAM, value=0.0)
        k.QLORA_TIME_FACTOR = replace(k.QLORA_TIME_FACTOR, value=1.0)
        k.ZERO_LAYER_PASS_S = replace(k.ZERO_LAYER_PASS_S, value=0.0)
        base = run()
        k.PER_LAYER_PASS_S = replace(k.PER_LAYER_PASS_S, value=1.0)
        with_launch = run()
        k.PER_LAYER_PASS_S = replace(k.PER_LAYER_PASS_S, value=0.0)
        k.DEQUANT_BYTES_PER_PARAM = replace(k.DEQUANT_BYTES_PER_PARAM, value=1.0)
        with_dq = run()
        k.DEQUANT_BYTES_PER_PARAM = replace(k.DEQUANT_BYTES_PER_PARAM, value=0.0)
        k.ZERO_LAYER_PASS_S = replace(k.ZERO_LAYER_PASS_S, value=1.0)
        with_zero = run()
    finally:
        k.PER_LAYER_PASS_S, k.DEQUANT_BYTES_PER_PARAM, k.QLORA_TIME_FACTOR, k.ZERO_LAYER_PASS_S = saved
    hopper = c.gpu.startswith("h100")
    compute = base.compute_s
    launch = with_launch.compute_s - compute
    dq = with_dq.compute_s - compute
    zero = with_zero.compute_s - compute
    measured_step = base.tokens_per_step / c.n_gpus / c.measured
    fixed = base.exposed_communication_s + base.optimizer_s
    features = [0.0 if hopper else compute, compute if hopper else 0.0, launch, dq, zero]
    return features, fixed, measured_step


def fit(path: Path) -> None:
    """Least squares on the even ids (relative error of the step time): utilization by
    architecture, per-layer pass overhead and dequantization bytes per parameter."""
    rows = [c for c, _ in cases(path) if c is not None and c.id % 2 == 0]
    feats = [_features(c) for c in rows]
    x = np.array([f for f, _, _ in feats])
    y = np.array([m - fixed for _, fixed, m in feats])
    w = 1.0 / np.array([m for _, _, m in feats])
    sol = np.maximum(np.linalg.lstsq(x * w[:, None], y * w, rcond=None)[0], 1e-9)
    rel = np.abs((x @ sol - y) * w)
    print(
        f"fit on {len(rows)} rows (even ids): median {100 * np.median(rel):.1f}%, "
        f"p90 {100 * np.percentile(rel, 90):.1f}%"
    )
    print(f"  UTILIZATION_BY_ARCH[Ampere] = {1 / sol[0]:.3f}")
    print(f"  UTILIZATION_BY_ARCH[Hopper] = {1 / sol[1]:.3f}")
    print(f"  PER_LAYER_PASS_S = {sol[2]:.5f}")
    print(f"  DEQUANT_BYTES_PER_PARAM = {sol[3]:.2f}")
    print(f"  ZERO_LAYER_PASS_S = {sol[4]:.5f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--rows", action="store_true")
    args = ap.parse_args()
    if args.fit:
        fit(args.csv)
    else:
        evaluate(args.csv, args.rows)


if __name__ == "__main__":
    main()
