"""Launch configurations for a chosen plan: a SkyPilot task, an accelerate config and an axolotl
recipe fragment. Each is a plain dict ready for `yaml.safe_dump`; values the plan does not decide
(bucket names, the training script) are marked as placeholders to fill in."""

from __future__ import annotations

import re
from typing import Any

from ftsolve.catalog._load import Catalog
from ftsolve.solver._job import JobSpec
from ftsolve.solver._plans import Plan

# SkyPilot clouds whose catalog names ftsolve's providers match (docs.skypilot.co yaml-spec).
_SKYPILOT_CLOUDS = {
    "aws",
    "gcp",
    "azure",
    "lambda",
    "runpod",
    "vast",
    "nebius",
    "cudo",
    "fluidstack",
    "paperspace",
    "oci",
    "do",
    "verda",
    "hyperbolic",
    "seeweb",
    "primeintellect",
    "shadeform",
    "hyperstack",
    "jarvislabs",
}


def _hf_repo(job: JobSpec, catalog: Catalog) -> str:
    arch = job.model if not isinstance(job.model, str) else catalog.model(job.model)
    m = re.search(r"huggingface\.co/([^/]+/[^/]+)/", arch.source)
    return m.group(1) if m else arch.name


def skypilot_task(plan: Plan, job: JobSpec, catalog: Catalog) -> dict[str, Any]:
    """A SkyPilot task YAML (docs.skypilot.co/en/latest/reference/yaml-spec.html)."""
    gpu = catalog.gpu(plan.gpu)
    accel = gpu.skypilot_names[0] if gpu.skypilot_names else gpu.display_name
    o = plan.offer
    resources: dict[str, Any] = {"accelerators": f"{accel}:{o.gpus_per_node}"}
    if o.provider in _SKYPILOT_CLOUDS:
        resources["infra"] = f"{o.provider}/{o.region}" if o.region not in ("default", "") else o.provider
    resources["instance_type"] = o.instance_type
    resources["use_spot"] = plan.market != "on-demand"
    arch = job.model if not isinstance(job.model, str) else catalog.model(job.model)
    model_gb = arch.total_params() * 2 / 1e9
    resources["disk_size"] = int(max(256, 3 * model_gb + job.dataset_gb + 50))
    if plan.market != "on-demand":
        resources["job_recovery"] = {"strategy": "FAILOVER", "max_restarts_on_errors": 3}
    task: dict[str, Any] = {
        "name": f"ftsolve-{plan.method}-{plan.gpu}",
        "num_nodes": plan.nodes,
        "resources": resources,
        # SkyPilot's task schema takes environment values as strings.
        "envs": {
            "BASE_MODEL": _hf_repo(job, catalog),
            "MICRO_BATCH": str(plan.micro_batch),
            "GRAD_ACCUM": str(plan.grad_accum),
            "SEQ_LEN": str(job.seq_len),
            "CHECKPOINT_EVERY_HOURS": str(plan.time.checkpoint_interval_hours or 0),
        },
        "file_mounts": {"/checkpoints": {"name": "REPLACE-with-your-bucket", "mode": "MOUNT"}},
        "setup": "pip install 'axolotl[flash-attn,deepspeed]'  # or your training stack",
        "run": "accelerate launch --config_file accelerate.yaml -m axolotl.cli.train axolotl.yaml",
    }
    return task


def accelerate_config(plan: Plan, job: JobSpec) -> dict[str, Any]:
    """An accelerate config (`accelerate launch --config_file`) for the plan's sharding and the
    job's CPU offload (the memory estimate counted offloaded state as off the GPU)."""
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "mixed_precision": "fp16" if plan.weight_precision == "fp16" else "bf16",
        "num_machines": plan.nodes,
        "num_processes": plan.n_gpus,
        "machine_rank": 0,
        "use_cpu": False,
    }
    offload = job.offload_optimizer or job.offload_params
    fsdp = plan.sharding == "zero3" and plan.n_gpus > 1 and (job.offload_params or not offload)
    if fsdp:
        cfg["distributed_type"] = "FSDP"
        cfg["fsdp_config"] = {
            "fsdp_sharding_strategy": "FULL_SHARD",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_offload_params": job.offload_params,
            "fsdp_activation_checkpointing": plan.gradient_checkpointing,
            "fsdp_use_orig_params": plan.method != "full",  # frozen base weights beside adapters
            "fsdp_cpu_ram_efficient_loading": True,
        }
    elif plan.sharding in ("zero1", "zero2", "zero3") or offload:
        # FSDP offloads parameters and optimizer state together and only when it shards; DeepSpeed
        # offloads the optimizer state alone, and on one GPU too (ZeRO-Offload: stage 2, or
        # stage 3 when the parameters stream from CPU memory).
        stage = {"none": 2, "ddp": 1, "zero1": 1, "zero2": 2, "zero3": 3}[plan.sharding]
        if job.offload_params:
            stage = 3
        cfg["distributed_type"] = "DEEPSPEED"
        cfg["deepspeed_config"] = {
            "zero_stage": stage,
            "gradient_accumulation_steps": plan.grad_accum,
            "offload_optimizer_device": "cpu" if offload else "none",
            "offload_param_device": "cpu" if job.offload_params else "none",
        }
    elif plan.sharding == "ddp":
        cfg["distributed_type"] = "MULTI_GPU"
    else:
        cfg["distributed_type"] = "NO"
    return cfg


def axolotl_config(plan: Plan, job: JobSpec, catalog: Catalog) -> dict[str, Any]:
    """An axolotl recipe fragment with the plan's method, quantization and batch settings."""
    cfg: dict[str, Any] = {"base_model": _hf_repo(job, catalog)}
    if plan.method != "full":
        cfg["adapter"] = "qlora" if plan.method == "qlora" else "lora"
        if plan.method == "qlora":
            cfg["load_in_4bit"] = True
            # The memory estimate assumed NF4 with the job's double-quantization choice
            # (axolotl passes bnb_config_kwargs to transformers' BitsAndBytesConfig).
            cfg["bnb_config_kwargs"] = {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": job.double_quant}
        if plan.weight_precision == "int8":
            cfg["load_in_8bit"] = True
        cfg["lora_r"] = job.lora_rank
        cfg["lora_alpha"] = 2 * job.lora_rank
        cfg["lora_dropout"] = job.lora_dropout
        if job.lora_targets == "all-linear":
            cfg["lora_target_linear"] = True
        else:
            cfg["lora_target_modules"] = {
                "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
                "mlp": ["gate_proj", "up_proj", "down_proj"],
                "qv": ["q_proj", "v_proj"],
            }[job.lora_targets]
    cfg.update(
        {
            "sequence_len": job.seq_len,
            "sample_packing": job.real_token_fraction >= 0.999,
            "micro_batch_size": plan.micro_batch,
            "gradient_accumulation_steps": plan.grad_accum,
            "gradient_checkpointing": plan.gradient_checkpointing,
            "bf16": plan.weight_precision != "fp16",
            "fp16": plan.weight_precision == "fp16",
            "flash_attention": job.flash_attention,
            "optimizer": {
                "adamw": "adamw_torch",
                "adamw-fp32": "adamw_torch",
                "adamw-bf16": "adamw_torch",
                "adamw-8bit": "adamw_bnb_8bit",
                "paged-adamw": "paged_adamw_32bit",
                "paged-adamw-8bit": "paged_adamw_8bit",
                "sgd": "sgd",
                "adafactor": "adafactor",
            }[job.optimizer],
            "output_dir": "/checkpoints/out",
        }
    )
    if plan.market != "on-demand" and plan.time.checkpoint_interval_hours:
        cfg["save_strategy"] = "steps"
        cfg["save_steps"] = max(1, int(plan.time.checkpoint_interval_hours * 3600 / max(plan.time.step_s, 1e-3)))
    if plan.sharding in ("zero1", "zero2"):
        cfg["deepspeed"] = f"deepspeed_configs/zero{plan.sharding[-1]}.json"
    elif plan.sharding == "zero3":
        cfg["fsdp"] = ["full_shard", "auto_wrap"]
        cfg["fsdp_config"] = {
            "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
            "fsdp_use_orig_params": plan.method != "full",
        }
    return cfg


_LAYER_CLASS = {
    "llama": "LlamaDecoderLayer",
    "mistral": "MistralDecoderLayer",
    "qwen2": "Qwen2DecoderLayer",
    "qwen3": "Qwen3DecoderLayer",
    "gemma2": "Gemma2DecoderLayer",
    "phi3": "Phi3DecoderLayer",
    "mixtral": "MixtralDecoderLayer",
    "olmoe": "OlmoeDecoderLayer",
    "qwen2_moe": "Qwen2MoeDecoderLayer",
    "qwen3_moe": "Qwen3MoeDecoderLayer",
    "deepseek_v2": "DeepseekV2DecoderLayer",
    "deepseek_v3": "DeepseekV3DecoderLayer",
}


def _layer_class(job: JobSpec, catalog: Catalog) -> str:
    arch = job.model if not isinstance(job.model, str) else catalog.model(job.model)
    family = "mixtral" if arch.num_experts > 1 and arch.family == "mistral" else arch.family
    return _LAYER_CLASS.get(family, "REPLACE-with-the-decoder-layer-class")


EXPORTERS = ("skypilot", "accelerate", "axolotl")


def export_plan(kind: str, plan: Plan, job: JobSpec, catalog: Catalog) -> dict[str, Any]:
    if kind == "skypilot":
        return skypilot_task(plan, job, catalog)
    if kind == "accelerate":
        return accelerate_config(plan, job)
    if kind == "axolotl":
        return axolotl_config(plan, job, catalog)
    raise ValueError(kind)
