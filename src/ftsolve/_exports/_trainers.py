"""Training configs that train what the plan priced: axolotl, torchtune, transformers'
TrainingArguments, and the DeepSpeed config the first and last of them point to."""

from __future__ import annotations

import dataclasses
from typing import Any

from ftsolve._errors import InvalidJobSpec
from ftsolve._exports._recipe import FSDP1_EXTRAS, PLACEHOLDER, TrainingRecipe, learning_rate
from ftsolve.solver._memory import FP32_MASTER, plan_upcasts

DATASET = f"{PLACEHOLDER}-with-your-dataset"
DEEPSPEED_FILE = "deepspeed.json"
# A preempted run resumes from the newest checkpoint; one more covers a save cut off mid-write.
SAVE_TOTAL_LIMIT = 2

# transformers' `optim` names for the job's optimizer regime (the memory model's state bytes).
HF_OPTIMIZERS = {
    "adamw": "adamw_torch",
    "adamw-fp32": "adamw_torch",
    "adamw-bf16": "adamw_torch",
    "adamw-8bit": "adamw_bnb_8bit",
    "paged-adamw": "paged_adamw_32bit",
    "paged-adamw-8bit": "paged_adamw_8bit",
    "sgd": "sgd",
    "adafactor": "adafactor",
}


def hf_optimizer(r: TrainingRecipe) -> str:
    """transformers' `optim` for the plan: torch AdamW fused where the plan priced a fused step
    (the foreach `adamw_torch` holds a copy of the second moments through the step)."""
    name = HF_OPTIMIZERS[r.options.optimizer]
    return "adamw_torch_fused" if name == "adamw_torch" and r.options.optimizer_step == "fused" else name


# torchtune instantiates the optimizer by class path (the bitsandbytes ones are what its
# single-device full fine-tuning configs use for the 8-bit and paged regimes).
TORCHTUNE_OPTIMIZERS = {
    "adamw": "torch.optim.AdamW",
    "adamw-fp32": "torch.optim.AdamW",
    "adamw-bf16": "torch.optim.AdamW",
    "adamw-8bit": "bitsandbytes.optim.AdamW8bit",
    "paged-adamw": "bitsandbytes.optim.PagedAdamW",
    "paged-adamw-8bit": "bitsandbytes.optim.PagedAdamW8bit",
    "sgd": "torch.optim.SGD",
    "adafactor": "torch.optim.Adafactor",
}
_LORA_MODULES = {
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mlp": ["gate_proj", "up_proj", "down_proj"],
    "qv": ["q_proj", "v_proj"],
}


def _lora_modules(r: TrainingRecipe) -> list[str] | None:
    """Module names to adapt; None for every linear layer."""
    return None if r.job.lora_targets == "all-linear" else _LORA_MODULES[r.job.lora_targets]


# How each target computes the loss: the plan's `loss` values it reproduces.
_TARGET_LOSSES = {
    "axolotl": ("fp32-upcast", "chunked", "fused"),
    "transformers": ("fp32-upcast", "fused"),
    "torchtune": ("chunked",),
}


def stack_notes(r: TrainingRecipe, target: str) -> list[str]:
    """Where the target trains differently from what the plan's stack assumed (memory differs)."""
    o, notes = r.options, []
    torchtune = target == "torchtune"
    adapters = "bf16" if torchtune else "fp32"
    if r.lora and o.adapter_dtype != adapters:
        notes.append(f"the plan assumed {o.adapter_dtype} adapters; {target} keeps them in {adapters}")
    if o.optimizer_in_backward and not (torchtune and not r.lora):
        notes.append(f"the plan assumed the optimizer step in backward, which {target} does not do here")
    if o.loss not in _TARGET_LOSSES.get(target, ()):
        notes.append(f"the plan assumed the {o.loss} loss, which {target} does not compute")
    if torchtune and r.plan.n_gpus > 1 and r.parallel.backend != "fsdp":
        notes.append(f"torchtune shards with FSDP2 where the plan assumed {r.plan.sharding}")
    # accelerate's mixed precision, which every non-torchtune export runs, holds FSDP's trainable flat
    # parameters in fp32 (FSDP1 with CPU offload keeps their gradient shards on the GPU in fp32).
    if not torchtune and r.parallel.backend == "fsdp" and not o.fp32_flat_params:
        notes.append(
            f"{target} runs accelerate's mixed precision, which holds FSDP's trainable parameters and their "
            "gradients in fp32: more than the plan priced (it assumed the model's dtype)"
        )
    if torchtune and r.schedule.patience is not None:
        notes.append("torchtune's recipes do not stop early: they validate every run_val_every_n_steps steps")
    # DeepSpeed's partitions and accelerate's FSDP keep an fp32 master for axolotl and transformers;
    # otherwise they, and torchtune always, train the model as loaded, in 16 bits.
    if r.plan.method == "full" and r.plan.optimizer in FP32_MASTER and (torchtune or not r.parallel.keeps_master):
        if target == "transformers" and r.dtype == "fp16":
            notes.append(
                "transformers trains an fp32 model under fp16 autocast (GradScaler refuses fp16 gradients): "
                "its fp16 copies of the weights are not in the plan"
            )
        else:
            notes.append(
                f"{target} loads the model in {r.dtype}: full fine-tuning keeps no fp32 master and its states "
                f"in {r.dtype}, less than the plan priced"
            )
    # torchtune quantizes to torchao's NF4 (fused under compile); the others load bitsandbytes.
    kernel = dataclasses.replace(o, quant_kernel="torchao" if torchtune else "bitsandbytes").dequant_kernel
    if r.plan.weight_precision == "nf4" and o.dequant_kernel != kernel:
        notes.append(
            f"the plan priced the 4-bit base with {o.dequant_kernel} dequantization; {target} runs {kernel} "
            "(workspace and traffic differ, docs/stacks.md §8)"
        )
    return notes


def _fsdp_sharding(r: TrainingRecipe) -> dict[str, Any]:
    """FSDP2 reshards after forward (a bool); FSDP1 takes FULL_SHARD by default and its extras."""
    return dict(FSDP1_EXTRAS) if r.options.fsdp == 1 else {"reshard_after_forward": True}


def deepspeed_config(r: TrainingRecipe) -> dict[str, Any]:
    """DeepSpeed's own config (deepspeed.ai/docs/config-json); "auto" values are filled from the
    training arguments by transformers' DeepSpeed integration, so they cannot disagree."""
    par = r.parallel
    # Bucket sizes "auto" (hidden_size**2 elements, filled by transformers) are what the memory
    # model prices (_memory._gathered_and_buckets); DeepSpeed's own default is 5e8, about 2 GB of
    # double-buffered bf16 buckets under ZeRO-1/2.
    zero: dict[str, Any] = {
        "stage": par.zero_stage,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": r.job.deepspeed_bucket_elements or "auto",
    }
    if par.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if par.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if par.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
        zero["stage3_prefetch_bucket_size"] = "auto"
        zero["stage3_param_persistence_threshold"] = "auto"
    return {
        "zero_optimization": zero,
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
    }


def _check_offload(r: TrainingRecipe, target: str) -> None:
    if r.options.activation_offload and r.checkpointing == "off":
        raise InvalidJobSpec(
            f"plan {r.plan.rank} offloads activations without activation checkpointing, which {target} cannot do. "
            "To fix: plan with --no-activation-offload, or export another --rank"
        )


def axolotl_config(r: TrainingRecipe) -> dict[str, Any]:
    """An axolotl config (axolotl 0.18.0's schema, `axolotl/utils/schemas/config.py`)."""
    _check_offload(r, "axolotl")
    p, s, job = r.plan, r.schedule, r.job
    cfg: dict[str, Any] = {"base_model": r.base_model}
    if r.lora:
        cfg["adapter"] = "qlora" if p.method == "qlora" else "lora"
        if p.weight_precision == "nf4":
            cfg["load_in_4bit"] = True
            # The memory estimate assumed NF4 with the job's double-quantization choice.
            cfg["bnb_config_kwargs"] = {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": job.double_quant}
        if p.weight_precision == "int8":
            cfg["load_in_8bit"] = True
        cfg |= {"lora_r": job.lora_rank, "lora_alpha": 2 * job.lora_rank, "lora_dropout": job.lora_dropout}
        modules = _lora_modules(r)
        if modules is None:
            cfg["lora_target_linear"] = True
        else:
            cfg["lora_target_modules"] = modules
        if job.train_embeddings:
            cfg["lora_modules_to_save"] = ["embed_tokens", "lm_head"]
    packed = job.real_token_fraction >= 0.999
    cfg |= {
        "datasets": [{"path": DATASET, "type": "alpaca"}],
        # axolotl reads a value above 1 as a count of samples, at most 1 as a share of the data.
        "val_set_size": 0 if s.eval_steps is None else max(2, s.eval_sequences) if s.eval_sequences else 0.01,
        "sequence_len": job.seq_len,
        "sample_packing": packed,
        "pad_to_sequence_len": packed,
        "micro_batch_size": p.micro_batch,
        "gradient_accumulation_steps": p.grad_accum,
        "max_steps": s.max_steps,
        "learning_rate": learning_rate(r),
        "optimizer": hf_optimizer(r),
        "bf16": r.dtype == "bf16",
        "fp16": r.dtype == "fp16",
        "attn_implementation": r.attention,
        "gradient_checkpointing": r.checkpointing == "model",
    }
    if r.options.activation_offload:
        cfg["activation_offloading"] = True
    if r.options.loss == "chunked":
        cfg["chunked_cross_entropy"] = True
    elif r.options.loss == "fused":
        cfg["plugins"] = ["axolotl.integrations.liger.LigerPlugin"]
        cfg["liger_fused_linear_cross_entropy"] = True
    if r.parallel.backend == "fsdp":
        cfg["fsdp_version"] = r.options.fsdp
        cfg["fsdp_config"] = {
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "transformer_layer_cls_to_wrap": r.layer_class or f"{PLACEHOLDER}-with-the-decoder-layer-class",
            "offload_params": r.parallel.offload_params,
            "state_dict_type": "SHARDED_STATE_DICT",
            "activation_checkpointing": r.checkpointing == "fsdp",
            "cpu_ram_efficient_loading": True,
        } | _fsdp_sharding(r)
    elif r.parallel.backend == "deepspeed":
        cfg["deepspeed"] = DEEPSPEED_FILE
    cfg |= {
        "output_dir": r.output_dir,
        "save_strategy": "steps",
        "save_steps": s.save_steps,
        "save_total_limit": SAVE_TOTAL_LIMIT,
        "auto_resume_from_checkpoints": True,
    }
    if s.eval_steps is not None:
        cfg["eval_steps"] = s.eval_steps
    if s.patience is not None:
        cfg |= {
            "early_stopping_patience": s.patience,
            "metric_for_best_model": "eval_loss",
            "greater_is_better": False,
            "load_best_model_at_end": True,
        }
    return cfg


def training_arguments(r: TrainingRecipe) -> dict[str, Any]:
    """transformers' TrainingArguments (5.24) as keyword arguments: `HfArgumentParser(
    TrainingArguments).parse_json_file(path, allow_extra_keys=True)` reads it; `_ftsolve` carries
    the header and what TrainingArguments does not hold (model loading, LoRA, early stopping)."""
    _check_offload(r, "transformers")
    p, s = r.plan, r.schedule
    args: dict[str, Any] = {
        "output_dir": r.output_dir,
        "per_device_train_batch_size": p.micro_batch,
        "per_device_eval_batch_size": p.micro_batch,
        "gradient_accumulation_steps": p.grad_accum,
        "max_steps": s.max_steps,
        "learning_rate": learning_rate(r),
        "lr_scheduler_type": "cosine",
        "optim": hf_optimizer(r),
        "use_liger_kernel": r.options.loss == "fused",
        "bf16": r.dtype == "bf16",
        "fp16": r.dtype == "fp16",
        "activation_checkpointing": r.checkpointing == "model",
        "save_strategy": "steps",
        "save_steps": s.save_steps,
        "save_total_limit": SAVE_TOTAL_LIMIT,
        "eval_strategy": "no" if s.eval_steps is None else "steps",
        "logging_steps": max(1, min(s.max_steps // 100, 50)),
    }
    if r.checkpointing == "model" and r.options.activation_offload:
        args["activation_checkpointing_kwargs"] = {"offload": True}
    if s.eval_steps is not None:
        args["eval_steps"] = s.eval_steps
    if s.patience is not None:
        args |= {"load_best_model_at_end": True, "metric_for_best_model": "eval_loss", "greater_is_better": False}
    if r.parallel.backend == "fsdp":
        args["fsdp"] = True
        args["fsdp_config"] = {
            "version": r.options.fsdp,
            "transformer_layer_cls_to_wrap": [r.layer_class or f"{PLACEHOLDER}-with-the-decoder-layer-class"],
            "cpu_offload": r.parallel.offload_params,
            "activation_checkpointing": r.checkpointing == "fsdp",
            "cpu_ram_efficient_loading": True,
        } | _fsdp_sharding(r)
    elif r.parallel.backend == "deepspeed":
        args["deepspeed"] = DEEPSPEED_FILE
    return args


def script_settings(r: TrainingRecipe) -> dict[str, Any]:
    """What a training script passes besides TrainingArguments (the transformers export's `_ftsolve`)."""
    p, job = r.plan, r.job
    model: dict[str, Any] = {"pretrained_model_name_or_path": r.base_model, "attn_implementation": r.attention}
    model["dtype"] = "bfloat16" if r.dtype == "bf16" else "float16"
    if p.method == "full" and r.dtype == "fp16":
        model["dtype"] = "float32"  # fp16 autocast: GradScaler refuses to unscale fp16 gradients
    if p.weight_precision == "nf4":
        model["quantization_config"] = {
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": job.double_quant,
            "bnb_4bit_compute_dtype": model["dtype"],
        }
    elif p.weight_precision == "int8":
        model["quantization_config"] = {"load_in_8bit": True}
    out: dict[str, Any] = {"from_pretrained": model, "dataset": DATASET}
    if "quantization_config" in model and r.lora:
        # The memory the plan priced: with PEFT's prepare_model_for_kbit_training (embeddings, lm_head
        # and norms in fp32) or without it; TRL's SFTTrainer calls it on its own for unsharded QLoRA.
        out["prepare_model_for_kbit_training"] = plan_upcasts(r.options, p.method, p.weight_precision, p.sharding)
    if r.lora:
        modules = _lora_modules(r)
        out["lora_config"] = {
            "r": job.lora_rank,
            "lora_alpha": 2 * job.lora_rank,
            "lora_dropout": job.lora_dropout,
            "target_modules": "all-linear" if modules is None else modules,
            "task_type": "CAUSAL_LM",
            **({"modules_to_save": ["embed_tokens", "lm_head"]} if job.train_embeddings else {}),
        }
    if r.schedule.patience is not None:
        out["callbacks"] = [f"EarlyStoppingCallback(early_stopping_patience={r.schedule.patience})"]
    if r.schedule.eval_steps is not None:
        out["eval_sequences"] = r.schedule.eval_sequences or f"{PLACEHOLDER}: the plan priced no evaluation"
    out["resume"] = "trainer.train(resume_from_checkpoint=get_last_checkpoint(args.output_dir))"
    return out


# torchtune's builders by Hugging Face repo (pytorch/torchtune torchtune/models/*/__init__.py at the
# commit setup installs): (package, builder stem, tokenizer, checkpointer model_type).
_TORCHTUNE_MODELS = {
    "meta-llama/Llama-3.1-8B": ("llama3_1", "llama3_1_8b", "llama3.llama3_tokenizer", "LLAMA3"),
    "meta-llama/Llama-3.1-70B": ("llama3_1", "llama3_1_70b", "llama3.llama3_tokenizer", "LLAMA3"),
    "meta-llama/Llama-3.1-405B": ("llama3_1", "llama3_1_405b", "llama3.llama3_tokenizer", "LLAMA3"),
    "meta-llama/Llama-3.2-1B": ("llama3_2", "llama3_2_1b", "llama3.llama3_tokenizer", "LLAMA3_2"),
    "meta-llama/Llama-3.2-3B": ("llama3_2", "llama3_2_3b", "llama3.llama3_tokenizer", "LLAMA3_2"),
    "meta-llama/Llama-3.3-70B-Instruct": ("llama3_3", "llama3_3_70b", "llama3.llama3_tokenizer", "LLAMA3"),
    "meta-llama/Llama-2-7b-hf": ("llama2", "llama2_7b", "llama2.llama2_tokenizer", "LLAMA2"),
    "meta-llama/Llama-2-13b-hf": ("llama2", "llama2_13b", "llama2.llama2_tokenizer", "LLAMA2"),
    "meta-llama/Llama-2-70b-hf": ("llama2", "llama2_70b", "llama2.llama2_tokenizer", "LLAMA2"),
    "mistralai/Mistral-7B-v0.1": ("mistral", "mistral_7b", "mistral.mistral_tokenizer", "MISTRAL"),
    "Qwen/Qwen2.5-0.5B": ("qwen2_5", "qwen2_5_0_5b", "qwen2_5.qwen2_5_tokenizer", "QWEN2"),
    "Qwen/Qwen2.5-1.5B": ("qwen2_5", "qwen2_5_1_5b_base", "qwen2_5.qwen2_5_tokenizer", "QWEN2"),
    "Qwen/Qwen2.5-3B": ("qwen2_5", "qwen2_5_3b", "qwen2_5.qwen2_5_tokenizer", "QWEN2"),
    "Qwen/Qwen2.5-7B": ("qwen2_5", "qwen2_5_7b_base", "qwen2_5.qwen2_5_tokenizer", "QWEN2"),
    "Qwen/Qwen2.5-14B": ("qwen2_5", "qwen2_5_14b_base", "qwen2_5.qwen2_5_tokenizer", "QWEN2"),
    "Qwen/Qwen2.5-32B": ("qwen2_5", "qwen2_5_32b_base", "qwen2_5.qwen2_5_tokenizer", "QWEN2"),
    "Qwen/Qwen2.5-72B": ("qwen2_5", "qwen2_5_72b_base", "qwen2_5.qwen2_5_tokenizer", "QWEN2"),
    "Qwen/Qwen3-4B": ("qwen3", "qwen3_4b_instruct", "qwen3.qwen3_tokenizer", "QWEN3"),
    "Qwen/Qwen3-8B": ("qwen3", "qwen3_8b_instruct", "qwen3.qwen3_tokenizer", "QWEN3"),
    "Qwen/Qwen3-14B": ("qwen3", "qwen3_14b_instruct", "qwen3.qwen3_tokenizer", "QWEN3"),
    "Qwen/Qwen3-32B": ("qwen3", "qwen3_32b", "qwen3.qwen3_tokenizer", "QWEN3"),
    "google/gemma-2-2b": ("gemma2", "gemma2_2b", "gemma.gemma_tokenizer", "GEMMA2"),
    "google/gemma-2-9b": ("gemma2", "gemma2_9b", "gemma.gemma_tokenizer", "GEMMA2"),
    "microsoft/Phi-3-mini-4k-instruct": ("phi3", "phi3_mini", "phi3.phi3_mini_tokenizer", "PHI3_MINI"),
}
_TOKENIZER_FILES = {"QWEN2": ("vocab.json", "merges.txt"), "QWEN3": ("vocab.json", "merges.txt")}


def _torchtune_model(r: TrainingRecipe) -> tuple[str, str, str, str]:
    found = _TORCHTUNE_MODELS.get(r.base_model)
    problem = None
    if found is None:
        problem = f"torchtune has no builder for {r.arch.name!r} that ftsolve knows"
    elif r.dtype == "fp16":
        problem = f"torchtune's recipes refuse fp16, and the {r.gpu.name} has no bf16"
    elif r.plan.weight_precision == "int8":
        problem = "torchtune has no LoRA on an int8 base"
    elif r.plan.weight_precision == "nf4" and r.options.quant_kernel == "gptq":
        problem = "torchtune quantizes the base itself (torchao NF4) and cannot load a GPTQ checkpoint"
    if problem is not None or found is None:
        raise InvalidJobSpec(
            f"plan {r.plan.rank} cannot be exported as a torchtune config: {problem}. "
            "To fix: export axolotl or transformers, or another --rank"
        )
    return found


def _torchtune_optimizer(r: TrainingRecipe) -> dict[str, Any]:
    out: dict[str, Any] = {"_component_": TORCHTUNE_OPTIMIZERS[r.options.optimizer], "lr": learning_rate(r)}
    if out["_component_"] == "torch.optim.AdamW":
        out["fused"] = r.options.optimizer_step == "fused"
    return out


def torchtune_config(r: TrainingRecipe) -> dict[str, Any]:
    """A torchtune recipe config for `tune run <recipe> --config torchtune.yaml` (recipes at
    TORCHTUNE_COMMIT, which save every `save_every_n_steps`)."""
    _check_offload(r, "torchtune")
    package, stem, tokenizer, model_type = _torchtune_model(r)
    p, s, job = r.plan, r.schedule, r.job
    model: dict[str, Any] = {"_component_": f"torchtune.models.{package}.{stem}"}
    if r.lora:
        model["_component_"] = f"torchtune.models.{package}.lora_{stem}"
        modules = _lora_modules(r) or [*_LORA_MODULES["attention"], *_LORA_MODULES["mlp"]]
        attn = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "o_proj": "output_proj"}
        model |= {
            "lora_attn_modules": [attn[m] for m in modules if m in attn],
            "apply_lora_to_mlp": any(m not in attn for m in modules),
            "apply_lora_to_output": job.train_embeddings,
            "lora_rank": job.lora_rank,
            "lora_alpha": 2 * job.lora_rank,
            "lora_dropout": job.lora_dropout,
            "quantize_base": p.method == "qlora",
        }
    base = "/tmp/base-model"
    tok: dict[str, Any] = {"_component_": f"torchtune.models.{tokenizer}", "max_seq_len": job.seq_len}
    files = _TOKENIZER_FILES.get(model_type)
    if files is None:
        # Llama 3's tiktoken model ships under original/ in the Hub repo.
        tok["path"] = f"{base}/{'original/' if model_type.startswith('LLAMA3') else ''}tokenizer.model"
    else:
        tok |= {"path": f"{base}/{files[0]}", "merges_file": f"{base}/{files[1]}"}
    cfg: dict[str, Any] = {
        "output_dir": r.output_dir,
        "tokenizer": tok,
        "model": model,
        "checkpointer": {
            "_component_": "torchtune.training.FullModelHFCheckpointer",
            "checkpoint_dir": base,
            "checkpoint_files": {
                "filename_format": "model-{}-of-{}.safetensors",
                "max_filename": f"{PLACEHOLDER}-with-the-shard-count-like-00004",
            },
            "recipe_checkpoint": None,
            "output_dir": r.output_dir,
            "model_type": model_type,
        },
        "resume_from_checkpoint": False,
        "dataset": {"_component_": "torchtune.datasets.instruct_dataset", "source": DATASET, "packed": False},
        "seed": None,
        "shuffle": True,
        "optimizer": _torchtune_optimizer(r),
        "loss": {"_component_": "torchtune.modules.loss.LinearCrossEntropyLoss"},
        # torchtune stops at epochs x max_steps_per_epoch: one epoch capped at the planned steps.
        "epochs": 1,
        "max_steps_per_epoch": s.max_steps,
        "batch_size": p.micro_batch,
        "gradient_accumulation_steps": p.grad_accum,
        "save_every_n_steps": s.save_steps,
        "clip_grad_norm": None,
        "compile": r.options.compile,
        "optimizer_in_bwd": r.options.optimizer_in_backward,
        "metric_logger": {
            "_component_": "torchtune.training.metric_logging.DiskLogger",
            "log_dir": f"{r.output_dir}/logs",
        },
        "log_every_n_steps": 1,
        "log_peak_memory_stats": True,
        "device": "cuda",
        "dtype": "bf16",
        "enable_activation_checkpointing": r.checkpointing != "off",
        "enable_activation_offloading": r.options.activation_offload,
    }
    if r.lora:
        cfg["save_adapter_weights_only"] = False
    if p.n_gpus > 1:
        cfg["fsdp_cpu_offload"] = r.parallel.offload_params
    if s.eval_steps is not None:
        cfg["run_val_every_n_steps"] = s.eval_steps
        cfg["dataset_val"] = {
            "_component_": "torchtune.datasets.instruct_dataset",
            "source": DATASET,
            "split": "validation",
        }
        cfg["batch_size_val"] = p.micro_batch
    if r.lora:
        cfg.pop("optimizer_in_bwd")  # the LoRA recipes do not read it
    return cfg
