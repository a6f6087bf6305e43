"""Peak GPU memory per GPU (physics.md §2-6), vectorized over training configurations.

Peak(b) = static + max(b · per_sample · (1 + margin), step), where b is the micro-batch in
sequences: model states, gathered shards, buffers and context do not depend on b; activations
and logits grow linearly in it; the optimizer step's temporaries come after backward has freed
them. That split lets the planner pick the largest micro-batch that fits in closed form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog import ModelArch
from ftsolve.solver import _coefficients as k
from ftsolve.solver._stacks import LOSS_BYTES_PER_LOGIT, OPTIMIZER_STEP_COPIES, STACKS, known_stack

F = NDArray[np.float64]
I = NDArray[np.int64]
B = NDArray[np.bool_]

# Codes used in the configuration arrays.
FULL, LORA, QLORA = 0, 1, 2
Q16, Q8, Q4 = 0, 1, 2  # base-weight storage: 16-bit, int8, NF4
NONE, DDP, ZERO1, ZERO2, ZERO3 = 0, 1, 2, 3, 4
METHOD_NAMES = ("full", "lora", "qlora")
QUANT_NAMES = ("16-bit", "int8", "nf4")
SHARD_NAMES = ("none", "ddp", "zero1", "zero2", "zero3")

# Bytes per parameter for (weights, grads, optimizer state) by optimizer regime, full fine-tuning
# (physics.md §2.1-2.2): mixed-precision AdamW 2+2+12 = 16 (ZeRO convention); AMP on an fp32 model
# 4+4+8 = 16; pure bf16 AdamW 2+2+4 = 8; bf16 + bitsandbytes 8-bit AdamW 2+2+2.03; paged
# optimizers hold the same state as their unpaged twins (they absorb spikes, not steady state);
# SGD+momentum with an fp32 master 2+2+(4+4); Adafactor with an fp32 master and factored
# second moments 2+2+4.
FULL_STATE_BYTES: dict[str, tuple[float, float, float]] = {
    "adamw": (2.0, 2.0, 12.0),
    "adamw-fp32": (4.0, 4.0, 8.0),
    "adamw-bf16": (2.0, 2.0, 4.0),
    "adamw-8bit": (2.0, 2.0, 2.03),
    "paged-adamw": (2.0, 2.0, 12.0),
    "paged-adamw-8bit": (2.0, 2.0, 2.03),
    "sgd": (2.0, 2.0, 8.0),
    "adafactor": (2.0, 2.0, 4.0),
}
OPTIMIZERS = tuple(FULL_STATE_BYTES)
# Regimes whose full fine-tuning keeps an fp32 copy of every weight (DeepSpeed's and FSDP's fp32
# parameters, the probe's masters); the others train a model loaded in 16 bits.
FP32_MASTER = frozenset({"adamw", "adamw-fp32", "paged-adamw", "sgd", "adafactor"})


def adapter_state_bytes(optimizer: str, adapter_dtype: str) -> tuple[float, float, float]:
    """(weight, grad, optimizer) bytes per adapter parameter.

    torch AdamW keeps its moments in the parameter's dtype, in every regime: `adamw-bf16` names a
    model loaded in bf16, while PEFT may keep the adapters in fp32; bitsandbytes paged 32-bit AdamW
    keeps fp32 moments; 8-bit AdamW about 2.03 bytes (physics.md §2.2-2.3).
    """
    w = 4.0 if adapter_dtype == "fp32" else 2.0
    opt = {
        "adamw": 2 * w,
        "adamw-fp32": 8.0,
        "adamw-bf16": 2 * w,
        "adamw-8bit": 2.03,
        "paged-adamw": 8.0,
        "paged-adamw-8bit": 2.03,
        "sgd": w,
        "adafactor": 0.0,
    }[optimizer]
    return w, w, opt


def embedding_copy_bytes(opts: MemoryOptions) -> tuple[float, float, float]:
    """(weight, grad, optimizer) bytes per parameter of the trained embedding and lm_head copies.

    PEFT's modules_to_save copies keep the base model's dtype (its autocast_adapter_dtype upcasts
    adapter weights only), and torch optimizers keep state in the parameter's dtype. DeepSpeed
    gives every trainable parameter its fp32 gradient, master and moments, as in full fine-tuning.
    """
    if opts.framework == "deepspeed":
        return 2.0, 4.0, FULL_STATE_BYTES[opts.optimizer][2]
    return adapter_state_bytes(opts.optimizer, "fp32" if opts.optimizer == "adamw-fp32" else "bf16")


@dataclass(frozen=True)
class MemoryOptions:
    """Job-level choices that change memory but are not searched over by the planner.

    Construct with `MemoryOptions.for_stack(stack, ...)` to start from a training stack's
    defaults (_stacks.py); the plain constructor gives the `hf` stack's.
    """

    optimizer: str = "adamw"
    adapter_dtype: str = "fp32"
    lora_targets: str = "all-linear"
    lora_dropout: float = 0.0
    train_embeddings: bool = False
    flash_attention: bool = True
    loss: str = "fp32-upcast"  # how the loss holds logits, see _stacks.LOSS_BYTES_PER_LOGIT
    offload_optimizer: bool = False
    offload_params: bool = False  # FSDP cpu_offload: parameters and gradients live in CPU memory
    # None: the stack's (Stack.fsdp_versions; FSDP2, which ftsolve's exports configure). FSDP1
    # (FullyShardedDataParallel) with offloaded parameters keeps every gradient shard on the GPU
    # until backward ends: torch fsdp/_runtime_utils.py _accumulate_sharded_grad sets
    # `flat_param._saved_grad_shard` on the post-backward stream, _offload_grad copies it to the
    # CPU, and _flat_param.py prepare_gradient_for_optim deletes it only in the final callback.
    # FSDP2 frees each one once its copy is queued (fsdp/_fully_shard/_fsdp_collectives.py
    # foreach_reduce: "we can free it here by not keeping a ref").
    fsdp_version: int | None = None
    # FSDP's trainable flat parameters in fp32 (None: the stack's, Stack.fsdp_fp32_params).
    fsdp_fp32_params: bool | None = None
    stack: str = "hf"  # training stack (_stacks.STACKS); its runtime family decides accounting quirks
    # Kernel of an int8/4-bit base: bitsandbytes (QLoRA's NF4, LLM.int8), gptq (a GPTQ-quantized
    # checkpoint such as Qwen's *-Int4 models trained through auto-gptq kernels) or torchao (the
    # NF4Tensor torchtune's QLoRA recipes quantize to).
    quant_kernel: str = "bitsandbytes"
    double_quant: bool = True  # QLoRA's double quantization of the NF4 block constants
    # lm_head quantized with the layers (None: the framework's default; LitGPT's bitsandbytes
    # plugin replaces every nn.Linear, transformers keeps lm_head in 16 bits).
    quantized_head: bool | None = None
    optimizer_in_backward: bool = False  # each gradient applied and freed as backward produces it
    activation_offload: bool = False  # tensors saved for backward wait in CPU memory
    # torch.compile: fuses torchao's NF4 dequantization (dequant_kernel); no other effect is modelled.
    compile: bool = False
    optimizer_step: str = "fused"  # how the optimizer step runs, see _stacks.OptimizerStep
    # PEFT's prepare_model_for_kbit_training on a bitsandbytes base (_stacks.Stack.kbit_upcast).
    kbit_upcast: bool = True
    # Batches of varying length (padded per batch, not packed or padded to seq_len): the caching
    # allocator then reserves beyond what is allocated for the short-lived tensors.
    variable_length: bool = False
    # DeepSpeed's reduce_bucket_size in elements; None is "auto", which transformers' DeepSpeed
    # integration fills with hidden_size**2 (integrations/deepspeed.py, trainer_config_finalize) and
    # which ftsolve's exported DeepSpeed configs use.
    deepspeed_bucket_elements: float | None = None

    def __post_init__(self) -> None:
        if self.fsdp_version is not None and self.fsdp_version not in (1, 2):
            raise ValueError(f"fsdp_version must be 1 or 2, not {self.fsdp_version!r}")
        versions = known_stack(self.stack).fsdp_versions
        if self.fsdp_version is not None and self.fsdp_version not in versions:
            raise ValueError(f"{self.stack} shards with FSDP{versions[0]} only: set fsdp_version to {versions[0]}")

    @property
    def fp32_flat_params(self) -> bool:
        """Whether FSDP holds the trainable flat parameters in fp32: as asked, else the stack's."""
        asked = self.fsdp_fp32_params
        return STACKS[self.stack].fsdp_fp32_params if asked is None else asked

    @property
    def fsdp(self) -> int:
        """The FSDP version it runs: the one asked for, else the stack's."""
        return STACKS[self.stack].fsdp_versions[0] if self.fsdp_version is None else self.fsdp_version

    @classmethod
    def for_stack(cls, stack: str = "hf", **overrides: Any) -> MemoryOptions:
        """The stack's defaults, with the given fields (those not None) overriding them."""
        s = known_stack(stack)
        fields: dict[str, Any] = {
            "stack": stack,
            "optimizer": s.optimizer,
            "loss": s.loss,
            "adapter_dtype": s.adapter_dtype,
            "optimizer_in_backward": s.optimizer_in_backward,
            "activation_offload": s.activation_offload,
            "compile": s.compile,
            "optimizer_step": s.optimizer_step,
            "kbit_upcast": s.kbit_upcast,
            "quant_kernel": s.quant_kernel,
        }
        fields |= {name: value for name, value in overrides.items() if value is not None}
        return cls(**fields)

    @property
    def dequant_kernel(self) -> str:
        """The key of the dequantization's traffic and workspace (_coefficients): torchao's NF4
        dequantizes eagerly in many element-wise steps unless torch.compile fuses them."""
        return "torchao-compiled" if self.quant_kernel == "torchao" and self.compile else self.quant_kernel

    @property
    def framework(self) -> str:
        """The stack's runtime family: hf, deepspeed or litgpt (see _stacks.Stack)."""
        return STACKS[self.stack].runtime

    def head_is_quantized(self) -> bool:
        return self.framework == "litgpt" if self.quantized_head is None else self.quantized_head


@dataclass(frozen=True)
class ModelSizes:
    """Scalars of one architecture that the memory, time and cost models share."""

    total_params: float
    linear_params: float
    other_params: float
    lora_params: float
    layer_params: float
    embedding_table_params: float
    embedding_params: float  # input embedding plus an untied lm_head
    matmul_params_active: float
    hidden: int
    layers: int
    vocab: int
    heads: int
    q_dim: int
    kv_dim: int
    intermediate: int
    experts_per_token: int
    gated: bool
    logit_softcap: bool = False

    @classmethod
    def of(cls, arch: ModelArch, lora_rank: int, lora_targets: str, framework: str = "hf") -> ModelSizes:
        if framework == "litgpt" and arch.tie_word_embeddings:
            # LitGPT's GPT has its own lm_head Linear beside the wte Embedding and never ties them;
            # its converter copies a tied table into lm_head.weight (litgpt/model.py,
            # scripts/convert_hf_checkpoint.py), so a tied model holds, trains and shards two tables.
            arch = arch.model_copy(update={"tie_word_embeddings": False})
        return cls(
            total_params=float(arch.total_params()),
            linear_params=float(arch.linear_params_in_layers()),
            other_params=float(arch.total_params() - arch.linear_params_in_layers()),
            lora_params=float(arch.lora_params(lora_rank, lora_targets)),
            layer_params=float(arch.largest_layer_params()),
            embedding_table_params=float(arch.vocab_size * arch.hidden_size),
            embedding_params=float(arch.embedding_params()),
            matmul_params_active=float(arch.matmul_params(active=True)),
            hidden=arch.hidden_size,
            layers=arch.num_layers,
            vocab=arch.vocab_size,
            heads=arch.num_heads,
            q_dim=arch.q_dim,
            kv_dim=arch.kv_dim,
            # Activations see the MLP width a token passes through (top-k experts and the shared
            # expert, averaged with any dense layers), kept as a multiple of one expert's width.
            intermediate=arch.expert_intermediate,
            experts_per_token=max(1, round(arch.mlp_width_per_token() / arch.expert_intermediate)),
            gated=arch.gated_mlp,
            logit_softcap=arch.logit_softcap,
        )

    def activation_units(
        self,
        trains_attention: bool,
        trains_mlp: bool,
        lora_dropout: bool = False,
        lora_targets: str = "all-linear",
        fused_qkv: bool = False,
        quantized_base: bool = False,
    ) -> float:
        """Bytes saved for backward per token per layer, in units of bytes x hidden size.

        physics.md §3.2, refined by what autograd keeps: a frozen linear layer needs no copy of its
        input (only trainable weights need x for their gradient), but norms, activation functions
        and flash attention keep their inputs and outputs whatever is trained. Full fine-tuning
        (or LoRA on all linear layers) gives c = 2(4 + 2q/h + 2kv/h + 4I/h): 41 for Llama-3-8B.
        With LoRA dropout the adapters keep the dropped-out copy instead of the input itself.
        quantized_base: bitsandbytes int8/4-bit linears keep their input A for backward whenever
        it needs a gradient (bitsandbytes autograd/_functions.py, MatMul4Bit: ctx.tensors = (A, B)),
        which a frozen 16-bit linear does not.
        """
        h = self.hidden
        q, kv = self.q_dim / h, 2 * self.kv_dim / h
        i = self.intermediate * self.experts_per_token / h
        # Always: two norm inputs, Q, K, V and the attention output (flash), and the MLP's
        # element-wise inputs: gate, up and the activation output (gated), or fc1 output (not).
        units = 2 + 2 * q + kv + (3 * i if self.gated else i)
        if (trains_attention and not lora_dropout) or quantized_base:
            units += 1  # normalized input of q/k/v
        if (trains_mlp and not lora_dropout) or quantized_base:
            units += 1 + i  # normalized input of gate/up (fc1) and input of down (fc2)
        if lora_dropout:
            # PEFT applies dropout separately in front of each adapted module: a bf16 copy and a
            # 1-byte mask of each module's input (physics.md §3.4). LitGPT's fused QKV linear
            # takes one dropout of its input for all three adapters.
            qkv = 1 if fused_qkv else 3
            attn = 0.0
            if lora_targets in ("attention", "all-linear"):
                attn = qkv + q
            elif lora_targets == "qv":
                attn = min(qkv, 2)
            mlp = (2 + i if self.gated else 1 + i) if lora_targets in ("mlp", "all-linear") else 0
            units += 1.5 * (attn + mlp)
        return 2.0 * units


def largest_linear(sizes: ModelSizes) -> float:
    """Elements of a decoder layer's widest linear weight (an MLP matrix, or q/o projections)."""
    return float(sizes.hidden * max(sizes.intermediate, sizes.q_dim, sizes.kv_dim))


def largest_param(sizes: ModelSizes) -> float:
    """Elements of the largest single weight: the embedding table or a layer's widest linear."""
    return max(float(sizes.embedding_table_params), largest_linear(sizes))


def base_weight_bytes(
    sizes: ModelSizes, method: I, quant: I, dense_bytes: float = 2.0, opts: MemoryOptions | None = None
) -> F:
    """Unsharded bytes of the model weights as stored on the GPU."""
    opts = opts or MemoryOptions()
    nf4 = k.NF4_BYTES_PER_PARAM if opts.double_quant else k.NF4_NO_DOUBLE_QUANT_BYTES_PER_PARAM
    linear_b = np.select([quant == Q8, quant == Q4], [k.INT8_BYTES_PER_PARAM.value, nf4.value], dense_bytes)
    # Embeddings, lm_head and norms stay 16-bit under int8/NF4 (physics.md §2.4).
    other_b = np.where(quant == Q16, dense_bytes, 2.0)
    out: F = sizes.linear_params * linear_b + sizes.other_params * other_b + 0.0 * method
    if opts.head_is_quantized():
        # A quantized head is a new tensor: it replaces an untied 16-bit head, while a tied one
        # stays behind as the input embedding.
        head = sizes.embedding_table_params
        untied = sizes.embedding_params > sizes.embedding_table_params
        out = out + np.where(quant != Q16, head * linear_b - (head * 2.0 if untied else 0.0), 0.0)
    return out


def dynamic_factor() -> float:
    """What activations and logits are planned at: 1 + the dynamic margin (physics.md §5)."""
    return 1.0 + k.DYNAMIC_MARGIN.value


# Reserved beyond allocated: blocks the caching allocator keeps cached after the differently sized
# tensors of earlier batches. It frees them and retries before it reports out of memory
# (c10/cuda/CUDACachingAllocator.cpp: release_cached_blocks on a failed cudaMalloc), so they show
# in max_memory_reserved but do not count against the card: ms-swift's variable-length runs
# reserved 78.7 GiB of an 80 GB card and finished.
RECLAIMED_BEFORE_OOM = ("fragmentation",)
# Static parts gone before the optimizer step: FSDP has resharded its gathered layers and
# reduce-scattered the unsharded gradients, autocast has dropped its cached copies and no weight
# is dequantized. The step's temporaries reuse that memory first.
FREED_BEFORE_STEP = ("unsharded_gradients", "gathered_shards", "autocast_copies", "dequant_workspace")


@dataclass(frozen=True)
class MemoryTerms:
    """Static components (bytes per GPU) and per-sequence dynamic components (bytes per b=1)."""

    static: dict[str, F]
    per_sample: dict[str, F]
    # CUDA managed memory (paged optimizer state): on the GPU while there is room, paged out
    # under pressure, so it neither causes an out-of-memory error nor shows in torch's counters.
    managed: dict[str, F] = field(default_factory=dict)
    # Temporaries the optimizer step allocates (bytes). The step runs after backward has freed
    # the activations, the logits and the static parts in FREED_BEFORE_STEP, so it raises the peak
    # only by what it needs beyond them (`step`).
    step_temporaries: F = field(default_factory=lambda: np.zeros(()))
    # Not memory: the bytes the optimizer step reads and writes once on this GPU (_States.stepped),
    # which the step time prices.
    stepped: F = field(default_factory=lambda: np.zeros(()))

    @cached_property
    def step(self) -> F:
        """The step's temporaries beyond the static parts backward has freed before it (bytes)."""
        freed = sum(self.static[name] for name in FREED_BEFORE_STEP if name in self.static)
        out: F = np.maximum(self.step_temporaries - freed, 0.0)
        return out

    def static_total(self) -> F:
        out: F = np.sum(np.stack(list(self.static.values())), axis=0)
        return out

    def _counted(self, reserved: bool = False) -> dict[str, F]:
        """The per-sequence components that count against the card, or with `reserved` all that
        max_memory_reserved shows (the cached blocks too)."""
        return {name: v for name, v in self.per_sample.items() if reserved or name not in RECLAIMED_BEFORE_OOM}

    def per_sample_total(self) -> F:
        """Dynamic bytes per sequence of the micro-batch that count against the card, margin included."""
        total: F = np.sum(np.stack(list(self._counted().values())), axis=0) * dynamic_factor()
        return total

    def dynamic(self, micro_batch: F | I) -> dict[str, F]:
        """Dynamic components at this micro-batch that count against the card, margin included."""
        factor = dynamic_factor()
        return {name: v * micro_batch * factor for name, v in self._counted().items()}

    def step_excess(self, dynamic_bytes: F) -> F:
        """What the optimizer step needs beyond the dynamic memory backward had freed."""
        out: F = np.maximum(self.step - dynamic_bytes, 0.0)
        return out

    def parts(self, micro_batch: F | I) -> dict[str, F]:
        """Every component at this micro-batch, margin included; they sum to the peak."""
        dynamic = self.dynamic(micro_batch)
        excess = self.step_excess(micro_batch * self.per_sample_total())
        return self.static | dynamic | {"optimizer_step": excess}

    def peak_bytes(self, micro_batch: F | I) -> F:
        """The planning peak: the dynamic part with its margin."""
        return self._with_step(micro_batch * self.per_sample_total())

    def measured_bytes(self, micro_batch: F | I, reserved: bool) -> F:
        """The peak as torch would report it (no margin): max_memory_reserved, or without the
        allocator's fragmentation max_memory_allocated; context and NCCL included."""
        dynamic: F = micro_batch * np.sum(np.stack(list(self._counted(reserved).values())), axis=0)
        return self._with_step(dynamic)

    def _with_step(self, dynamic: F) -> F:
        out: F = self.static_total() + dynamic + self.step_excess(dynamic)
        return out

    def take(self, idx: I) -> MemoryTerms:
        """The terms of the pairs at `idx` (components that are one value for all stay so)."""

        def pick(parts: dict[str, F]) -> dict[str, F]:
            return {name: v[idx] if np.ndim(v) else v for name, v in parts.items()}

        def one(v: F) -> F:
            return v[idx] if np.ndim(v) else v

        return MemoryTerms(
            pick(self.static), pick(self.per_sample), pick(self.managed), one(self.step_temporaries), one(self.stepped)
        )

    def with_static(self, name: str, value: F) -> MemoryTerms:
        """The same terms with one static component replaced."""
        return MemoryTerms(
            self.static | {name: value}, self.per_sample, self.managed, self.step_temporaries, self.stepped
        )


def _gradient_bytes(sizes: ModelSizes, opts: MemoryOptions, full: B, full_grad_bytes: float) -> F:
    """Unsharded gradient bytes of what trains: every weight, or the adapters and embedding copies."""
    ag = adapter_state_bytes(opts.optimizer, opts.adapter_dtype)[1]
    copies = sizes.embedding_params * embedding_copy_bytes(opts)[1] if opts.train_embeddings else 0.0
    out: F = np.where(full, sizes.total_params * full_grad_bytes, sizes.lora_params * ag + copies)
    return out


def unsharded_gradient_bytes(
    sizes: ModelSizes, opts: MemoryOptions, method: I, shard: I, n_gpus: I, accumulating: B | bool
) -> F:
    """FSDP gradient bytes per GPU held whole beyond their shard.

    Accelerate and Lightning Fabric accumulate under FSDP's no_sync(), which keeps every unit's
    gradient unsharded until the micro-batch that syncs (torch FSDP docs of no_sync; accelerate's
    GradientAccumulationPlugin.sync_each_batch). When every micro-batch syncs, only the root unit's
    gradient (embeddings, an untied lm_head) is whole, through the backward. Lightning FSDP wraps
    adapters and frozen weights in one FlatParameter, which gets one gradient of its full size even
    when only the adapters in it train. DeepSpeed accumulates into its partitioned gradients, and
    torchtune's FSDP2 recipes reduce-scatter every micro-batch (Stack.fsdp_unsharded_accumulation).
    """
    n = n_gpus.astype(np.float64)
    full = method == FULL
    deepspeed = opts.framework == "deepspeed"
    g_b = FULL_STATE_BYTES[opts.optimizer][1]
    grad_bytes = _gradient_bytes(sizes, opts, full, g_b)
    if opts.framework == "litgpt":
        grad_bytes = np.where(full, grad_bytes, sizes.total_params * 2.0)
    sharded = (shard == ZERO3) & (n > 1) & (not deepspeed)
    root = np.where((sharded | opts.offload_params) & (not deepspeed) & full, sizes.embedding_params * g_b, 0.0)
    # Under no_sync FSDP leaves each unit's unsharded gradient on the GPU, CPU offload or not
    # (torch fsdp/_runtime_utils.py _post_backward_hook returns before reducing; FSDP2 keeps its
    # unsharded accumulated gradient). Without offload this GPU's shard is already among the
    # gradients (1/n of them); with it none is.
    no_sync = sharded & accumulating & STACKS[opts.stack].fsdp_unsharded_accumulation
    out: F = np.where(no_sync, grad_bytes * (1.0 if opts.offload_params else 1.0 - 1.0 / n), root)
    return out


@dataclass(frozen=True)
class _States:
    """Model states per GPU (bytes) and the per-parameter facts the other terms reuse."""

    weights: F
    adapters: F
    grads: F
    optim: F
    paged: F  # optimizer state in CUDA managed memory, out of `optim`
    stepped: F  # what the optimizer step reads and writes once (bytes; priced by the step time)
    grad_bytes: F  # unsharded gradient bytes of what trains
    trainable: F  # trainable parameters
    base: F  # unsharded base weight bytes as stored
    state_bytes: tuple[float, float, F]  # (weight, grad, optimizer) bytes per parameter, full FT
    dense: float  # bytes per dense weight: 4 for an fp32-loaded model, else 2
    master: B  # full fine-tuning whose state holds an fp32 master beside the moments (`adamw`)


def kbit_upcast(opts: MemoryOptions, method: I, quant: I, shard: I) -> B:
    """Where PEFT's prepare_model_for_kbit_training runs (Stack.kbit_upcast): adapters on a
    bitsandbytes int8/4-bit base (PEFT skips the cast for GPTQ), unless the QLoRA is sharded, for
    which TRL leaves it out (FSDP, ZeRO-3)."""
    on = opts.kbit_upcast and opts.quant_kernel == "bitsandbytes"
    out: B = on & (method != FULL) & (quant != Q16) & (shard != ZERO3)
    return out


def plan_upcasts(opts: MemoryOptions, method: str, weight_precision: str, sharding: str) -> bool:
    """kbit_upcast for one plan, by its names (what an export must ask the training script for)."""
    quant = QUANT_NAMES.index(weight_precision) if weight_precision in QUANT_NAMES else Q16

    def one(code: int) -> I:
        return np.array([code], dtype=np.int64)

    return bool(kbit_upcast(opts, one(METHOD_NAMES.index(method)), one(quant), one(SHARD_NAMES.index(sharding)))[0])


def sharded_master(opts: MemoryOptions, method: I, shard: I) -> B:
    """Full fine-tuning of a model its stack loads in bf16 that the backend it shards or offloads
    with gives an fp32 master again (_stacks.Stack.master_when_sharded): priced as `adamw`."""
    out: B = (method == FULL) & (opts.optimizer == "adamw-bf16") & STACKS[opts.stack].master_when_sharded
    return out & ((shard >= ZERO1) | opts.offload_optimizer | opts.offload_params)


def _states(sizes: ModelSizes, opts: MemoryOptions, method: I, quant: I, shard: I, n: F, upcast: B) -> _States:
    """Weights, adapters, gradients and optimizer state per GPU, sharded as the stage says."""
    full = method == FULL
    w_b, g_b, plain_o_b = FULL_STATE_BYTES[opts.optimizer]
    rebuilt = sharded_master(opts, method, shard)
    o_b: F = np.where(rebuilt, FULL_STATE_BYTES["adamw"][2], plain_o_b)
    if opts.framework == "deepspeed" and opts.optimizer in ("adamw", "paged-adamw"):
        # DeepSpeed accumulates gradients in fp32: 2 (bf16 weights) + 4 (fp32 grads) + 4 (fp32 master)
        # + 8 (moments) = 18 B/param, the comment of its estimate_zero2_model_states_mem_needs
        # (physics.md §2.1); the bf16 gradient is not kept beside the fp32 one.
        g_b = 4.0
    aw, _, ao = adapter_state_bytes(opts.optimizer, opts.adapter_dtype)
    shard_w = np.where(shard == ZERO3, n, 1.0)
    shard_g = np.where(shard >= ZERO2, n, 1.0)
    shard_o = np.where(shard >= ZERO1, n, 1.0)

    dense = 4.0 if opts.optimizer == "adamw-fp32" else 2.0  # an fp32-loaded model keeps fp32 weights
    base = base_weight_bytes(sizes, method, quant, dense, opts)
    weights = np.where(full, sizes.total_params * w_b, base) / shard_w
    # prepare_model_for_kbit_training: the 16-bit embeddings, lm_head and norms become fp32.
    weights = weights + np.where(upcast, sizes.other_params * 2.0, 0.0)
    # Trainable parameters: everything (full) or the adapters, plus embedding and lm_head copies
    # when they are trained as well (PEFT modules_to_save keeps the original and a trainable copy).
    extra = sizes.embedding_params if opts.train_embeddings else 0.0
    cw, _, co = embedding_copy_bytes(opts)
    adapter_bytes = sizes.lora_params * aw + extra * cw  # unsharded
    adapters = np.where(full, 0.0, adapter_bytes / shard_w)
    trainable = np.where(full, sizes.total_params, sizes.lora_params + extra)
    grad_bytes = _gradient_bytes(sizes, opts, full, g_b)
    grads = grad_bytes / shard_g
    if opts.optimizer_in_backward:
        # Each parameter is stepped in its gradient hook and its gradient freed (torchtune's
        # optimizer_in_bwd): at most the largest single gradient is alive at once.
        grads = np.minimum(grads, largest_param(sizes) * g_b / shard_g)
    if opts.framework == "litgpt":
        # Each Lightning FSDP unit's FlatParameter holds frozen weights and adapters together and
        # gets one gradient of its full size, sharded like the weights (see unsharded_gradient_bytes).
        grads = np.where((shard == ZERO3) & (n > 1) & ~full, sizes.total_params * 2.0 / n, grads)
    if opts.offload_params:
        # Only the gathered units are on the GPU; the shards wait in CPU memory. Their gradients
        # too, but FSDP1 keeps each GPU gradient shard until backward ends (fsdp_version), all of
        # them by then, in the flat parameter's dtype: fp32 where FSDP holds the trainable flat
        # parameters in fp32 (fsdp_fp32_params: accelerate's mixed precision), else what trains
        # is held in (LitGPT's bf16-true, a plain FSDP loop over a bf16 model). They live
        # on its post-backward stream, whose cached blocks the compute stream does not reuse: in
        # reserved memory they add to the compute peak. Allocated, they grow as backward frees
        # activations; the planning peak counts both, an upper bound. Offloading on one GPU, or
        # through DeepSpeed, is DeepSpeed's ZeRO-Offload (_exports._recipe.parallel_of): none kept.
        fsdp1 = (shard == ZERO3) & (n > 1) & (opts.fsdp == 1) & (opts.framework != "deepspeed")
        kept = trainable * 4.0 / n if opts.fp32_flat_params else grads
        if opts.optimizer_in_backward:
            # FSDP1 hands each handle's shard to its optimizer and drops it (_post_backward_use_sharded_grad_views).
            kept = np.minimum(kept, largest_param(sizes) * 4.0 / n)
        weights, adapters, grads = weights * 0.0, adapters * 0.0, np.where(fsdp1, kept, 0.0)
    on_gpu_optim = 0.0 if opts.offload_optimizer or opts.offload_params else 1.0
    optim = np.where(full, sizes.total_params * o_b, sizes.lora_params * ao + extra * co) / shard_o * on_gpu_optim
    # bitsandbytes allocates paged optimizer state in CUDA managed memory (cudaMallocManaged): the
    # driver pages it to CPU memory under pressure, and torch's allocator never counts it.
    paged = optim if opts.optimizer.startswith("paged") else optim * 0.0
    # The optimizer step reads and writes, once each, this GPU's partition (ZeRO-1/2 step 1/n of the
    # parameters, then gather them) of what trains, its gradients (read once also when stepped in
    # its hook, or held in a FlatParameter of frozen weights) and the optimizer state, paged or not.
    # The frozen base is never stepped: torch optimizers step the parameters they were given, and
    # transformers' Trainer.create_optimizer gives them those that require grad.
    trained = np.where(full, sizes.total_params * w_b, adapter_bytes)
    stepped = (trained + grad_bytes) / shard_o + optim
    return _States(
        weights=weights,
        adapters=adapters,
        grads=grads,
        optim=optim - paged,
        paged=paged,
        stepped=stepped,
        grad_bytes=grad_bytes,
        trainable=trainable,
        base=base,
        state_bytes=(w_b, g_b, o_b),
        dense=dense,
        master=(full & (opts.optimizer == "adamw")) | rebuilt,
    )


def _optimizer_step_bytes(sizes: ModelSizes, opts: MemoryOptions, st: _States) -> F:
    """Temporaries of the optimizer step per GPU: copies of one moment of every trainable
    parameter of this GPU's optimizer shard (_stacks.OptimizerStep). Only torch's AdamW makes
    them; the 8-bit, paged, SGD and Adafactor optimizers update in place or per parameter."""
    copies = OPTIMIZER_STEP_COPIES[opts.optimizer_step]
    if copies == 0.0 or opts.optimizer not in ("adamw", "adamw-fp32", "adamw-bf16"):
        return np.zeros_like(st.optim)
    # The state holds two moments per parameter, and for mixed-precision full fine-tuning an fp32
    # master beside them (FULL_STATE_BYTES "adamw": 4 + 8 bytes).
    moments = np.where(st.master, 3.0, 2.0)
    per_copy = st.optim / moments
    if opts.optimizer_in_backward:
        # Stepped one parameter at a time in its gradient hook: one parameter's copy at most.
        per_copy = np.minimum(per_copy, largest_param(sizes) * st.state_bytes[2] / moments)
    out: F = copies * per_copy
    return out


def _gathered_and_buckets(
    sizes: ModelSizes, opts: MemoryOptions, st: _States, method: I, shard: I, n: F
) -> tuple[F, F]:
    """Unsharded parameters gathered for compute, and communication buckets (bytes per GPU)."""
    if opts.framework == "deepspeed":
        # ZeRO-3 gathers up to stage3_max_live_parameters. Gradients are copied into contiguous
        # reduce buckets of reduce_bucket_size elements whatever the trainable size: ZeRO-1/2
        # allocate two at every backward with overlap_comm (stage_1_and_2.py backward(), "double
        # buffers to avoid data access conflict"), ZeRO-3 one (stage3.py __ipg_bucket_flat_buffer).
        live = np.minimum(sizes.total_params, k.DEEPSPEED_ZERO3_LIVE_ELEMENTS.value) * 2.0
        gathered = np.where((shard == ZERO3) | opts.offload_params, live, 0.0)
        bucket = (opts.deepspeed_bucket_elements or float(sizes.hidden) ** 2) * 2.0
        buckets = np.where((shard == ZERO1) | (shard == ZERO2), 2.0 * bucket, np.where(shard == ZERO3, bucket, 0.0))
        return gathered, buckets
    # FSDP holds the current and the prefetched layer unsharded, and the root unit (what no
    # decoder layer wraps: embeddings, an untied lm_head) stays unsharded from forward
    # through backward, with its unsharded gradient when it trains. Offloaded parameters
    # stream in one wrapped unit at a time, on one GPU as well.
    layer_storage = np.where(method == FULL, st.state_bytes[0], st.base / sizes.total_params)
    gathered = np.where(
        ((shard == ZERO3) & (n > 1)) | opts.offload_params,
        k.ZERO3_GATHERED_LAYERS.value * sizes.layer_params * layer_storage + sizes.embedding_params * 2.0,
        0.0,
    )
    buckets = np.where((shard == DDP) & (n > 1), st.grad_bytes, 0.0)
    return gathered, buckets


def _autocast_copies(sizes: ModelSizes, dense: float, method: I, quant: I, shard: I, ckpt: I, n: F) -> F:
    """bf16 copies of fp32 weights that autocast makes for its matmuls (bytes per GPU).

    Autocast on an fp32 model runs every matmul on a bf16 copy of its weight. Copies of trained
    weights are cached for the whole forward (torch autocast caches casts of leaf tensors that
    require grad); a frozen weight is recast at each use, and its copy is what the matmul saves
    to compute its input's gradient: kept for every layer without checkpointing, for the
    re-materialized layer with it. Gathered ZeRO-3 units are already the compute copies.
    """
    head = sizes.embedding_table_params
    frozen_copies = np.where(ckpt == 1, sizes.linear_params / sizes.layers, sizes.linear_params) + head
    copies = np.where(method == FULL, sizes.linear_params + head, np.where(quant == Q16, frozen_copies, 0.0)) * 2.0
    out: F = np.where((dense == 4.0) & ~((shard == ZERO3) & (n > 1)), copies, 0.0)
    return out


def _dequant_workspace(sizes: ModelSizes, opts: MemoryOptions, quant: I) -> F:
    """What a quantized matmul holds while it expands its weight to bf16 (bytes per GPU).

    bitsandbytes expands one linear's weight to bf16 for its matmul, in forward and again in
    backward, and frees it after; GPTQ kernels dequantize tile by tile and hold no bf16 copy;
    torchao's eager NF4 dequantization keeps int64 indices and every intermediate of the largest
    linear until it returns (DEQUANT_WORKSPACE_BYTES_PER_ELEMENT).
    """
    per_element = k.DEQUANT_WORKSPACE_BYTES_PER_ELEMENT[opts.dequant_kernel].value
    dequant: F = np.where(quant != Q16, largest_linear(sizes) * per_element, 0.0)
    if opts.head_is_quantized():
        # A quantized head is dequantized to bf16 whole in forward and backward, at the logits'
        # peak (LitGPT's bitsandbytes plugin quantizes it, see MemoryOptions).
        dequant = dequant + np.where(quant != Q16, sizes.embedding_table_params * 2.0, 0.0)
    return dequant


def _activation_units(sizes: ModelSizes, opts: MemoryOptions, seq_len: int, method: I, quant: I) -> F:
    """Bytes saved for backward per token and layer, in units of the hidden size (c of physics.md
    §3), by configuration."""
    t = opts.lora_targets

    def lora_units(quantized_base: bool) -> float:
        return sizes.activation_units(
            t in ("attention", "all-linear", "qv"),
            t in ("mlp", "all-linear"),
            opts.lora_dropout > 0,
            t,
            fused_qkv=opts.framework == "litgpt",
            quantized_base=quantized_base,
        )

    lora_c = np.where(quant != Q16, lora_units(opts.quant_kernel == "bitsandbytes"), lora_units(False))
    c = np.where(method == FULL, sizes.activation_units(True, True), lora_c) * k.ACTIVATION_SCALE.value
    if not opts.flash_attention:
        # Eager attention keeps the softmax output (fp32) and its bf16 copy: a·s values of 6 bytes
        # per token and layer (physics.md §3.1: 5 with dropout masks in Korthikanti's count).
        c = c + k.EAGER_ATTENTION_BYTES_PER_SCORE.value * sizes.heads * float(seq_len) / float(sizes.hidden)
    out: F = c
    return out


def _softcap_bytes(sizes: ModelSizes, opts: MemoryOptions) -> float:
    """Bytes per logit value a softcapped head adds: logits / cap, tanh, * cap (Gemma-2 in
    transformers' Gemma2ForCausalLM, LitGPT's do_softcapping) keep tanh's 16-bit output for
    backward beside the logits the loss takes. A fused loss caps inside its chunks; some stacks cap
    the hidden states instead (Stack.softcaps_logits)."""
    capped = sizes.logit_softcap and opts.loss != "fused" and STACKS[opts.stack].softcaps_logits
    return 2.0 if capped else 0.0


def _per_sample(
    sizes: ModelSizes, opts: MemoryOptions, seq_len: int, method: I, quant: I, ckpt: I, upcast: B
) -> dict[str, F]:
    """Dynamic memory per sequence of the micro-batch (bytes), before the margin."""
    s, h, layers = float(seq_len), float(sizes.hidden), float(sizes.layers)
    # Each checkpointed layer keeps its input: bf16, or fp32 where prepare_model_for_kbit_training
    # made the embeddings fp32 (the residual adds then stay fp32 through the stack).
    layer_input = np.where(upcast, 4.0, 2.0) * s * h
    per_layer = _activation_units(sizes, opts, seq_len, method, quant) * s * h
    logit_total = s * sizes.vocab * (LOSS_BYTES_PER_LOGIT[opts.loss] + _softcap_bytes(sizes, opts))
    # Without checkpointing every layer's activations are alive when the logits are. With it,
    # the stored layer inputs are, but the one re-materialized layer comes after the loss and
    # lm_head backward have freed the logits: that phase needs only what exceeds them.
    stored = np.where(ckpt == 1, layer_input, per_layer) * layers
    if opts.activation_offload:
        # Saved tensors stream to CPU as forward produces them (torchtune's OffloadActivations,
        # Unsloth's offloaded checkpointing): one layer's set in use and one in transfer stay.
        stored = np.minimum(stored, 2.0 * np.where(ckpt == 1, layer_input, per_layer))
    recompute = np.where(ckpt == 1, np.maximum(per_layer - logit_total, 0.0), 0.0)
    logits = np.full_like(stored, logit_total)
    # With batches of varying length the caching allocator keeps blocks of earlier, differently
    # sized short-lived tensors (the logits, the re-materialized layer) reserved beside the live
    # ones; activations kept through the step are reallocated in the same order every step.
    frag = k.RESERVED_FRAGMENTATION.value * (logits + recompute) if opts.variable_length else 0.0 * logits
    return {"activations": stored, "recompute": recompute, "logits": logits, "fragmentation": frag}


def memory_terms(
    sizes: ModelSizes,
    opts: MemoryOptions,
    seq_len: int,
    method: I,
    quant: I,
    shard: I,
    ckpt: I,
    n_gpus: I,
    accumulating: B | bool = False,
) -> MemoryTerms:
    """Memory per GPU for each configuration (all arrays broadcast together).

    `accumulating`: the step accumulates gradients over several micro-batches (grad_accum > 1),
    which FSDP does with its gradients unsharded (see `unsharded_gradients`).
    """
    n = n_gpus.astype(np.float64)
    upcast = kbit_upcast(opts, method, quant, shard)
    st = _states(sizes, opts, method, quant, shard, n, upcast)
    gathered, buckets = _gathered_and_buckets(sizes, opts, st, method, shard, n)
    shape = np.broadcast(n, method, quant, shard, ckpt).shape

    def b(x: F | float) -> F:
        return np.broadcast_to(np.asarray(x, dtype=np.float64), shape)

    static = {
        "weights": b(st.weights),
        "adapters": b(st.adapters),
        "gradients": b(st.grads),
        "unsharded_gradients": b(unsharded_gradient_bytes(sizes, opts, method, shard, n_gpus, accumulating)),
        "optimizer": b(st.optim),
        "gathered_shards": b(gathered),
        "comm_buckets": b(buckets),
        "autocast_copies": b(_autocast_copies(sizes, st.dense, method, quant, shard, ckpt, n)),
        "dequant_workspace": b(_dequant_workspace(sizes, opts, quant)),
        "framework_runtime": b(k.runtime_gib(opts.stack).value * k.GIB),
        "cuda_context": b(k.CUDA_CONTEXT_GIB.value * k.GIB),
        "nccl": b(np.where(n > 1, k.NCCL_GIB.value * k.GIB, 0.0)),
    }
    return MemoryTerms(
        static=static,
        per_sample={name: b(v) for name, v in _per_sample(sizes, opts, seq_len, method, quant, ckpt, upcast).items()},
        managed={"paged_optimizer": b(st.paged)},
        step_temporaries=b(_optimizer_step_bytes(sizes, opts, st)),
        stepped=b(st.stepped),
    )


def max_micro_batch(terms: MemoryTerms, usable_bytes: F, cap: I) -> I:
    """Largest power-of-two micro-batch <= cap that fits; 0 where even b=1 does not fit."""
    room = usable_bytes - terms.static_total()
    fit = np.floor(room / terms.per_sample_total())
    fit = np.where(room >= terms.step, np.minimum(fit, cap.astype(np.float64)), 0.0)
    out = np.zeros(fit.shape, dtype=np.int64)
    ok = fit >= 1
    out[ok] = (2 ** np.floor(np.log2(fit[ok]))).astype(np.int64)
    return out
