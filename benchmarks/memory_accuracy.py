"""Peak-memory accuracy against measured fine-tuning runs (../shared/data/measured.csv).

    python benchmarks/memory_accuracy.py [--csv PATH] [--fit] [--rows]

Evaluates every measured row that states enough of its configuration (model, method, sequence
length, micro-batch, checkpointing, GPU count and how it is sharded) and prints, per source and
per method, stack and source, the count and the median and 90th-percentile absolute relative error
of the predicted peak: leave-one-source-out (the headline: fit on every other source, predict this
one), then in sample. It counts the fit verdicts twice: at the planning peak (runs that succeeded
but are predicted not to fit, runs that went out of memory and are predicted not to fit), and
with the headroom the planner keeps by default (the peak plus the library's band for the method
and stack, k.memory_band), which leaves out runs that used most of their card although they ran.
`--fit` fits the constants on every source (least squares of relative errors, constrained so
that no run that succeeded is predicted not to fit; see `fit`) and prints them; `--rows` prints
every row.

How rows are read (each choice is the source's own documentation, see MEASURED.md):
- LitGPT (resource tables, config hub): bf16-true weights, torch AdamW (state in bf16, pure-bf16
  regime for full fine-tuning), adapters in bf16, PagedAdamW 32-bit for QLoRA, chunked
  cross-entropy, torch.cuda.max_memory_allocated in GB (1e9). The resource tables use Alpaca
  without a length cap: the peak comes from the longest sample, whose length the tables state for
  each model's tokenizer (phi-1.5 1044 tokens, StableLM Alpha 1034, Llama 2 1304, Falcon 1079).
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
import contextlib
import csv
import functools
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from ftsolve.catalog import Catalog, GpuSpec, ModelArch, arch_from_config, load_catalog, load_gpus, resolve_gpu
from ftsolve.solver import _coefficients as k
from ftsolve.solver._estimate import MemoryEstimate, estimate_memory
from ftsolve.solver._hardware import usable_gib
from ftsolve.solver._memory import MemoryOptions
from ftsolve.solver._stacks import STACK_NAMES

Method = Literal["full", "lora", "qlora"]
WeightPrecision = Literal["auto", "16-bit", "int8", "nf4"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT / "data" / "measured.csv"
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
    "meta-llama/meta-llama-3-8b": "llama-3.1-8b",
    "qwen/qwen2.5-7b": "qwen2.5-7b",
    "qwen/qwen2.5-7b-instruct": "qwen2.5-7b",
    "qwen/qwen2.5-3b-instruct": "qwen2.5-3b",
    "qwen/qwen2.5-14b": "qwen2.5-14b",
    "qwen/qwen2.5-72b-instruct": "qwen2.5-72b",
    "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/meta-llama-3-8b-instruct": "llama-3.1-8b",
    "meta-llama/llama-3.1-70b-instruct": "llama-3.1-70b",
    "meta-llama/llama-2-13b-hf": "llama-2-13b",
    "google/gemma-2-9b-it": "gemma-2-9b",
    "microsoft/phi-3-mini-128k-instruct": "phi-3-mini",  # the 4k model's shapes; rope scaling only differs
    "qwen/qwen3-8b": "qwen3-8b",
}
_CONFIG_ALIAS = {
    "qwen-1_8b-chat": "qwen-1.8b",
    "qwen-7b-chat": "qwen-7b",
    "qwen-14b-chat": "qwen-14b",
    "qwen-72b-chat": "qwen-72b",
    "yi-6b-chat": "yi-6b",
    "yi-34b-chat": "yi-34b",
    "google/gemma-7b": "gemma-7b",
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
    card_gib: float | None  # None when the source does not name the GPU
    usable_gib: float | None  # what a process can allocate on that card (_hardware.usable_gib)
    measured_gib: float | None
    ok: bool
    reserved: bool  # the tool reports reserved (allocator) memory, not allocated

    @property
    def stack(self) -> str:
        return self.opts.stack


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


def _usable_gib(gpu: str, card_gib: float) -> float:
    """The planner's usable memory of the named card (its reported total less the driver's share),
    or the nominal share for a generic or unknown card."""
    name = re.sub(r"-?\d+\s*GB?$", "", gpu.split(" (")[0].split()[0]) if gpu.strip() else ""
    gpus = _gpus()
    spec = resolve_gpu(name, card_gib, known_memory_gib={n: g.memory_gib for n, g in gpus.items()}) if name else None
    if spec is not None and spec in gpus and gpus[spec].memory_gib == card_gib:
        return usable_gib(gpus[spec])
    return card_gib * k.USABLE_MEMORY_FRACTION.value


@functools.cache
def _gpus() -> dict[str, GpuSpec]:
    return load_gpus()


def _card_gib(gpu: str) -> float | None:
    m = re.search(r"(\d+)\s*G", gpu)
    if m:
        return float(m.group(1))
    if not gpu.strip():
        return None
    return {"A10G": 24.0, "L4": 24.0, "T4": 16.0, "H100": 80.0}.get(gpu.split()[0], 80.0)


def _targets(text: str) -> tuple[str, bool]:
    t = text.lower()
    emb = "embed" in t or "wte" in t
    if t.startswith("q,v"):
        return "qv", emb
    if "default (qwen: c_attn)" in t or t.startswith("default (c_attn)"):
        return "attention", emb
    return "all-linear", emb


def _liger(row: dict[str, str]) -> bool:
    """Liger kernels on: a fused linear cross-entropy (ms-swift's use_liger_kernel)."""
    text = (row["notes"] + " " + row["framework"]).lower()
    return "liger" in text and not any(t in text for t in ("no liger", "liger was off", "liger off"))


def _loss(row: dict[str, str], arch: ModelArch, method: str, deepspeed: bool) -> str | None:
    """How the source's loss holds the logits; None: the stack's default.

    Qwen-1's remote modelling code takes the cross-entropy of bf16 logits (modeling_qwen.py:
    CrossEntropyLoss on lm_logits without .float()); transformers' own models upcast. That holds
    only under DeepSpeed: without it, the Trainer's bf16 mixed precision runs the forward under
    autocast (accelerate's prepare_model), whose cross-entropy and log-softmax run in fp32, so the
    logits are upcast all the same (Qwen's finetune_lora_single_gpu.sh: --bf16 True, no
    --deepspeed; ms-swift's sft without DeepSpeed).
    universal-llm-trainer calls the forward without labels, so transformers keeps bf16 logits; its
    QLoRA keeps lm_head in fp32 without autocast: fp32 logits, priced as the upcast loss's.
    """
    ult = row["source_key"] == "universal_llm_trainer"
    if ult and method == "qlora":
        return "fp32-upcast"
    if (arch.family == "qwen" and deepspeed) or ult:
        return "bf16"
    if arch.family == "qwen":
        return "fp32-upcast"
    return "fused" if _liger(row) else None


def _double_quant(weights: str, source: str) -> bool | None:
    """Whether a 4-bit base ran with double quantization, where the row says: "(double quant)" or
    "nf4-dq" where it did, "no double quant" where it did not; a plain "nf4" in LitGPT's rows where
    it did not (its QLoRA configs name `bnb.nf4`, whose layers keep one fp32 constant per 64
    weights). None (the stack's default) otherwise: other sources write "nf4" for either."""
    text = weights.lower()
    if "no double" in text:
        return False
    if "double" in text or "nf4-dq" in text:
        return True
    return False if source.startswith("litgpt") and text.startswith("nf4") else None


def _optimizer_step(row: dict[str, str], stack: str) -> str | None:
    """How the source's AdamW step ran, from the versions it states; None: the stack's default.

    Both ran transformers' `adamw_torch` (torch.optim.AdamW on its foreach path): ms-swift's
    SftArguments.optim = 'adamw_torch' with torch 2.1.1 (docs/source/LLM/Benchmark.md, @4312aeb2),
    Qwen's finetune.py TrainingArguments.optim = "adamw_torch" with PyTorch 2.0 (README profiling
    section, @2df8e8ac). DeepSpeed runs its own FusedAdam (its configs name an optimizer).
    A row that names transformers' optimizer says which it ran; LitGPT's stack default is foreach.
    """
    optimizer = row["optimizer"].lower()
    if stack == "deepspeed":
        return None
    if "adamw_torch" in optimizer:
        return "fused" if "fused" in optimizer else "foreach"
    return "foreach" if row["source_key"] in ("ms_swift_benchmark", "qwen_readme_profiling") else None


def cases(path: Path) -> Iterator[tuple[dict[str, str], Case | None, str]]:
    """(row, case or None, reason when skipped) for every row of measured.csv."""
    archs = _archs()
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            yield row, *_case(row, archs)


# The LitGPT resource tables ran Alpaca without a length cap, so each run's peak comes from its
# longest training example, whose length the tables state per tokenizer (Lightning-AI/litgpt
# tutorials/resource-tables.md @4839345a: "phi1.5: 1044 tokens, StableLM Alpha: 1034 tokens,
# Llama 2: 1304 tokens, Falcon 1079 tokens").
_LITGPT_LONGEST_ALPACA = {
    "phi-1.5": 1044,
    "stablelm-base-alpha-3b": 1034,
    "llama-2-7b": 1304,
    "llama-2-13b": 1304,
    "falcon-40b": 1079,
}


def _case(row: dict[str, str], archs: dict[str, ModelArch]) -> tuple[Case | None, str]:
    src = row["source_key"]
    if row["kind"] != "measured":
        return None, "estimate, not a measurement"
    if "suspect" in row["notes"].lower():
        return None, "marked suspect in the source notes"
    if "same run as row" in row["notes"]:
        return None, "the same run as another row"
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
        if name not in _LITGPT_LONGEST_ALPACA:
            return None, f"longest Alpaca example of {row['model']!r} not stated"
        seq = str(_LITGPT_LONGEST_ALPACA[name])
    if not seq or not row["micro_batch_size"]:
        return None, "sequence length or micro-batch not stated"
    ckpt_text = row["grad_ckpt"].lower()
    if not ckpt_text or ckpt_text.startswith("unknown"):
        return None, "gradient checkpointing not stated"
    shard_text = row["sharding"].lower()
    n = int(row["num_gpus"] or 1)
    if "not stated" in shard_text:
        return None, "multi-GPU parallelism not stated"
    if n > 1 and re.search(r"megatron|sequence par|context par|\b(tp|pp|ep|cp)\s*\d", shard_text):
        return None, "tensor, pipeline, expert or sequence parallelism not modelled"
    if "upper bound" in row["notes"].lower() or "at capacity" in row["notes"].lower():
        return None, "memory figure is an upper bound (the card's capacity)"
    if "seq_len is a cap" in row["notes"]:
        return None, "sequence length is only a cap on short samples"
    # universal-llm-trainer: its own loop around HF models and PEFT (the hf stack's accounting). Its
    # QLoRA loads the model in fp32 and nothing autocasts, so activations and logits are fp32
    # (data/MEASURED.md); the model prices the fp32 embeddings, norms and checkpointed layer inputs
    # (kbit upcast), not the fp32 activations inside the recomputed layer.
    ult = src == "universal_llm_trainer"
    sharding = "none"
    if n > 1:
        sharding = (
            "zero3" if ("zero3" in shard_text or "fsdp" in shard_text) else "zero2" if "zero2" in shard_text else "ddp"
        )
    targets, emb = _targets(row["lora_targets"])
    flash = not row["flash_attn"].lower().startswith("no")
    litgpt = src.startswith("litgpt")
    fp32_model = "fp32" in row["weight_precision"]
    swift = src.startswith("ms_swift")
    # The stack's regime (_stacks.Stack.optimizer): LitGPT's config hub and ms-swift train full
    # fine-tuning in bf16, the hf and DeepSpeed rows keep an fp32 master. LitGPT's QLoRA configs
    # name bitsandbytes' paged AdamW; a model loaded in fp32 keeps fp32 adapters and states.
    optimizer = "paged-adamw" if method == "qlora" and litgpt else "adamw-fp32" if fp32_model else None
    if ult and method == "full":
        optimizer = "adamw-bf16"  # the bf16 model and torch AdamW, no master copy (data/MEASURED.md)
    if swift and method == "full":
        # ms-swift's DeepSpeed runs too are predicted with the bf16 model's states, as they have been
        # since they were added: DeepSpeed's bf16 optimizer keeps an fp32 master, but with it their
        # figures come out 12-55% over (open: docs/stacks.md, "DeepSpeed ZeRO-3 states").
        optimizer = "adamw-bf16"
    deepspeed = "zero" in shard_text or "deepspeed" in shard_text or "finetune_ds" in shard_text
    if deepspeed and n == 1:
        sharding = "zero3" if ("zero3" in shard_text or "finetune_ds" in shard_text) else "zero2"
    stack = "litgpt" if litgpt else "deepspeed" if deepspeed else "ms-swift" if swift else "hf"
    offload = row["offload"].lower().startswith("cpu") or "offload_params=true" in row["offload"].lower()
    opts = MemoryOptions.for_stack(
        stack,
        optimizer=optimizer,
        adapter_dtype="fp32" if fp32_model else None,
        loss=_loss(row, arch, method, deepspeed),
        # Alpaca (LitGPT resource tables) and ms-swift's datasets come in batches of varying length.
        variable_length=src in ("litgpt_resource_tables",) or swift,
        lora_targets=targets,
        train_embeddings=emb,
        flash_attention=flash,
        offload_optimizer=offload,
        offload_params=offload,
        # Every FSDP run here wrapped with torch's FullyShardedDataParallel (FSDP1): LitGPT's
        # FSDPStrategy, Trainer/accelerate before fully_shard reached them, universal-llm-trainer.
        fsdp_version=1 if "fsdp" in shard_text and "fsdp2" not in shard_text else None,
        # universal-llm-trainer wraps its bf16 model with torch's FSDP itself (src/trainer/build.py
        # @aefdc4a, MixedPrecision(param_dtype=float16)): the flat parameters stay bf16, no
        # accelerate to upcast them.
        fsdp_fp32_params=False if ult else None,
        # LitGPT (finetune/lora.py), Qwen (finetune.py LoraArguments) and ms-swift all default
        # to lora_dropout 0.05; none of the rows states another value.
        lora_dropout=0.05 if method != "full" else 0.0,
        quant_kernel="gptq" if "gptq" in row["weight_precision"].lower() else "bitsandbytes",
        double_quant=_double_quant(row["weight_precision"], src),
        # Qwen's finetune/ds_config_zero2.json sets reduce_bucket_size 2e8 (its ZeRO-3 config
        # leaves "auto", as ms-swift's do).
        deepspeed_bucket_elements=2e8 if src == "qwen_readme_profiling" and sharding == "zero2" else None,
        optimizer_step=_optimizer_step(row, stack),
    )
    precision = "int8" if re.search(r"\bint8\b", row["weight_precision"]) else "nf4" if method == "qlora" else "16-bit"
    micro = int(float(row["micro_batch_size"]))
    # Accumulation matters under FSDP (unsharded gradients); every FSDP row states it, directly or
    # as the config's global_batch_size (LitGPT config hub notes).
    accum = int(float(row["grad_accum"] or 1))
    global_batch = re.search(r"global_batch_size (\d+)", row["notes"])
    if not row["grad_accum"] and global_batch:
        accum = max(1, -(-int(global_batch.group(1)) // (micro * n)))
    if ult:
        # Its loop calls backward on every micro-batch without FSDP's no_sync (src/trainer/trainer.py
        # @aefdc4a): each backward reduce-scatters, as without accumulation.
        accum = 1
    if precision == "int8":
        # ms-swift files int8 GPTQ bases under "qlora"; ftsolve calls that 8-bit base LoRA.
        method = "lora"
    card = float(row["gpu_mem_gb"]) if row["gpu_mem_gb"] else _card_gib(row["gpu_type"])
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
        card_gib=card,
        usable_gib=None if card is None else _usable_gib(row["gpu_type"], card),
        measured_gib=measured,
        ok=outcome == "ok",
        reserved=swift or ult,  # universal-llm-trainer prints torch.cuda.memory_reserved()
    ), ""


@functools.cache
def _catalog() -> Catalog:
    return load_catalog(user=False)


# Bound of the fragmentation: the caching allocator holds at most about two earlier, differently
# sized generations of the short-lived blocks beside the live one (it splits and reuses larger
# cached blocks before it asks for new ones).
FRAGMENTATION_MAX = 2.0


@dataclass(frozen=True)
class Coefficients:
    """The fitted memory constants: one shared activation scale, the allocator's fragmentation of
    short-lived tensors under variable-length batches, and a runtime overhead per stack."""

    activation_scale: float
    fragmentation: float
    runtime_gib: dict[str, float]

    @classmethod
    def physical(cls) -> Coefficients:
        """What a constant is worth before any data informs it: the lean activation count (1.0),
        one cached copy of the short-lived tensors (1.0), no runtime overhead; a fold uses these
        for constants its training sources do not inform, so no held-out source leaks in."""
        return cls(1.0, 1.0, {})

    @classmethod
    def current(cls) -> Coefficients:
        return cls(
            k.ACTIVATION_SCALE.value,
            k.RESERVED_FRAGMENTATION.value,
            {s: c.value for s, c in k.FRAMEWORK_RUNTIME_GIB.items()},
        )

    @property
    def count(self) -> int:
        return 2 + len(self.runtime_gib)


@contextlib.contextmanager
def applied(coef: Coefficients) -> Iterator[None]:
    """The library's coefficients replaced by `coef` for the duration (a benchmark, single thread)."""
    saved = (k.ACTIVATION_SCALE, k.RESERVED_FRAGMENTATION, k.FRAMEWORK_RUNTIME_GIB)
    k.ACTIVATION_SCALE = replace(k.ACTIVATION_SCALE, value=coef.activation_scale)
    k.RESERVED_FRAGMENTATION = replace(k.RESERVED_FRAGMENTATION, value=coef.fragmentation)
    k.FRAMEWORK_RUNTIME_GIB = {
        name: k.Coefficient(v, "GiB", "fitted in this fold") for name, v in coef.runtime_gib.items()
    }
    try:
        yield
    finally:
        k.ACTIVATION_SCALE, k.RESERVED_FRAGMENTATION, k.FRAMEWORK_RUNTIME_GIB = saved


def _estimate(case: Case, **changes: Any) -> MemoryEstimate:
    return estimate_memory(
        case.arch,
        catalog=_catalog(),
        method=cast("Method", case.method),
        seq_len=case.seq_len,
        micro_batch=case.micro_batch,
        grad_accum=case.grad_accum,
        n_gpus=case.n_gpus,
        sharding=case.sharding,
        gradient_checkpointing=cast("bool", changes.get("ckpt", case.ckpt)),
        weight_precision=cast("WeightPrecision", case.precision),
        lora_rank=case.lora_rank,
        options=replace(case.opts, **{k2: v for k2, v in changes.items() if k2 != "ckpt"}),
    )


def predict(case: Case) -> tuple[float, float]:
    """(predicted figure in the row's metric, planning peak), both GiB, with the current coefficients."""
    est = _estimate(case)
    return (est.reserved_gib if case.reserved else est.allocated_gib), est.peak_gib


@dataclass(frozen=True)
class Pieces:
    """A row's prediction as a function of the fitted constants (GiB, micro-batch included):

        per-layer activations = A·u + e          (u: the scaled units, e: eager attention scores)
        no checkpointing:  stored = m·(A·u + e)  (m = layers, or 2 with activation offload)
        checkpointing:     stored = fixed inputs; recompute = max(A·u + e - logits, 0)
        dynamic   = stored + recompute + logits
        allocated = fixed + R[stack] + max(dynamic, step)
        reserved  = fixed + R[stack] + max(dynamic + F·(logits + recompute), step)   (F: variable-length only)
        planning  = fixed + overheads + R + max(margin·dynamic, step)   (cached blocks are reclaimed before an OOM)
    (step: the optimizer step's temporaries, which need only what backward's dynamic memory leaves)
    """

    fixed: float
    u: float
    e: float
    m: float
    stored_ckpt: float
    logits: float
    overheads: float
    step: float


def _pieces(case: Case) -> Pieces:
    unit = Coefficients(1.0, 0.0, {s: 0.0 for s in STACK_NAMES})
    margin = 1.0 + k.DYNAMIC_MARGIN.value
    with applied(unit):
        est = _estimate(case)
        c = est.components_gib
        flat = _estimate(case, ckpt=False, activation_offload=False).components_gib
    with applied(replace(unit, activation_scale=0.0)):
        flat0 = _estimate(case, ckpt=False, activation_offload=False).components_gib
    dynamic = ("activations", "recompute", "logits", "fragmentation", "optimizer_step")
    overheads = c["cuda_context"] + c["nccl"]
    layers = case.arch.num_layers
    e = flat0["activations"] / margin / layers
    return Pieces(
        fixed=sum(v for n, v in c.items() if n not in dynamic) - overheads,
        u=flat["activations"] / margin / layers - e,
        e=e,
        m=2.0 if case.opts.activation_offload else float(layers),
        stored_ckpt=c["activations"] / margin if case.ckpt else 0.0,
        logits=c["logits"] / margin,
        overheads=overheads,
        step=est.optimizer_step_gib,
    )


def _analytic(case: Case, p: Pieces, coef: Coefficients) -> tuple[float, float]:
    """(metric figure, planning peak) from the pieces; equals `predict` under `applied(coef)`."""
    a, f = coef.activation_scale, coef.fragmentation
    # A stack the fold never saw gets the median of the fold's stacks, as k.runtime_gib does.
    unseen = float(np.median(list(coef.runtime_gib.values()))) if coef.runtime_gib else 0.0
    runtime = coef.runtime_gib.get(case.stack, unseen)
    layer = a * p.u + p.e
    stored = p.stored_ckpt if case.ckpt else p.m * layer
    recompute = max(layer - p.logits, 0.0) if case.ckpt else 0.0
    frag = f * (p.logits + recompute) if case.opts.variable_length else 0.0
    dynamic = stored + recompute + p.logits
    allocated = p.fixed + runtime + max(dynamic, p.step)
    reserved = p.fixed + runtime + max(dynamic + frag, p.step)
    margin = 1.0 + k.DYNAMIC_MARGIN.value
    planning = p.fixed + p.overheads + runtime + max(margin * dynamic, p.step)
    return (reserved if case.reserved else allocated), planning


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


def fit(rows: list[Case], pieces: dict[int, Pieces], prior: Coefficients) -> Coefficients:
    """Least squares of relative errors over `rows` for the activation scale, the fragmentation
    and a runtime per stack present; constants no row informs keep their prior value.

    Given F and which rows' re-materialized layer exceeds their logits (the piece each row is
    on), the prediction is linear in (A, R[stack]): solve, recompute the pieces, repeat until no
    row changes piece. F is searched on a grid when rows report reserved memory of
    variable-length batches. The solution is constrained so that no run of `rows` that
    succeeded is predicted not to fit its card (planning peak within the usable memory).
    """
    stacks = sorted({c.stack for c in rows})
    informs_f = any(c.reserved and c.opts.variable_length for c in rows)
    weight = np.array([1.0 / c.measured_gib for c in rows])  # type: ignore[operator]
    typical = float(np.median(1.0 / weight))  # GiB of a typical run: the pooling's scale
    margin = 1.0 + k.DYNAMIC_MARGIN.value
    best: tuple[tuple[float, float], Coefficients] | None = None
    for frag in np.arange(0.0, FRAGMENTATION_MAX + 0.01, 0.1) if informs_f else [prior.fragmentation]:
        a = prior.activation_scale
        branches: list[object] | None = None
        sol = np.zeros(1 + len(stacks))
        for _ in range(50):
            layer = [bool(c.ckpt and a * pieces[c.id].u + pieces[c.id].e > pieces[c.id].logits) for c in rows]
            steps = [_step_wins(c, pieces[c.id], a, frag, lw) for c, lw in zip(rows, layer, strict=True)]
            now: list[object] = [*layer, *steps]
            if now == branches:
                break
            branches = now
            design, target, plan_design, plan_room = [], [], [], []
            for c, layer_wins, (step_metric, step_plan) in zip(rows, layer, steps, strict=True):
                p = pieces[c.id]
                f_metric = frag if (c.reserved and c.opts.variable_length) else 0.0
                onehot = [1.0 if c.stack == s else 0.0 for s in stacks]
                if not c.ckpt:  # stored = m(Au + e)
                    coef_a, const = p.m * p.u, p.m * p.e + p.logits
                    coef_a_plan, const_plan = margin * coef_a, margin * (p.m * p.e + p.logits)
                    const += f_metric * p.logits
                elif layer_wins:  # stored fixed; recompute = Au + e - logits
                    coef_a, const = p.u * (1 + f_metric), p.stored_ckpt + p.e + f_metric * p.e
                    coef_a_plan = margin * p.u
                    const_plan = margin * (p.stored_ckpt + p.e)
                else:
                    coef_a, const = 0.0, p.stored_ckpt + p.logits * (1 + f_metric)
                    coef_a_plan, const_plan = 0.0, margin * (p.stored_ckpt + p.logits)
                if step_metric:  # the optimizer step's temporaries make this row's peak
                    coef_a, const = 0.0, p.step
                if step_plan:
                    coef_a_plan, const_plan = 0.0, p.step
                design.append([coef_a, *onehot])
                target.append(c.measured_gib - p.fixed - const)  # type: ignore[operator]
                plan_design.append([coef_a_plan, *onehot])
                # 0.02 GiB to spare, so that the coefficients rounded to 3 digits keep the constraint
                usable = c.usable_gib - 0.02 if c.ok and c.usable_gib else np.inf
                plan_room.append(usable - p.fixed - p.overheads - const_plan)
            x, y = np.array(design), np.array(target)
            # Partial pooling: each stack's runtime is also asked to equal the pooled runtime (the
            # last unknown) as if by one more run of typical size, so a stack that few runs inform
            # stays near the other stacks' value instead of taking up one source's habits.
            xs = np.hstack([x * weight[:, None], np.zeros((len(rows), 1))])
            shrink = np.hstack([np.zeros((len(stacks), 1)), np.eye(len(stacks)), -np.ones((len(stacks), 1))]) / typical
            xs = np.vstack([xs, shrink])
            ys = np.concatenate([y * weight, np.zeros(len(stacks))])
            plan_x = np.hstack([np.array(plan_design), np.zeros((len(rows), 1))])
            sol = _constrained_lstsq(xs, ys, plan_x, np.array(plan_room))[:-1]
            a = float(sol[0])
        rel = np.abs((x @ sol - y) * weight)
        # F is chosen by the rows it prices (reserved memory of variable-length batches), not by
        # how it lets A and R trade errors elsewhere.
        own = np.array([c.reserved and c.opts.variable_length for c in rows]) if informs_f else np.ones(len(rows), bool)
        score = (float(np.percentile(rel[own], 90)), float(np.median(rel[own])))
        coef = Coefficients(a, float(frag), {s: float(v) for s, v in zip(stacks, sol[1:], strict=True)})
        if best is None or score < best[0]:
            best = (score, coef)
    assert best is not None
    return best[1]


def _dynamic(case: Case, p: Pieces, a: float, frag: float, layer_wins: bool) -> tuple[float, float]:
    """(dynamic memory in the row's metric, dynamic memory at planning) for activation scale a."""
    layer = a * p.u + p.e
    stored = p.stored_ckpt if case.ckpt else p.m * layer
    recompute = max(layer - p.logits, 0.0) if case.ckpt and layer_wins else 0.0
    spare = frag * (p.logits + recompute) if case.opts.variable_length else 0.0
    dynamic = stored + recompute + p.logits
    return dynamic + (spare if case.reserved else 0.0), (1.0 + k.DYNAMIC_MARGIN.value) * dynamic


def _step_wins(case: Case, p: Pieces, a: float, frag: float, layer_wins: bool) -> tuple[bool, bool]:
    """Whether the optimizer step, not backward, makes the row's (metric, planning) peak."""
    metric, planning = _dynamic(case, p, a, frag, layer_wins)
    return p.step > metric, p.step > planning


@dataclass(frozen=True)
class Outcome:
    case: Case
    error: float | None  # predicted / measured - 1
    verdict_wrong: bool  # succeeded but predicted not to fit, or OOM predicted to fit
    headroom_wrong: bool  # the same with the headroom a plan keeps (the planning peak plus its band)


def _outcome(case: Case, p: Pieces, coef: Coefficients) -> Outcome:
    figure, planning = _analytic(case, p, coef)
    wrong = roomy_wrong = False
    if case.card_gib is not None:
        usable = case.usable_gib or np.inf
        wrong = (planning <= usable) != case.ok
        # The planner's default headroom: the library's band for the method and stack (k.memory_band).
        roomy_wrong = (planning * (1.0 + k.memory_band(case.method, case.stack)) <= usable) != case.ok
    err = None if case.measured_gib is None else figure / case.measured_gib - 1.0
    return Outcome(case, err, wrong, roomy_wrong)


def leave_one_source_out(
    all_cases: list[Case], pieces: dict[int, Pieces] | None = None
) -> tuple[list[Outcome], dict[str, Coefficients]]:
    """Refit on every source but one, predict that one; every evaluable source in turn."""
    pieces = pieces if pieces is not None else {c.id: _pieces(c) for c in all_cases}
    prior = Coefficients.physical()
    fitted = [c for c in all_cases if c.measured_gib is not None]
    out: list[Outcome] = []
    folds: dict[str, Coefficients] = {}
    for source in sorted({c.source for c in all_cases}):
        train = [c for c in fitted if c.source != source]
        coef = fit(train, pieces, prior)
        folds[source] = coef
        out += [_outcome(c, pieces[c.id], coef) for c in all_cases if c.source == source]
    return out, folds


def evaluable(path: Path) -> tuple[list[Case], dict[str, int]]:
    skipped: dict[str, int] = defaultdict(int)
    out = []
    for _row, case, reason in cases(path):
        if case is None:
            skipped[reason] += 1
        else:
            out.append(case)
    return out, skipped


def _stats(errors: list[float]) -> str:
    if not errors:
        return f"{0:5d} {'-':>7s} {'-':>7s} {'-':>7s}"
    a = np.array(errors)
    return (
        f"{len(a):5d} {100 * np.median(np.abs(a)):6.1f}% {100 * np.percentile(np.abs(a), 90):6.1f}% "
        f"{100 * np.median(a):+6.1f}%"
    )


def summary(outcomes: list[Outcome]) -> dict[str, tuple[float, float, int]]:
    """(median, p90 of |error|, n) per method and overall."""
    out = {}
    for key in ("full", "lora", "qlora", "all"):
        e = [abs(o.error) for o in outcomes if o.error is not None and key in ("all", o.case.method)]
        out[key] = (float(np.median(e)), float(np.percentile(e, 90)), len(e)) if e else (0.0, 0.0, 0)
    return out


def bands(outcomes: list[Outcome]) -> dict[str, float]:
    """The 90th percentile of |error| per method and stack (`method/stack`, with at least 5 rows),
    per method (`method`) and overall (`all`): the band each estimate states. A stack's rows may
    narrow its method's band only when two sources give 5 rows each; otherwise they may widen it:
    one source's habits are not a stack's."""
    groups: dict[str, list[float]] = defaultdict(list)
    rows_by_source: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        if o.error is not None:
            stacked = f"{o.case.method}/{o.case.stack}"
            for key in (stacked, o.case.method, "all"):
                groups[key].append(abs(o.error))
            rows_by_source[stacked][o.case.source] += 1
    p90 = {key: round(float(np.percentile(e, 90)), 3) for key, e in sorted(groups.items()) if len(e) >= 5}
    for key in p90:
        method = key.split("/")[0]
        informed = sum(n >= 5 for n in rows_by_source[key].values())
        if "/" in key and informed < 2 and method in p90:
            p90[key] = max(p90[key], p90[method])
    return p90


def _table(title: str, outcomes: list[Outcome]) -> None:
    groups: dict[str, list[float]] = defaultdict(list)
    for o in outcomes:
        if o.error is None:
            continue
        c = o.case
        for key in (f"method {c.method}", f"stack {c.stack}", f"source {c.source}", f"{c.source} {c.method}", "all"):
            groups[key].append(o.error)
    print(f"\n{title}")
    print(f"{'group':42s} {'n':>5s} {'median':>7s} {'p90':>7s} {'signed':>7s}")
    for key in sorted(groups, key=lambda s: (s == "all", s.count(" ") > 1, s)):
        print(f"{key:42s} {_stats(groups[key])}")


def _verdicts(outcomes: list[Outcome], headroom: bool = False) -> tuple[int, int, int, int]:
    """(succeeded but predicted not to fit, succeeded, OOM predicted not to fit, OOM), at the
    planning peak or, with `headroom`, at the peak plus the band a plan keeps above it."""
    judged = [o for o in outcomes if o.case.card_gib is not None]
    ok = [o for o in judged if o.case.ok]
    oom = [o for o in judged if not o.case.ok]

    def wrong(o: Outcome) -> bool:
        return o.headroom_wrong if headroom else o.verdict_wrong

    return sum(wrong(o) for o in ok), len(ok), sum(not wrong(o) for o in oom), len(oom)


def evaluate(path: Path, show_rows: bool = False) -> dict[str, tuple[float, float, int]]:
    all_cases, skipped = evaluable(path)
    pieces = {c.id: _pieces(c) for c in all_cases}
    loso, folds = leave_one_source_out(all_cases, pieces)
    current = Coefficients.current()
    in_sample = [_outcome(c, pieces[c.id], current) for c in all_cases]
    for c, o in zip(all_cases, in_sample, strict=True):  # the analytic form is the library's
        if o.error is not None:
            assert abs(predict(c)[0] / c.measured_gib - 1.0 - o.error) < 1e-3, c.id  # type: ignore[operator]
            assert abs(predict(c)[1] - _analytic(c, pieces[c.id], current)[1]) < 1e-2, c.id  # the planning peak too
    if show_rows:
        for o in loso:
            c = o.case
            err = "" if o.error is None else f"measured {c.measured_gib:6.2f} ({100 * o.error:+.0f}%)"
            flag = " VERDICT WRONG" if o.verdict_wrong else " NOT PLANNED (headroom)" if o.headroom_wrong else ""
            print(
                f"  {c.id:4d} {c.source:26s} {c.model[:22]:22s} {c.method:5s} {c.stack:9s} s={c.seq_len:5d} "
                f"b={c.micro_batch} ckpt={int(c.ckpt)} n={c.n_gpus} {c.sharding:5s} {'ok ' if c.ok else 'OOM'} "
                f"{err}{flag}"
            )
    _table("leave-one-source-out (headline): fit on every other source, predict this one", loso)
    _table("in sample (secondary): the library's coefficients, fitted on all sources", in_sample)
    print("\nper-fold coefficients (activation scale, fragmentation, runtime GiB by stack):")
    for source, coef in folds.items():
        rt = ", ".join(f"{s} {v:.2f}" for s, v in coef.runtime_gib.items())
        print(f"  without {source:28s} A {coef.activation_scale:.3f}  F {coef.fragmentation:.1f}  {rt}")
    print("not evaluated: " + "; ".join(f"{n} {r}" for r, n in sorted(skipped.items(), key=lambda kv: -kv[1])))
    print(f"bands (p90 of |leave-one-source-out error|): {bands(loso)}")
    print(f"in sample (secondary), fit verdicts: {_verdict_text(in_sample)}")
    s = summary(loso)
    print(
        "LOSO memory: "
        + ", ".join(f"{m} {100 * s[m][0]:.1f}%/{100 * s[m][1]:.1f}% (n={s[m][2]})" for m in s)
        + f"; {_verdict_text(loso)}; fitted constants {current.count}"
    )
    return s


def _verdict_text(outcomes: list[Outcome]) -> str:
    """The fit verdicts at the planning peak, each with its count under the planner's headroom."""
    wrong_ok, n_ok, right_oom, n_oom = _verdicts(outcomes)
    roomy_ok, _, roomy_oom, _ = _verdicts(outcomes, headroom=True)
    return (
        f"succeeded but predicted not to fit {wrong_ok} of {n_ok} ({roomy_ok} with the planner's headroom); "
        f"OOM predicted not to fit {right_oom} of {n_oom} ({roomy_oom} with the headroom)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--fit", action="store_true", help="fit on every source and print the coefficients")
    ap.add_argument("--rows", action="store_true")
    args = ap.parse_args()
    if args.fit:
        all_cases, _ = evaluable(args.csv)
        pieces = {c.id: _pieces(c) for c in all_cases}
        coef = fit([c for c in all_cases if c.measured_gib is not None], pieces, Coefficients.physical())
        print(f"fit on {sum(c.measured_gib is not None for c in all_cases)} rows with a memory figure: {coef}")
        return
    evaluate(args.csv, args.rows)


if __name__ == "__main__":
    main()
