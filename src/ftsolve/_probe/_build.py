"""The files of a probe for one plan: the script (`probe_script.py` with the planned configuration
written in) and a SkyPilot task that runs it on the plan's offer.

The probe runs on one GPU of the plan's node with transformers + PEFT. It keeps what changes the
per-GPU memory and speed of a training step (method, precision, checkpointing, micro-batch,
sequence length, optimizer regime, adapter dtype, LoRA targets and rank, attention), runs
transformers' own loss (fp32 upcast), and has no sharding: where the plan shards a model that one
GPU cannot hold whole, the probe keeps fewer decoder layers (same width, so the same per-layer
physics), and the record names the architecture it ran. The model is then asked about exactly
that configuration, so the correction is what the model misses on that GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pprint import pformat
from typing import Any

import yaml

from ftsolve._calibration import RunConfig
from ftsolve._errors import InvalidJobSpec
from ftsolve._exports import skypilot_problem
from ftsolve.catalog import Catalog, ModelArch
from ftsolve.solver._estimate import estimate_memory, estimate_time, resolve_arch
from ftsolve.solver._job import JobSpec
from ftsolve.solver._plans import Plan

SCRIPT_NAME = "ftsolve_probe.py"
TASK_NAME = "probe-task.yaml"
RECORD_NAME = "probe-record.json"
MARKER = "PLAN = {}  # <ftsolve: planned configuration>"
MAX_PROBE_ACCUMULATION = 4  # micro-batches per timed step: enough to include the optimizer step's share
# model_type of the configuration the probe builds, by ftsolve's family name where they differ.
_MODEL_TYPE = {"guessed": "llama"}


def one_line(value: object, limit: int = 200) -> str:
    """`value` as one printable line (catalog names reach comments of the files written)."""
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in str(value)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Dumper(yaml.SafeDumper):
    """SafeDumper writing multi-line strings (the task's setup and run) as literal blocks."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _str)


@dataclass(frozen=True)
class Probe:
    """What a probe runs and what the model predicts for it."""

    config: RunConfig
    arch: ModelArch
    hf_config: dict[str, Any]
    predicted: dict[str, float]
    notes: tuple[str, ...]
    files: dict[str, str]


def hub_id(arch: ModelArch) -> str | None:
    """The Hugging Face repo an architecture was read from, if its source names one."""
    m = re.search(r"huggingface\.co/([A-Za-z0-9][\w.-]*/[\w.-]+)/", arch.source)
    return m.group(1) if m else None


def hf_config(arch: ModelArch, seq_len: int) -> dict[str, Any]:
    """The transformers configuration (AutoConfig.for_model's arguments) of an architecture."""
    if arch.kv_lora_rank is not None:
        raise InvalidJobSpec(f"{arch.name}: the probe cannot build latent-attention models; run it with --weights")
    model_type = "mixtral" if arch.family == "mistral" and arch.num_experts > 1 else arch.family
    model_type = _MODEL_TYPE.get(model_type, model_type)
    out: dict[str, Any] = {
        "model_type": model_type,
        "hidden_size": arch.hidden_size,
        "intermediate_size": arch.intermediate_size,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_kv_heads,
        "vocab_size": arch.vocab_size,
        "tie_word_embeddings": arch.tie_word_embeddings,
        "max_position_embeddings": max(seq_len, 4096),
    }
    if arch.head_dim is not None:
        out["head_dim"] = arch.head_dim
    if arch.attention_bias and model_type == "llama":
        out["attention_bias"] = True
    if arch.num_experts > 1:
        if model_type == "mixtral":
            out |= {"num_local_experts": arch.num_experts, "num_experts_per_tok": arch.experts_per_token}
        elif model_type in ("qwen2_moe", "qwen3_moe", "olmoe"):
            out |= {"num_experts": arch.num_experts, "num_experts_per_tok": arch.experts_per_token}
            if arch.expert_intermediate_size:
                out["moe_intermediate_size"] = arch.expert_intermediate_size
            if arch.shared_expert_intermediate_size:
                out["shared_expert_intermediate_size"] = arch.shared_expert_intermediate_size
        else:
            raise InvalidJobSpec(f"{arch.name}: the probe cannot build {model_type} experts; run it with --weights")
    return out


def _probe_recipe(job: JobSpec, weight_precision: str) -> tuple[dict[str, Any], list[str]]:
    """The recipe the probe runs (JobSpec's recipe fields) for a plan of `weight_precision`, and what
    it does differently from the job."""
    opts = job.memory_options()
    if opts.quant_kernel == "gptq":
        raise InvalidJobSpec("the probe quantizes with bitsandbytes; it cannot run a GPTQ base (--quant-kernel gptq)")
    notes = []
    differs = {
        "quant_kernel": (
            opts.quant_kernel if weight_precision == "nf4" else "bitsandbytes",
            "bitsandbytes",
            "bitsandbytes' NF4 dequantization",
        ),
        "loss": (opts.loss, "fp32-upcast", "transformers' loss (fp32 upcast)"),
        "optimizer_in_backward": (opts.optimizer_in_backward, False, "the optimizer step after backward"),
        "activation_offload": (opts.activation_offload, False, "activations kept on the GPU"),
        "compile": (opts.compile, False, "no torch.compile"),
        "offload_optimizer": (opts.offload_optimizer, False, "optimizer state on the GPU"),
        "offload_params": (opts.offload_params, False, "parameters on the GPU"),
        "variable_length": (opts.variable_length, False, "full-length batches of random tokens"),
        "quantized_head": (opts.head_is_quantized(), False, "a 16-bit lm_head"),
        "kbit_upcast": (
            opts.kbit_upcast and weight_precision in ("nf4", "int8"),
            False,
            "no prepare_model_for_kbit_training (16-bit embeddings and norms)",
        ),
    }
    for job_value, probe_value, words in differs.values():
        if job_value != probe_value:
            notes.append(f"runs {words}, where the job has {job_value}")
    recipe = {
        "optimizer": opts.optimizer,
        "adapter_dtype": opts.adapter_dtype,
        "lora_targets": opts.lora_targets,
        "lora_dropout": opts.lora_dropout,
        "train_embeddings": opts.train_embeddings,
        "flash_attention": opts.flash_attention,
        "double_quant": opts.double_quant,
        "optimizer_step": opts.optimizer_step,
    }
    recipe |= {name: value for name, (_, value, _) in differs.items()}
    return recipe, notes


# Full fine-tuning with these optimizers steps an fp32 master copy one parameter at a time in the
# probe (probe_script.make_step), which holds at most one parameter's temporaries, as a fused step.
MASTER_COPY_OPTIMIZERS = ("adamw", "paged-adamw", "sgd", "adafactor")


def _estimate_args(c: RunConfig, catalog: Catalog) -> dict[str, Any]:
    """What estimate_memory and estimate_time take of a configuration, beside its model and GPU."""
    return {
        "method": c.method,
        "seq_len": c.seq_len,
        "micro_batch": c.micro_batch,
        "grad_accum": c.grad_accum,
        "gradient_checkpointing": c.gradient_checkpointing,
        "weight_precision": c.weight_precision,
        "lora_rank": c.lora_rank,
        "options": c.options(),
        "catalog": catalog,
    }


def _estimates(config: RunConfig, gpu: str, catalog: Catalog) -> tuple[float, float, float, float, float]:
    """(peak GiB, usable GiB, reserved GiB, allocated GiB, tokens/s) of a configuration on `gpu`."""
    c = config
    common = _estimate_args(c, catalog)
    mem = estimate_memory(c.model, gpu=gpu, **common)
    tps = estimate_time(c.model, gpu, host_speed=c.host_speed, **common).tokens_per_s
    return mem.peak_gib, float(mem.usable_gib or 0.0), mem.reserved_gib, mem.allocated_gib, tps


def _fitting(base: RunConfig, arch: ModelArch, gpu: str, catalog: Catalog) -> tuple[RunConfig, ModelArch]:
    """The configuration with as many decoder layers (then as large a micro-batch) as fit one GPU
    with the headroom a plan keeps (MemoryEstimate.fits_with_headroom)."""

    def at(layers: int, micro_batch: int) -> tuple[RunConfig, ModelArch]:
        sliced = arch
        if layers < arch.num_layers:
            sliced = arch.model_copy(
                update={
                    "name": f"{arch.name} ({layers} of {arch.num_layers} layers)",
                    "num_layers": layers,
                    "dense_layers": min(arch.dense_layers, layers),
                    "published_params_b": None,
                }
            )
        return base.model_copy(update={"model": sliced, "micro_batch": micro_batch}), sliced

    def fits(layers: int, micro_batch: int) -> bool:
        config = at(layers, micro_batch)[0]
        return bool(estimate_memory(config.model, gpu=gpu, **_estimate_args(config, catalog)).fits_with_headroom)

    b = base.micro_batch
    while b >= 1:
        if fits(arch.num_layers, b):
            return at(arch.num_layers, b)
        if fits(1, b):
            low, high = 1, arch.num_layers  # fits(low) and not fits(high)
            while high - low > 1:
                mid = (low + high) // 2
                low, high = (mid, high) if fits(mid, b) else (low, mid)
            return at(low, b)
        b //= 2
    raise InvalidJobSpec(f"not even one decoder layer of {arch.name} fits one {gpu} for the probe")


def build_probe(plan: Plan, job: JobSpec, catalog: Catalog, *, steps: int = 5, warmup: int = 2) -> Probe:
    """The probe of `plan`: its configuration on one GPU, the model's prediction for it, its files."""
    if not 1 <= steps <= 1000 or not 0 <= warmup <= 1000:
        raise InvalidJobSpec("invalid --steps/--warmup: steps 1-1000, warm-up 0-1000")
    arch = resolve_arch(job.model, catalog)[0]
    recipe, notes = _probe_recipe(job, plan.weight_precision)
    if plan.method == "full" and recipe["optimizer"] in MASTER_COPY_OPTIMIZERS and recipe["optimizer_step"] != "fused":
        recipe["optimizer_step"] = "fused"
        notes.append("steps the fp32 master copy one parameter at a time, where the job has a foreach step")
    precision = {"bf16": "16-bit", "fp16": "16-bit"}.get(plan.weight_precision, plan.weight_precision)
    base = RunConfig(
        model=arch,
        method=plan.method,
        weight_precision=precision,
        seq_len=job.seq_len,
        micro_batch=plan.micro_batch,
        grad_accum=min(plan.grad_accum, MAX_PROBE_ACCUMULATION),
        gradient_checkpointing=plan.gradient_checkpointing,
        lora_rank=job.lora_rank,
        stack="hf",
        host_speed=job.host_speed,
        recipe=recipe,
    )
    config, ran = _fitting(base, arch, plan.gpu, catalog)
    if plan.n_gpus > 1 or plan.sharding != "none":
        notes.append(f"runs one GPU without sharding, where the plan has {plan.n_gpus} GPU(s) with {plan.sharding}")
    if ran.num_layers < arch.num_layers:
        notes.append(f"keeps {ran.num_layers} of {arch.num_layers} decoder layers to fit one GPU")
    if config.micro_batch < plan.micro_batch:
        notes.append(f"micro-batch {config.micro_batch}, where the plan has {plan.micro_batch}")
    peak, _, reserved, allocated, tps = _estimates(config, plan.gpu, catalog)
    predicted = {
        "tokens_per_s": round(tps, 1),
        "peak_gib": round(peak, 3),
        "reserved_gib": round(reserved, 3),
        "allocated_gib": round(allocated, 3),
    }
    hf = hf_config(ran, job.seq_len)
    script = _script(plan, job, config, hf, predicted, notes, steps, warmup, hub_id(arch))
    files = {SCRIPT_NAME: script}
    task = probe_task(plan, job, config, arch)
    if task is not None:
        files[TASK_NAME] = task
    return Probe(config, ran, hf, predicted, tuple(notes), files)


def _script(
    plan: Plan,
    job: JobSpec,
    config: RunConfig,
    hf: dict[str, Any],
    predicted: dict[str, float],
    notes: list[str],
    steps: int,
    warmup: int,
    base_model: str | None,
) -> str:
    planned = {
        "plan": {
            "rank": plan.rank,
            "gpu": plan.gpu,
            "offer": plan.offer.key,
            "stack": job.stack,
            "method": plan.method,
            "n_gpus": plan.n_gpus,
            "sharding": plan.sharding,
            "micro_batch": plan.micro_batch,
            "grad_accum": plan.grad_accum,
            "tokens_per_s": plan.time.tokens_per_s,
            "peak_gib": plan.memory.peak_gib,
        },
        "config": config.model_dump(mode="json"),
        "hf_config": hf,
        "base_model": base_model,
        "predicted": predicted,
        "notes": notes,
        "steps": steps,
        "warmup": warmup,
    }
    template = resources.files("ftsolve._probe").joinpath("probe_script.py").read_text(encoding="utf-8")
    if MARKER not in template:  # pragma: no cover - the template and this module ship together
        raise RuntimeError("probe_script.py lost its PLAN marker")
    body = template.split("\n", 1)[1]  # drop the type-checker's line
    where = one_line(f"{plan.offer.provider} {plan.offer.instance_type}")
    header = f"# Probe of ftsolve plan {plan.rank}: {plan.method} on {plan.gpu} ({where}), stack {job.stack}.\n"
    header += "".join(f"# The probe {one_line(note)}.\n" for note in notes)
    return header + body.replace(MARKER, "PLAN = " + pformat(planned, width=110, sort_dicts=False))


def probe_task(plan: Plan, job: JobSpec, config: RunConfig, arch: ModelArch) -> str | None:
    """A SkyPilot task running the probe on the plan's offer (one GPU of its node), or None where
    SkyPilot cannot launch the offer as the catalog states it."""
    o = plan.offer
    if skypilot_problem(o) is not None:
        return None
    resources_: dict[str, Any] = {
        "infra": o.provider if o.region in ("", "default") else f"{o.provider}/{o.region}",
        "instance_type": o.instance_type,
    }
    if "skypilot" in o.source.lower():
        resources_["accelerators"] = f"{o.source_gpu_name}:{o.gpus_per_node}"
    resources_["use_spot"] = o.on_demand_usd_per_gpu_hour is None
    resources_["disk_size"] = int(max(100, 3 * arch.total_params() * 2 / 1e9 + 50))
    packages = ["torch", "transformers", "peft"]
    bnb = config.method == "qlora" or config.weight_precision in ("int8", "nf4")
    if bnb or str(config.recipe.get("optimizer", "")).startswith(("paged", "adamw-8bit")):
        packages.append("bitsandbytes")
    imports = ", ".join(p for p in packages)
    task = {
        "name": f"ftsolve-probe-{plan.gpu}",
        "resources": resources_,
        "workdir": ".",
        "setup": f'python -c "import {imports}" 2>/dev/null || pip install -q {" ".join(packages)}\n',
        "run": f"python {SCRIPT_NAME} --out {RECORD_NAME}\ncat {RECORD_NAME}\n",
    }
    header = (
        f"# ftsolve probe of plan {plan.rank} ({plan.gpu}, {one_line(o.provider + ' ' + o.instance_type)}): "
        f"sky launch -c ftsolve-probe {TASK_NAME}\n"
        f"# then: scp ftsolve-probe:sky_workdir/{RECORD_NAME} . && ftsolve calibrate {RECORD_NAME} "
        "&& sky down ftsolve-probe\n"
    )
    return header + yaml.dump(task, Dumper=_Dumper, sort_keys=False, allow_unicode=False, width=1_000_000)
