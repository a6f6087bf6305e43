"""Training stacks: what each one does by default that changes peak memory or step time.

A stack is a small record of defaults, each with the file of the stack's own source that shows
it; docs/stacks.md has the commits, line numbers and the derivations behind every entry. A job
names its stack (`JobSpec.stack`, `--stack`); every switch is also a job field of its own, so a
user of any stack can state what they run, and an explicit field wins over the stack's
default. Exports read the same record (one place for what a stack does).

Loss computation (`loss`), bytes held per logit value (s·V per sequence) at the loss peak:
- `fp32-upcast`: bf16 logits from lm_head, an fp32 copy for the loss, and log-softmax's fp32
  output saved for backward; in backward the fp32 gradient of the log-probabilities and of the
  logits exist together with the saved output: 2 + 4 + 4 forward, 4 + 4 + 4 backward -> 12.
  transformers' ForCausalLMLoss (`logits = logits.float()`, loss_utils.py).
- `bf16`: cross-entropy straight on bf16 logits (Qwen-1 remote modelling code, LitGPT's
  chunked_cross_entropy): logits, a contiguous shifted copy and the saved log-probabilities in bf16
  forward, 2 + 2 + 2; backward 2 + 2 + 2 -> 6.
- `chunked`: torchtune's CEWithChunkedOutputLoss: lm_head output in 8 bf16 chunks (2), each chunk
  upcast for its loss in turn, so one fp32 chunk copy (4/8) lives at a time while every chunk's
  fp32 log-probabilities are saved (4) -> 6.5.
- `fused`: fused linear cross-entropy (Liger, Unsloth, cut-cross-entropy): logits exist one chunk
  at a time and their gradient is written in place: about one bf16 value -> 2.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

Loss = Literal["fp32-upcast", "bf16", "chunked", "fused"]
# How the optimizer step is computed, by the state-sized temporaries it allocates (OPTIMIZER_STEP_COPIES):
# - `fused`: one kernel updates each state in place (torch AdamW(fused=True), DeepSpeed's FusedAdam,
#   bitsandbytes' 8-bit and paged optimizers): none.
# - `foreach`: torch AdamW's default multi-tensor path holds `exp_avg_sq_sqrt =
#   torch._foreach_sqrt(device_exp_avg_sqs)`, a copy of the second moments of every parameter of
#   a device and dtype in the param group, while it updates them all at once (torch/optim/adam.py
#   _multi_tensor_adam, which then adds eps and divides in place): one. Older releases added eps
#   out of place (`denom = torch._foreach_add(exp_avg_sq_sqrt, eps)`), a second copy this model
#   leaves out because the release that changed it could not be confirmed.
OptimizerStep = Literal["fused", "foreach"]
OPTIMIZER_STEPS: tuple[OptimizerStep, ...] = ("fused", "foreach")
OPTIMIZER_STEP_COPIES: dict[str, float] = {"fused": 0.0, "foreach": 1.0}
LOSSES: tuple[Loss, ...] = ("fp32-upcast", "bf16", "chunked", "fused")
StackName = Literal["hf", "accelerate-fsdp", "deepspeed", "torchtune", "axolotl", "unsloth", "litgpt", "ms-swift"]
Runtime = Literal["hf", "deepspeed", "litgpt"]

# Kernels that expand an int8/4-bit base to bf16 (MemoryOptions.quant_kernel).
QuantKernel = Literal["bitsandbytes", "gptq", "torchao"]
QUANT_KERNELS: tuple[str, ...] = typing.get_args(QuantKernel)

LOSS_BYTES_PER_LOGIT: dict[str, float] = {"fp32-upcast": 12.0, "bf16": 6.0, "chunked": 6.5, "fused": 2.0}


@dataclass(frozen=True)
class Stack:
    """Defaults of one training stack that change memory or time.

    `runtime` is the family whose memory accounting it shares: `hf` (transformers/PEFT/accelerate
    FSDP, which accumulates under no_sync with unsharded gradients), `deepspeed` (fp32 gradient
    partitions and bucket buffers) or `litgpt` (Lightning Fabric: an untied lm_head, FlatParameter
    gradients of full size under FSDP, a quantized head).
    """

    name: StackName
    label: str
    runtime: Runtime
    loss: Loss
    adapter_dtype: Literal["fp32", "bf16"]
    gradient_checkpointing: bool  # default of its standard recipes
    optimizer_in_backward: bool = False
    activation_offload: bool = False
    compile: bool = False
    fsdp_unsharded_accumulation: bool = True  # no_sync() keeps gradients whole between syncs
    requires_bf16: bool = False  # its recipes refuse fp16: GPUs without bf16 cannot run it
    # Its default optimizer's step (OptimizerStep). transformers' Trainer defaults to
    # adamw_torch_fused with PyTorch >= 2.8, to the foreach adamw_torch before.
    optimizer_step: OptimizerStep = "fused"
    # Its QLoRA/int8 recipes run PEFT's prepare_model_for_kbit_training, which casts every 16-bit
    # parameter of a bitsandbytes-quantized model to fp32 (embeddings, lm_head, norms), so the
    # residual stream the embeddings start runs in fp32 too.
    kbit_upcast: bool = False
    # The kernel its QLoRA recipes dequantize the 4-bit base with (MemoryOptions.quant_kernel).
    quant_kernel: QuantKernel = "bitsandbytes"
    # Its optimizer regime (_memory.FULL_STATE_BYTES), which is the precision full fine-tuning
    # keeps the model in: `adamw` for an fp32 master beside 16-bit compute (AMP on an fp32-loaded
    # model, DeepSpeed's fp32 partitions), `adamw-bf16` where the model is loaded in bf16 and torch
    # AdamW keeps its moments in the parameters' dtype (no master copy). Adapters keep their own
    # dtype's moments either way.
    optimizer: str = "adamw"
    # Whether its sharded or offloaded full fine-tuning gets an fp32 master back from the backend
    # it shards with (_exports._recipe.parallel_of): DeepSpeed's fp32 partitions, accelerate's FSDP
    # mixed precision upcasting the flat parameters. torchtune's FSDP2 and LitGPT's bf16-true FSDP
    # keep bf16.
    master_when_sharded: bool = False
    # Where a softcapped model (Gemma-2) caps: on the logits (transformers' Gemma2ForCausalLM,
    # LitGPT's do_softcapping), which keeps one more logits-size tensor, or on the hidden states
    # before the output projection.
    softcaps_logits: bool = True
    # The FSDP implementations it can shard with, its default first (MemoryOptions.fsdp_version):
    # FSDP2 for the stacks ftsolve exports (its configs write fsdp_version 2), FSDP1 for LitGPT,
    # whose Lightning FSDPStrategy wraps with FullyShardedDataParallel.
    fsdp_versions: tuple[int, ...] = (2, 1)
    # Whether FSDP keeps its trainable flat parameters, and so their gradients, in fp32: accelerate
    # upcasts them under mixed precision (accelerator.py prepare_model, "Upcasted low precision
    # parameters"), which every stack that trains through it does; LitGPT's bf16-true and
    # torchtune keep the model's dtype (MemoryOptions.fsdp_fp32_params).
    fsdp_fp32_params: bool = True
    sources: tuple[tuple[str, str], ...] = ()  # (fact, where the stack's source shows it)


_TF = "huggingface/transformers"
_PEFT_UPCAST = (
    "adapters in fp32",
    "huggingface/peft src/peft/tuners/tuners_utils.py: autocast_adapter_dtype=True casts bf16/fp16 "
    "adapter weights to fp32 (_cast_adapter_dtype)",
)
_HF_LOSS = (
    "loss upcasts logits to fp32",
    f"{_TF} src/transformers/loss/loss_utils.py ForCausalLMLoss: `logits = logits.float()`",
)
_HF_OPTIM = (
    "AdamW step fused (PyTorch >= 2.8)",
    f"{_TF} src/transformers/training_args.py: default_optim = 'adamw_torch_fused' if "
    "is_torch_greater_or_equal_than_2_8 (else 'adamw_torch', the foreach path)",
)
_HF_CKPT = (
    "gradient checkpointing off unless asked",
    f"{_TF} src/transformers/training_args.py: gradient_checkpointing: bool = False",
)

STACKS: dict[str, Stack] = {
    s.name: s
    for s in (
        Stack(
            "hf",
            "transformers Trainer + PEFT",
            "hf",
            "fp32-upcast",
            "fp32",
            gradient_checkpointing=False,
            kbit_upcast=True,
            sources=(
                _HF_LOSS,
                _PEFT_UPCAST,
                _HF_CKPT,
                _HF_OPTIM,
                (
                    "QLoRA/int8: 16-bit parameters of the quantized model cast to fp32",
                    "huggingface/peft src/peft/utils/other.py prepare_model_for_kbit_training: "
                    "`param.data = param.data.to(torch.float32)` for every fp16/bf16 parameter but Params4bit "
                    "(skipped for GPTQ); huggingface/trl SFTTrainer calls it for a 4/8-bit model unless its "
                    "QLoRA is sharded (FSDP, ZeRO-3)",
                ),
            ),
        ),
        Stack(
            "accelerate-fsdp",
            "accelerate + FSDP (Trainer or plain loop)",
            "hf",
            "fp32-upcast",
            "fp32",
            gradient_checkpointing=False,
            sources=(
                _HF_LOSS,
                _PEFT_UPCAST,
                _HF_OPTIM,
                (
                    "accumulation under no_sync keeps unsharded gradients",
                    "huggingface/accelerate src/accelerate/accelerator.py no_sync / "
                    "GradientAccumulationPlugin.sync_each_batch=False",
                ),
            ),
        ),
        Stack(
            "deepspeed",
            "transformers Trainer + DeepSpeed ZeRO",
            "deepspeed",
            "fp32-upcast",
            "fp32",
            gradient_checkpointing=False,
            fsdp_unsharded_accumulation=False,
            sources=(
                _HF_LOSS,
                (
                    "the fp32 partitions stepped in place: FusedAdam for a config that names an optimizer, "
                    "torch's fused AdamW (transformers' default with torch >= 2.8) as the client optimizer of "
                    "ftsolve's exported configs, which name none",
                    "deepspeedai/DeepSpeed deepspeed/ops/adam/fused_adam.py FusedAdam (multi_tensor_apply); "
                    f"{_TF} src/transformers/training_args.py default_optim",
                ),
                (
                    "fp32 gradient partitions and bucket buffers",
                    "deepspeedai/DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py; "
                    "estimate_zero2_model_states_mem_needs (18 B/param)",
                ),
            ),
        ),
        Stack(
            "torchtune",
            "torchtune recipes",
            "hf",
            "chunked",
            "bf16",
            gradient_checkpointing=True,
            fsdp_unsharded_accumulation=False,
            requires_bf16=True,
            quant_kernel="torchao",
            optimizer="adamw-bf16",
            softcaps_logits=False,
            fsdp_versions=(2,),
            fsdp_fp32_params=False,
            sources=(
                (
                    "shards with FSDP2 only",
                    "pytorch/torchtune torchtune/training/_distributed.py shard_model: "
                    "`fully_shard(m, **fsdp_kwargs)`, CPUOffloadPolicy for fsdp_cpu_offload",
                ),
                (
                    "Gemma-2's final softcap on the hidden states, not the logits",
                    "pytorch/torchtune torchtune/models/gemma2/_component_builders.py Gemma2FinalNorm: "
                    "rms_norm, then TanhSoftCapping(final_capping_value), before the output projection",
                ),
                (
                    "full fine-tuning in bf16: no fp32 master, AdamW moments in bf16",
                    "pytorch/torchtune recipes/configs/llama3_1/8B_full.yaml: dtype: bf16, optimizer: "
                    "torch.optim.AdamW; the model is built in that dtype (training.set_default_dtype). "
                    "Its *_full_single_device configs choose bitsandbytes.optim.PagedAdamW8bit with "
                    "optimizer_in_bwd: True instead (--optimizer paged-adamw-8bit --optimizer-in-backward)",
                ),
                (
                    "QLoRA dequantizes torchao's NF4 eagerly (int64 indices, many element-wise passes)",
                    "pytorch/torchtune torchtune/modules/peft/lora.py LoRALinear.forward: "
                    "`linear_nf4(input=x, weight=self.weight)` for a quantized base; pytorch/ao nf4_tensor.py "
                    "LinearNF4 dequantizes with get_original_weight in forward and again in backward; "
                    "recipes/configs: compile: False",
                ),
                (
                    "fp16 refused: bf16 or fp32 only",
                    "pytorch/torchtune recipes/lora_finetune_single_device.py (and every recipe): "
                    '`if self._dtype == torch.float16: raise ValueError("full fp16 training is not supported")`',
                ),
                (
                    "chunked cross-entropy over 8 output chunks",
                    "pytorch/torchtune torchtune/modules/loss/ce_chunked_output_loss.py "
                    "CEWithChunkedOutputLoss(num_output_chunks=8): `logits_chunk.float()` per chunk",
                ),
                (
                    "whole model, adapters included, in bf16",
                    "pytorch/torchtune recipes/configs/llama3_1/8B_lora_single_device.yaml: dtype: bf16",
                ),
                (
                    "AdamW step fused",
                    "pytorch/torchtune recipes/configs/llama3_1/8B_lora_single_device.yaml: "
                    "optimizer: torch.optim.AdamW, fused: True",
                ),
                (
                    "activation checkpointing on",
                    "pytorch/torchtune recipes/configs/llama3_1/*.yaml: enable_activation_checkpointing: True",
                ),
                (
                    "FSDP2 reduce-scatters gradients every backward (no no_sync)",
                    "pytorch/torchtune recipes/full_finetune_distributed.py: loss.backward() per micro-batch",
                ),
            ),
        ),
        Stack(
            "axolotl",
            "axolotl (transformers Trainer + PEFT)",
            "hf",
            "fp32-upcast",
            "fp32",
            gradient_checkpointing=True,
            optimizer="adamw-bf16",
            master_when_sharded=True,
            sources=(
                (
                    "the model loaded in bf16 (bf16: true): full fine-tuning without an fp32 master",
                    "axolotl-ai-cloud/axolotl src/axolotl/utils/config/__init__.py normalize_config: "
                    "`if cfg.bf16 or cfg.bfloat16: cfg.torch_dtype = torch.bfloat16`; loaders/model.py passes it "
                    "as torch_dtype to from_pretrained (sharded through DeepSpeed or FSDP the backend keeps an fp32 "
                    "master: master_when_sharded)",
                ),
                _HF_LOSS,
                _PEFT_UPCAST,
                _HF_OPTIM,
                (
                    "gradient checkpointing on in its examples",
                    "axolotl-ai-cloud/axolotl examples/llama-3/lora-8b.yml: gradient_checkpointing: true",
                ),
            ),
        ),
        Stack(
            "unsloth",
            "Unsloth (patched transformers + PEFT)",
            "hf",
            "fused",
            "fp32",
            gradient_checkpointing=True,
            activation_offload=True,
            optimizer="adamw-bf16",
            master_when_sharded=True,
            sources=(
                (
                    "the model loaded in bf16 where the GPU has it: full fine-tuning without an fp32 master",
                    "unslothai/unsloth unsloth/models/llama.py FastLlamaModel.from_pretrained: `if dtype is None: "
                    "dtype = torch.float16 if not SUPPORTS_BFLOAT16 else torch.bfloat16`",
                ),
                (
                    "fused cross-entropy on bf16 logits, gradient in place",
                    "unslothai/unsloth unsloth/kernels/cross_entropy_loss.py fast_cross_entropy_loss",
                ),
                (
                    "'unsloth' gradient checkpointing offloads the stored layer inputs to CPU",
                    "unslothai/unsloth unsloth/models/_utils.py Unsloth_Offloaded_Gradient_Checkpointer "
                    "(use_gradient_checkpointing='unsloth')",
                ),
                _PEFT_UPCAST,
            ),
        ),
        Stack(
            "litgpt",
            "LitGPT (Lightning Fabric)",
            "litgpt",
            "bf16",
            "bf16",
            gradient_checkpointing=False,
            optimizer_step="foreach",
            optimizer="adamw-bf16",
            fsdp_versions=(1, 2),
            fsdp_fp32_params=False,
            sources=(
                (
                    "bf16-true full fine-tuning: no fp32 master, AdamW moments in bf16",
                    "Lightning-AI/litgpt config_hub/finetune/llama-3.1-8b/full.yaml: precision: bf16-true, "
                    "optimizer torch.optim.AdamW",
                ),
                (
                    "torch AdamW on its default foreach path",
                    "Lightning-AI/litgpt litgpt/utils.py instantiate_torch_optimizer: "
                    "getattr(torch.optim, 'AdamW')(params, **kwargs), no fused argument",
                ),
                (
                    "chunked cross-entropy on bf16 logits",
                    "Lightning-AI/litgpt litgpt/utils.py chunked_cross_entropy; finetune/lora.py "
                    "model(input_ids, lm_head_chunk_size=128)",
                ),
                (
                    "bf16-true precision: adapters in bf16",
                    "Lightning-AI/litgpt config_hub/finetune/*/lora.yaml: precision: bf16-true",
                ),
                (
                    "untied lm_head, quantized with the layers",
                    "Lightning-AI/litgpt litgpt/model.py GPT.lm_head; litgpt/utils.py BitsandbytesPrecision "
                    "replaces every nn.Linear",
                ),
            ),
        ),
        Stack(
            "ms-swift",
            "ms-swift (swift sft, transformers Trainer + PEFT)",
            "hf",
            "fp32-upcast",
            "fp32",
            gradient_checkpointing=True,
            optimizer="adamw-bf16",
            master_when_sharded=True,
            sources=(
                (
                    "the model loaded in its config's dtype (bf16): full fine-tuning without an fp32 master",
                    "modelscope/ms-swift swift/llm/argument/base_args/model_args.py @00f5f5d: torch_dtype None "
                    "takes model_info.torch_dtype (_init_torch_dtype) and sets bf16 mixed precision on top",
                ),
                (
                    "gradient checkpointing on by default",
                    "modelscope/ms-swift swift/llm/utils/argument.py SftArguments.gradient_checkpointing: "
                    "Optional[bool] = None (on unless disabled)",
                ),
                _PEFT_UPCAST,
                _HF_OPTIM,
            ),
        ),
    )
}
STACK_NAMES: tuple[str, ...] = tuple(STACKS)


def known_stack(name: str) -> Stack:
    """The record of a stack, or a ValueError that names the known ones."""
    if name not in STACKS:
        raise ValueError(f"unknown stack {name!r}: choose one of {', '.join(STACKS)}")
    return STACKS[name]
