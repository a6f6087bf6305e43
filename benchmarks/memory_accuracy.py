"""Peak-memory accuracy against measured fine-tuning runs (../shared/data/measured.csv).

    python benchmarks/memory_accuracy.py [--csv PATH] [--fit] [--rows]

Evaluates every measured row that states enough of its configuration (model, method, sequence
length, micro-batch, checkpointing, GPU count and how it is sharded) and prints, per source and
per method, the count and the median and 90th-percentile absolute relative error of the predicted
peak, overall and on the held-out half (rows with odd id; coefficients are fitted on even ids).
It also counts runs that succeeded but are predicted not to fit with the default margin, and
runs that went out of memory but are predicted to fit. `--fit` fits the calibrated
coefficients on the fit half (least squares of relative errors, constrained so that no run of
the fit half that succeeded is predicted not to fit; see `fit`) and prints them;
`--rows` prints every row.

How rows are read (each choice is the source's own documentation, see MEASURED.md):
- LitGPT (resource tables, config hub): bf16-true weights, torch AdamW (state in bf16, pure-bf16
  regime for full fine-tuning), adapters in bf16, PagedAdamW 32-bit for QLoRA, chunked
  cross-entropy, torch.cuda.max_memory_allocated in GB (1e9). The resource tables use Alpaca
  without a length cap: the peak comes from the longest sample, 1044-1304 tokens depending on the
  tokenizer, taken as 1174 (midpoint).
- Qwen README and ms-swift: HF Trainer + PEFT (metric unstated); Qwen prints "G", read as GB
  (see _gib), ms-swift GiB; ms-swift reports reserved memory (`max_memory_reserved`). Full fine-tuning
  in Qwen's finetune_ds.sh runs DeepSpeed ZeRO-3 mixed precision (16 B/param); ms-swift's full runs
  are compared as pure bf16 (its sft default dtype is bf16 with torch AdamW). ms-swift files its
  int8 GPTQ runs under "qlora"; they are compared as 8-bit base LoRA. Rows whose base is a GPTQ
  checkpoint (Qwen README Q-LoRA, ms-swift GPTQ) use the gptq kernel, other int8/4-bit bases
  bitsandbytes; LitGPT quantizes lm_head as well (its plugin replaces every nn.Linear).
- Gradient accumulation (it matters under FSDP, whose no_sync holds gradients unsharded): the
  grad_accum column, or the LitGPT config's global_batch_size / (micro-batch x GPUs) from the notes.
- Rows marked "estimate", rows whose notes call them suspect, multi-GPU rows whose parallelism is
  not stated, and rows without sequence length or micro-batch are not evaluated.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, cast

import numpy as np

from ftsolve.catalog import Catalog, ModelArch, arch_from_config, load_catalog
from ftsolve.solver import _coefficients as k
from ftsolve.solver._estimate import MemoryEstimate, estimate_memory
from ftsolve.solver._memory import MemoryOptions

Method = Literal["full", "lora", "qlora"]
WeightPrecision = Literal["auto", "16-bit", "int8", "nf4"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT.parent / "shared" / "data" / "measured.csv"
GIB = 2**30

_PRESET = {
    "llama-2-7b": "llama-2-7b",
    "llama-2-7b-hf": "llama-2-7b",
    "llama-2-13b": "llama-2-13b",
    "llama-3-8b": "llama-3.1-8b",
    "llama-3.1-8b": "llama-3.1-8b",
    "meta-llama-3.1-8b": "llama-3.1-8b",
    "llama3-8b-instruct": "llama-3.1-8b",
    "llama-3.1-8b-instruct": "llama-3.1-8b",
    "llama-3.2-1b": "llama-3.2-1b",
    "llama-3.2-3b": "llama-3.2-3b",
    "mistral-7b": "mistral-7b",
    "mistral-7b-v0.2": "mistral-7b",
    "gemma-2-2b": "gemma-2-2b",
    "gemma-2-9b": "gemma-2-9b",
    "phi-3-mini-4k-instruct": "phi-3-mini",
    "meta-llama-3-70b": "llama-3.1-70b",
}
_CONFIG_ALIAS = {
    "qwen-1_8b-chat": "qwen-1.8b",
    "qwen-7b-chat": "qwen-7b",
    "qwen-14b-chat": "qwen-14b",
    "qwen-72b-chat": "qwen-72b",
    "yi-6b-chat": "yi-6b",
    "yi-34b-chat": "yi-34b",
}


@dataclass(frozen=True)
class Case:
    id: int
    source: str
    model: str
    arch: ModelArch
    method: str
    precision: str
    opts: MemoryOptions
    lora_rank: int
    seq_len: int
    micro_batch: int
    grad_accum: int
    ckpt: bool
    sharding: str
    n_gpus: int
    card_gib: float
    measured_gib: float | None
    ok: bool
    reserved: bool  # the tool reports reserved (allocator) memory, not allocated


def _archs() -> dict[str, ModelArch]:
    cat = load_catalog(user=False)
    out = {name: cat.model(preset) for name, preset in _PRESET.items()}
    configs = json.loads((Path(__file__).parent / "measured_models.json").read_text())
    for name, cfg in configs.items():
        if not name.startswith("_"):
            out[name] = arch_from_config({k2: v for k2, v in cfg.items() if not k2.startswith("_")}, name)
    for alias, name in _CONFIG_ALIAS.items():
        out[alias] = out[name]
    return out


def _gib(value: str, unit: str) -> float | None:
    if not value.strip():
        return None
    x = float(value)
    # Qwen's README prints "G": read as GB (1e9), since its 2-GPU full fine-tune reports 81.0G per
    # GPU on an A100-80G, more than the card's 80 GiB could hold.
    if "1e9" in unit or (unit.startswith(("GB", '"G"')) and "GiB" not in unit):
        return x * 1e9 / GIB
    if unit.startswith("MB"):
        return x * 1e6 / GIB
    return x  # GiB, or "G" as printed by tools that divide by 2**30


def _card_gib(gpu: str) -> float:
    m = re.search(r"(\d+)\s*G", gpu)
    if m:
        return float(m.group(1))
    return {"A10G": 24.0, "L4": 24.0, "T4": 16.0, "H100": 80.0}.get(gpu.split()[0], 80.0)


def _targets(text: str) -> tuple[str, bool]:
    t = text.lower()
    emb = "embed" in t or "wte" in t
    if t.startswith("q,v"):
        return "qv", emb
    if "default (qwen: c_attn)" in t or t.startswith("default (c_attn)"):
        return "attention", emb
    return "all-linear", emb


def cases(path: Path) -> Iterator[tuple[dict[str, str], Case | None, str]]:
    """(row, case or None, reason when skipped) for every row of measured.csv."""
    archs = _archs()
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            yield row, *_case(row, archs)


def _case(row: dict[str, str], archs: dict[str, ModelArch]) -> tuple[Case | None, str]:
    src = row["source_key"]
    if row["kind"] != "measured":
        return None, "estimate, not a measurement"
    if "suspect" in row["notes"].lower():
        return None, "marked suspect in the source notes"
    method = row["method"].split(" ")[0]
    if method not in ("full", "lora", "qlora") or row["method"] in ("lora (packing)", "qlora (unsloth)"):
        return None, f"method {row['method']!r} not modelled"
    name = row["model"].strip().lower()
    arch = archs.get(name)
    if arch is None:
        return None, f"architecture of {row['model']!r} not known"
    outcome = row["outcome"]
    measured = _gib(row["peak_mem_gb_per_gpu"], row["mem_unit"])
    if outcome == "ok" and measured is None:
        return None, "no memory figure"
    seq = row["seq_len"]
    if not seq and src == "litgpt_resource_tables":
        seq = "1174"  # Alpaca's longest sample (1044-1304 by tokenizer), see module docstring
    if not seq or not row["micro_batch_size"]:
        return None, "sequence length or micro-batch not stated"
    ckpt_text = row["grad_ckpt"].lower()
    if not ckpt_text or ckpt_text.startswith("unknown"):
        return None, "gradient checkpointing not stated"
    shard_text = row["sharding"].lower()
    n = int(row["num_gpus"] or 1)
    if "not stated" in shard_text:
        return None, "multi-GPU parallelism not stated"
    sharding = "none"
    if n > 1:
        sharding = (
            "zero3" if ("zero3" in shard_text or "fsdp" in shard_text) else "zero2" if "zero2" in shard_text else "ddp"
        )
    targets, emb = _targets(row["lora_targets"])
    flash = not row["flash_attn"].lower().startswith("no")
    litgpt = src.startswith("litgpt")
    fp32_model = "fp32" in row["weight_precision"]
    if method == "full":
        optimizer = "adamw-bf16" if litgpt or src == "ms_swift_benchmark" else "adamw"
    elif method == "qlora" and litgpt:
        optimizer = "paged-adamw"
    else:
        optimizer = "adamw-fp32" if fp32_model else "adamw"
    deepspeed = "zero" in shard_text or "deepspeed" in shard_text or "finetune_ds" in shard_text
    if deepspeed and n == 1:
        sharding = "zero3" if ("zero3" in shard_text or "finetune_ds" in shard_text) else "zero2"
    framework = "litgpt" if litgpt else "deepspeed" if deepspeed else "hf"
    offload = row["offload"].lower().startswith("cpu")
    opts = MemoryOptions(
        optimizer=optimizer,
        adapter_dtype="bf16" if litgpt and not fp32_model else "fp32",
        lora_targets=targets,
        train_embeddings=emb,
        flash_attention=flash,
        framework=framework,
        offload_optimizer=offload,
        offload_params=offload,
        # LitGPT (finetune/lora.py), Qwen (finetune.py LoraArguments) and ms-swift all default
        # to lora_dropout 0.05; none of the rows states another value.
        lora_dropout=0.05 if method != "full" else 0.0,
        quant_kernel="gptq" if "gptq" in row["weight_precision"].lower() else "bitsandbytes",
    )
    precision = "int8" if "int8" in row["weight_precision"] else "nf4" if method == "qlora" else "16-bit"
    micro = int(float(row["micro_batch_size"]))
    # Accumulation matters under FSDP (unsharded gradients); every FSDP row states it, directly or
    # as the config's global_batch_size (LitGPT config hub notes).
    accum = int(float(row["grad_accum"] or 1))
    global_batch = re.search(r"global_batch_size (\d+)", row["notes"])
    if not row["grad_accum"] and global_batch:
        accum = max(1, -(-int(global_batch.group(1)) // (micro * n)))
    if precision == "int8":
        # ms-swift files int8 GPTQ bases under "qlora"; ftsolve calls that 8-bit base LoRA.
        method = "lora"
    return Case(
        id=int(row["id"]),
        source=src,
        model=row["model"],
        arch=arch,
        method=method,
        precision=precision,
        opts=opts,
        lora_rank=int(float(row["lora_rank"] or 8)),
        seq_len=int(float(seq)),
        micro_batch=micro,
        grad_accum=accum,
        ckpt=ckpt_text.startswith("yes"),
        sharding=sharding,
        n_gpus=n,
        card_gib=float(row["gpu_mem_gb"] or _card_gib(row["gpu_type"])),
        measured_gib=measured,
        ok=outcome == "ok",
        reserved=src == "ms_swift_benchmark",
    ), ""


@functools.cache
def _catalog() -> Catalog:
    return load_catalog(user=False)


def _estimate(case: Case) -> MemoryEstimate:
    return estimate_memory(
        case.arch,
        catalog=_catalog(),
        method=cast("Method", case.method),
        seq_len=case.seq_len,
        micro_batch=case.micro_batch,
        grad_accum=case.grad_accum,
        n_gpus=case.n_gpus,
        sharding=case.sharding,
        gradient_checkpointing=case.ckpt,
        weight_precision=cast("WeightPrecision", case.precision),
        lora_rank=case.lora_rank,
        options=case.opts,
    )


def predict(case: Case) -> tuple[float, float]:
    """(predicted allocated peak in GiB, planning peak with context and margin in GiB)."""
    est = _estimate(case)
    c = est.components_gib
    margin = 1.0 + k.DYNAMIC_MARGIN.value
    dynamic = (c["activations"] + c["logits"]) / margin
    allocated = est.peak_gib - c["cuda_context"] - c["nccl"] - dynamic * (margin - 1.0)
    if case.reserved:
        # the short-lived part: the logits, or with checkpointing the re-materialized layer
        short = c["logits"] / margin
        if case.ckpt:
            short = max(short, (c["activations"] + c["logits"]) / margin - _pieces(case).stored)
        allocated += k.RESERVED_FRAGMENTATION.value * short
    return allocated, est.peak_gib


def _stats(errors: list[float]) -> str:
    if not errors:
        return f"{0:5d} {'-':>7s} {'-':>7s}"
    a = np.abs(np.array(errors))
    return f"{len(a):5d} {100 * np.median(a):6.1f}% {100 * np.percentile(a, 90):6.1f}%"


def evaluate(path: Path, show_rows: bool = False) -> dict[str, list[float]]:
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    held: dict[tuple[str, str], list[float]] = defaultdict(list)
    skipped: dict[str, int] = defaultdict(int)
    wrong_oom = wrong_fit = 0
    all_errors: list[float] = []
    for _row, case, reason in cases(path):
        if case is None:
            skipped[reason] += 1
            continue
        allocated, planning = predict(case)
        usable = case.card_gib * k.USABLE_MEMORY_FRACTION.value
        if case.ok and planning > usable:
            wrong_oom += 1
            if show_rows:
                print(f"  predicted not to fit: id {case.id} {case.model} {case.method} {planning:.1f} > {usable:.1f}")
        if not case.ok and planning <= usable:
            wrong_fit += 1
            if show_rows:
                print(f"  OOM predicted to fit: id {case.id} {case.model} {case.method} {planning:.1f} <= {usable:.1f}")
        if case.measured_gib is None:
            continue
        err = allocated / case.measured_gib - 1.0
        all_errors.append(err)
        for key in ((case.source, case.method), (case.source, "*"), ("*", case.method), ("*", "*")):
            groups[key].append(err)
            if case.id % 2:
                held[key].append(err)
        if show_rows:
            print(
                f"  {case.id:4d} {case.source:24s} {case.model[:22]:22s} {case.method:5s} "
                f"s={case.seq_len:5d} b={case.micro_batch} ckpt={int(case.ckpt)} n={case.n_gpus} "
                f"{case.sharding:5s} "
                f"measured {case.measured_gib:6.2f} predicted {allocated:6.2f} ({100 * err:+.0f}%)"
            )
    print(
        f"{'source':26s} {'method':6s} {'all: n':>6s} {'median':>7s} {'p90':>7s}   "
        f"{'held-out: n':>11s} {'median':>7s} {'p90':>7s}"
    )
    for key in sorted(groups, key=lambda t: (t[0] == "*", t)):
        print(f"{key[0]:26s} {key[1]:6s} {_stats(groups[key])}   {_stats(held[key]):>27s}")
    print(f"\nsucceeded on the card but predicted not to fit (default margin): {wrong_oom}")
    print(f"out of memory but predicted to fit: {wrong_fit}")
    print("not evaluated: " + "; ".join(f"{n} {r}" for r, n in sorted(skipped.items(), key=lambda kv: -kv[1])))
    return {"all": all_errors}


@dataclass(frozen=True)
class Pieces:
    """A row's prediction split by calibrated coefficient, each at coefficient 1 (GiB)."""

    fixed: float
    activations: float  # every saved activation (with checkpointing: stored inputs + one layer)
    stored: float  # with checkpointing the stored layer inputs alone; else = activations
    logits: float  # at 1 byte per value
    dequant: float  # at one layer
    overheads: float  # CUDA context and NCCL, which the planning peak adds


def _pieces(case: Case) -> Pieces:
    names = ("ACTIVATION_SCALE", "LOGITS_BYTES_PER_VALUE", "DEQUANT_LAYERS", "DEQUANT_LAYERS_GPTQ")
    saved = {name: getattr(k, name) for name in names}
    saved_runtime = k.FRAMEWORK_RUNTIME_GIB
    margin = 1.0 + k.DYNAMIC_MARGIN.value

    def run(logit_bytes: float, layers: float) -> dict[str, float]:
        for name, value in zip(names, (1.0, logit_bytes, layers, layers), strict=True):
            setattr(k, name, replace(saved[name], value=value))
        return _estimate(case).components_gib

    try:
        k.FRAMEWORK_RUNTIME_GIB = {f: replace(c, value=0.0) for f, c in saved_runtime.items()}
        unit = run(1.0, 1.0)
        no_logits = run(0.0, 0.0)
        huge_logits = run(1e6, 0.0)  # the re-materialized layer hides entirely under the logits
    finally:
        for name, c in saved.items():
            setattr(k, name, c)
        k.FRAMEWORK_RUNTIME_GIB = saved_runtime
    dequant = unit["dequant_workspace"] - no_logits["dequant_workspace"]
    dynamic = unit["activations"] + unit["logits"]
    fixed = sum(unit.values()) - dynamic - dequant - unit["cuda_context"] - unit["nccl"]
    return Pieces(
        fixed=fixed,
        activations=no_logits["activations"] / margin,
        stored=huge_logits["activations"] / margin,
        logits=unit["logits"] / margin,
        dequant=dequant,
        overheads=unit["cuda_context"] + unit["nccl"],
    )


def _constrained_lstsq(x: np.ndarray, y: np.ndarray, c: np.ndarray, d: np.ndarray) -> np.ndarray:
    """min |x·s - y|² subject to c·s <= d and s >= 0.

    The primal active-set method for a convex quadratic program (Nocedal & Wright, Numerical
    Optimization, algorithm 16.3), started from the feasible s = 0. A row with d < 0 is one no
    s >= 0 can meet (its fixed terms alone exceed the card): it is left out.
    """
    m = x.shape[1]
    c, d = c[d >= 0], d[d >= 0]
    c = np.vstack([c, -np.eye(m)])
    d = np.concatenate([d, np.zeros(m)])
    h, xty = x.T @ x, x.T @ y
    sol = np.zeros(m)
    active = [i for i in range(len(d)) if abs(d[i]) <= 1e-12]
    for _ in range(10 * len(d) + 10):
        eq = c[active]
        kkt = np.block([[h, eq.T], [eq, np.zeros((len(active), len(active)))]])
        rhs = np.concatenate([xty - h @ sol, np.zeros(len(active))])
        step_and_mult = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
        step, mult = step_and_mult[:m], step_and_mult[m:]
        if np.max(np.abs(step), initial=0.0) <= 1e-10 * (1.0 + np.max(np.abs(sol))):
            if len(active) == 0 or mult.min() >= -1e-10:
                out: np.ndarray = np.maximum(sol, 0.0)  # round-off below zero on an active bound
                return out
            active.pop(int(np.argmin(mult)))
            continue
        along = c @ step
        blocking = [i for i in range(len(d)) if i not in active and along[i] > 1e-12]
        ratios = [(d[i] - c[i] @ sol) / along[i] for i in blocking]
        alpha = min([1.0, *ratios])
        sol = sol + alpha * step
        if alpha < 1.0:
            active.append(blocking[int(np.argmin(ratios))])
    raise RuntimeError("constrained least squares did not converge")


def fit(path: Path) -> None:
    """Least squares of relative errors on the fit half (even ids) for the calibrated coefficients:

        prediction = fixed + A·activations + L·logits + F·short + Q[kernel]·dequant + R[framework]

    where, with checkpointing, the stored layer inputs are not scaled and the re-materialized layer
    adds only what exceeds the logits (A·layer - L·logits when positive). F, the allocator's
    fragmentation, applies only where a tool reports reserved memory and only to the short-lived
    part (the logits, or with checkpointing the re-materialized layer when it is larger): those
    few large tensors change size with each batch's length, while the activations kept through
    the step are freed and reallocated in the same order every step. That makes the model
    piecewise linear: the fit solves the linear problem for the current pieces, recomputes which
    piece each row is on, and repeats until no row changes piece. F is searched on a grid. The fit
    is constrained so that no run of the fit half that succeeded is predicted not to fit its card:
    the planning peak (the same terms with the dynamic margin instead of F, plus CUDA context and
    NCCL) stays within the usable memory.
    """
    rows = [c for _r, c, _ in cases(path) if c is not None and c.measured_gib is not None and c.id % 2 == 0]
    frameworks = sorted({c.opts.framework for c in rows})
    pieces = [_pieces(c) for c in rows]
    weight = np.array([1.0 / c.measured_gib for c in rows])  # type: ignore[operator]
    margin = 1.0 + k.DYNAMIC_MARGIN.value
    best = None
    for frag in np.arange(0.0, 4.01, 0.1):
        a, lg = k.ACTIVATION_SCALE.value, k.LOGITS_BYTES_PER_VALUE.value
        branches: list[bool] | None = None
        for _ in range(50):
            now = [
                bool(c.ckpt and a * (p.activations - p.stored) > lg * p.logits)
                for c, p in zip(rows, pieces, strict=True)
            ]
            if now == branches:
                break
            branches = now
            design: list[list[float]] = []
            plan_design: list[list[float]] = []
            target: list[float] = []
            plan_room: list[float] = []
            for c, p, layer_wins in zip(rows, pieces, now, strict=True):
                gptq = c.opts.quant_kernel == "gptq"
                layer = p.activations - p.stored if c.ckpt else p.activations
                rest = [0.0 if gptq else p.dequant, p.dequant if gptq else 0.0]
                rest += [1.0 if c.opts.framework == fw else 0.0 for fw in frameworks]
                fr = 1.0 + (frag if c.reserved else 0.0)
                act = (fr if layer_wins else 1.0) * layer if layer_wins or not c.ckpt else 0.0
                design.append([act, 0.0 if layer_wins else fr * p.logits, *rest])
                act = margin * layer if layer_wins or not c.ckpt else 0.0
                plan_design.append([act, 0.0 if layer_wins else margin * p.logits, *rest])
                stored = p.stored if c.ckpt else 0.0
                target.append(c.measured_gib - p.fixed - stored)  # type: ignore[operator]
                # 0.02 GiB to spare, so that the coefficients rounded to 3 digits keep the constraint
                usable = c.card_gib * k.USABLE_MEMORY_FRACTION.value - 0.02 if c.ok else np.inf
                plan_room.append(usable - p.fixed - p.overheads - margin * stored)
            x, y = np.array(design), np.array(target)
            sol = _constrained_lstsq(x * weight[:, None], y * weight, np.array(plan_design), np.array(plan_room))
            a, lg = float(sol[0]), float(sol[1])
        rel = np.abs((x @ sol - y) * weight)
        score = (float(np.percentile(rel, 90)), float(np.median(rel)))
        if best is None or score < best[0]:
            best = (score, frag, sol)
    assert best is not None
    (p90, med), frag, sol = best
    names = ["ACTIVATION_SCALE", "LOGITS_BYTES_PER_VALUE", "DEQUANT_LAYERS", "DEQUANT_LAYERS_GPTQ"]
    names += [f"FRAMEWORK_RUNTIME_GIB[{fw}]" for fw in frameworks]
    print(f"fit on {len(rows)} rows (even ids): median {100 * med:.1f}%, p90 {100 * p90:.1f}%")
    print(f"  RESERVED_FRAGMENTATION = {frag:.1f}")
    for name, value in zip(names, sol, strict=True):
        print(f"  {name} = {value:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--rows", action="store_true")
    args = ap.parse_args()
    if args.fit:
        fit(args.csv)
        return
    evaluate(args.csv, args.rows)


if __name__ == "__main__":
    main()
