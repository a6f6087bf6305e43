"""Training throughput and step time (physics.md §7-9), vectorized over configurations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ftsolve._errors import CatalogError
from ftsolve.catalog import GpuSpec
from ftsolve.solver import _coefficients as k
from ftsolve.solver._memory import (
    DDP,
    FULL,
    Q4,
    Q8,
    Q16,
    ZERO1,
    ZERO2,
    ZERO3,
    ModelSizes,
    base_weight_bytes,
)

F = NDArray[np.float64]
I = NDArray[np.int64]


def flops_per_token(sizes: ModelSizes, seq_len: int, method: I, ckpt: I) -> F:
    """Hardware FLOPs per trained token, recompute included (physics.md §7).

    Full FT: 6·N_f; LoRA/QLoRA: 4·N_f + 6·P_L (no weight-gradient matmul for frozen weights);
    gradient checkpointing adds one forward. Attention scores and AV with a causal flash
    kernel: 2·L·s·q_dim forward, three times that forward + backward.
    """
    nf = sizes.matmul_params_active
    attn_fwd = 2.0 * sizes.layers * seq_len * sizes.q_dim
    dense = np.where(method == FULL, 6.0 * nf, 4.0 * nf + 6.0 * sizes.lora_params)
    recompute = np.where(ckpt == 1, 2.0 * nf + attn_fwd, 0.0)
    return dense + 3.0 * attn_fwd + recompute


def utilization(gpu: GpuSpec) -> k.Coefficient:
    """The GPU's hardware utilization: its architecture's, scaled by how much of its peak its
    matmuls reach (_coefficients.utilization_for); every architecture in gpus.csv has an entry."""
    try:
        return k.utilization_for(gpu.name, gpu.architecture)
    except KeyError:
        raise CatalogError(
            f"GPU {gpu.name!r}: no utilization for architecture {gpu.architecture!r}; add it to "
            "UTILIZATION_BY_ARCH in solver/_coefficients.py"
        ) from None


def intra_node_bus_gb_per_s(gpu: GpuSpec) -> float:
    """NCCL bus bandwidth between GPUs of one node (physics.md §9.2)."""
    if gpu.has_nvlink_fabric and gpu.nvlink_bandwidth_gb_per_s:
        return k.NVLINK_BUS_FRACTION.value * gpu.nvlink_bandwidth_gb_per_s / 2.0
    if gpu.has_nvlink_fabric:  # AMD/Intel OAM fabrics: no per-direction figure in gpus.csv
        return k.PCIE_BUS_GB_PER_S["pcie5"].value * 4
    if gpu.name.startswith("rtx-") and "ada" not in gpu.name and "a6000" not in gpu.name and "pro" not in gpu.name:
        return k.PCIE_BUS_GB_PER_S["consumer"].value
    for gen in ("pcie5", "pcie4", "pcie3"):
        if gen in gpu.interconnect:
            return k.PCIE_BUS_GB_PER_S[gen].value
    return k.PCIE_BUS_GB_PER_S["pcie4"].value


def bus_gb_per_s(intra_gb_per_s: F, nodes: I, inter_node_gbit: F) -> F:
    """NCCL bus bandwidth of a job: the node's, or the network's where the job spans nodes and the
    network is slower (physics.md §9.2)."""
    inter = inter_node_gbit * k.INTER_NODE_EFFICIENCY.value / 8.0
    out: F = np.where(nodes > 1, np.minimum(intra_gb_per_s, inter), intra_gb_per_s)
    return out


@dataclass(frozen=True)
class StepTime:
    """Per-configuration step time and its parts (seconds), and tokens per second overall."""

    compute_s: F
    comm_s: F
    exposed_comm_s: F
    optimizer_s: F
    step_s: F
    tokens_per_step: F
    tokens_per_s: F
    utilization: F


def dequant_bytes_per_param(quant_kernel: str, ckpt: I) -> F:
    """Memory traffic per quantized base parameter per micro-batch to expand it to 16 bits.

    bitsandbytes and torchao's NF4 dequantize in forward, again in backward for the input's
    gradient (MatMul4Bit and LinearNF4 save the quantized weight), and in the recompute: 2 + ckpt
    times. auto-gptq's torch path
    keeps the fp16 weight it made for backward (torch.matmul saves it): forward and recompute,
    1 + ckpt times, and backward reads the saved weight once more (2 B).
    """
    per = k.DEQUANT_BYTES_PER_PARAM[quant_kernel].value
    recompute = ckpt.astype(np.float64)
    if quant_kernel == "gptq":
        return (1.0 + recompute) * per + 2.0
    return (2.0 + recompute) * per


def step_time(
    sizes: ModelSizes,
    seq_len: int,
    stepped_bytes: F,
    method: I,
    quant: I,
    shard: I,
    ckpt: I,
    n_gpus: I,
    micro_batch: I,
    grad_accum: I,
    peak_tflops: F,
    util: F,
    mem_bw_gb_per_s: F,
    bus_gb_per_s: F,
    quant_kernel: str = "bitsandbytes",
    host_speed: float = 1.0,
) -> StepTime:
    """Time of one optimizer step on n GPUs (data parallel over all of them)."""
    n = n_gpus.astype(np.float64)
    b = micro_batch.astype(np.float64)
    m = grad_accum.astype(np.float64)
    tokens_mb = b * seq_len
    flops_mb = tokens_mb * flops_per_token(sizes, seq_len, method, ckpt)
    compute = flops_mb / (peak_tflops * 1e12 * util)
    # Roofline: every pass streams the (unsharded) weights once; small micro-batches are
    # bandwidth-bound (physics.md §8).
    passes = 2.0 + ckpt
    weight_bytes = np.where(method == FULL, sizes.total_params * 2.0, base_weight_bytes(sizes, method, quant))
    stream = passes * weight_bytes / (mem_bw_gb_per_s * 1e9 * k.WEIGHT_STREAM_EFFICIENCY.value)
    # Fixed work per micro-batch that does not shrink with fewer tokens: kernel launches and
    # framework overhead per layer and pass, and dequantizing quantized bases every pass
    # (memory-bound, physics.md §7: about 4.5 bytes moved per base parameter per pass).
    launch = passes * sizes.layers * k.PER_LAYER_PASS_S.value / host_speed  # host-bound (HOST_SPEED_BY_CPU)
    dequant = np.where(
        quant != Q16,
        sizes.linear_params
        * dequant_bytes_per_param(quant_kernel, ckpt)
        / (mem_bw_gb_per_s * 1e9 * k.WEIGHT_STREAM_EFFICIENCY.value),
        0.0,
    )
    # ZeRO-2/3 hook every layer in every pass (parameter fetch or gradient reduce-scatter); the
    # latency of those small collectives does not overlap well (DeepSpeed issue #1174).
    zero_hooks = np.where((shard == ZERO2) | (shard == ZERO3), passes * sizes.layers * k.ZERO_LAYER_PASS_S.value, 0.0)
    per_mb = np.maximum(compute, stream) + launch + dequant + zero_hooks
    factor = np.select([quant == Q4, quant == Q8], [k.QLORA_TIME_FACTOR.value, k.INT8_TIME_FACTOR.value], 1.0)
    per_mb = per_mb * np.where(method == FULL, 1.0, factor)

    # Communication per step, bytes per GPU (physics.md §9.1, ring collectives).
    ring = np.where(n > 1, (n - 1.0) / n, 0.0)
    psi_train = np.where(method == FULL, sizes.total_params * 2.0, sizes.lora_params * 4.0)
    psi_base = weight_bytes
    dp_volume = 2.0 * ring * psi_train
    zero2_volume = (m + 1.0) * ring * psi_train
    # ZeRO-3: gather forward + gather backward (+ gather for recompute) and reduce-scatter grads.
    zero3_volume = m * ring * ((2.0 + ckpt) * psi_base + psi_train)
    volume = np.select(
        [shard == DDP, shard == ZERO1, shard == ZERO2, shard == ZERO3],
        [dp_volume, dp_volume, zero2_volume, zero3_volume],
        0.0,
    )
    comm = volume / (bus_gb_per_s * 1e9)
    compute_step = m * per_mb
    exposed = np.maximum(0.0, comm - k.OVERLAP_ETA.value * compute_step)
    # Optimizer step: read and write what it steps once (MemoryTerms.stepped).
    opt = 2.0 * stepped_bytes / (mem_bw_gb_per_s * 1e9 * k.WEIGHT_STREAM_EFFICIENCY.value)
    step = compute_step + exposed + opt
    tokens_step = tokens_mb * m * n
    return StepTime(
        compute_s=compute_step,
        comm_s=comm,
        exposed_comm_s=exposed,
        optimizer_s=opt,
        step_s=step,
        tokens_per_step=tokens_step,
        tokens_per_s=tokens_step / step,
        utilization=util,
    )
