"""Which training setups exist and which GPUs run them.

One rule set, applied two ways: the candidate table builds only the setups that the setup rules
allow and masks the GPU rules as its "compatibility" constraint; the stand-alone estimates (a
one-row table) raise the first broken rule's reason as an InvalidJobSpec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from ftsolve._errors import InvalidJobSpec
from ftsolve.solver._hardware import Hardware
from ftsolve.solver._memory import DDP, FULL, LORA, NONE, Q4, Q8, Q16, QLORA, ZERO1, ZERO2, ZERO3
from ftsolve.solver._stacks import STACKS

I = NDArray[np.int64]
B = NDArray[np.bool_]
T = TypeVar("T")

# Training configurations the planner searches: (method, base quantization, sharding, gradient
# checkpointing). int8 LoRA is not offered with ZeRO-3 (bitsandbytes int8 cannot be FSDP-sharded),
# and ZeRO-1/2 only shard optimizer state and gradients, which adapters barely have.
CONFIGS: I = np.array(
    [
        (method, quant, shard, ckpt)
        for method, quant, shards in (
            (FULL, Q16, (NONE, DDP, ZERO1, ZERO2, ZERO3)),
            (LORA, Q16, (NONE, DDP, ZERO3)),
            (LORA, Q8, (NONE, DDP)),
            (QLORA, Q4, (NONE, DDP, ZERO3)),
        )
        for shard in shards
        for ckpt in (0, 1)
    ],
    dtype=np.int64,
)


@dataclass(frozen=True)
class Setup:
    """Training setups, arrays broadcast together: what the setup rules read."""

    method: I
    quant: I
    shard: I
    n_gpus: I
    runtime: str  # the stack's runtime family (MemoryOptions.framework)
    quant_kernel: str  # MemoryOptions.quant_kernel


@dataclass(frozen=True)
class OnGpu:
    """Base-weight storage on GPU types, arrays broadcast together: what the GPU rules read."""

    quant: I
    nvidia: B
    timed: B  # the catalog has the GPU's tensor peak and memory bandwidth
    bf16: B  # the GPU computes in bf16
    needs_bf16: bool  # the stack refuses fp16 (Stack.requires_bf16)

    @classmethod
    def of(cls, quant: I, hw: Hardware, at: I | slice, stack: str) -> OnGpu:
        """The GPU facts of setups `hw[at]` running `quant` on `stack`."""
        return cls(quant, hw.nvidia[at], hw.timed[at], hw.bf16[at], STACKS[stack].requires_bf16)


@dataclass(frozen=True)
class Rule(Generic[T]):
    """One rule: its name, what an estimate says when a setup breaks it, and where it holds."""

    name: str
    reason: str
    holds: Callable[[T], B]


SETUP_RULES: tuple[Rule[Setup], ...] = (
    Rule(
        "sharding",
        "invalid sharding: several GPUs need ddp, zero1, zero2 or zero3",
        lambda s: (s.n_gpus == 1) | (s.shard != NONE),
    ),
    # DeepSpeed runs ZeRO stages on one GPU (ZeRO-Offload is built on them); torch DDP and FSDP
    # on one GPU only add hooks to a plain run.
    Rule(
        "one_gpu_sharding",
        "invalid sharding: one GPU shards nothing outside DeepSpeed (ZeRO on one GPU: stack='deepspeed')",
        lambda s: (s.n_gpus > 1) | (s.shard == NONE) | ((s.runtime == "deepspeed") & (s.shard >= ZERO1)),
    ),
    Rule(
        "full_precision",
        "invalid weight_precision: full fine-tuning trains 16-bit weights",
        lambda s: (s.method != FULL) | (s.quant == Q16),
    ),
    # torchtune quantizes bases to torchao's NF4 only; an int8 base needs bitsandbytes or GPTQ.
    Rule(
        "int8_kernel",
        "invalid weight_precision: torchao's NF4 kernel (torchtune) has no int8 base; use nf4 or another stack",
        lambda s: (s.quant != Q8) | (s.quant_kernel != "torchao"),
    ),
)
# What a GPU must support for a setup to run on it at all (a memory estimate asks only these).
GPU_RULES: tuple[Rule[OnGpu], ...] = (
    Rule(
        "quantized_kernels",
        "int8 and 4-bit bases need bitsandbytes or GPTQ CUDA kernels: NVIDIA GPUs only",
        lambda g: g.nvidia | (g.quant == Q16),
    ),
    Rule(
        "bf16",
        "the stack's recipes refuse fp16 and this GPU has no bf16 (torchtune)",
        lambda g: g.bf16 | (not g.needs_bf16),
    ),
)
# What the catalog must know of a GPU to time a setup on it (a time estimate and the table).
TIMING_RULES: tuple[Rule[OnGpu], ...] = (
    Rule("timed", "no tensor peak or memory bandwidth in the catalog, so no time estimate", lambda g: g.timed),
)


def holds_all(rules: tuple[Rule[T], ...], x: T) -> B:
    """Where every rule holds."""
    out: B = np.ones((), dtype=bool)
    for rule in rules:
        out = out & rule.holds(x)  # the rules' shapes broadcast together
    return out


def refuse_broken(rules: tuple[Rule[T], ...], x: T, prefix: str = "") -> None:
    """Raise the first broken rule's reason (for a one-row estimate)."""
    for rule in rules:
        if not np.all(rule.holds(x)):
            raise InvalidJobSpec(prefix + rule.reason)
