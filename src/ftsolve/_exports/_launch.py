"""Launching a plan: a SkyPilot task (docs.skypilot.co/en/latest/reference/yaml-spec.html) and an
accelerate config (`accelerate launch --config_file`)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from ftsolve._errors import InvalidJobSpec
from ftsolve._exports._recipe import CHECKPOINT_MOUNT, FSDP1_EXTRAS, MAIN_PROCESS_PORT, PLACEHOLDER, TrainingRecipe
from ftsolve._exports._switch import CAPACITY_ENV, LAUNCH_FILE, SWITCH_FILE, carries_switch
from ftsolve._exports._text import clean
from ftsolve.catalog._models import Offer

# The clouds SkyPilot 0.14.1 launches on (sky.utils.registry.CLOUD_REGISTRY), by infra name.
# skypilot-catalog also lists hyperstack and jarvislabs, which that release cannot launch.
SKYPILOT_CLOUDS = frozenset(
    {
        "aws",
        "azure",
        "cudo",
        "do",
        "fluidstack",
        "gcp",
        "hyperbolic",
        "ibm",
        "lambda",
        "mithril",
        "nebius",
        "oci",
        "paperspace",
        "primeintellect",
        "runpod",
        "scp",
        "seeweb",
        "shadeform",
        "vast",
        "verda",
    }
)
# A region or instance type SkyPilot could look up: no spaces, parentheses or other prose.
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*")
_NO_REGION = ("", "default")
# Instance types whose GPU count SkyPilot's catalog misstates, as (provider, instance type). SkyPilot's
# Azure v8 catalog lists Standard_ND96isr_H100_v5 as H100:12 (the VM has 8 GPUs;
# coopslarhette/skypilot-catalog catalogs/v8/azure/vms.csv @20291d7e, skypilot-org/skypilot-catalog
# catalogs/v6 @098741e7). Naming `accelerators: H100:8` would not help: for a task with an instance type,
# sky/clouds/azure.py _get_feasible_launchable_resources drops the task's accelerators, so the launched
# resources, the Ray GPU demand and SKYPILOT_NUM_GPUS_PER_NODE all take the catalog's 12
# (backend_utils.get_task_demands_dict). The run command therefore names the offer's own count.
SKYPILOT_GPU_MISCOUNTS = frozenset({("azure", "Standard_ND96isr_H100_v5")})
SKYPILOT_VERSION = "0.14.1"
AXOLOTL_VERSION = "0.18.0"
# torchtune's last PyPI release (0.6.1) saves per epoch only; save_every_n_steps is on main.
TORCHTUNE_COMMIT = "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1"


def skypilot_names(offer: Offer) -> bool:
    """True when the offer's names are SkyPilot's own (read from skypilot-catalog or imported
    from a SkyPilot catalog): its accelerator spelling, region and instance type launch as stated."""
    return "skypilot" in offer.source.lower()


def skypilot_problem(offer: Offer) -> str | None:
    """Why SkyPilot cannot launch the offer as it is stated, or None when it can.

    The catalog's own verdict first (`Offer.launchable` and its reason), then whether SkyPilot
    has the provider as a cloud. Offers whose names are not SkyPilot's own must also name a region
    and an instance type that look like identifiers, not prose such as 'all (list price)' (a user's
    offers file may predate the launchable column); SkyPilot's own names may hold spaces (Vast's
    regions read 'Texas, US, NA').
    """
    names = (offer.provider, offer.region, offer.instance_type, offer.source_gpu_name)
    if not all(v.isprintable() for v in names):
        return "its names hold control characters"
    if not offer.launchable:
        return f"the catalog marks it not launchable ({clean(offer.not_launchable_reason, 120)})"
    if offer.provider not in SKYPILOT_CLOUDS:
        return f"SkyPilot {SKYPILOT_VERSION} has no cloud named {clean(offer.provider, 40)!r}"
    if skypilot_names(offer):
        return None
    if offer.region not in _NO_REGION and not _IDENTIFIER.fullmatch(offer.region):
        return f"its region {clean(offer.region, 60)!r} is not a SkyPilot region"
    if not _IDENTIFIER.fullmatch(offer.instance_type):
        return f"its instance type {clean(offer.instance_type, 60)!r} is not a SkyPilot instance type"
    return None


def check_launchable(recipe: TrainingRecipe) -> None:
    problem = skypilot_problem(recipe.plan.offer)
    if problem is not None:
        raise InvalidJobSpec(
            f"plan {recipe.plan.rank} cannot be exported as a SkyPilot task: {problem}. To fix: export another "
            "--rank, or plan with --providers naming a SkyPilot cloud"
        )


def _resources(r: TrainingRecipe) -> dict[str, Any]:
    o, plan = r.plan.offer, r.plan
    res: dict[str, Any] = {"infra": o.provider if o.region in _NO_REGION else f"{o.provider}/{o.region}"}
    res["instance_type"] = o.instance_type
    if skypilot_names(o):
        # The offer's own spelling: SkyPilot matches the accelerator against the instance type's.
        res["accelerators"] = f"{o.source_gpu_name}:{o.gpus_per_node}"
    res["use_spot"] = plan.market != "on-demand"
    model_gb = r.arch.total_params() * 2 / 1e9
    res["disk_size"] = int(max(256, 3 * model_gb + r.job.dataset_gb + 50))
    if plan.market != "on-demand":
        # Run with `sky jobs launch`: a preempted managed job is relaunched (in another zone or
        # region if need be) and resumes from the latest checkpoint on the bucket.
        recovery: dict[str, Any] = {"strategy": "FAILOVER"}
        if r.job.failure_probability > 0:
            recovery["max_restarts_on_errors"] = 1
        res["job_recovery"] = recovery
    return res


def trainer_of(r: TrainingRecipe) -> str:
    """The training config the task runs: torchtune for the torchtune stack, axolotl otherwise."""
    return "torchtune" if r.job.stack == "torchtune" else "axolotl"


def _setup(r: TrainingRecipe, trainer: str) -> str:
    if trainer == "torchtune":
        return (
            f"pip install 'torchtune @ git+https://github.com/pytorch/torchtune@{TORCHTUNE_COMMIT}' torchao\n"
            "tune download \"$BASE_MODEL\" --output-dir /tmp/base-model --ignore-patterns 'original/consolidated*'\n"
        )
    extras = "flash-attn,deepspeed" if r.attention == "flash_attention_2" else "deepspeed"
    return f"pip install --no-build-isolation 'axolotl[{extras}]=={AXOLOTL_VERSION}'\n"


def gpus_per_node(r: TrainingRecipe) -> str:
    """The launcher's processes per node: SkyPilot's variable, or the offer's own count where SkyPilot's
    catalog misstates it (SKYPILOT_GPU_MISCOUNTS)."""
    o = r.plan.offer
    if (o.provider, o.instance_type) in SKYPILOT_GPU_MISCOUNTS:
        return str(r.plan.n_gpus // r.plan.nodes)
    return "$SKYPILOT_NUM_GPUS_PER_NODE"


def _rendezvous(r: TrainingRecipe) -> list[str]:
    """Launcher arguments of a multi-node run: node count, this node's rank, the head's address."""
    if r.plan.nodes == 1:
        return []
    return [
        "--num_machines",
        "$SKYPILOT_NUM_NODES",
        "--machine_rank",
        "$SKYPILOT_NODE_RANK",
        "--main_process_ip",
        "$HEAD_IP",
        "--main_process_port",
        str(MAIN_PROCESS_PORT),
        "--num_processes",
        f"$((SKYPILOT_NUM_NODES * {gpus_per_node(r).removeprefix('$')}))",
    ]


def _run(r: TrainingRecipe, trainer: str) -> str:
    lines = ["set -e"]
    if r.plan.nodes > 1:
        lines.append('HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)')
    if trainer == "axolotl":
        # axolotl resumes by itself (auto_resume_from_checkpoints).
        args = ["accelerate", "launch", "--config_file", "accelerate.yaml", *_rendezvous(r)]
        args += ["-m", "axolotl.cli.train", "axolotl.yaml"]
    else:
        lines.append(
            'RESUME=False; ls "$OUTPUT_DIR" 2>/dev/null | grep -qE "^(step|epoch)_[0-9]+$" && RESUME=True'
        )
        args = ["tune", "run"]
        if r.plan.n_gpus > 1:
            args += ["--nnodes", "$SKYPILOT_NUM_NODES", "--nproc_per_node", gpus_per_node(r)]
        if r.plan.nodes > 1:
            args += ["--node_rank", "$SKYPILOT_NODE_RANK", "--master_addr", "$HEAD_IP"]
            args += ["--master_port", str(MAIN_PROCESS_PORT)]
        args += [torchtune_recipe(r), "--config", "torchtune.yaml", "resume_from_checkpoint=$RESUME"]
    if carries_switch(r.plan):
        # The plan's switch to on-demand capacity: switch.py stops the run when its rule fires.
        args = ["python3", SWITCH_FILE, "--", *args]
    lines.append(" ".join(_word(a) for a in args))
    return "\n".join(lines) + "\n"


def _word(arg: str) -> str:
    """A shell word: variables (written by this module, never from the catalog) in double quotes
    so the shell expands them, anything else quoted literally."""
    return f'"{arg}"' if "$" in arg else shlex.quote(arg)


def torchtune_recipe(r: TrainingRecipe) -> str:
    kind = "full_finetune" if r.plan.method == "full" else "lora_finetune"
    return f"{kind}_{'distributed' if r.plan.n_gpus > 1 else 'single_device'}"


def skypilot_task(r: TrainingRecipe) -> dict[str, Any]:
    """The task: resources as the offer states them, the generated configs shipped as its workdir,
    a bucket for checkpoints, and the launcher wired to SkyPilot's node rank and head address."""
    check_launchable(r)
    trainer = trainer_of(r)
    return {
        "name": f"ftsolve-{r.plan.method}-{r.plan.gpu}",
        "num_nodes": r.plan.nodes,
        "resources": _resources(r),
        # SkyPilot's task schema takes environment values as strings.
        "envs": {
            "BASE_MODEL": r.base_model,
            "OUTPUT_DIR": r.output_dir,
            "CHECKPOINT_BUCKET": f"{PLACEHOLDER}-with-your-bucket-name",
            **({CAPACITY_ENV: "interruptible"} if carries_switch(r.plan) else {}),
        },
        # The folder `ftsolve export skypilot --out DIR` writes: this task and the configs it runs.
        "workdir": ".",
        "file_mounts": {
            CHECKPOINT_MOUNT: {"name": "${CHECKPOINT_BUCKET}", "mode": "MOUNT_CACHED", "persistent": True},
        },
        "setup": _setup(r, trainer),
        "run": _run(r, trainer),
    }


def launch_command(r: TrainingRecipe) -> str:
    if carries_switch(r.plan):
        return f"bash {LAUNCH_FILE} <your-bucket> (sky jobs launch, then on-demand if the switch rule fires)"
    managed = r.plan.market != "on-demand"
    return f"sky {'jobs launch' if managed else 'launch'} task.yaml --env CHECKPOINT_BUCKET=<your-bucket>"


def accelerate_config(r: TrainingRecipe) -> dict[str, Any]:
    """An accelerate config for the plan's sharding and offload. One file serves every node:
    `machine_rank` and `main_process_ip` are given per node at launch (the SkyPilot task's
    `--machine_rank $SKYPILOT_NODE_RANK --main_process_ip $HEAD_IP`)."""
    p, par = r.plan, r.parallel
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": {"single": "NO", "ddp": "MULTI_GPU", "fsdp": "FSDP", "deepspeed": "DEEPSPEED"}[
            par.backend
        ],
        "mixed_precision": r.dtype,
        "num_machines": p.nodes,
        "num_processes": p.n_gpus,
        "machine_rank": 0,
        "gpu_ids": "all",
        "use_cpu": False,
        "debug": False,
    }
    if p.nodes > 1:
        cfg |= {"main_process_port": MAIN_PROCESS_PORT, "rdzv_backend": "static", "same_network": True}
    if par.backend == "fsdp":
        v1 = r.options.fsdp == 1
        cfg["fsdp_config"] = {
            "fsdp_version": r.options.fsdp,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": r.layer_class or f"{PLACEHOLDER}-with-the-decoder-layer-class",
            # accelerate takes FSDP1's sharding strategy by name and refuses a bool for it.
            "fsdp_reshard_after_forward": "FULL_SHARD" if v1 else True,
            "fsdp_offload_params": par.offload_params,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_activation_checkpointing": r.checkpointing == "fsdp",
            "fsdp_cpu_ram_efficient_loading": True,
        } | ({f"fsdp_{k}": v for k, v in FSDP1_EXTRAS.items()} if v1 else {})
    elif par.backend == "deepspeed":
        cfg["deepspeed_config"] = {
            "zero_stage": par.zero_stage,
            "gradient_accumulation_steps": p.grad_accum,
            "offload_optimizer_device": "cpu" if par.offload_optimizer else "none",
            "offload_param_device": "cpu" if par.offload_params else "none",
            "zero3_init_flag": par.zero_stage == 3,
        }
    return cfg
