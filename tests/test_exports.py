"""Exports that launch, resume and train what was planned (issue 16), checked with the tools' own
code where it installs beside ftsolve (SkyPilot's task loader and resource validation,
accelerate's config loader and launch checks) and against pinned copies of their schemas where
it does not (axolotl, torchtune, transformers: tests/fixtures/exports/README.md)."""

from __future__ import annotations

import csv
import functools
import json
import math
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from strategies import catalog_of, offer_lists

import ftsolve
from ftsolve import Catalog, InvalidJobSpec, JobSpec, NoFeasiblePlan, Plan
from ftsolve._exports import EXPORTERS, FILE_NAMES, export_files, export_plan, render_export, skypilot_problem
from ftsolve.cli import cli

FIXTURES = Path(__file__).parent / "fixtures" / "exports"
CATALOG = ftsolve.load_catalog(user=False)
# The jobs of the README's tour, with the plans it shows.
README_JOBS = [
    (JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24, budget_usd=300), 5),
    (
        JobSpec(
            model="llama-3.1-70b",
            train_tokens=200_000_000,
            seq_len=4096,
            methods=("full",),
            deadline_hours=48,
            trial_runs=2,
            failure_probability=0.1,
        ),
        3,
    ),
    (JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24, budget_usd=1), 1),
    (JobSpec(model="llama-3.1-70b", train_tokens=100_000_000, seq_len=4096, methods=("full",), max_gpus=32), 5),
]


def readme_plans() -> list[tuple[JobSpec, Plan]]:
    found = []
    for job, top in README_JOBS:
        try:
            found += [(job, p) for p in ftsolve.plan(job, CATALOG, top=top).plans]
        except NoFeasiblePlan:  # the budget-bound job turns infeasible when prices move
            continue
    assert len(found) >= 10
    return found


def parse(kind: str, text: str) -> dict[str, Any]:
    data = json.loads(text) if FILE_NAMES[kind].endswith(".json") else yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


# --- SkyPilot -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sky_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SkyPilot's v8 catalog layout (<cloud>/vms.csv) from the fixtures: Lambda's file as SkyPilot
    keeps it, the other clouds rebuilt from the compact extract (skypilot_gpu_offers.csv)."""
    root = tmp_path_factory.mktemp("sky-catalogs") / "v8"
    rows: dict[str, list[dict[str, str]]] = {}
    with open(FIXTURES / "skypilot_gpu_offers.csv", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["cloud"], []).append(row)
    columns = ["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "Region"]
    columns += ["GpuInfo", "SpotPrice", "AvailabilityZone"]
    for cloud, cloud_rows in rows.items():
        if cloud == "lambda":
            continue
        (root / cloud).mkdir(parents=True)
        with open(root / cloud / "vms.csv", "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            for r in cloud_rows:
                w.writerow(
                    [
                        *(r["instance_type"], r["accelerator_name"], r["accelerator_count"], r["vcpus"]),
                        *(r["memory_gib"], r["price_per_hour"], r["region"], "", r["spot_price_per_hour"]),
                        r["availability_zone"],
                    ]
                )
    (root / "lambda").mkdir()
    (root / "lambda" / "vms.csv").write_text((FIXTURES / "skypilot_v8_lambda_vms.csv").read_text())
    return root


@pytest.fixture
def sky(sky_catalog: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """SkyPilot reading its catalog from the fixture (offline; it downloads a missing file)."""
    sky = pytest.importorskip("sky")
    from sky.catalog import common

    monkeypatch.setattr(common, "_ABSOLUTE_VERSIONED_CATALOG_DIR", str(sky_catalog))
    yield sky


def test_skypilot_exports_of_the_readme_plans_load_and_validate(sky: Any, sky_catalog: Path, tmp_path: Path) -> None:
    from sky.data.storage import StorageMode

    checked = refused = 0
    for i, (job, p) in enumerate(readme_plans()):
        if skypilot_problem(p.offer) is not None:
            with pytest.raises(InvalidJobSpec, match="cannot be exported as a SkyPilot task"):
                export_plan("skypilot", p, job, CATALOG)
            refused += 1
            continue
        folder = write(tmp_path / f"plan-{i}", export_files("skypilot", p, job, CATALOG))
        task = sky.Task.from_yaml(str(folder / "task.yaml"))
        cwd = os.getcwd()
        try:
            os.chdir(folder)  # the task ships its folder as workdir "."
            task.expand_and_validate_workdir()
        finally:
            os.chdir(cwd)
        assert task.num_nodes == p.nodes
        (res,) = task.resources
        assert res.use_spot == (p.market != "on-demand") and res.instance_type == p.offer.instance_type
        assert (res.job_recovery is not None) == (p.market != "on-demand")
        assert task.storage_mounts["/checkpoints"].mode == StorageMode.MOUNT_CACHED
        for name in ("accelerate.yaml", "axolotl.yaml"):
            assert name in task.run and (folder / name).is_file()
        # The optimizer's own check that the instance type carries the requested accelerators, for
        # the clouds the fixture has (the bundled catalog's gcp and azure offers come from elsewhere).
        if (sky_catalog / str(res.cloud).lower()).is_dir():
            feasible = res.cloud.get_feasible_launchable_resources(res, num_nodes=task.num_nodes)
            assert feasible.resources_list, (p.offer.key, feasible.hint)
            checked += 1
    assert checked >= 8 and refused >= 1


def test_a_multi_node_task_passes_rank_head_and_gpus_per_node() -> None:
    job, p = next((j, p) for j, p in readme_plans() if p.nodes > 1 and skypilot_problem(p.offer) is None)
    run = export_plan("skypilot", p, job, CATALOG)["run"]
    assert 'HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)' in run
    for arg in ('--machine_rank "$SKYPILOT_NODE_RANK"', '--main_process_ip "$HEAD_IP"', "SKYPILOT_NUM_GPUS_PER_NODE"):
        assert arg in run


@pytest.mark.parametrize(
    ("update", "why"),
    [
        ({"launchable": False, "not_launchable_reason": "price list for all regions"}, "not launchable"),
        ({"region": "all (list price)", "instance_type": "HGX B300 (per GPU)"}, "region"),
        ({"region": "eu-north1", "instance_type": "HGX B300 (per GPU)"}, "instance type"),
        ({"provider": "hyperstack"}, "no cloud named"),
    ],
)
def test_an_offer_skypilot_cannot_launch_is_refused_in_one_line(update: dict[str, Any], why: str) -> None:
    job, p = readme_plans()[0]
    offer = p.offer.model_copy(update={"provider": "nebius", "source": "nebius.com/prices"} | update)
    odd = p.model_copy(update={"offer": offer})
    problem = skypilot_problem(odd.offer)
    assert problem is not None and why in problem
    with pytest.raises(InvalidJobSpec) as exc:
        export_plan("skypilot", odd, job, CATALOG)
    assert "\n" not in str(exc.value) and "--rank" in str(exc.value)
    assert export_plan("axolotl", odd, job, CATALOG)["micro_batch_size"] == p.micro_batch  # training configs still


def test_the_cli_refuses_an_unlaunchable_plan_with_exit_2() -> None:
    args = ["--model", "llama-3.1-8b", "--tokens", "10M", "--seq-len", "2048", "--providers", "coreweave"]
    args += ["--methods", "lora", "--max-gpus", "8"]
    result = CliRunner().invoke(cli, ["export", "skypilot", *args])
    assert result.exit_code == 2, result.output
    assert "SkyPilot" in result.output and len(result.output.strip().splitlines()) == 1


# --- accelerate -------------------------------------------------------------------------------


def _launch_args(folder: Path, run: str, rank: int, nodes: int, gpus_per_node: int) -> list[str]:
    """The accelerate command line one node of the task runs, with SkyPilot's variables set."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SKYPILOT_NODE_RANK": str(rank),
        "SKYPILOT_NODE_IPS": "\n".join(f"10.0.0.{i + 1}" for i in range(nodes)),
        "SKYPILOT_NUM_NODES": str(nodes),
        "SKYPILOT_NUM_GPUS_PER_NODE": str(gpus_per_node),
    }
    script = 'accelerate() { printf "%s\\0" "$@"; }\n' + run
    out = subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


def test_accelerate_configs_load_and_every_node_gets_its_rank_and_the_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launch = pytest.importorskip("accelerate.commands.launch")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils.launch import prepare_multi_gpu_env

    multi = 0
    for i, (job, p) in enumerate(readme_plans()):
        if skypilot_problem(p.offer) is not None:
            continue
        folder = write(tmp_path / f"plan-{i}", export_files("skypilot", p, job, CATALOG))
        cfg = load_config_from_file(str(folder / "accelerate.yaml"))
        assert cfg.num_processes == p.n_gpus and cfg.num_machines == p.nodes
        assert cfg.mixed_precision == ("bf16" if CATALOG.gpu(p.gpu).supports_bf16 else "fp16")
        run = yaml.safe_load((folder / "task.yaml").read_text())["run"]
        monkeypatch.chdir(folder)
        for rank in range(p.nodes):
            argv = _launch_args(folder, run, rank, p.nodes, p.offer.gpus_per_node)
            assert argv[0] == "launch"
            args, _, _ = launch._validate_launch_command(launch.launch_command_parser().parse_args(argv[1:]))
            assert args.num_processes == p.n_gpus and args.num_machines == p.nodes
            if p.nodes > 1:
                assert args.machine_rank == rank and args.main_process_ip == "10.0.0.1"
                assert args.main_process_port == 29500
            if cfg.distributed_type in ("FSDP", "MULTI_GPU"):
                env = prepare_multi_gpu_env(args)
                if cfg.distributed_type == "FSDP":
                    assert env["FSDP_TRANSFORMER_CLS_TO_WRAP"] == "LlamaDecoderLayer"
                    assert env["FSDP_ACTIVATION_CHECKPOINTING"] == str(p.gradient_checkpointing).lower()
        multi += p.nodes > 1
    assert multi >= 1


def fsdp_plan(**recipe: Any) -> tuple[JobSpec, Plan]:
    """A job of Llama-3.1-70B LoRA on up to 8 H100s, and its first plan sharded with FSDP."""
    job = JobSpec(
        model="llama-3.1-70b", train_tokens=20_000_000, seq_len=2048, methods=("lora",), max_gpus=8, gpus=("h100-sxm",)
    ).model_copy(update=recipe)
    return job, next(p for p in ftsolve.plan(job, CATALOG, top=5).plans if p.sharding == "zero3" and p.n_gpus > 1)


@pytest.mark.parametrize("version", [1, 2])
def test_the_jobs_fsdp_version_is_the_one_accelerate_axolotl_and_transformers_run(
    version: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launch = pytest.importorskip("accelerate.commands.launch")
    import accelerate.utils.dataclasses as accelerate_dataclasses
    import torch
    from accelerate.utils.launch import prepare_multi_gpu_env

    job, p = fsdp_plan(fsdp_version=version)
    (tmp_path / "accelerate.yaml").write_text(yaml.safe_dump(export_plan("accelerate", p, job, CATALOG)))
    parsed = launch.launch_command_parser().parse_args(["--config_file", str(tmp_path / "accelerate.yaml"), "t.py"])
    for name, value in prepare_multi_gpu_env(launch._validate_launch_command(parsed)[0]).items():
        monkeypatch.setenv(name, value)
    # accelerate's FSDP plugin reads the launch environment as on the training machine (one CUDA device).
    monkeypatch.setattr(accelerate_dataclasses, "is_cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    plugin = accelerate_dataclasses.FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == version
    if version == 1:
        assert plugin.sharding_strategy.name == "FULL_SHARD" and plugin.use_orig_params and plugin.sync_module_states
    else:
        assert plugin.reshard_after_forward is True
    check_axolotl(export_plan("axolotl", p, job, CATALOG))
    args = check_training_args(export_plan("transformers", p, job, CATALOG))
    assert args["fsdp_config"]["version"] == version
    assert ("reshard_after_forward" in args["fsdp_config"]) == (version == 2)


@pytest.mark.parametrize("fp32_params", [None, False])
def test_an_export_says_when_accelerate_holds_fsdps_parameters_in_fp32_and_the_plan_did_not(
    fp32_params: bool | None,
) -> None:
    job, p = fsdp_plan(fsdp_fp32_params=fp32_params)
    for target in ("axolotl", "transformers"):
        said = "trainable parameters and their gradients in fp32" in render_export(target, p, job, CATALOG)
        assert said == (fp32_params is False), target


def test_torchtune_refuses_fsdp1() -> None:
    args = ["--model", "llama-3.1-8b", "--tokens", "5M", "--seq-len", "2048", "--stack", "torchtune"]
    result = CliRunner().invoke(cli, ["plan", *args, "--fsdp-version", "1"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.strip().endswith("torchtune shards with FSDP2 only: set fsdp_version to 2"), result.output


# --- axolotl ---------------------------------------------------------------------------------

AXOLOTL_SCHEMA: dict[str, Any] = json.loads((FIXTURES / "axolotl_schema_v0.18.0.json").read_text())


@functools.cache
def axolotl_validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    cls = jsonschema.validators.validator_for(AXOLOTL_SCHEMA)
    cls.check_schema(AXOLOTL_SCHEMA)
    return cls(AXOLOTL_SCHEMA)


def check_axolotl(cfg: dict[str, Any]) -> None:
    """Against axolotl 0.18.0's schema (every key one of its fields, every value of its type), and
    the model validators that concern what ftsolve writes (axolotl/utils/schemas/validation.py)."""
    assert set(cfg) <= set(AXOLOTL_SCHEMA["properties"]), set(cfg) - set(AXOLOTL_SCHEMA["properties"])
    axolotl_validator().validate(cfg)
    fsdp_ckpt = (cfg.get("fsdp_config") or {}).get("activation_checkpointing") is True
    assert not (cfg["gradient_checkpointing"] and fsdp_ckpt), "two activation-checkpointing switches"
    assert not (cfg["bf16"] and cfg["fp16"])
    if cfg.get("early_stopping_patience"):
        assert cfg["save_steps"] % cfg["eval_steps"] == 0 and cfg["val_set_size"] > 0
    if cfg.get("eval_steps"):
        assert cfg["val_set_size"] > 0  # eval_steps with val_set_size 0 is refused
    if cfg.get("activation_offloading"):
        assert cfg["gradient_checkpointing"] or fsdp_ckpt
    assert cfg["val_set_size"] < 1 or cfg["val_set_size"] >= 2  # 1 would mean the whole dataset
    if "fsdp_config" in cfg:  # FSDP2 reshards by a bool; FSDP1 takes FULL_SHARD and keeps original parameters
        assert cfg["fsdp_version"] in (1, 2)
        fsdp = cfg["fsdp_config"]
        assert ("reshard_after_forward" in fsdp) == (cfg["fsdp_version"] == 2)
        assert fsdp.get("use_orig_params", False) == fsdp.get("sync_module_states", False) == (cfg["fsdp_version"] == 1)


def test_axolotl_exports_of_the_readme_plans_fit_axolotls_schema() -> None:
    for job, p in readme_plans():
        for patience in (None, 3):
            j = job.model_copy(update={"early_stop_patience": patience, "eval_fraction": 0.01})
            check_axolotl(export_plan("axolotl", p, j, CATALOG))


# --- torchtune -------------------------------------------------------------------------------

TORCHTUNE: dict[str, Any] = json.loads((FIXTURES / "torchtune_bd2a0fc.json").read_text())


def check_torchtune(cfg: dict[str, Any], recipe: str) -> None:
    """Every key one the recipe reads, every component one torchtune defines with the arguments
    given (pytorch/torchtune at the pinned commit); optimizers are torch or bitsandbytes classes."""
    assert set(cfg) <= set(TORCHTUNE["recipes"][recipe]), set(cfg) - set(TORCHTUNE["recipes"][recipe])
    for key, section in cfg.items():
        if not isinstance(section, dict) or "_component_" not in section:
            continue
        path = section["_component_"]
        if key == "optimizer":
            assert path.startswith(("torch.optim.", "bitsandbytes.optim."))
            continue
        assert path in TORCHTUNE["components"], path
        spec = TORCHTUNE["components"][path]
        given_args = set(section) - {"_component_"}
        assert spec["kwargs"] or given_args <= set(spec["params"]), (path, given_args - set(spec["params"]))
    assert cfg["dtype"] == "bf16" and cfg["max_steps_per_epoch"] >= 1 and cfg["epochs"] == 1


def test_torchtune_exports_fit_the_recipes_or_are_refused() -> None:
    job = JobSpec(model="qwen2.5-7b", train_tokens=20_000_000, seq_len=2048, stack="torchtune", max_gpus=8)
    kinds = set()
    for methods in (("full",), ("lora",), ("qlora",)):
        for p in ftsolve.plan(job.model_copy(update={"methods": methods}), CATALOG, top=3).plans:
            cfg = export_plan("torchtune", p, job, CATALOG)
            kind = ("full" if p.method == "full" else "lora") + ("_distributed" if p.n_gpus > 1 else "_single_device")
            check_torchtune(cfg, f"{kind.split('_')[0]}_finetune_{kind.split('_', 1)[1]}")
            kinds.add(kind)
    assert len(kinds) >= 2
    v100 = JobSpec(model="qwen2.5-0.5b", train_tokens=1_000_000, seq_len=1024, gpus=("v100-sxm2-16gb",))
    p = ftsolve.plan(v100, CATALOG, top=1).plans[0]
    with pytest.raises(InvalidJobSpec, match="fp16"):
        export_plan("torchtune", p, v100, CATALOG)


# --- transformers ----------------------------------------------------------------------------

TRAINING_ARGS: dict[str, Any] = json.loads((FIXTURES / "transformers_training_args_5.24.0.json").read_text())


def check_training_args(data: dict[str, Any]) -> dict[str, Any]:
    """Against TrainingArguments of transformers 5.24.0: every key a field (besides the `_ftsolve`
    header), choices among its enums, one activation-checkpointing switch."""
    args = {k: v for k, v in data.items() if k != "_ftsolve"}
    assert set(args) <= set(TRAINING_ARGS["fields"]), set(args) - set(TRAINING_ARGS["fields"])
    for name, allowed in TRAINING_ARGS["choices"].items():
        assert name not in args or args[name] in allowed, (name, args[name])
    for name, value in args.items():
        kind = TRAINING_ARGS["fields"][name]
        if kind == "<class 'int'>":
            assert isinstance(value, int) and not isinstance(value, bool), name
        elif kind == "<class 'bool'>":
            assert isinstance(value, bool), name
    assert not (args["activation_checkpointing"] and (args.get("fsdp_config") or {}).get("activation_checkpointing"))
    if args.get("load_best_model_at_end"):
        assert args["save_steps"] % args["eval_steps"] == 0 and args["eval_strategy"] == "steps"
    return args


# --- Every target trains the plan ------------------------------------------------------------


def assert_trains_the_plan(kind: str, cfg: dict[str, Any], p: Plan, job: JobSpec) -> None:
    """The exported micro-batch, accumulation, precision, checkpointing, save interval and max
    steps are the plan's (each read the way its target names it)."""
    gpu = CATALOG.gpu(p.gpu)
    bf16 = gpu.supports_bf16
    if kind == "axolotl":
        mb, accum = cfg["micro_batch_size"], cfg["gradient_accumulation_steps"]
        steps, save = cfg["max_steps"], cfg["save_steps"]
        ckpt = [cfg["gradient_checkpointing"], (cfg.get("fsdp_config") or {}).get("activation_checkpointing", False)]
        assert cfg["bf16"] is bf16 and cfg["fp16"] is not bf16
        assert cfg["attn_implementation"] == ("flash_attention_2" if gpu.flash_attention_2 else "sdpa")
    elif kind == "transformers":
        mb, accum, steps, save = (
            cfg["per_device_train_batch_size"],
            cfg["gradient_accumulation_steps"],
            cfg["max_steps"],
            cfg["save_steps"],
        )
        ckpt = [cfg["activation_checkpointing"], (cfg.get("fsdp_config") or {}).get("activation_checkpointing", False)]
        assert cfg["bf16"] is bf16 and cfg["fp16"] is not bf16
    else:  # torchtune
        mb, accum, steps, save = (
            cfg["batch_size"],
            cfg["gradient_accumulation_steps"],
            cfg["max_steps_per_epoch"],
            cfg["save_every_n_steps"],
        )
        ckpt = [cfg["enable_activation_checkpointing"]]
        assert bf16 and cfg["dtype"] == "bf16"
    assert (mb, accum) == (p.micro_batch, p.grad_accum)
    assert sum(map(bool, ckpt)) == int(p.gradient_checkpointing)
    # Max steps: the token budget (padding included) over tokens per step, rounded up.
    per_step = p.micro_batch * p.grad_accum * p.n_gpus * job.seq_len * job.real_token_fraction
    assert steps * per_step >= job.train_tokens > (steps - 1) * per_step
    # The same steps at the plan's step time are its training hours (the plan rounds step_s and
    # training_hours to 4 decimals: up to 5e-5 s per step, 5e-5 h overall).
    assert abs(steps * p.time.step_s - p.time.training_hours * 3600) <= p.time.step_s + steps * 5e-5 + 0.2
    tau = p.time.checkpoint_interval_hours
    if job.early_stop_patience is not None:
        assert save <= (steps if not tau else max(1, math.floor(round(tau * 3600 / p.time.step_s, 6))))
    elif tau:
        # Saves at the planned interval: the largest whole number of steps within it.
        # tau is rounded to 4 decimals in the plan (0.18 s); no interval is shorter than one step.
        assert save == steps or save * p.time.step_s <= (tau + 5e-5) * 3600
        assert save == steps or save == 1 or (save + 1) * p.time.step_s > tau * 3600
    else:
        assert save == steps  # on-demand: the final save only


def exports_of(p: Plan, job: JobSpec, catalog: Catalog) -> Iterator[tuple[str, dict[str, Any]]]:
    for kind in ("axolotl", "transformers", "torchtune"):
        try:
            text = render_export(kind, p, job, catalog)
        except InvalidJobSpec as exc:
            # torchtune trains neither fp16 nor on an int8 base; no target offloads activations
            # without checkpointing them.
            assert kind == "torchtune" or "offloads activations" in str(exc), exc
            continue
        yield kind, parse(kind, text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offers=offer_lists(),
    model=st.sampled_from(["qwen2.5-0.5b", "llama-3.2-1b", "llama-3.1-8b", "mistral-7b"]),
    tokens=st.integers(1_000_000, 300_000_000),
    seq_len=st.sampled_from([512, 2048, 4096]),
    global_batch=st.sampled_from([1, 8, 16, 64]),
    methods=st.sampled_from([("full",), ("lora",), ("qlora",), ("full", "lora", "qlora")]),
    markets=st.sampled_from([("on-demand",), ("interruptible",), ("fallback",)]),
    stack=st.sampled_from(["hf", "axolotl", "torchtune", "deepspeed", "unsloth"]),
    patience=st.sampled_from([None, None, 2]),
    packed=st.booleans(),
    offload=st.sampled_from([(False, False), (True, False), (False, True)]),
)
def test_every_export_trains_what_was_planned(
    offers: tuple[ftsolve.Offer, ...],
    model: str,
    tokens: int,
    seq_len: int,
    global_batch: int,
    methods: tuple[str, ...],
    markets: tuple[str, ...],
    stack: str,
    patience: int | None,
    packed: bool,
    offload: tuple[bool, bool],
) -> None:
    catalog = catalog_of(offers)
    job = JobSpec.model_validate(
        {
            "model": model,
            "train_tokens": tokens,
            "seq_len": seq_len,
            "global_batch_size": global_batch,
            "methods": methods,
            "markets": markets,
            "stack": stack,
            "early_stop_patience": patience,
            "eval_fraction": 0.02 if patience else 0.0,
            "real_token_fraction": 1.0 if packed else 0.7,
            "offload_optimizer": offload[0],
            "offload_params": offload[1],
            "max_gpus": 16,
            "max_nodes": 2,
        }
    )
    try:
        plans = ftsolve.plan(job, catalog, top=2).plans
    except NoFeasiblePlan:
        assume(False)
        return
    for p in plans:
        event(f"{p.sharding}, {p.market}, bf16={catalog.gpu(p.gpu).supports_bf16}, ckpt={p.gradient_checkpointing}")
        for kind, cfg in exports_of(p, job, catalog):
            if kind == "axolotl":
                check_axolotl(cfg)
            elif kind == "transformers":
                cfg = check_training_args(cfg)
            assert_trains_the_plan(kind, cfg, p, job)
        acc = export_plan("accelerate", p, job, catalog)
        assert acc["mixed_precision"] == ("bf16" if catalog.gpu(p.gpu).supports_bf16 else "fp16")
        if acc["distributed_type"] == "DEEPSPEED":
            assert acc["deepspeed_config"]["gradient_accumulation_steps"] == p.grad_accum


# --- Safe output -----------------------------------------------------------------------------

HOSTILE = 'evil"\nworkdir: /home\n# \'x\' \u2028setup: rm -rf ~ #'


def test_a_hostile_provider_name_cannot_add_keys(tmp_path: Path) -> None:
    job, p = readme_plans()[0]
    # Offer's validator refuses such names on load; a plan built before that check, or by a
    # library caller, still must not write them raw.
    hostile = p.model_copy(update={"offer": p.offer.model_copy(update={"provider": HOSTILE, "tier": HOSTILE})})
    expected = {kind: list(export_plan(kind, p, job, CATALOG)) for kind in EXPORTERS if kind != "skypilot"}
    for kind, keys in expected.items():
        text = render_export(kind, hostile, job, CATALOG)
        data = parse(kind, text)
        if kind == "transformers":
            assert list(data) == ["_ftsolve", *keys] and "\n" not in data["_ftsolve"]["offer"]
        else:
            assert list(data) == keys
            header = text[: text.index(f"\n{keys[0]}:")]
            assert all(line.startswith("#") for line in header.splitlines()), header
            assert "workdir: /home" in header and "\u2028" not in header  # shown, as a comment only
    with pytest.raises(InvalidJobSpec) as exc:  # not a SkyPilot cloud: refused, in one line
        export_plan("skypilot", hostile, job, CATALOG)
    assert "\n" not in str(exc.value) and "\u2028" not in str(exc.value)


def test_quotes_and_hashes_in_a_launchable_offers_names_round_trip(sky: Any, tmp_path: Path) -> None:
    job, p = readme_plans()[0]
    odd = 'gpu_1x "a6000" # spot: yes'
    offer = p.offer.model_copy(update={"instance_type": odd, "tier": "t # x: 'y'"})
    plan = p.model_copy(update={"offer": offer})
    text = render_export("skypilot", plan, job, CATALOG)
    data = yaml.safe_load(text)
    assert set(data) == set(export_plan("skypilot", p, job, CATALOG))
    assert data["resources"]["instance_type"] == odd
    assert sky.Task.from_yaml_str(text).name == data["name"]


# --- The command line ------------------------------------------------------------------------


def test_export_out_dir_writes_one_folder_per_plan_with_what_the_task_ships(tmp_path: Path) -> None:
    args = ["--model", "llama-3.1-70b", "--tokens", "200M", "--seq-len", "4096", "--methods", "full"]
    args += ["--deadline", "48h", "--early-stop-patience", "2", "--gpus", "b300,b200,h200-sxm"]  # SkyPilot knows all
    ranks = ["--rank", "1", "--rank", "3"]
    result = CliRunner().invoke(cli, ["export", "skypilot", *args, *ranks, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for rank in (1, 3):
        folder = tmp_path / f"plan-{rank}"
        assert {f.name for f in folder.iterdir()} == {"task.yaml", "accelerate.yaml", "axolotl.yaml"}
        task_text = (folder / "task.yaml").read_text()
        assert task_text.startswith(f"# ftsolve plan {rank}: SkyPilot task")
        assert "peak_memory_gib_per_gpu" in task_text and "tokens_per_s_all_gpus" in task_text
        axolotl = yaml.safe_load((folder / "axolotl.yaml").read_text())
        assert axolotl["early_stopping_patience"] == 2 and axolotl["auto_resume_from_checkpoints"] is True
    several = CliRunner().invoke(cli, ["export", "axolotl", *args, "--rank", "1", "--rank", "2"])
    assert several.exit_code == 2 and "--out DIR" in several.output


def test_a_deepspeed_plan_ships_its_deepspeed_config(tmp_path: Path) -> None:
    job = JobSpec(
        model="llama-3.1-8b", train_tokens=20_000_000, seq_len=2048, methods=("full",), offload_optimizer=True
    )
    p = ftsolve.plan(job, CATALOG, top=1).plans[0]
    files = export_files("axolotl", p, job, CATALOG)
    assert parse("axolotl", files["axolotl.yaml"])["deepspeed"] == "deepspeed.json"
    ds = json.loads(files["deepspeed.json"])
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert ds["gradient_accumulation_steps"] == "auto"  # filled from the training arguments
    # hidden_size**2-element reduce buckets, as the memory model prices them (DeepSpeed's own
    # default of 5e8 elements would hold about 2 GB more under ZeRO-1/2)
    assert ds["zero_optimization"]["reduce_bucket_size"] == "auto"
    # A bucket size the job states is the one the plan priced and the config carries.
    sized = job.model_copy(update={"deepspeed_bucket_elements": 200_000_000})
    files = export_files("axolotl", ftsolve.plan(sized, CATALOG, top=1).plans[0], sized, CATALOG)
    assert json.loads(files["deepspeed.json"])["zero_optimization"]["reduce_bucket_size"] == 200_000_000


@pytest.mark.parametrize(("stack", "step"), [("hf", "fused"), ("hf", "foreach"), ("torchtune", "fused")])
def test_exports_run_the_optimizer_step_the_plan_priced(stack: str, step: str) -> None:
    # torch AdamW's foreach step holds a copy of the second moments (priced as optimizer_step);
    # the fused one does not. Each export asks its trainer for the step the plan assumed.
    job = JobSpec(
        model="llama-3.2-1b",
        train_tokens=5_000_000,
        seq_len=1024,
        methods=("full",),
        stack=stack,
        optimizer="adamw-bf16",
        optimizer_step=step,
    )
    p = ftsolve.plan(job, CATALOG, top=1).plans[0]
    cfgs = dict(exports_of(p, job, CATALOG))
    if stack == "torchtune":
        assert cfgs["torchtune"]["optimizer"]["fused"] is (step == "fused")
        return
    name = "adamw_torch_fused" if step == "fused" else "adamw_torch"
    assert check_training_args(cfgs["transformers"])["optim"] == name
    assert cfgs["axolotl"]["optimizer"] == name
    check_axolotl(cfgs["axolotl"])


def test_an_export_says_when_its_trainer_dequantizes_otherwise_than_the_plan_priced() -> None:
    # The hf stack prices QLoRA with bitsandbytes; torchtune expands torchao's NF4 eagerly (14 B per
    # element of workspace, not 2), so its config says so; a torchtune plan exported to transformers
    # says the reverse; a GPTQ checkpoint cannot go to torchtune at all.
    hf = JobSpec(model="qwen2.5-7b", train_tokens=20_000_000, seq_len=2048, methods=("qlora",), max_gpus=1)
    p = ftsolve.plan(hf, CATALOG, top=1).plans[0]
    assert p.weight_precision == "nf4"
    assert "torchtune runs torchao" in render_export("torchtune", p, hf, CATALOG)
    assert "dequantization;" not in render_export("axolotl", p, hf, CATALOG)
    tt = hf.model_copy(update={"stack": "torchtune"})
    q = ftsolve.plan(tt, CATALOG, top=1).plans[0]
    assert "dequantization;" not in render_export("torchtune", q, tt, CATALOG)
    assert "transformers runs bitsandbytes" in render_export("transformers", q, tt, CATALOG)
    gptq = hf.model_copy(update={"quant_kernel": "gptq"})
    g = ftsolve.plan(gptq, CATALOG, top=1).plans[0]
    with pytest.raises(InvalidJobSpec, match="GPTQ checkpoint"):
        export_plan("torchtune", g, gptq, CATALOG)


def test_a_full_fine_tuning_export_says_where_it_keeps_less_or_more_than_the_plan_priced() -> None:
    # The hf stack prices an fp32 master. Unsharded, transformers and axolotl train the model as
    # loaded (bf16) and torchtune always does, so each export says so; a regime without a master
    # (torchtune's) needs no word. On a card without bf16 the transformers script loads fp32 (fp16
    # autocast: GradScaler refuses fp16 gradients) and says its fp16 weight copies are not priced.
    hf = JobSpec(model="llama-3.2-1b", train_tokens=5_000_000, seq_len=1024, methods=("full",), max_gpus=1)
    p = ftsolve.plan(hf, CATALOG, top=1).plans[0]
    assert (p.optimizer, p.n_gpus) == ("adamw", 1)
    script = dict(exports_of(p, hf, CATALOG))["transformers"]["_ftsolve"]["script"]
    assert script["from_pretrained"]["dtype"] == "bfloat16"
    for target in ("axolotl", "torchtune", "transformers"):
        assert "keeps no fp32 master" in render_export(target, p, hf, CATALOG), target
    tt = hf.model_copy(update={"stack": "torchtune"})
    q = ftsolve.plan(tt, CATALOG, top=1).plans[0]
    assert q.optimizer == "adamw-bf16"
    assert not any("fp32 master" in render_export(t, q, tt, CATALOG) for t in ("axolotl", "torchtune", "transformers"))
    t4 = hf.model_copy(update={"gpus": ("t4", "v100-sxm2-16gb", "v100-sxm2-32gb"), "model": "qwen2.5-0.5b"})
    r = ftsolve.plan(t4, CATALOG, top=1).plans[0]
    assert dict(exports_of(r, t4, CATALOG))["transformers"]["_ftsolve"]["script"]["from_pretrained"]["dtype"] == (
        "float32"
    )
    assert "fp16 copies of the weights are not in the plan" in render_export("transformers", r, t4, CATALOG)


def test_a_bf16_stack_sharded_through_deepspeed_or_fsdp_is_priced_with_the_fp32_master_they_keep() -> None:
    # axolotl loads bf16, but its ZeRO-1/2 plans run DeepSpeed and its multi-GPU ZeRO-3 plans
    # accelerate's FSDP, which keep an fp32 master: priced and named `adamw`, as the hf stack's.
    # torchtune's FSDP2 keeps bf16.
    from ftsolve.solver._estimate import estimate_memory
    from ftsolve.solver._memory import MemoryOptions

    def states(stack: str, sharding: str) -> float:
        opts = MemoryOptions.for_stack(stack)
        est = estimate_memory("llama-3.1-8b", method="full", n_gpus=4, sharding=sharding, options=opts)
        return sum(est.components_gib[c] for c in ("weights", "gradients", "optimizer"))

    for sharding in ("zero1", "zero2", "zero3"):
        assert states("axolotl", sharding) == pytest.approx(states("hf", sharding)), sharding
        assert states("torchtune", sharding) < states("hf", sharding) - 5, sharding
    assert states("axolotl", "ddp") < 0.6 * states("hf", "ddp")
    job = JobSpec(
        model="llama-3.1-8b", train_tokens=5_000_000, seq_len=1024, methods=("full",), stack="axolotl", gpus=("a100",)
    )
    sharded = [p for p in ftsolve.plan(job, CATALOG, top=10).plans if p.sharding != "none"]
    assert sharded and all(p.optimizer == "adamw" for p in sharded)
    p = sharded[0]
    assert "fp32 master" not in render_export("axolotl", p, job, CATALOG)
    assert "keeps no fp32 master" in render_export("torchtune", p, job, CATALOG)


def test_a_checkpoint_interval_saves_every_whole_step_it_holds() -> None:
    from ftsolve._exports._recipe import steps_within

    # 0.182 h is 900 steps of 0.728 s exactly; floating point divides it to 899.9999999999999.
    assert steps_within(0.182, 0.728) == 900
    assert steps_within(0.182, 0.7281) == 899
    assert steps_within(0.0001, 10.0) == 1  # never shorter than one step
