"""Every physical coefficient the estimators use, in one place, with its source.

Nothing here was fitted yet unless `fitted_on` says so; the defaults are the values that
../shared/docs/physics.md recommends, and the accuracy benchmarks in benchmarks/ report how far
they are from measured runs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Coefficient:
    value: float
    unit: str
    source: str
    fitted_on: str = "not fitted: literature value"


GIB = 2**30
_FITTED = (
    "constrained least squares on the 209 evaluable rows with a memory figure in data/measured.csv "
    "(LitGPT resource tables and config hub, Qwen README, ms-swift benchmark and examples, philschmid), "
    "each row read with its stack's mechanisms (loss, adapter dtype, checkpointing, fragmentation of "
    "variable-length batches), constrained so that no run that succeeded is predicted not to fit its "
    "card; benchmarks/memory_accuracy.py --fit, 2026-12-02. Leave-one-source-out validation of the "
    "same fit is the benchmark's headline"
)

# --- memory -------------------------------------------------------------------------------
USABLE_MEMORY_FRACTION = Coefficient(
    0.98,
    "of nominal card memory, for a GPU without a visible total in gpus.csv",
    "the share CUDA exposes (A100-80GB: ~79.2 of 80 GiB; assumption, verify on a GPU). physics.md §5's "
    "~95% predates the explicit context, runtime and dynamic-margin terms, which now carry the headroom",
)
DRIVER_RESERVED_MIB = Coefficient(
    620.0,
    "MiB of the nvidia-smi total a process cannot allocate",
    "CUDA deviceQuery total against nvidia-smi total: H100 SXM 81106 of 81559 MiB (thamada/nvidia-smi "
    "nvsim/H100SXMx8_deviceQuery.py), A100-SXM4-40GB 40339 of 40960 MiB (bottlerocket-os/bottlerocket#3873); "
    "the larger gap, rounded",
)
DYNAMIC_MARGIN = Coefficient(
    0.10,
    "fraction added to activations and logits",
    "physics.md §5: ~10% multiplicative margin on the dynamic part",
)
ACTIVATION_SCALE = Coefficient(
    1.403,
    "x the lean derivation of saved activations (c = 41 bytes·s·b·h per layer for Llama-3-8B)",
    "physics.md §3.2: implementations keep extra copies (fp32 norm intermediates, RoPE outputs); "
    "stas00/ml-engineering measured c ≈ 56 for HF Llama-3.1-8B, i.e. 1.37",
    _FITTED,
)
RESERVED_FRAGMENTATION = Coefficient(
    1.7,
    "x the short-lived dynamic part (the logits, and with checkpointing the re-materialized layer) "
    "reserved beyond allocated when batches vary in length; bounded to [0, 2]",
    "physics.md §5: reserved - allocated, worse with variable sequence lengths; the few large "
    "short-lived tensors change size with each batch, while activations kept through the step are "
    "reallocated in the same order every step; the caching allocator keeps about two earlier "
    "generations of those blocks at most (hence the bound). Physical prior when unfitted: 1.0",
    _FITTED + " (only ms-swift reports reserved memory of variable-length batches)",
)
EAGER_ATTENTION_BYTES_PER_SCORE = Coefficient(
    6.0,
    "bytes per attention score (a·s per token and layer) without FlashAttention/SDPA",
    "physics.md §3.1: fp32 softmax output for its backward plus the bf16 copy for P·V",
)
# The band each memory estimate states: the 90th percentile of |error| when the coefficients are
# fitted on every other source and the row's source is predicted (leave-one-source-out), per
# `method/stack` with at least 5 rows, else per method, else overall. Printed by
# benchmarks/memory_accuracy.py ("bands"), 2026-12-02; tests/test_accuracy.py keeps these at
# least as wide as what the benchmark measures.
MEMORY_BANDS: dict[str, float] = {
    "all": 0.265,
    "full": 0.218,
    "full/deepspeed": 0.230,
    "full/litgpt": 0.142,
    "full/ms-swift": 0.249,
    "lora": 0.260,
    "lora/deepspeed": 0.200,
    "lora/hf": 0.178,
    "lora/litgpt": 0.148,
    "lora/ms-swift": 0.359,
    "qlora": 0.286,
    "qlora/deepspeed": 0.095,
    "qlora/litgpt": 0.197,
    "qlora/ms-swift": 0.453,
}


def memory_band(method: str, stack: str) -> float:
    """The validated band for this method on this stack; a stack without its own rows gets the
    method's band over all stacks (what an unseen stack's error looked like in validation)."""
    return MEMORY_BANDS.get(f"{method}/{stack}", MEMORY_BANDS.get(method, MEMORY_BANDS["all"]))


CUDA_CONTEXT_GIB = Coefficient(0.9, "GiB per process", "physics.md §5: 0.47-0.92 GiB on A100 with PyTorch 2.1 (stas00)")
NCCL_GIB = Coefficient(
    1.5, "GiB per process when n > 1", "physics.md §5: +~1.5 GiB after the first collective (stas00)"
)
ZERO3_GATHERED_LAYERS = Coefficient(
    2.0, "decoder layers held unsharded", "physics.md §4: FSDP current + prefetched layer"
)
NF4_BYTES_PER_PARAM = Coefficient(
    0.516, "bytes per quantized parameter (NF4 + double quant)", "physics.md §2.4, QLoRA paper §3"
)
NF4_NO_DOUBLE_QUANT_BYTES_PER_PARAM = Coefficient(
    0.5625,
    "bytes per quantized parameter (NF4, one fp32 absmax per 64-weight block)",
    "QLoRA paper §3: 32/64 = 0.5 bits of constants per parameter, 0.127 with double quantization",
)
INT8_BYTES_PER_PARAM = Coefficient(
    1.0, "bytes per quantized parameter (LLM.int8)", "bitsandbytes Linear8bitLt int8 weights"
)
LORA_STATE_BYTES_PER_PARAM = Coefficient(
    16.0,
    "bytes per adapter parameter (fp32 weight, grad, AdamW m and v)",
    "physics.md §2.3: PEFT upcasts adapters to fp32 (autocast_adapter_dtype=True)",
)

# Runtime overheads of training frameworks that the physics does not name: cuBLAS/NCCL
# workspaces, allocator slack, framework buffers. DeepSpeed adds its reduce buckets (modelled
# apart: reduce_bucket_size elements, two under ZeRO-1/2 with overlap_comm) and keeps an
# fp32 gradient copy in full fine-tuning: 18 B/param, DeepSpeed's own estimator (physics.md §2.1).
# Partially pooled: each stack's value is also held to the pooled one as if by one more run
# (benchmarks/memory_accuracy.py fit), so a stack few sources inform stays near the others.
FRAMEWORK_RUNTIME_GIB: dict[str, Coefficient] = {
    "hf": Coefficient(
        3.038, "GiB", "HF Trainer/PEFT runtime buffers", _FITTED + " (the hf rows: Qwen README LoRA, philschmid)"
    ),
    "deepspeed": Coefficient(
        2.302,
        "GiB",
        "as hf; the DeepSpeed buckets are modelled apart",
        _FITTED + " (the DeepSpeed rows: Qwen README full, Q-LoRA and multi-GPU; ms-swift ZeRO-3)",
    ),
    "litgpt": Coefficient(0.0, "GiB", "LitGPT/Lightning Fabric runtime buffers", _FITTED + " (bounded at 0)"),
    "ms-swift": Coefficient(
        3.542,
        "GiB",
        "ms-swift runtime buffers, and what its variable-length runs hold beyond the modelled dynamic memory "
        "(its 2024 benchmark reads about 20% under the model without it)",
        _FITTED + " (the ms-swift rows; no longer held down by its runs at the card's capacity, whose cached "
        "blocks are reclaimed before an OOM)",
    ),
}


def runtime_gib(stack: str) -> Coefficient:
    """The stack's fitted runtime overhead; a stack without measured runs gets the median of the
    fitted stacks (what leave-one-source-out validates: a new stack is an unseen source)."""
    if stack in FRAMEWORK_RUNTIME_GIB:
        return FRAMEWORK_RUNTIME_GIB[stack]
    median = statistics.median(c.value for c in FRAMEWORK_RUNTIME_GIB.values())
    return Coefficient(median, "GiB", f"no measured runs of stack {stack!r}: median of the fitted stacks")


DEEPSPEED_ZERO3_LIVE_ELEMENTS = Coefficient(
    1e9, "parameters gathered at once under ZeRO-3", "DeepSpeed stage3_max_live_parameters default"
)

_THROUGHPUT_FIT = (
    "least squares on the 125 throughput rows of data/measured.csv (Qwen README on A100-80G, LLM "
    "Foundry MPT on A100/H100, VectorLM Llama-3-8B FSDP on A100-80G); benchmarks/throughput_accuracy.py "
    "--fit, 2026-12-02; leave-one-source-out validation is the benchmark's headline"
)

# --- throughput ---------------------------------------------------------------------------
# Hardware utilization u on real tokens by GPU architecture (physics.md §8, recommended defaults).
UTILIZATION_BY_ARCH: dict[str, Coefficient] = {
    "Hopper": Coefficient(
        0.526, "of dense 16-bit peak", "physics.md §8: 0.38-0.46 MFU reported for H100", _THROUGHPUT_FIT
    ),
    "Blackwell": Coefficient(
        0.35,
        "of dense 16-bit peak",
        "assumption: below Hopper until measured (new kernels; physics.md §8 has no data)",
    ),
    "Blackwell Ultra": Coefficient(
        0.35, "of dense 16-bit peak", "assumption: as Blackwell (same kernels; no measurement)"
    ),
    "Ampere": Coefficient(
        0.62,
        "of dense 16-bit peak",
        "physics.md §8: 0.44-0.58 on A100 (EleutherAI, fms-fsdp)",
        _THROUGHPUT_FIT,
    ),
    # The key is gpus.csv's architecture name; a test checks every architecture there has one.
    "Ada": Coefficient(0.45, "of dense 16-bit peak", "physics.md §8: 4090/L40S-class 0.45"),
    "Turing": Coefficient(0.35, "of dense 16-bit peak", "assumption: no fine-tuning measurement in physics.md"),
    "Volta": Coefficient(0.35, "of dense 16-bit peak", "assumption: no fine-tuning measurement in physics.md"),
    "CDNA2": Coefficient(0.35, "of dense 16-bit peak", "assumption: ROCm kernels, no measurement in physics.md"),
    "CDNA3": Coefficient(0.35, "of dense 16-bit peak", "assumption: ROCm kernels, no measurement in physics.md"),
    "Gaudi2": Coefficient(0.35, "of dense 16-bit peak", "assumption: SynapseAI, no measurement in physics.md"),
    "Gaudi3": Coefficient(0.35, "of dense 16-bit peak", "assumption: SynapseAI, no measurement in physics.md"),
}
PER_LAYER_PASS_S = Coefficient(
    0.00131,
    "seconds per decoder layer per pass (forward, backward, recompute) of each micro-batch",
    "assumption: kernel-launch and framework overhead that does not scale with tokens; visible as "
    "low tokens/s at short sequences in the Qwen README profiling table",
    _THROUGHPUT_FIT,
)
ZERO_LAYER_PASS_S = Coefficient(
    0.00142,
    "seconds per decoder layer per pass of each micro-batch under ZeRO-2/3 (collective latency and hooks)",
    "physics.md §9.3 field reports (DeepSpeed #1174: ZeRO-3 forward 8x slower than ZeRO-2)",
    _THROUGHPUT_FIT,
)
# Memory traffic per quantized base parameter each time a kernel expands it to 16 bits (how many
# times per micro-batch: _throughput.dequant_bytes_per_param).
DEQUANT_BYTES_PER_PARAM: dict[str, Coefficient] = {
    "bitsandbytes": Coefficient(
        4.5,
        "bytes moved per quantized base parameter per dequantization",
        "physics.md §7: read 0.52 B of NF4, write the 2 B bf16 weight, read it again for the matmul "
        "(bitsandbytes dequantize_4bit before each matmul)",
    ),
    "gptq": Coefficient(
        18.5,
        "bytes moved per quantized base parameter per dequantization",
        "auto-gptq 0.4.2 qlinear_cuda_old.py forward, the path of every micro-batch of 128 tokens or more "
        "(kernel_switch_threshold) with exllama off, as Qwen's finetune.py loads GPTQ models: read 0.5 B "
        "packed; bitwise_right_shift writes an int32 per element (4); .to(int8) reads it, writes 1 (4 + 1); "
        "bitwise_and in place (1 + 1); weight - zeros (1 + 1); scales * (...) to fp16 (1 + 2); the matmul "
        "reads the fp16 weight (2): 18.5",
    ),
}
QLORA_TIME_FACTOR = Coefficient(
    1.0,
    "x LoRA time on the same GPU, on top of the dequantization term",
    "physics.md §7 (published 1.0-1.8 end to end); the dequantization cost is now explicit",
)
INT8_TIME_FACTOR = Coefficient(
    3.0, "x LoRA time on the same GPU", "gpu_poor src/App.js bnb int8 factor 3.0 (estimators.md §2)"
)
OVERLAP_ETA = Coefficient(0.85, "fraction of compute time that hides communication", "physics.md §9.3: η ≈ 0.8-0.9")
WEIGHT_STREAM_EFFICIENCY = Coefficient(
    0.8, "of nominal memory bandwidth", "assumption: typical achieved HBM/GDDR fraction for large reads"
)
NVLINK_BUS_FRACTION = Coefficient(
    0.77,
    "x per-direction NVLink bandwidth as NCCL bus bandwidth",
    "physics.md §9.2: A100 ~230 of 300 GB/s per direction",
)
PCIE_BUS_GB_PER_S = {
    "pcie3": Coefficient(10.0, "GB/s", "physics.md §9.2 (Gen3 ~ half of Gen4's ~20)"),
    "pcie4": Coefficient(20.0, "GB/s", "physics.md §9.2: PCIe Gen4 x16 ~20 [32]"),
    "pcie5": Coefficient(40.0, "GB/s", "physics.md §9.2: PCIe Gen5 ~40 [64]"),
    "consumer": Coefficient(10.0, "GB/s", "physics.md §9.2: GeForce without peer-to-peer ~10"),
}
INTER_NODE_EFFICIENCY = Coefficient(0.8, "x NIC line rate as bus bandwidth", "physics.md §9.2: 100 GbE ≈ 10 GB/s")
# The network of a provider that publishes none is the catalog's DEFAULT_INTER_NODE_GBIT (one place
# for what the plans and the time estimates assume).

# --- start-up, checkpoints, storage -------------------------------------------------------
ENVIRONMENT_SETUP_MINUTES = Coefficient(
    3.0,
    "minutes per attempt",
    "assumption: image pull / pip install (prices-and-spot.md 2(c) gives only totals)",
)
LOAD_GB_PER_S = Coefficient(1.0, "GB/s from local disk to GPU", "io.net FAQ (2026): 7B load to GPU 15-30 s unoptimized")
CHECKPOINT_WRITE_GB_PER_S = Coefficient(
    1.0, "GB/s to a persistent volume", "assumption: network volume throughput; measure on the target cloud"
)
FULL_CHECKPOINT_BYTES_PER_PARAM = Coefficient(
    14.0,
    "bytes per parameter (bf16 weights + fp32 master and moments)",
    "physics.md §10: resumable full-FT checkpoint 14-16 B/param",
)
LORA_CHECKPOINT_BYTES_PER_PARAM = Coefficient(
    12.0, "bytes per adapter parameter (fp32 weights + AdamW moments)", "physics.md §2.3"
)
HOURS_PER_MONTH = 730.0
