"""What an exported training config trains, decided once for every target.

`training_recipe` turns a plan into the settings that the memory and time models assumed: the
batch geometry (micro-batch, accumulation, data-parallel GPUs), the steps the token budget takes,
the checkpoint and evaluation cadence, precision and attention by GPU, the one activation-
checkpointing switch, how the model is sharded and what is offloaded. The training-stack switches
(loss, activation offload, optimizer in backward) come from `JobSpec.memory_options()`, the
record the memory model reads (`solver/_stacks.py`). The SkyPilot, accelerate, axolotl,
torchtune and transformers exports only spell this record in their own vocabulary.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from ftsolve._exports._switch import carries_switch, rule_words
from ftsolve.catalog._load import Catalog
from ftsolve.catalog._models import GpuSpec, ModelArch
from ftsolve.solver._job import JobSpec
from ftsolve.solver._memory import MemoryOptions
from ftsolve.solver._plans import Plan

# Marks every value the user must supply; the file stays valid with it in place.
PLACEHOLDER = "REPLACE"
CHECKPOINT_MOUNT = "/checkpoints"
# Rendezvous port of the head node (torchrun's and accelerate's default).
MAIN_PROCESS_PORT = 29500
# What an FSDP1 config (JobSpec.fsdp_version 1) states beyond FSDP2's: loading on rank 0 alone
# (cpu_ram_efficient_loading) needs the module states broadcast (accelerate utils/launch.py), and
# the original parameters kept. accelerate launch defaults both to true; written so the file says
# what runs. The Trainer that runs every export wraps PEFT's adapters as units of their own
# (transformers' update_fsdp_plugin_peft, PEFT's fsdp_auto_wrap_policy), so no flat parameter mixes
# adapters with frozen weights and the gradients are the adapters' alone, as priced. FSDP2 needs
# neither key.
FSDP1_EXTRAS = {"use_orig_params": True, "sync_module_states": True}
# Evaluations over a run when the plan has no checkpoint cadence to evaluate at (on-demand).
EVALS_PER_RUN = 10

# transformers' decoder-layer class by config.json model_type (ModelArch.family): what FSDP wraps.
_LAYER_CLASS = {
    "llama": "LlamaDecoderLayer",
    "mistral": "MistralDecoderLayer",
    "mixtral": "MixtralDecoderLayer",
    "qwen2": "Qwen2DecoderLayer",
    "qwen2_moe": "Qwen2MoeDecoderLayer",
    "qwen3": "Qwen3DecoderLayer",
    "qwen3_moe": "Qwen3MoeDecoderLayer",
    "gemma": "GemmaDecoderLayer",
    "gemma2": "Gemma2DecoderLayer",
    "gemma3_text": "Gemma3DecoderLayer",
    "phi": "PhiDecoderLayer",
    "phi3": "Phi3DecoderLayer",
    "olmo": "OlmoDecoderLayer",
    "olmo2": "Olmo2DecoderLayer",
    "olmoe": "OlmoeDecoderLayer",
    "granite": "GraniteDecoderLayer",
    "deepseek_v2": "DeepseekV2DecoderLayer",
    "deepseek_v3": "DeepseekV3DecoderLayer",
}


@dataclass(frozen=True)
class Parallel:
    """How the plan spreads training over its GPUs, and what it keeps in CPU memory."""

    backend: Literal["single", "ddp", "fsdp", "deepspeed"]
    zero_stage: int  # DeepSpeed ZeRO stage; 0 for every other backend
    offload_params: bool
    offload_optimizer: bool

    @property
    def keeps_master(self) -> bool:
        """Whether the backend keeps an fp32 master of a 16-bit model: DeepSpeed's partitions, and
        accelerate's FSDP mixed precision, which upcasts the flat parameters."""
        return self.backend in ("deepspeed", "fsdp")


@dataclass(frozen=True)
class Schedule:
    """Steps, checkpoints and evaluations, in optimizer steps."""

    max_steps: int
    save_steps: int
    planned_save_steps: int | None  # the plan's checkpoint interval in steps; None: only the final save
    eval_steps: int | None  # None: no evaluation
    eval_sequences: int | None  # sequences per evaluation from the job's eval_fraction; None: none priced
    patience: int | None


@dataclass(frozen=True)
class TrainingRecipe:
    """Everything a training config needs from one plan (see the module docstring)."""

    plan: Plan
    job: JobSpec
    arch: ModelArch
    gpu: GpuSpec
    options: MemoryOptions
    base_model: str
    layer_class: str | None
    dtype: Literal["bf16", "fp16"]
    attention: Literal["flash_attention_2", "sdpa", "eager"]
    checkpointing: Literal["off", "model", "fsdp"]  # where the one activation-checkpointing switch is on
    parallel: Parallel
    schedule: Schedule
    output_dir: str
    placeholders: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: micro-batch x accumulation x data-parallel GPUs."""
        return self.plan.micro_batch * self.plan.grad_accum * self.plan.n_gpus

    @property
    def lora(self) -> bool:
        return self.plan.method != "full"


def _arch(job: JobSpec, catalog: Catalog) -> ModelArch:
    return job.model if isinstance(job.model, ModelArch) else catalog.model(job.model)


def hub_id(arch: ModelArch) -> str | None:
    """The Hugging Face repo an architecture was read from, if its source names one."""
    m = re.search(r"huggingface\.co/([A-Za-z0-9][\w.-]*/[\w.-]+)/", arch.source)
    return m.group(1) if m else None


def layer_class(arch: ModelArch) -> str | None:
    # The Mixtral preset is recorded with Mistral's model_type and eight experts.
    family = "mixtral" if arch.family == "mistral" and arch.num_experts > 1 else arch.family
    return _LAYER_CLASS.get(family)


def parallel_of(plan: Plan, job: JobSpec, options: MemoryOptions) -> Parallel:
    """The backend that keeps on each GPU what the memory estimate counted there.

    FSDP shards ZeRO-3 style and offloads parameters and optimizer state together; DeepSpeed
    offloads the optimizer state alone and on one GPU too (ZeRO-Offload), and is the only
    ZeRO-1/2 of the hf runtime's stacks; the deepspeed stack uses DeepSpeed for every stage.
    """
    offload = job.offload_optimizer or job.offload_params
    deepspeed_runtime = options.framework == "deepspeed"
    if plan.sharding == "zero3" and plan.n_gpus > 1 and not deepspeed_runtime and (job.offload_params or not offload):
        return Parallel("fsdp", 0, job.offload_params, job.offload_params)
    if plan.sharding in ("zero1", "zero2", "zero3") or offload:
        stage = {"none": 2, "ddp": 1, "zero1": 1, "zero2": 2, "zero3": 3}[plan.sharding]
        return Parallel("deepspeed", 3 if job.offload_params else stage, job.offload_params, offload)
    return Parallel("ddp" if plan.n_gpus > 1 else "single", 0, False, False)


def steps_within(hours: float, step_s: float) -> int:
    """The whole steps that fit in `hours`, at least one. Rounded first: the plan's decimal interval
    and step time may divide to a hair under the whole number they equal (0.182 h / 0.728 s gives
    899.9999999999999 in floating point, not 900)."""
    return max(1, math.floor(round(hours * 3600 / step_s, 6)))


def schedule_of(plan: Plan, job: JobSpec) -> Schedule:
    """Max steps from the token budget; saves at the plan's checkpoint interval; evaluations at
    every save when early stopping needs them (HF Trainer keeps the best checkpoint only where an
    evaluation and a save coincide: save_steps a multiple of eval_steps)."""
    global_batch = plan.micro_batch * plan.grad_accum * plan.n_gpus
    # The time model processes train_tokens / real_token_fraction tokens, padding included.
    max_steps = max(1, math.ceil(job.train_tokens / (job.real_token_fraction * global_batch * job.seq_len)))
    tau = plan.time.checkpoint_interval_hours
    planned = None if not tau else min(max_steps, steps_within(tau, plan.time.step_s))
    patience = job.early_stop_patience
    save = planned or max_steps
    evaluate = patience is not None or job.eval_fraction > 0
    if not evaluate:
        return Schedule(max_steps, save, planned, None, None, None)
    if patience is None:
        eval_steps = max(1, max_steps // EVALS_PER_RUN)
    else:
        # At least twice the patience window of evaluations, so that a plateau in the first half
        # of the run can stop it; at every save, so that the best checkpoint is one that was saved.
        eval_steps = min(save, max(1, max_steps // max(EVALS_PER_RUN, 2 * (patience + 1))))
        save = eval_steps
    n_evals = max(1, max_steps // eval_steps)
    per_eval = job.eval_fraction * job.train_tokens / n_evals / job.seq_len
    eval_sequences = max(1, math.ceil(per_eval)) if job.eval_fraction > 0 else None
    return Schedule(max_steps, save, planned, eval_steps, eval_sequences, patience)


def training_recipe(plan: Plan, job: JobSpec, catalog: Catalog) -> TrainingRecipe:
    """The settings every export of `plan` shares (module docstring)."""
    arch = _arch(job, catalog)
    gpu = catalog.gpu(plan.gpu)
    options = job.memory_options()
    parallel = parallel_of(plan, job, options)
    schedule = schedule_of(plan, job)
    placeholders = [f"the dataset: {PLACEHOLDER}-with-your-dataset", "the learning rate: a starting value, tune it"]
    notes: list[str] = []
    repo = hub_id(arch)
    if repo is None:
        repo = f"{PLACEHOLDER}-with-the-hub-id-of-{arch.name}"
        placeholders.append("base_model: the model's Hugging Face id or local path")
    layer = layer_class(arch)
    if layer is None and parallel.backend == "fsdp":
        placeholders.append(f"the decoder layer class of model_type {arch.family!r} (FSDP wraps it)")
    if schedule.eval_steps is not None and schedule.eval_sequences is None:
        placeholders.append("the validation set size: the plan priced no evaluation (eval_fraction 0)")
    if job.global_batch_size != plan.micro_batch * plan.grad_accum * plan.n_gpus:
        notes.append(
            f"global batch {plan.micro_batch * plan.grad_accum * plan.n_gpus} sequences (asked "
            f"{job.global_batch_size}): accumulation rounds up to whole micro-batches"
        )
    if carries_switch(plan):
        notes.append(f"{rule_words(plan, schedule)}: the SkyPilot export's launch.sh and switch.py carry the rule")
    if schedule.patience is not None and schedule.planned_save_steps != schedule.save_steps:
        notes.append(
            f"early stopping saves and evaluates every {schedule.save_steps} steps "
            f"(the plan's checkpoint cadence: {schedule.planned_save_steps or 'final save only'})"
        )
    attention: Literal["flash_attention_2", "sdpa", "eager"] = (
        "eager" if not job.flash_attention else "flash_attention_2" if gpu.flash_attention_2 else "sdpa"
    )
    checkpointing: Literal["off", "model", "fsdp"] = (
        "off" if not plan.gradient_checkpointing else "fsdp" if parallel.backend == "fsdp" else "model"
    )
    return TrainingRecipe(
        plan=plan,
        job=job,
        arch=arch,
        gpu=gpu,
        options=options,
        base_model=repo,
        layer_class=layer,
        dtype="bf16" if gpu.supports_bf16 else "fp16",
        attention=attention,
        checkpointing=checkpointing,
        parallel=parallel,
        schedule=schedule,
        output_dir=f"{CHECKPOINT_MOUNT}/ftsolve-{plan.method}-{plan.gpu}",
        placeholders=tuple(placeholders),
        notes=tuple(notes),
    )


def learning_rate(recipe: TrainingRecipe) -> float:
    """A common starting learning rate (a placeholder the header marks): adapters take larger ones."""
    return 2e-4 if recipe.lora else 1e-5
