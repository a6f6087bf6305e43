"""Job files, schemas, output formats, compare, pareto, exports and the public names (issue 8)."""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import ftsolve
from ftsolve.cli import cli

JOB = ["--model", "llama-3.1-8b", "--tokens", "50M", "--seq-len", "2048", "--deadline", "24h"]


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.output


def test_public_names_are_the_module_namespace() -> None:
    """`__all__` lists exactly the public names the package defines (submodules aside)."""
    assert ftsolve.__all__ == sorted(ftsolve.__all__)
    public = {
        name
        for name, value in vars(ftsolve).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert set(ftsolve.__all__) - {"__version__"} == public
    for name in ("plan", "compare", "pareto", "estimate_memory", "estimate_time", "check_plan", "export_plan"):
        assert callable(getattr(ftsolve, name))


def test_compare_and_pareto_are_library_calls() -> None:
    job = ftsolve.JobSpec(model="qwen3-4b", train_tokens=10**7, seq_len=512, gpus=("h100-sxm", "l40s"))
    rows = ftsolve.compare(job)
    assert {r.option for r in rows} == {"h100-sxm", "l40s"}
    frontier = ftsolve.pareto(job, points=3)
    assert len(frontier) == 3 and any(p.on_frontier for p in frontier)


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_job_files_with_units_and_flags_overriding_them(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"job{suffix}"
    if suffix == ".yaml":
        path.write_text(
            "model: llama-3.1-8b\ntrain_tokens: 50M\nseq_len: 2048\ndeadline_hours: 36h\n"
            "budget_usd: $500\nmethods: [lora, qlora]\n"
        )
    else:
        path.write_text(
            'model = "llama-3.1-8b"\ntrain_tokens = "50M"\nseq_len = 2048\ndeadline_hours = "36h"\n'
            'budget_usd = 500\nmethods = ["lora", "qlora"]\n'
        )
    code, out = run("plan", "--job", str(path), "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["job"]["deadline_hours"] == 36 and data["job"]["budget_usd"] == 500
    assert {p["method"] for p in data["plans"]} <= {"lora", "qlora"}
    code, out = run("plan", "--job", str(path), "--deadline", "10h", "--methods", "qlora", "--json")
    data = json.loads(out)
    assert data["job"]["deadline_hours"] == 10 and data["job"]["methods"] == ["qlora"]
    assert data["job"]["budget_usd"] == 500


def test_bad_job_files_get_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "job.yaml"
    for text, message in (
        ("model: [unclosed", "not valid YAML"),
        ("modell: x\n", "unknown field 'modell'"),
        ("train_tokens: 5M\nseq_len: 512\n", "missing model"),
    ):
        bad.write_text(text)
        code, out = run("plan", "--job", str(bad))
        assert code == 2 and message in out and len(out.strip().splitlines()) == 1, out


def test_schemas_describe_the_job_and_the_plans() -> None:
    code, out = run("schema", "job")
    schema = json.loads(out)
    assert code == 0 and {"model", "train_tokens", "deadline_hours", "budget_usd"} <= set(schema["properties"])
    code, out = run("schema", "plan")
    schema = json.loads(out)
    assert "plans" in schema["properties"] and "Plan" in schema["$defs"]
    code, out = run("plan", *JOB, "--json")
    ftsolve.PlanSet.model_validate_json(out)  # the output follows its schema


def test_markdown_output() -> None:
    code, out = run("plan", *JOB, "--markdown", "--top", "2")
    assert code == 0
    assert "| # | offer | GPUs |" in out and out.count("\n| 1 |") == 1 and "Prices dated" in out


def test_compare_by_gpu_and_method() -> None:
    code, out = run("compare", *JOB, "--json")
    rows = json.loads(out)
    assert code == 0 and rows
    feasible = [r for r in rows if r["feasible"]]
    assert feasible == sorted(feasible, key=lambda r: r["total_cost_usd"])
    assert all(r["blocked_by"] for r in rows if not r["feasible"])
    code, out = run("compare", *JOB, "--by", "method", "--json")
    assert {r["option"] for r in json.loads(out)} == {"full", "lora", "qlora"}


def test_pareto_table_json_and_svg(tmp_path: Path) -> None:
    code, out = run(
        "pareto", "--model", "llama-3.1-8b", "--tokens", "100M", "--seq-len", "2048", "--points", "5", "--json"
    )
    points = json.loads(out)
    assert code == 0 and len(points) == 5
    feasible = [p for p in points if p["feasible"]]
    # A later deadline never costs more.
    costs = [p["total_cost_usd"] for p in feasible]
    assert costs == sorted(costs, reverse=True)
    assert any(p["on_frontier"] for p in feasible)
    svg = tmp_path / "frontier.svg"
    code, out = run(
        "pareto",
        "--model",
        "llama-3.1-8b",
        "--tokens",
        "100M",
        "--seq-len",
        "2048",
        "--points",
        "4",
        "--plot",
        str(svg),
    )
    assert code == 0 and svg.read_text().startswith("<svg") and "</svg>" in svg.read_text()
    if importlib.util.find_spec("matplotlib") is None:
        code, out = run(
            "pareto",
            "--model",
            "llama-3.1-8b",
            "--tokens",
            "100M",
            "--seq-len",
            "2048",
            "--points",
            "3",
            "--plot",
            str(tmp_path / "f.png"),
        )
        assert code == 2 and "matplotlib" in out


@pytest.mark.parametrize("kind", ["skypilot", "accelerate", "axolotl"])
def test_exports_are_valid_yaml_with_the_plan_filled_in(kind: str, tmp_path: Path) -> None:
    args = [
        "--model",
        "llama-3.1-70b",
        "--tokens",
        "100M",
        "--seq-len",
        "4096",
        "--methods",
        "full",
        "--max-gpus",
        "32",
        "--json",
    ]
    plan = json.loads(run("plan", *args)[1])["plans"][0]
    out_file = tmp_path / f"{kind}.yaml"
    code, out = run("export", kind, *args[:-1], "--out", str(out_file))
    assert code == 0, out
    cfg = yaml.safe_load(out_file.read_text())
    if kind == "skypilot":
        assert cfg["num_nodes"] == plan["nodes"]
        offer = plan["offer"]  # its own accelerator spelling (a SkyPilot-catalog offer)
        assert cfg["resources"]["accelerators"] == f"{offer['source_gpu_name']}:{offer['gpus_per_node']}"
        assert cfg["resources"]["use_spot"] == (plan["market"] != "on-demand")
    elif kind == "accelerate":
        assert cfg["num_processes"] == plan["n_gpus"] and cfg["num_machines"] == plan["nodes"]
        assert cfg["distributed_type"] in ("FSDP", "DEEPSPEED", "MULTI_GPU", "NO")
    else:
        assert cfg["sequence_len"] == 4096 and cfg["micro_batch_size"] == plan["micro_batch"]
        assert cfg["gradient_accumulation_steps"] == plan["grad_accum"]
        # One activation-checkpointing switch: FSDP's own under FSDP, the model's otherwise.
        fsdp_ckpt = cfg.get("fsdp_config", {}).get("activation_checkpointing", False)
        assert [cfg["gradient_checkpointing"], fsdp_ckpt].count(True) == int(plan["gradient_checkpointing"])
        assert "adapter" not in cfg


def test_export_of_a_qlora_plan_sets_the_adapter() -> None:
    code, out = run(
        "export", "axolotl", "--model", "llama-3.1-8b", "--tokens", "10M", "--seq-len", "2048", "--methods", "qlora"
    )
    cfg = yaml.safe_load(out)
    assert code == 0 and cfg["adapter"] == "qlora" and cfg["load_in_4bit"] is True and cfg["lora_r"] == 16
    assert cfg["bnb_config_kwargs"] == {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True}


def test_plan_help_fits_one_screen_and_is_grouped() -> None:
    code, out = run("plan", "--help")
    assert code == 0 and len(out.splitlines()) <= 55
    for section in ("Job:", "Constraints:", "Output and catalog:"):
        assert section in out


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "llama-3.1-8b", "--tokens", "50M", "--seq-len", "2048", "--deadline", "24h"],
        ["--model", "llama-3.1-70b", "--tokens", "100M", "--seq-len", "4096", "--methods", "full", "--max-gpus", "32"],
        [
            "--model",
            "llama-3.1-8b",
            "--tokens",
            "50M",
            "--seq-len",
            "2048",
            "--markets",
            "on-demand",
            "--provider",
            "aws",
        ],
    ],
)
def test_skypilot_export_passes_skypilots_own_task_schema(args: list[str]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schemas = pytest.importorskip("sky.utils.schemas")
    code, out = run("export", "skypilot", *args)
    assert code == 0, out
    jsonschema.validate(yaml.safe_load(out), schemas.get_task_schema())


@pytest.mark.parametrize(
    ("offload_optimizer", "offload_params", "max_gpus"),
    [(False, False, 1), (True, False, 1), (True, False, 8), (False, True, 1), (False, True, 8)],
)
def test_accelerate_export_offloads_what_the_memory_estimate_left_off_the_gpu(
    offload_optimizer: bool, offload_params: bool, max_gpus: int
) -> None:
    job = ftsolve.JobSpec(
        model="llama-3.1-8b",
        train_tokens=20_000_000,
        seq_len=2048,
        methods=("full",),
        offload_optimizer=offload_optimizer,
        offload_params=offload_params,
        max_gpus=max_gpus,
    )
    catalog = ftsolve.load_catalog(user=False)
    for p in ftsolve.plan(job, catalog, top=3).plans:
        on_gpu = p.memory.components_gib
        assert any("CPU offload" in a for a in p.assumptions) == (offload_optimizer or offload_params)
        assert (on_gpu["optimizer"] == 0) == (offload_optimizer or offload_params)
        assert (on_gpu["weights"] == 0) == offload_params
        cfg = ftsolve.export_plan("accelerate", p, job, catalog)
        if cfg["distributed_type"] == "FSDP":
            assert cfg["fsdp_config"]["fsdp_offload_params"] == offload_params
            assert not (offload_optimizer and not offload_params)  # FSDP cannot offload the optimizer alone
        elif offload_optimizer or offload_params:
            ds = cfg["deepspeed_config"]
            assert cfg["distributed_type"] == "DEEPSPEED" and ds["offload_optimizer_device"] == "cpu"
            assert (ds["offload_param_device"] == "cpu") == offload_params
            assert ds["zero_stage"] == 3 or not offload_params
        else:
            assert cfg["distributed_type"] in ("NO", "MULTI_GPU", "DEEPSPEED")
