"""Stand-alone estimates for one configuration: `estimate_memory` (and the data it returns)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from ftsolve._errors import InvalidJobSpec
from ftsolve.catalog import (
    DEFAULT_INTER_NODE_GBIT,
    Catalog,
    ModelArch,
    config_json_path,
    load_catalog,
    load_config_json,
)
from ftsolve.solver import _coefficients as k
from ftsolve.solver._compat import GPU_RULES, SETUP_RULES, TIMING_RULES, OnGpu, Setup, refuse_broken
from ftsolve.solver._hardware import Hardware, hardware
from ftsolve.solver._memory import (
    METHOD_NAMES,
    Q4,
    Q8,
    Q16,
    QLORA,
    SHARD_NAMES,
    MemoryOptions,
    MemoryTerms,
    ModelSizes,
    memory_terms,
)
from ftsolve.solver._stacks import OPTIMIZER_STEPS, QUANT_KERNELS
from ftsolve.solver._throughput import StepTime, flops_per_token, step_time

I = NDArray[np.int64]

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
    components_gib: dict[str, float] = Field(
        description="static parts, the dynamic parts incl. margin, and what the optimizer step needs beyond them"
    )
    allocated_gib: float = Field(description="what torch.cuda.max_memory_allocated() would report")
    reserved_gib: float = Field(description="what torch.cuda.max_memory_reserved() would report")
    device_gib: float = Field(
        description="what nvidia-smi would show: reserved + CUDA context + NCCL + managed (paged) memory"
    )
    managed_gib: float = Field(description="paged optimizer state in CUDA managed memory (pages out under pressure)")
    optimizer_step_gib: float = Field(
        default=0.0,
        description="temporaries of the optimizer step beyond the gathered shards, unsharded gradients and "
        "copies backward frees; they raise the peak only beyond its activations and logits (component optimizer_step)",
    )
    peak_gib: float = Field(
        description="planning peak: allocated + context + NCCL + the dynamic margin (cached blocks the allocator "
        "frees before an OOM left out), or the optimizer step's temporaries where they exceed the dynamic part"
    )
    error_band: float = Field(
        description="relative: the leave-one-source-out p90 error for this method and stack, "
        "wider for a bare parameter count"
    )
    architecture_source: str
    gpu: str | None = None
    usable_gib: float | None = None
    fits: bool | None = Field(default=None, description="the planning peak is within the GPU's usable memory")
    headroom_band: float = Field(
        default=0.0,
        description="the headroom a plan keeps above the peak by default, as a share of it: the validated band "
        "for the method and stack (a bare parameter count's wider error_band is not kept; --memory-margin sets "
        "another, and a calibration of the GPU and method may narrow it)",
    )
    fits_with_headroom: bool | None = Field(
        default=None,
        description="the planning peak plus headroom_band is within the usable memory: the planner's default test",
    )


def arch_from_param_count(n_params: float) -> ModelArch:
    """A Llama-shaped architecture of about `n_params` parameters (aspect ratio h/L = 128, GQA 8,
    SwiGLU with I = 3.5h, 128k vocabulary): the best guess when only a size is known."""
    if not 1e7 < n_params <= 1e14:  # 100T parameters: beyond any model trained so far
        raise InvalidJobSpec(f"invalid parameter count {n_params:g}: expected between 1e7 and 1e14")
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
    "host_speed": (*k.HOST_SPEED_BOUNDS, False),  # as JobSpec.host_speed
}


def _check_ranges(**values: float | None) -> None:
    for name, value in values.items():
        if value is None:
            continue
        low, high, inclusive = _RANGES[name]
        above = value >= low if inclusive else value > low
        if isinstance(value, bool) or not math.isfinite(value) or not above or value > high:
            raise InvalidJobSpec(f"invalid {name} {value!r}: must lie in {'[' if inclusive else '('}{low:g}, {high:g}]")


def _a(x: int) -> I:
    return np.array([x], dtype=np.int64)


def _quant_code(method: int, weight_precision: str) -> int:
    if weight_precision == "auto":
        return Q4 if method == QLORA else Q16
    return {"16-bit": Q16, "int8": Q8, "nf4": Q4}[weight_precision]


@dataclass(frozen=True)
class _OneRow:
    """An estimate's configuration, resolved and checked by the planner's own rules: the inputs of
    a one-row candidate table."""

    arch: ModelArch
    band: float
    where: str
    sizes: ModelSizes
    opts: MemoryOptions
    setup: Setup
    ckpt: I

    def terms(self, seq_len: int, accumulating: bool = False) -> MemoryTerms:
        s = self.setup
        return memory_terms(
            self.sizes, self.opts, seq_len, s.method, s.quant, s.shard, self.ckpt, s.n_gpus, accumulating
        )


def _one_row(
    model: str | ModelArch | Path | float,
    catalog: Catalog,
    opts: MemoryOptions,
    *,
    method: str,
    weight_precision: str,
    sharding: str,
    n_gpus: int,
    gradient_checkpointing: bool,
    lora_rank: int,
) -> _OneRow:
    if sharding not in SHARD_NAMES:
        raise InvalidJobSpec(f"invalid sharding {sharding!r}: choose one of {', '.join(SHARD_NAMES)}")
    if opts.quant_kernel not in QUANT_KERNELS:
        raise InvalidJobSpec(f"invalid quant_kernel {opts.quant_kernel!r}: choose {', '.join(QUANT_KERNELS)}")
    if opts.optimizer_step not in OPTIMIZER_STEPS:
        raise InvalidJobSpec(f"invalid optimizer_step {opts.optimizer_step!r}: choose {' or '.join(OPTIMIZER_STEPS)}")
    m = METHOD_NAMES.index(method)
    setup = Setup(
        method=_a(m),
        quant=_a(_quant_code(m, weight_precision)),
        shard=_a(SHARD_NAMES.index(sharding)),
        n_gpus=_a(n_gpus),
        runtime=opts.framework,
        quant_kernel=opts.quant_kernel,
    )
    refuse_broken(SETUP_RULES, setup)
    arch, band, where = resolve_arch(model, catalog)
    sizes = ModelSizes.of(arch, lora_rank, opts.lora_targets, opts.framework)
    return _OneRow(arch, band, where, sizes, opts, setup, _a(int(gradient_checkpointing)))


def _one_gpu(
    catalog: Catalog, gpu: str, row: _OneRow, n_gpus: int, nodes: int, inter_node_gbit_per_s: float | None = None
) -> Hardware:
    """One GPU setup (as the table builds it), refused where the planner would never run the row on it."""
    gbit = inter_node_gbit_per_s if inter_node_gbit_per_s is not None else DEFAULT_INTER_NODE_GBIT
    hw = hardware([catalog.gpu(gpu)], _a(0), _a(n_gpus), _a(nodes), np.array([gbit], dtype=np.float64))
    refuse_broken(GPU_RULES, OnGpu.of(row.setup.quant, hw, slice(None), row.opts.stack), prefix=f"GPU {gpu!r}: ")
    return hw


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
    row = _one_row(
        model,
        catalog,
        opts,
        method=method,
        weight_precision=weight_precision,
        sharding=sharding,
        n_gpus=n_gpus,
        gradient_checkpointing=gradient_checkpointing,
        lora_rank=lora_rank,
    )
    terms = row.terms(seq_len, accumulating=grad_accum > 1)
    parts = {name: float(v[0]) / k.GIB for name, v in terms.parts(_a(micro_batch)).items()}
    overheads = parts["cuda_context"] + parts["nccl"]
    reserved = float(terms.measured_bytes(_a(micro_batch), reserved=True)[0]) / k.GIB - overheads
    allocated = float(terms.measured_bytes(_a(micro_batch), reserved=False)[0]) / k.GIB - overheads
    step = float(np.ravel(terms.step)[0])
    managed = sum(float(v[0]) for v in terms.managed.values()) / k.GIB
    peak = float(terms.peak_bytes(_a(micro_batch))[0]) / k.GIB
    headroom = k.memory_band(method, opts.stack)  # as the planner's headroom_band, uncalibrated
    usable = fits = roomy = None
    if gpu is not None:
        hw = _one_gpu(catalog, gpu, row, n_gpus, 1)
        usable = round(float(hw.usable_bytes[0]) / k.GIB, 3)
        fits, roomy = peak <= usable, peak * (1.0 + headroom) <= usable
    return MemoryEstimate(
        model=row.arch.name,
        params_b=round(row.sizes.total_params / 1e9, 4),
        method=method,
        weight_precision={Q16: "16-bit", Q8: "int8", Q4: "nf4"}[int(row.setup.quant[0])],
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
        optimizer_step_gib=round(step / k.GIB, 3),
        peak_gib=round(peak, 3),
        error_band=max(headroom, row.band),
        architecture_source=row.where,
        gpu=gpu,
        usable_gib=usable,
        fits=fits,
        headroom_band=headroom,
        fits_with_headroom=roomy,
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
    error_band: float = Field(
        description="relative band of tokens/s: the leave-one-source-out p90 error for the method, "
        "widened on a GPU no measured run used (k.time_band)"
    )


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
    host_speed: float = 1.0,
) -> TimeEstimate:
    """Step time, tokens/s and (optionally) hours of one configuration on `gpu` (physics.md §7-9);
    `host_speed`: the host CPU's single-thread speed (JobSpec.host_speed)."""
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
        host_speed=host_speed,
    )
    if n_gpus % nodes:
        raise InvalidJobSpec(f"invalid nodes: {n_gpus} GPUs do not split evenly over {nodes} nodes")
    row = _one_row(
        model,
        catalog,
        opts,
        method=method,
        weight_precision=weight_precision,
        sharding=sharding,
        n_gpus=n_gpus,
        gradient_checkpointing=gradient_checkpointing,
        lora_rank=lora_rank,
    )
    hw = _one_gpu(catalog, gpu, row, n_gpus, nodes, inter_node_gbit_per_s)
    refuse_broken(TIMING_RULES, OnGpu.of(row.setup.quant, hw, slice(None), row.opts.stack), prefix=f"GPU {gpu!r}: ")
    u = utilization if utilization is not None else float(hw.utilization[0])
    terms = row.terms(seq_len)
    s = row.setup
    st = step_time(
        row.sizes,
        seq_len,
        terms.stepped,
        s.method,
        s.quant,
        s.shard,
        row.ckpt,
        s.n_gpus,
        _a(micro_batch),
        _a(grad_accum),
        hw.peak_tflops,
        np.array([u], dtype=np.float64),
        hw.memory_bandwidth_gb_per_s,
        hw.bus_gb_per_s,
        opts.dequant_kernel,
        host_speed,
    )
    hours = None if train_tokens is None else train_tokens / real_token_fraction / float(st.tokens_per_s[0]) / 3600.0
    return _time_estimate(
        row, gpu, hw, st, u, seq_len=seq_len, micro_batch=micro_batch, grad_accum=grad_accum, nodes=nodes, hours=hours
    )


def _time_estimate(
    row: _OneRow,
    gpu: str,
    hw: Hardware,
    st: StepTime,
    u: float,
    *,
    seq_len: int,
    micro_batch: int,
    grad_accum: int,
    nodes: int,
    hours: float | None,
) -> TimeEstimate:
    s = row.setup
    tps = float(st.tokens_per_s[0])
    n_gpus = int(s.n_gpus[0])
    return TimeEstimate(
        model=row.arch.name,
        gpu=gpu,
        method=METHOD_NAMES[int(s.method[0])],
        n_gpus=n_gpus,
        nodes=nodes,
        sharding=SHARD_NAMES[int(s.shard[0])],
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        seq_len=seq_len,
        gradient_checkpointing=bool(row.ckpt[0]),
        flops_per_token=float(flops_per_token(row.sizes, seq_len, s.method, row.ckpt)[0]),
        peak_tflops=float(hw.peak_tflops[0]),
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
        # A bare parameter count guesses the shapes: its band holds for the time as for the memory.
        error_band=round(max(k.time_band(METHOD_NAMES[int(s.method[0])], gpu), row.band), 3),
    )
