"""Launch and training configs for a chosen plan.

Targets (`EXPORTERS`): a SkyPilot task that runs the plan's training config on the offer it
priced, an accelerate config, an axolotl config, a torchtune recipe config and transformers'
TrainingArguments as JSON. All of them train from one record (`_recipe.training_recipe`), so
micro-batch, accumulation, steps, checkpoint cadence, precision and sharding agree with the plan
and with each other. Each file opens with a header naming the plan it implements and its
predicted peak memory and throughput; `export_files` adds the files a config points to (the
SkyPilot task's folder: the task, the accelerate and training configs, a DeepSpeed config).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ftsolve._exports._launch import accelerate_config, launch_command, skypilot_problem, skypilot_task, trainer_of
from ftsolve._exports._recipe import TrainingRecipe, training_recipe
from ftsolve._exports._switch import LAUNCH_FILE, SWITCH_FILE, carries_switch, launch_script, switch_script
from ftsolve._exports._text import json_text, yaml_text
from ftsolve._exports._trainers import (
    DEEPSPEED_FILE,
    axolotl_config,
    deepspeed_config,
    script_settings,
    stack_notes,
    torchtune_config,
    training_arguments,
)
from ftsolve.catalog._load import Catalog
from ftsolve.solver._job import JobSpec
from ftsolve.solver._plans import Plan

EXPORTERS = ("skypilot", "accelerate", "axolotl", "torchtune", "transformers")
FILE_NAMES = {
    "skypilot": "task.yaml",
    "accelerate": "accelerate.yaml",
    "axolotl": "axolotl.yaml",
    "torchtune": "torchtune.yaml",
    "transformers": "training_args.json",
}
_BUILDERS: dict[str, Callable[[TrainingRecipe], dict[str, Any]]] = {
    "skypilot": skypilot_task,
    "accelerate": accelerate_config,
    "axolotl": axolotl_config,
    "torchtune": torchtune_config,
    "transformers": training_arguments,
}
_TITLES = {
    "skypilot": "SkyPilot task",
    "accelerate": "accelerate config",
    "axolotl": "axolotl config (axolotl 0.18.0)",
    "torchtune": "torchtune recipe config",
    "transformers": "transformers TrainingArguments (5.24)",
}

__all__ = ["EXPORTERS", "FILE_NAMES", "export_files", "export_plan", "render_export", "skypilot_problem"]


def _builder(kind: str) -> Callable[[TrainingRecipe], dict[str, Any]]:
    try:
        return _BUILDERS[kind]
    except KeyError:
        raise ValueError(f"unknown export {kind!r}: choose one of {', '.join(EXPORTERS)}") from None


def export_plan(kind: str, plan: Plan, job: JobSpec, catalog: Catalog) -> dict[str, Any]:
    """The config of one target (`EXPORTERS`) for `plan`, as a plain dict (no header).

    Raises InvalidJobSpec when the target cannot carry the plan: an offer SkyPilot cannot launch
    as stated, fp16 or an int8 base in torchtune, activation offload without checkpointing.
    """
    return _builder(kind)(training_recipe(plan, job, catalog))


def _trainer_kind(kind: str, r: TrainingRecipe) -> str:
    return trainer_of(r) if kind in ("skypilot", "accelerate") else kind


def _header(kind: str, r: TrainingRecipe) -> dict[str, Any]:
    p, o, job, s = r.plan, r.plan.offer, r.job, r.schedule
    nodes = f"{p.nodes} node{'s' if p.nodes > 1 else ''}"
    parallel = r.parallel.backend + (f" ZeRO-{r.parallel.zero_stage}" if r.parallel.backend == "deepspeed" else "")
    offloaded = (
        ("parameters", r.parallel.offload_params),
        ("optimizer", r.parallel.offload_optimizer),
        ("activations", r.options.activation_offload),
    )
    offload = [name for name, on in offloaded if on]
    header: dict[str, Any] = {
        f"ftsolve plan {p.rank}": f"{_TITLES[kind]} for {p.n_gpus}x {p.gpu} ({nodes}), {p.method} "
        f"{p.weight_precision}, {p.market}",
        "offer": f"{o.provider} / {o.tier} / {o.instance_type} / {o.region}",
        "job": f"{r.arch.name}, {job.train_tokens:,} tokens at sequence length {job.seq_len}, stack {job.stack}",
        "predicted": {
            "peak_memory_gib_per_gpu": p.memory.peak_gib,
            "usable_memory_gib_per_gpu": p.memory.usable_gib,
            "tokens_per_s_all_gpus": p.time.tokens_per_s,
            "step_s": p.time.step_s,
            "expected_hours": p.time.expected_hours,
            "expected_cost_usd": p.total_cost_usd,
            "compare_with": "torch.cuda.max_memory_reserved() per GPU; tokens per second over all GPUs",
        },
        "trains": {
            "micro_batch": p.micro_batch,
            "grad_accum": p.grad_accum,
            "data_parallel_gpus": p.n_gpus,
            "global_batch": r.global_batch,
            "max_steps": s.max_steps,
            "save_steps": s.save_steps,
            "eval_steps": s.eval_steps,
            "early_stop_patience": s.patience,
            "precision": r.dtype,
            "attention": r.attention,
            "activation_checkpointing": r.checkpointing,
            "parallel": parallel,
            "offload": offload or "none",
        },
        "why": p.why,
        "placeholders": list(r.placeholders),
    }
    trainer = _trainer_kind(kind, r)
    if kind == "skypilot":
        header["placeholders"].append("envs.CHECKPOINT_BUCKET: a bucket you own (SkyPilot creates it if missing)")
        header["launch"] = f"from this folder: {launch_command(r)} (gated models: --secret HF_TOKEN)"
    if trainer == "torchtune":
        header["placeholders"] += [
            "checkpointer.checkpoint_files.max_filename: the base model's safetensors shard count",
            "epochs: more than 1 if one pass over your data is shorter than max_steps_per_epoch steps",
        ]
    notes = [*r.notes, *stack_notes(r, trainer)]
    if r.parallel.backend == "deepspeed" and kind in ("axolotl", "transformers"):
        notes.append(f"points to {DEEPSPEED_FILE}, written beside it by `ftsolve export {kind} --out DIR`")
    if notes:
        header["notes"] = notes
    return header


def render_export(kind: str, plan: Plan, job: JobSpec, catalog: Catalog) -> str:
    """The main file of one target as text: its header, then the config, both serialized."""
    r = training_recipe(plan, job, catalog)
    return _render(kind, r, _builder(kind)(r))


def _render(kind: str, r: TrainingRecipe, body: dict[str, Any]) -> str:
    if kind == "transformers":
        header = _header(kind, r) | {"script": script_settings(r)}
        return json_text(body, header)
    return yaml_text(body, _header(kind, r))


def export_files(kind: str, plan: Plan, job: JobSpec, catalog: Catalog) -> dict[str, str]:
    """Every file of one plan's export folder, by name: the target's file and those it points to."""
    r = training_recipe(plan, job, catalog)
    body = _builder(kind)(r)
    files = {FILE_NAMES[kind]: _render(kind, r, body)}
    trainer = _trainer_kind(kind, r)
    if kind == "skypilot":
        if trainer == "axolotl":
            files[FILE_NAMES["accelerate"]] = _render("accelerate", r, accelerate_config(r))
        files[FILE_NAMES[trainer]] = _render(trainer, r, _builder(trainer)(r))
        if carries_switch(r.plan):
            files[SWITCH_FILE], files[LAUNCH_FILE] = switch_script(r), launch_script(r)
    if r.parallel.backend == "deepspeed" and kind != "accelerate" and trainer in ("axolotl", "transformers"):
        files[DEEPSPEED_FILE] = json_text(deepspeed_config(r))
    return files
