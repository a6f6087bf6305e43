"""Every physical coefficient the estimators use, in one place, with its source.

Nothing here was fitted yet unless `fitted_on` says so; the defaults are the values that
../shared/docs/physics.md recommends, and the accuracy benchmarks in benchmarks/ report how far
they are from measured runs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Coefficient:
    value: float
    unit: str
    source: str
    fitted_on: str = "not fitted: literature value"


GIB = 2**30
_FITTED = (
    "constrained least squares on the 254 evaluable rows with a memory figure in data/measured.csv "
    "(LitGPT resource tables and config hub, Qwen README, ms-swift benchmark and examples, philschmid, "
    "universal-llm-trainer), each row read with its stack's mechanisms (loss, adapter dtype, "
    "checkpointing, fragmentation of variable-length batches; the fragmentation chosen by the rows it "
    "prices), constrained so that no run that succeeded is predicted not to fit its card; "
    "benchmarks/memory_accuracy.py --fit, 2026-12-03. Leave-one-source-out validation of the same fit "
    "is the benchmark's headline"
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
    1.409,
    "x the lean derivation of saved activations (c = 41 bytes·s·b·h per layer for Llama-3-8B)",
    "physics.md §3.2: implementations keep extra copies (fp32 norm intermediates, RoPE outputs); "
    "stas00/ml-engineering measured c ≈ 56 for HF Llama-3.1-8B, i.e. 1.37",
    _FITTED,
)
RESERVED_FRAGMENTATION = Coefficient(
    1.9,
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
# `method/stack` with at least 5 rows (never narrower than the method's unless two sources give 5
# rows each), else per method, else overall. Printed by
# benchmarks/memory_accuracy.py ("bands"), 2026-12-03; tests/test_accuracy.py keeps these at
# least as wide as what the benchmark measures.
MEMORY_BANDS: dict[str, float] = {
    "all": 0.180,
    "full": 0.182,
    "full/deepspeed": 0.182,
    "full/hf": 0.182,
    "full/litgpt": 0.182,
    "full/ms-swift": 0.297,
    "lora": 0.194,
    "lora/deepspeed": 0.196,
    "lora/hf": 0.273,
    "lora/litgpt": 0.122,
    "lora/ms-swift": 0.194,
    "qlora": 0.171,
    "qlora/deepspeed": 0.171,
    "qlora/hf": 0.171,
    "qlora/litgpt": 0.149,
    "qlora/ms-swift": 0.289,
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
        2.475,
        "GiB",
        "HF Trainer/PEFT runtime buffers",
        _FITTED + " (the hf rows: Qwen README LoRA, philschmid, universal-llm-trainer)",
    ),
    "deepspeed": Coefficient(
        2.278,
        "GiB",
        "as hf; the DeepSpeed buckets are modelled apart",
        _FITTED + " (the DeepSpeed rows: Qwen README full, Q-LoRA and multi-GPU; ms-swift ZeRO-3)",
    ),
    "litgpt": Coefficient(0.0, "GiB", "LitGPT/Lightning Fabric runtime buffers", _FITTED + " (bounded at 0)"),
    "ms-swift": Coefficient(
        1.583,
        "GiB",
        "ms-swift runtime buffers, and what its variable-length runs hold beyond the modelled dynamic memory",
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
    "least squares on the 174 throughput rows of data/measured.csv (Qwen README on A100-80G, LLM "
    "Foundry MPT on A100/H100, VectorLM Llama-3-8B FSDP on A100-80G, optimum-benchmark Llama-2 at 256 "
    "tokens on A100-80G and RTX 4090, the 4090 rows in the Ampere column at its matmul ratio); "
    "benchmarks/throughput_accuracy.py "
    "--fit, 2026-12-02; leave-one-source-out validation is the benchmark's headline"
)

# --- throughput ---------------------------------------------------------------------------
# Hardware utilization u on real tokens, fitted per architecture on the GPU its rows ran on
# (UTILIZATION_REFERENCE_GPU); the key is gpus.csv's architecture name.
UTILIZATION_BY_ARCH_FITTED: dict[str, Coefficient] = {
    "Hopper": Coefficient(
        0.508, "of dense 16-bit peak", "physics.md §8: 0.38-0.46 MFU reported for H100", _THROUGHPUT_FIT
    ),
    "Ampere": Coefficient(
        0.605,
        "of dense 16-bit peak",
        "physics.md §8: 0.44-0.58 on A100 (EleutherAI, fms-fsdp)",
        _THROUGHPUT_FIT,
    ),
}
UTILIZATION_REFERENCE_GPU = {"Ampere": "a100-sxm-80gb", "Hopper": "h100-sxm"}

# The fraction of the catalog's dense 16-bit peak (gpus.csv) that a large bf16 matmul reaches on
# each GPU (fp16 where the GPU has no bf16). Training time is mostly such matmuls, so a GPU's
# utilization is its architecture's fitted utilization scaled by how much of its peak its matmuls
# reach (utilization_for): a power-limited PCIe card, a clock-boosting GeForce card and a datasheet
# that overstates the peak all show here. Hopper's fitted u over Ampere's (0.85) is close to their
# matmul ratio (0.94), which is what this rule assumes.
_ZZC = "zzc0721/torch-performance-test-data database.md @9d82827 (torch matmul, square sizes to 10240, best)"
_MAMF = "stas00/ml-engineering compute/accelerator/README.md @744d01e MAMF table"
_MATMUL = "of the dense 16-bit peak in gpus.csv, reached by a large bf16 matmul"
MATMUL_EFFICIENCY: dict[str, Coefficient] = {
    name: Coefficient(round(reached / peak, 3), _MATMUL, f"{source}: {reached} of {peak} TFLOP/s; {note}")
    for name, reached, peak, source, note in (
        ("a100-sxm-80gb", 264.53, 312.0, _ZZC, "'A100 SXM4 80GB' (A800 SXM4 80GB: 266.48)"),
        ("a100-sxm-40gb", 264.53, 312.0, _ZZC, "as the 80 GB card, the same chip and clocks"),
        ("a100-pcie-40gb", 234.14, 312.0, _ZZC, "'A100-PCIE-40GB'"),
        ("a100-pcie-80gb", 234.14, 312.0, _ZZC, "as A100-PCIE-40GB, the same chip"),
        ("rtx-a6000", 123.34, 154.8, _ZZC, "'RTX A6000'"),
        ("rtx-3090", 76.58, 71.0, _ZZC, "median of 3 'RTX 3090' rows; boost clocks exceed the spec"),
        ("h100-sxm", 790.59, 989.5, _ZZC, "median of 2 'H100 80GB HBM3' rows (797.51, 783.66)"),
        ("h200-sxm", 790.29, 989.5, _ZZC, "'H200'"),
        ("h100-pcie", 499.88, 756.5, _ZZC, "mean of 'H100 PCIe' 495.93 and 'H800 PCIe' 503.83"),
        ("gh200-96gb", 828.6, 989.0, _MAMF, "GH200 SXM 900 W (MAMF's theory 989; gpus.csv 989.5)"),
        ("gh200-144gb", 828.6, 989.0, _MAMF, "GH200 SXM 900 W, 141 GiB HBM3e version (theory 989; gpus.csv 989.5)"),
        ("rtx-4090", 165.26, 165.2, _ZZC, "median of 6 24 GB 'RTX 4090' rows (162.39-173.31)"),
        ("l40s", 269.15, 362.05, _ZZC, "'L40S'"),
        ("l4", 70.89, 121.0, _ZZC, "'L4'"),
        ("rtx-5090", 238.04, 209.5, _ZZC, "median of 4 'RTX 5090' rows (221.65-242.18)"),
        ("rtx-pro-6000-blackwell", 409.42, 503.8, _ZZC, "'RTX PRO 6000 Blackwell Server Edition'"),
        ("b200", 1696.03, 2250.0, _ZZC, "'B200 180GB' (ml-engineering MAMF: 1745.0)"),
        ("b300", 1769.0, 2250.0, _MAMF, "B300 SXM"),
        ("gb200", 1822.0, 2500.0, _MAMF, "GB200 SXM"),
        ("t4", 41.93, 65.0, _ZZC, "fp16, median of 3 'Tesla T4' rows (no bf16)"),
        ("v100-sxm2-16gb", 94.84, 125.0, _ZZC, "fp16, 'Tesla V100-SXM2-16GB' (no bf16)"),
        ("v100-sxm2-32gb", 94.84, 125.0, _ZZC, "fp16, as the 16 GB card"),
        # The MAMF row measured one of the package's two GCDs against that GCD's 191.5: the same share
        # of the package's 383 in gpus.csv.
        ("mi250x", 147.0, 191.5, "stas00/ml-engineering @359ee1c MAMF table", "one GCD of two"),
        ("mi300x", 668.4, 1307.4, _MAMF, "PYTORCH_TUNABLEOP_ENABLED=1"),
        ("mi325x", 784.9, 1307.4, _MAMF, "PYTORCH_TUNABLEOP_ENABLED=1, 1000 W"),
        ("gaudi2", 418.7, 432.0, _MAMF, "PT_HPU_LAZY_MODE=1"),
        ("gaudi3", 1243.0, 1835.0, _MAMF, "PT_HPU_LAZY_MODE=1; MAMF's theory column says 1677"),
    )
}


def _fitted_per_matmul() -> float:
    """Utilization per unit of matmul efficiency, averaged over the fitted architectures."""
    return statistics.fmean(
        UTILIZATION_BY_ARCH_FITTED[arch].value / MATMUL_EFFICIENCY[gpu].value
        for arch, gpu in UTILIZATION_REFERENCE_GPU.items()
    )


# The GPUs of each architecture whose matmul efficiency is measured, one per chip and power envelope
# (the 40 and 80 GB A100s share theirs). Their median stands in for a GPU of the architecture with no
# measurement of its own.
MATMUL_GPUS_BY_ARCH: dict[str, tuple[str, ...]] = {
    "Ampere": ("a100-sxm-80gb", "a100-pcie-40gb", "rtx-a6000", "rtx-3090"),
    "Hopper": ("h100-sxm", "h100-pcie", "gh200-96gb"),
    "Ada": ("rtx-4090", "l40s", "l4"),
    "Blackwell": ("b200", "gb200", "rtx-5090", "rtx-pro-6000-blackwell"),
    "Blackwell Ultra": ("b300",),
    "Turing": ("t4",),
    "Volta": ("v100-sxm2-16gb",),
    "CDNA2": ("mi250x",),
    "CDNA3": ("mi300x", "mi325x"),
    "Gaudi2": ("gaudi2",),
    "Gaudi3": ("gaudi3",),
}


def _arch_median(architecture: str) -> tuple[float, str]:
    """(the median matmul efficiency of the architecture's measured GPUs, where it comes from)."""
    measured = MATMUL_GPUS_BY_ARCH[architecture]
    median = statistics.median(MATMUL_EFFICIENCY[g].value for g in measured)
    return median, f"the median matmul efficiency of {', '.join(measured)}"


def _matmul_efficiency(gpu: str, architecture: str) -> tuple[float, str]:
    """(the GPU's matmul efficiency, where it comes from): its own measurement, else its
    architecture's median (an assumption)."""
    if gpu in MATMUL_EFFICIENCY:
        return MATMUL_EFFICIENCY[gpu].value, f"{gpu}'s matmul efficiency"
    median, where = _arch_median(architecture)
    return median, f"assumed: {where} ({gpu} has no measurement)"


def _carried(eff: float, where: str) -> Coefficient:
    """The fitted utilization per unit of matmul efficiency (Ampere, Hopper) times `eff`."""
    return Coefficient(
        _fitted_per_matmul() * eff,
        "of dense 16-bit peak",
        f"derived: fitted utilization per unit of matmul efficiency (Ampere, Hopper) x {where}",
        _THROUGHPUT_FIT,
    )


def _derived_arch(arch: str) -> Coefficient:
    """An architecture without fitted rows, at the median efficiency of its measured GPUs."""
    out = _carried(*_arch_median(arch))
    return replace(out, value=round(out.value, 3))


# Every architecture in gpus.csv has an entry (a test checks it): no silent default.
UTILIZATION_BY_ARCH: dict[str, Coefficient] = dict(UTILIZATION_BY_ARCH_FITTED) | {
    arch: _derived_arch(arch) for arch in MATMUL_GPUS_BY_ARCH if arch not in UTILIZATION_BY_ARCH_FITTED
}


def utilization_for(gpu: str, architecture: str) -> Coefficient:
    """The utilization of one GPU: its architecture's fitted one, scaled by its matmul efficiency
    over that of the GPU the architecture was fitted on; for an architecture without fitted runs,
    the fitted utilization per unit of matmul efficiency times its efficiency."""
    eff, where = _matmul_efficiency(gpu, architecture)
    if architecture in UTILIZATION_REFERENCE_GPU:
        fitted = UTILIZATION_BY_ARCH[architecture]
        ref = UTILIZATION_REFERENCE_GPU[architecture]
        ratio = eff / MATMUL_EFFICIENCY[ref].value
        if ratio == 1.0:
            return fitted
        return replace(
            fitted, value=fitted.value * ratio, source=f"{fitted.source}; x {ratio:.3f}: {where} over {ref}'s"
        )
    return _carried(eff, where)


# The band each time estimate states: the 90th percentile of |tokens/s error| when the constants
# are fitted on every other source and the row's source is predicted (leave-one-source-out), per
# `method/gpu` with at least 5 rows, else per method. Printed by benchmarks/throughput_accuracy.py
# ("bands"), 2026-12-02; tests/test_accuracy.py keeps these at least as wide as what it measures.
TIME_BANDS: dict[str, float] = {
    "all": 0.329,
    "full": 0.234,
    "full/a100-sxm-40gb": 0.183,
    "full/a100-sxm-80gb": 0.239,
    "full/h100-sxm": 0.227,
    "lora": 0.366,
    "lora/a100-sxm-80gb": 0.366,
    "qlora": 0.327,
    "qlora/a100-sxm-80gb": 0.32,
    "qlora/rtx-4090": 0.338,
}
# The GPUs of the benchmark's rows (a test checks it): on any other GPU the utilization is carried
# over by matmul efficiency, unvalidated, and the band widens by how far that rule misses between
# the two fitted architectures (utilization_transfer_band).
THROUGHPUT_MEASURED_GPUS = frozenset({"a100-sxm-40gb", "a100-sxm-80gb", "h100-sxm", "rtx-4090"})


def utilization_transfer_band() -> float:
    """|1 - (Hopper's fitted u / Ampere's) / (their matmul-efficiency ratio)|: how far carrying a
    utilization over by matmul efficiency missed where both ends were measured."""
    (a, ref_a), (h, ref_h) = (
        (UTILIZATION_BY_ARCH_FITTED[arch].value, MATMUL_EFFICIENCY[gpu].value)
        for arch, gpu in sorted(UTILIZATION_REFERENCE_GPU.items())
    )
    return abs(1.0 - (h / a) / (ref_h / ref_a))


def time_band(method: str, gpu: str) -> float:
    """The validated tokens/s band for this method on this GPU (its own where it has 5 measured runs
    of the method), widened on a GPU no measured run used."""
    band = TIME_BANDS.get(f"{method}/{gpu}", TIME_BANDS.get(method, TIME_BANDS["all"]))
    return band if gpu in THROUGHPUT_MEASURED_GPUS else band + utilization_transfer_band()


PER_LAYER_PASS_S = Coefficient(
    0.00118,
    "seconds per decoder layer per pass (forward, backward, recompute) of each micro-batch",
    "assumption: kernel-launch and framework overhead that does not scale with tokens, on the reference "
    "host (HOST_SPEED_BY_CPU); visible as low tokens/s at short sequences in the Qwen README profiling table",
    _THROUGHPUT_FIT,
)
# The per-layer overhead is the host issuing kernels from Python (eager PyTorch at short
# micro-batches is launch-bound), so it scales with the inverse of the host CPU's single-thread
# speed (JobSpec.host_speed). The fitted PER_LAYER_PASS_S is taken as that of a datacenter host of
# the A100 generation, an AMD EPYC 7742 (DGX A100's CPU; optimum-benchmark's A100 host): speed 1.
# A host's speed is its boost clock times its core's IPC relative to Zen 2, from the vendor's figures.
REFERENCE_HOST = "AMD EPYC 7742"
HOST_SPEED_BOUNDS = (0.2, 5.0)  # exclusive, inclusive: what a job, a run or an estimate may state
HOST_SPEED_BY_CPU: dict[str, Coefficient] = {
    REFERENCE_HOST: Coefficient(
        1.0, "x the reference host's single-thread speed", "the reference (Zen 2, 3.4 GHz boost)"
    ),
    "AMD Ryzen 9 7950X": Coefficient(
        2.25,
        "x the reference host's single-thread speed",
        "5.7 / 3.4 GHz boost x 1.19 (Zen 3 IPC over Zen 2) x 1.13 (Zen 4 over Zen 3): boost clocks "
        "hardwaretimes.com (7950X 5.7 GHz) and islabit.com (EPYC 7763 at 3.5 GHz is 100 MHz above the 7742); "
        "IPC as AMD announced it (pcgamer.com 2020-10-08: +19%; hardwaretimes.com: Zen 4 +13%)",
    ),
}
ZERO_LAYER_PASS_S = Coefficient(
    0.00084,
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
    "torchao": Coefficient(
        35.0,
        "bytes moved per quantized base parameter per dequantization",
        "pytorch/ao @36027d8 torchao/quantization/quantize_/workflows/nf4/nf4_tensor.py "
        "NF4Tensor.get_original_weight, run eagerly by torchtune's linear_nf4 (LinearNF4.forward and "
        "backward): per element, >> 4 and & 0b1111 (0.5 + 0.5 each), .to(torch.long) (0.5 + 4 each), "
        "nf4[index] (4 + 1 each), repeated.flatten() twice (1 each), the two scalings (3 each), "
        "torch.stack (2 + 2); the matmul reads the bf16 weight (2): 35",
    ),
    "torchao-compiled": Coefficient(
        4.5,
        "bytes moved per quantized base parameter per dequantization",
        "inferred: under torch.compile Inductor fuses get_original_weight's element-wise chain into one "
        "kernel that reads the packed NF4 (0.5 B) and writes the bf16 weight (2), which the matmul reads (2), "
        "as bitsandbytes does; not measured",
    ),
}
# The transient memory of one dequantization, per element of the largest quantized linear (the
# weight a kernel expands at a time, forward or backward).
DEQUANT_WORKSPACE_BYTES_PER_ELEMENT: dict[str, Coefficient] = {
    "bitsandbytes": Coefficient(
        2.0,
        "bytes per weight element while one linear is dequantized",
        "bitsandbytes autograd/_functions.py MatMul4Bit: F.dequantize_4bit(B, quant_state) makes the bf16 "
        "weight of one linear for its matmul and frees it after",
    ),
    "gptq": Coefficient(
        0.0,
        "bytes per weight element while one linear is dequantized",
        "GPTQ kernels dequantize tile by tile inside the matmul and hold no bf16 copy",
    ),
    "torchao": Coefficient(
        14.0,
        "bytes per weight element while one linear is dequantized",
        "pytorch/ao @36027d8 nf4_tensor.py get_original_weight keeps every intermediate until it returns: "
        "first_elements and second_elements in int64 (4 + 4 per element of the weight), dequantized_first "
        "and _second (1 + 1), scaled_first and _second (1 + 1) and the stacked bf16 weight (2): 14",
    ),
    "torchao-compiled": Coefficient(
        2.0,
        "bytes per weight element while one linear is dequantized",
        "inferred: a fused dequantization kernel holds only the bf16 weight it writes, as bitsandbytes does",
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
