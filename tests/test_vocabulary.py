"""The job's vocabulary in one place (issue 18): every CLI job option is generated from a JobSpec
field, shows JobSpec's default, and leaves a field it was not typed for to the job file."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from ftsolve import JobSpec
from ftsolve.cli import cli
from ftsolve.cli._options import GroupedCommand, job_from_options, job_options
from ftsolve.solver._memory import MemoryOptions

JOB_COMMANDS = ["plan", "compare", "pareto", "explain", "export"]
FIELDS = [name for name in JobSpec.model_fields if name != "model"]


@click.command(cls=GroupedCommand)
@job_options
def probe(**o: Any) -> None:
    """The JobSpec the options describe, as JSON (the commands' own path, without planning)."""
    click.echo(job_from_options(o).model_dump_json())


def parsed(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(probe, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    data: dict[str, Any] = json.loads(result.output)
    return data


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


@pytest.mark.parametrize("command", JOB_COMMANDS)
def test_every_field_has_exactly_one_option_named_after_it(command: str) -> None:
    params = cli.commands[command].params
    options = [p for p in params if isinstance(p, click.Option)]
    for field in FIELDS:
        setting = [p for p in options if p.name == field]
        assert len(setting) == 1, (command, field)
        assert setting[0].opts[0] == flag(field), (command, field, setting[0].opts)
    # model is --model or --config; no spelling (flag or alias) belongs to two options.
    assert {"model", "config", "job"} <= {p.name for p in options}
    spellings = [o for p in options for o in (*p.opts, *p.secondary_opts)]
    assert len(spellings) == len(set(spellings))


def test_every_field_has_a_title_a_description_and_a_help_section() -> None:
    for name, info in JobSpec.model_fields.items():
        assert info.description and info.title, name
        extra = info.json_schema_extra
        assert isinstance(extra, dict) and extra["group"] in ("job", "recipe", "constraints", "policy"), name


def _help_default(help_text: str, option: str) -> str:
    row = next(line for line in help_text.splitlines() if line.strip().startswith(option + " "))
    found = re.search(r"\(([^()]*)\)\.$", row.strip())
    assert found, row
    return found.group(1)


def test_help_shows_jobspecs_defaults() -> None:
    help_text = CliRunner().invoke(cli, ["plan", "--help"]).output
    for field in ("global_batch_size", "deadline_confidence", "max_gpus", "max_nodes", "objective"):
        default = JobSpec.model_fields[field].get_default()
        shown = _help_default(help_text, flag(field))
        assert shown == (f"{default:g}" if isinstance(default, float) else str(default)), field
    assert _help_default(help_text, "--methods") == "all"  # JobSpec allows every method
    assert _help_default(help_text, "--eu-only") == "off"
    full = " ".join(CliRunner().invoke(cli, ["plan", "--help-all"]).output.split())
    for field in FIELDS:
        default = JobSpec.model_fields[field].get_default()
        if isinstance(default, int) and not isinstance(default, bool):
            assert f"[default: {default}]" in full, field
    assert "[default: the stack's]" in full  # loss, adapter dtype, offload ...: None in JobSpec
    for command in JOB_COMMANDS:
        args = [command, "skypilot", "--help"] if command == "export" else [command, "--help"]
        assert len(CliRunner().invoke(cli, args).output.splitlines()) <= 55, command


def test_an_untyped_option_leaves_the_job_file_and_jobspec_defaults(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "model: qwen3-4b\ntrain_tokens: 10M\nseq_len: 1024\nglobal_batch_size: 32\ndeadline_confidence: 0.8\n"
        "max_gpus: 8\nmethods: [lora]\nstack: torchtune\nflash_attention: false\ntrial_runs: 1\n"
    )
    data = parsed("--job", str(job))
    assert data["global_batch_size"] == 32 and data["deadline_confidence"] == 0.8 and data["max_gpus"] == 8
    assert data["methods"] == ["lora"] and data["stack"] == "torchtune" and data["flash_attention"] is False
    assert data["trial_runs"] == 1
    # Fields neither typed nor in the file keep JobSpec's default, not a copy held by the CLI.
    for field in ("max_nodes", "objective", "optimizer", "lora_rank", "markets", "eval_fraction", "loss"):
        assert data[field] == _json(JobSpec.model_fields[field].get_default()), field
    typed = parsed("--job", str(job), "--global-batch", "64", "--flash", "--methods", "qlora", "--max-gpus", "16")
    assert typed["global_batch_size"] == 64 and typed["flash_attention"] is True
    assert typed["methods"] == ["qlora"] and typed["max_gpus"] == 16 and typed["deadline_confidence"] == 0.8


def _json(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def test_the_plan_command_keeps_a_job_files_value_under_untyped_flags(tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text('model = "qwen3-4b"\ntrain_tokens = "10M"\nseq_len = 1024\nglobal_batch_size = 32\n')
    result = CliRunner().invoke(cli, ["plan", "--job", str(job), "--top", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["job"]["global_batch_size"] == 32


BASE = ["--model", "qwen3-4b", "--seq-len", "1024"]
OLD = [
    *["--tokens", "50M", "--global-batch", "32", "--deadline", "1.5d", "--budget", "$1.2k", "--trials", "2"],
    *["--failure-prob", "0.1", "--quota", "AWS=8,gcp=16", "--gpu", "h100-sxm,l40s", "--provider", "aws,gcp"],
    *["--region", "us-east-1", "--country", "de,uk", "--confidence", "0.95", "--time-value", "40"],
    *["--methods", "lora,qlora", "--markets", "on-demand", "--quantize-head", "--no-flash", "--eu-only"],
    *["--optimizer-in-backward", "--variable-length", "--loss", "chunked", "--stack", "torchtune"],
]
NEW = [
    *["--train-tokens", "50000000", "--global-batch-size", "32", "--deadline-hours", "36", "--budget-usd", "1200"],
    *["--trial-runs", "2", "--failure-probability", "0.1", "--gpu-quota", "aws=8,gcp=16", "--gpus", "h100-sxm,l40s"],
    *["--providers", "aws,gcp", "--regions", "us-east-1", "--countries", "DE,GB", "--deadline-confidence", "0.95"],
    *["--time-value-usd-per-hour", "40", "--methods", "lora,qlora", "--markets", "on-demand", "--quantized-head"],
    *["--no-flash-attention", "--eu-only", "--optimizer-in-backward", "--variable-length", "--loss", "chunked"],
    *["--stack", "torchtune"],
]


def test_old_spellings_parse_to_the_same_job() -> None:
    expected = JobSpec(
        model="qwen3-4b",
        seq_len=1024,
        train_tokens=50_000_000,
        global_batch_size=32,
        deadline_hours=36,
        budget_usd=1200,
        trial_runs=2,
        failure_probability=0.1,
        gpu_quota={"aws": 8, "gcp": 16},
        gpus=("h100-sxm", "l40s"),
        providers=("aws", "gcp"),
        regions=("us-east-1",),
        countries=("DE", "GB"),
        deadline_confidence=0.95,
        time_value_usd_per_hour=40,
        methods=("lora", "qlora"),
        markets=("on-demand",),
        quantized_head=True,
        flash_attention=False,
        eu_only=True,
        optimizer_in_backward=True,
        variable_length=True,
        loss="chunked",
        stack="torchtune",
    )
    assert JobSpec.model_validate(parsed(*BASE, *OLD)) == expected
    assert JobSpec.model_validate(parsed(*BASE, *NEW)) == expected


def test_every_estimate_option_that_describes_the_job_is_plannable() -> None:
    # Options of `estimate memory` that describe one configuration the planner searches over.
    configuration = {"config_path", "params", "method", "precision", "seq_len", "micro_batch", "grad_accum"}
    configuration |= {"n_gpus", "sharding", "ckpt", "gpu", "as_json", "chunked_loss"}  # --chunked-loss: --loss
    memory = cli.commands["estimate"].commands["memory"]  # type: ignore[attr-defined]
    describing = {p.name for p in memory.params} - configuration - {"model"}
    plan_options = {p.name for p in cli.commands["plan"].params}
    assert describing <= set(JobSpec.model_fields) & plan_options
    assert {f.name for f in dataclasses.fields(MemoryOptions)} <= describing
    job = parsed(*BASE, "--tokens", "10M", "--quant-kernel", "gptq", "--offload-params", "--train-embeddings")
    assert job["quant_kernel"] == "gptq" and job["offload_params"] is True and job["train_embeddings"] is True


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--deadline", "soon"], "invalid deadline"),
        (["--budget-usd", "-3"], "invalid budget"),
        (["--tokens", "lots"], "invalid tokens"),
        (["--gpu-quota", "aws"], "--quota"),
        (["--providers", ","], "invalid list"),
        (["--max-gpus", "many"], "--max-gpus"),
        (["--loss", "smooth"], "--loss"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(cli, ["plan", *BASE, "--tokens", "10M", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], result.output
