"""Stand-alone estimates for one configuration: `estimate_memory` (and the data it returns)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ftsolve._errors import InvalidJobSpec
from ftsolve.catalog._hf import config_json_path, load_config_json
from ftsolve.catalog._load import Catalog, load_catalog
from ftsolve.catalog._models import ModelArch
from ftsolve.solver import _coefficients as k
from ftsolve.solver._memory import (
    FULL,
    METHOD_NAMES,
    Q4,
    Q8,
    Q16,
    QLORA,
    SHARD_NAMES,
    MemoryOptions,
    ModelSizes,
    memory_terms,
)

# Error bands stated with every estimate: the leave-one-source-out accuracy of the model per
# method and stack (k.memory_band), widened to at least PARAM_COUNT_BAND when the architecture
# had to be guessed from a bare parameter count (a known architecture widens nothing).
ARCH_KNOWN_BAND = 0.0
PARAM_COUNT_BAND = 0.40


class MemoryEstimate(BaseModel):
    """Predicted peak memory per GPU for one configuration, by component."""

    model_config = ConfigDict(frozen=True)

    model: str
    params_b: float
    method: Literal["full", "lora", "qlora"]
    weight_precision: str
    sharding: str
    n_gpus: int
    micro_batch: int
    grad_accum: int
    seq_len: int
    gradient_checkpointing: bool
    components_gib: dict[str, float] = Field(description="static parts and the dynamic parts incl. margin")
    allocated_gib: float = Field(description="what torch.cuda.max_memory_allocated() would report")
    reserved_gib: float = Field(description="what torch.cuda.max_memory_reserved() would report")
    device_gib: float = Field(
        description="what nvidia-smi would show: reserved + CUDA context + NCCL + managed (paged) memory"
    )
    managed_gib: float = Field(description="paged optimizer state in CUDA managed memory (pages out under pressure)")
    peak_gib: float = Field(description="planning peak: reserved + context + NCCL + the dynamic margin")
    error_band: float = Field(
        description="relative: the leave-one-source-out p90 error for this method and stack, "
        "wider for a bare parameter count"
    )
    architecture_source: str
    gpu: str | None = None
    usable_gib: float | None = None
    fits: bool | None = None


def arch_from_param_count(n_params: float) -> ModelArch:
    """A Llama-shaped architecture of about `n_params` parameters (aspect ratio h/L = 128, GQA 8,
    SwiGLU with I = 3.5h, 128k vocabulary): the best guess when only a size is known."""
    if n_params <= 1e7:
        raise InvalidJobSpec(f"invalid parameter count {n_params:g}: expected at least 1e7")
    vocab = 128256
    h = 512
    # Grow h in steps of 512 (so that heads = h/128 split into 4 KV groups) and L = h/128 until
    # the decoder layers plus embeddings reach the count; then solve for L.
    while True:
        layers = max(h // 128, 2)
        per_layer = 2 * h * h + 2 * h * (h // 4) + 3 * h * int(3.5 * h)
        if layers * per_layer + 2 * vocab * h >= n_params or h > 65536:
            break
        h += 512
    rest = max(n_params - 2 * vocab * h, per_layer)
    layers = max(round(rest / per_layer), 1)
    heads = max(h // 128, 1)
    return ModelArch(
        name=f"~{n_params / 1e9:.1f}B (from parameter count)",
        family="guessed",
        hidden_size=h,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=max(heads // 4, 1),
        intermediate_size=int(3.5 * h),
        vocab_size=vocab,
        source="guessed from a parameter count",
    )


def resolve_arch(model: str | ModelArch | Path | float, catalog: Catalog) -> tuple[ModelArch, float, str]:
    """(architecture, error band, where it came from) for a preset, a config.json or a size."""
    if isinstance(model, ModelArch):
        return model, ARCH_KNOWN_BAND, model.source or "given architecture"
    if isinstance(model, (int, float)):
        arch = arch_from_param_count(float(model))
        return arch, PARAM_COUNT_BAND, arch.source
    path = model if isinstance(model, Path) else config_json_path(str(model), Path())
    if path is not None:
        return load_config_json(path), ARCH_KNOWN_BAND, str(model)
    arch = catalog.model(str(model))
    return arch, ARCH_KNOWN_BAND, arch.source


# (low, high, low inclusive) for every number an estimate takes: beyond these no real run exists,
# and a NaN or infinity would flow into the figures unnoticed. The job's own bounds are JobSpec's.
_RANGES: dict[str, tuple[float, float, bool]] = {
    "seq_len": (1, 1_048_576, True),
    "micro_batch": (1, 65_536, True),
    "grad_accum": (1, 65_536, True),
    "n_gpus": (1, 65_536, True),
    "nodes": (1, 8_192, True),
    "lora_rank": (1, 4096, True),
    "lora_dropout": (0.0, 1.0, True),
    "inter_node_gbit_per_s": (0.0, 100_000.0, False),
    "utilization": (0.0, 1.0, False),
    "train_tokens": (1, 10**15, True),
    "real_token_fraction": (0.01, 1.0, True),
}


def _check_ranges(**values: float | None) -> None:
    for name, value in values.items():
        if value is None:
            continue
        low, high, inclusive = _RANGES[name]
        above = value >= low if inclusive else value > low
        if isinstance(value, bool) or not math.isfinite(value) or not above or value > high:
            raise InvalidJobSpec(f"invalid {name} {value!r}: must lie in {'[' if inclusive else '('}{low:g}, {high:g}]")


def estimate_memory(
    model: str | ModelArch | Path | float,
    *,
    method: Literal["full", "lora", "qlora"] = "lora",
    seq_len: int = 2048,
    micro_batch: int = 1,
    grad_accum: int = 1,
    n_gpus: int = 1,
    sharding: str = "none",
    gradient_checkpointing: bool = True,
    weight_precision: Literal["auto", "16-bit", "int8", "nf4"] = "auto",
    lora_rank: int = 16,
    options: MemoryOptions | None = None,
    gpu: str | None = None,
    catalog: Catalog | None = None,
) -> MemoryEstimate:
    """Peak memory per GPU of one training configuration, as a breakdown.

    `model` is a preset name, a ModelArch, a path to a Hugging Face config.json (or its folder), or
    a bare parameter count (a wider error band is stated then). `grad_accum` > 1 matters under
    FSDP, which accumulates with unsharded gradients.
    """
    catalog = catalog if catalog is not None else load_catalog(user=False)
    opts = options or MemoryOptions()
    _check_ranges(seq_len=seq_len, micro_batch=micro_batch, grad_accum=grad_accum, n_gpus=n_gpus, lora_rank=lora_rank)
    _check_ranges(lora_dropout=opts.lora_dropout)
    if sharding not in SHARD_NAMES:
        raise InvalidJobSpec(f"invalid sharding {sharding!r}: choose one of {', '.join(SHARD_NAMES)}")
    if n_gpus > 1 and sharding == "none":
        raise InvalidJobSpec("invalid sharding: several GPUs need ddp, zero1, zero2 or zero3")
    if n_gpus == 1 and sharding != "none" and opts.framework != "deepspeed":
        raise InvalidJobSpec(
            "invalid sharding: one GPU shards nothing (DeepSpeed ZeRO on one GPU: framework='deepspeed')"
        )
    if opts.quant_kernel not in ("bitsandbytes", "gptq"):
        raise InvalidJobSpec(f"invalid quant_kernel {opts.quant_kernel!r}: choose bitsandbytes or gptq")
    arch, band, where = resolve_arch(model, catalog)
    m = METHOD_NAMES.index(method)
    if weight_precision == "auto":
        q = Q4 if m == QLORA else Q16
    else:
        q = {"16-bit": Q16, "int8": Q8, "nf4": Q4}[weight_precision]
    if m == FULL and q != Q16:
        raise InvalidJobSpec("invalid weight_precision: full fine-tuning trains 16-bit weights")
    sizes = ModelSizes.of(arch, lora_rank, opts.lora_targets, opts.framework)

    def a(x: int) -> np.ndarray:
        return np.array([x], dtype=np.int64)

    terms = memory_terms(
        sizes,
        opts,
        seq_len,
        a(m),
        a(q),
        a(SHARD_NAMES.index(sharding)),
        a(int(gradient_checkpointing)),
        a(n_gpus),
        accumulating=grad_accum > 1,
    )
    margin = 1.0 + k.DYNAMIC_MARGIN.value
    parts = {name: float(v[0]) / k.GIB for name, v in terms.static.items()}
    dynamic = {name: float(v[0]) * micro_batch / k.GIB for name, v in terms.per_sample.items()}
    parts |= {name: v * margin for name, v in dynamic.items()}
    managed = sum(float(v[0]) for v in terms.managed.values()) / k.GIB
    peak = float(terms.peak_bytes(a(micro_batch))[0]) / k.GIB
    overheads = parts["cuda_context"] + parts["nccl"]
    reserved = sum(parts.values()) - sum(dynamic.values()) * (margin - 1.0) - overheads
    allocated = reserved - dynamic["fragmentation"]
    usable = fits = None
    if gpu is not None:
        spec = catalog.gpu(gpu)
        usable = round(spec.memory_gib * k.USABLE_MEMORY_FRACTION.value, 3)
        fits = peak <= usable
    return MemoryEstimate(
        model=arch.name,
        params_b=round(sizes.total_params / 1e9, 4),
        method=method,
        weight_precision={Q16: "16-bit", Q8: "int8", Q4: "nf4"}[q],
        sharding=sharding,
        n_gpus=n_gpus,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        seq_len=seq_len,
        gradient_checkpointing=gradient_checkpointing,
        components_gib={name: round(v, 3) for name, v in parts.items()},
        allocated_gib=round(allocated, 3),
        reserved_gib=round(reserved, 3),
        device_gib=round(reserved + overheads + managed, 3),
        managed_gib=round(managed, 3),
        peak_gib=round(peak, 3),
        error_band=max(k.memory_band(method, opts.stack), band),
        architecture_source=where,
        gpu=gpu,
        usable_gib=usable,
        fits=fits,
    )


class TimeEstimate(BaseModel):
    """Predicted step time and throughput for one configuration, by phase."""

    model_config = ConfigDict(frozen=True)

    model: str
    gpu: str
    method: Literal["full", "lora", "qlora"]
    n_gpus: int
    nodes: int
    sharding: str
    micro_batch: int
    grad_accum: int
    seq_len: int
    gradient_checkpointing: bool
    flops_per_token: float = Field(description="hardware FLOPs per processed token, recompute included")
    peak_tflops: float
    utilization: float
    compute_s: float
    communication_s: float
    exposed_communication_s: float
    optimizer_s: float
    step_s: float
    tokens_per_step: int
    tokens_per_s: float = Field(description="processed tokens per second, all GPUs")
    tokens_per_s_per_gpu: float
    scaling_efficiency: float = Field(description="compute time / step time")
    hours: float | None = Field(default=None, description="training hours for `train_tokens`, if given")


def estimate_time(
    model: str | ModelArch | Path | float,
    gpu: str,
    *,
    method: Literal["full", "lora", "qlora"] = "lora",
    seq_len: int = 2048,
    micro_batch: int = 1,
    grad_accum: int = 1,
    n_gpus: int = 1,
    nodes: int = 1,
    sharding: str = "none",
    gradient_checkpointing: bool = True,
    weight_precision: Literal["auto", "16-bit", "int8", "nf4"] = "auto",
    lora_rank: int = 16,
    options: MemoryOptions | None = None,
    inter_node_gbit_per_s: float | None = None,
    utilization: float | None = None,
    train_tokens: int | None = None,
    real_token_fraction: float = 1.0,
    catalog: Catalog | None = None,
) -> TimeEstimate:
    """Step time, tokens/s and (optionally) hours of one configuration on `gpu` (physics.md §7-9)."""
    catalog = catalog if catalog is not None else load_catalog(user=False)
    opts = options or MemoryOptions()
    _check_ranges(
        seq_len=seq_len, micro_batch=micro_batch, grad_accum=grad_accum, n_gpus=n_gpus, nodes=nodes, lora_rank=lora_rank
    )
    _check_ranges(
        lora_dropout=opts.lora_dropout,
        inter_node_gbit_per_s=inter_node_gbit_per_s,
        utilization=utilization,
        train_tokens=train_tokens,
        real_token_fraction=real_token_fraction,
    )
    if n_gpus % nodes:
        raise InvalidJobSpec(f"invalid nodes: {n_gpus} GPUs do not split evenly over {nodes} nodes")
    if sharding not in SHARD_NAMES:
        raise InvalidJobSpec(f"invalid sharding {sharding!r}: choose one of {', '.join(SHARD_NAMES)}")
    spec = catalog.gpu(gpu)
    if spec.tensor_tflops is None or spec.memory_bandwidth_gb_per_s is None:
        raise InvalidJobSpec(f"GPU {gpu!r} has no tensor peak or bandwidth in the catalog; no time estimate")
    arch, _band, _where = resolve_arch(model, catalog)
    m = METHOD_NAMES.index(method)
    q = (
        (Q4 if m == QLORA else Q16)
        if weight_precision == "auto"
        else {"16-bit": Q16, "int8": Q8, "nf4": Q4}[weight_precision]
    )
    sizes = ModelSizes.of(arch, lora_rank, opts.lora_targets, opts.framework)
    from ftsolve.solver._throughput import flops_per_token, intra_node_bus_gb_per_s, step_time
    from ftsolve.solver._throughput import utilization as arch_utilization

    def a(x: int) -> np.ndarray:
        return np.array([x], dtype=np.int64)

    sh = a(SHARD_NAMES.index(sharding))
    terms = memory_terms(sizes, opts, seq_len, a(m), a(q), sh, a(int(gradient_checkpointing)), a(n_gpus))
    state_bytes = terms.static["optimizer"] + terms.static["gradients"] + terms.static["weights"]
    bus = intra_node_bus_gb_per_s(spec)
    if nodes > 1:
        gbit = inter_node_gbit_per_s if inter_node_gbit_per_s is not None else k.DEFAULT_INTER_NODE_GBIT.value
        bus = min(bus, gbit * k.INTER_NODE_EFFICIENCY.value / 8.0)
    u = utilization if utilization is not None else arch_utilization(spec).value

    def f(x: float) -> np.ndarray:
        return np.array([x], dtype=np.float64)

    st = step_time(
        sizes,
        seq_len,
        state_bytes,
        a(m),
        a(q),
        sh,
        a(int(gradient_checkpointing)),
        a(n_gpus),
        a(micro_batch),
        a(grad_accum),
        f(spec.tensor_tflops),
        f(u),
        f(spec.memory_bandwidth_gb_per_s),
        f(bus),
        opts.quant_kernel,
    )
    tps = float(st.tokens_per_s[0])
    hours = None if train_tokens is None else train_tokens / real_token_fraction / tps / 3600.0
    return TimeEstimate(
        model=arch.name,
        gpu=gpu,
        method=method,
        n_gpus=n_gpus,
        nodes=nodes,
        sharding=sharding,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        seq_len=seq_len,
        gradient_checkpointing=gradient_checkpointing,
        flops_per_token=float(flops_per_token(sizes, seq_len, a(m), a(int(gradient_checkpointing)))[0]),
        peak_tflops=spec.tensor_tflops,
        utilization=u,
        compute_s=float(st.compute_s[0]),
        communication_s=float(st.comm_s[0]),
        exposed_communication_s=float(st.exposed_comm_s[0]),
        optimizer_s=float(st.optimizer_s[0]),
        step_s=float(st.step_s[0]),
        tokens_per_step=int(st.tokens_per_step[0]),
        tokens_per_s=tps,
        tokens_per_s_per_gpu=tps / n_gpus,
        scaling_efficiency=float(st.compute_s[0] / st.step_s[0]),
        hours=hours,
    )
