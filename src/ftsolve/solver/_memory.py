"""Peak GPU memory per GPU (physics.md §2-6), vectorized over training configurations.

Peak(b) = static + b · per_sample · (1 + margin), where b is the micro-batch in sequences:
model states, gathered shards, buffers and context do not depend on b; activations and logits
grow linearly in it. That split lets the planner pick the largest micro-batch that fits in
closed form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog._models import ModelArch
from ftsolve.solver import _coefficients as k

F = NDArray[np.float64]
I = NDArray[np.int64]

# Codes used in the configuration arrays.
FULL, LORA, QLORA = 0, 1, 2
Q16, Q8, Q4 = 0, 1, 2  # base-weight storage: 16-bit, int8, NF4
NONE, DDP, ZERO1, ZERO2, ZERO3 = 0, 1, 2, 3, 4
METHOD_NAMES = ("full", "lora", "qlora")
QUANT_NAMES = ("16-bit", "int8", "nf4")
SHARD_NAMES = ("none", "ddp", "zero1", "zero2", "zero3")

# Bytes per trainable parameter for (weights, grads, optimizer) by optimizer regime, full FT.
# physics.md §2.1-2.2: mixed-precision AdamW 2+2+12 = 16; pure bf16 AdamW 2+2+4 = 8; bf16 +
# bnb 8-bit AdamW 2+2+2.03; SGD+momentum with fp32 master 2+2+(4+4); Adafactor with fp32
# master and factored second moments 2+2+4.
FULL_STATE_BYTES: dict[str, tuple[float, float, float]] = {
    "adamw": (2.0, 2.0, 12.0),
    "adamw-bf16": (2.0, 2.0, 4.0),
    "adamw-8bit": (2.0, 2.0, 2.03),
    "sgd": (2.0, 2.0, 8.0),
    "adafactor": (2.0, 2.0, 4.0),
}
# Adapter (weight, grad, optimizer) bytes per parameter: PEFT keeps adapters in fp32
# (physics.md §2.3) except in the pure-bf16 regime.
ADAPTER_STATE_BYTES: dict[str, tuple[float, float, float]] = {
    "adamw": (4.0, 4.0, 8.0),
    "adamw-bf16": (2.0, 2.0, 4.0),
    "adamw-8bit": (4.0, 4.0, 2.03),
    "sgd": (4.0, 4.0, 4.0),
    "adafactor": (4.0, 4.0, 0.0),
}


@dataclass(frozen=True)
class ModelSizes:
    """Scalars of one architecture that the memory, time and cost models share."""

    total_params: float
    linear_params: float
    other_params: float
    lora_params: float
    layer_params: float
    embedding_table_params: float
    matmul_params_active: float
    hidden: int
    layers: int
    vocab: int
    q_dim: int
    activation_units: float  # c in bytes·s·b·h per layer, before ACTIVATION_SCALE

    @classmethod
    def of(cls, arch: ModelArch, lora_rank: int, lora_targets: str) -> ModelSizes:
        h, i = arch.hidden_size, arch.intermediate_size
        kv_ratio = 2 * arch.kv_dim / h
        mlp_units = (4 if arch.gated_mlp else 2) * i * arch.experts_per_token / h
        q_ratio = arch.q_dim / h
        # physics.md §3.2: norm in 1, QKV in 1, Q q/h, K+V 2kd/h, attention out q/h,
        # MLP norm in 1, MLP in 1, gate/up/act/product 4·I/h (top-k experts for MoE); x2 bytes.
        c = 2.0 * (4 + 2 * q_ratio + kv_ratio + mlp_units)
        return cls(
            total_params=float(arch.total_params()),
            linear_params=float(arch.linear_params_in_layers()),
            other_params=float(arch.total_params() - arch.linear_params_in_layers()),
            lora_params=float(arch.lora_params(lora_rank, lora_targets)),
            layer_params=float(arch.attention_params_per_layer() + arch.mlp_params_per_layer()),
            embedding_table_params=float(arch.vocab_size * arch.hidden_size),
            matmul_params_active=float(arch.matmul_params(active=True)),
            hidden=h,
            layers=arch.num_layers,
            vocab=arch.vocab_size,
            q_dim=arch.q_dim,
            activation_units=c,
        )


def base_weight_bytes(sizes: ModelSizes, method: I, quant: I) -> F:
    """Unsharded bytes of the model weights as stored on the GPU."""
    linear_b = np.select(
        [quant == Q8, quant == Q4], [k.INT8_BYTES_PER_PARAM.value, k.NF4_BYTES_PER_PARAM.value], 2.0
    )
    # Embeddings, lm_head and norms stay 16-bit under int8/NF4 (physics.md §2.4).
    return sizes.linear_params * linear_b + sizes.other_params * 2.0 + 0.0 * method


@dataclass(frozen=True)
class MemoryTerms:
    """Static components (bytes per GPU) and per-sequence dynamic components (bytes per b=1)."""

    static: dict[str, F]
    per_sample: dict[str, F]

    def static_total(self) -> F:
        out: F = np.sum(np.stack(list(self.static.values())), axis=0)
        return out

    def per_sample_total(self) -> F:
        total: F = np.sum(np.stack(list(self.per_sample.values())), axis=0) * (1.0 + k.DYNAMIC_MARGIN.value)
        return total

    def peak_bytes(self, micro_batch: F | I) -> F:
        return self.static_total() + micro_batch * self.per_sample_total()


def memory_terms(
    sizes: ModelSizes,
    optimizer: str,
    seq_len: int,
    method: I,
    quant: I,
    shard: I,
    ckpt: I,
    n_gpus: I,
) -> MemoryTerms:
    """Memory per GPU for each configuration (all arrays broadcast together)."""
    n = n_gpus.astype(np.float64)
    full = method == FULL
    w_b, g_b, o_b = FULL_STATE_BYTES[optimizer]
    aw, ag, ao = ADAPTER_STATE_BYTES[optimizer]
    shard_w = np.where(shard == ZERO3, n, 1.0)
    shard_g = np.where(shard >= ZERO2, n, 1.0)
    shard_o = np.where(shard >= ZERO1, n, 1.0)

    weights = np.where(full, sizes.total_params * w_b, base_weight_bytes(sizes, method, quant)) / shard_w
    trainable = np.where(full, sizes.total_params, sizes.lora_params)
    adapters = np.where(full, 0.0, sizes.lora_params * aw / shard_w)
    grads = trainable * np.where(full, g_b, ag) / shard_g
    optim = trainable * np.where(full, o_b, ao) / shard_o

    layer_storage = np.where(full, 2.0, base_weight_bytes(sizes, method, quant) / sizes.total_params)
    gathered = np.where(
        (shard == ZERO3) & (n > 1),
        k.ZERO3_GATHERED_LAYERS.value * sizes.layer_params * layer_storage
        + sizes.embedding_table_params * 2.0,
        0.0,
    )
    buckets = np.where((shard == DDP) & (n > 1), trainable * np.where(full, g_b, ag), 0.0)
    context = np.full(np.broadcast(n, method).shape, k.CUDA_CONTEXT_GIB.value * k.GIB)
    nccl = np.where(n > 1, k.NCCL_GIB.value * k.GIB, 0.0)

    s, h, layers = float(seq_len), float(sizes.hidden), float(sizes.layers)
    c = sizes.activation_units * k.ACTIVATION_SCALE.value
    per_layer = c * s * h
    activations = np.where(ckpt == 1, 2.0 * s * h * layers + per_layer, per_layer * layers)
    logits = np.full_like(activations, s * sizes.vocab * k.LOGITS_BYTES_PER_VALUE.value)

    shape = np.broadcast(n, method, quant, shard, ckpt).shape

    def b(x: F | float) -> F:
        return np.broadcast_to(np.asarray(x, dtype=np.float64), shape)

    return MemoryTerms(
        static={
            "weights": b(weights),
            "adapters": b(adapters),
            "gradients": b(grads),
            "optimizer": b(optim),
            "gathered_shards": b(gathered),
            "ddp_buckets": b(buckets),
            "cuda_context": b(context),
            "nccl": b(nccl),
        },
        per_sample={"activations": b(activations), "logits": b(logits)},
    )


def max_micro_batch(terms: MemoryTerms, usable_bytes: F, cap: I) -> I:
    """Largest power-of-two micro-batch <= cap that fits; 0 where even b=1 does not fit."""
    room = usable_bytes - terms.static_total()
    fit = np.floor(room / terms.per_sample_total())
    fit = np.minimum(fit, cap.astype(np.float64))
    out = np.zeros(fit.shape, dtype=np.int64)
    ok = fit >= 1
    out[ok] = (2 ** np.floor(np.log2(fit[ok]))).astype(np.int64)
    return out
