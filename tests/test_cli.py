"""The `ftsolve` command line, driven through click's test runner."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ftsolve.cli import cli

README_JOB = [
    "plan",
    "--model",
    "llama-3.1-8b",
    "--tokens",
    "50M",
    "--seq-len",
    "2048",
    "--deadline",
    "24h",
    "--budget",
    "300",
]


def test_plan_prints_a_ranked_table() -> None:
    result = CliRunner().invoke(cli, README_JOB)
    assert result.exit_code == 0, result.output
    assert "llama-3.1-8b" in result.output
    for column in ("offer", "GPUs", "method", "market", "mem/GPU", "hours", "cost USD"):
        assert column in result.output
    assert "cheapest expected total cost" in result.output


def test_plan_json_matches_library_plans() -> None:
    import ftsolve

    result = CliRunner().invoke(cli, [*README_JOB, "--json"])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["schema_version"] == 1
    job = ftsolve.JobSpec(
        model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24, budget_usd=300
    )
    lib = ftsolve.plan(job)
    assert [p["total_cost_usd"] for p in data["plans"]] == [p.total_cost_usd for p in lib.plans]
    assert data["plans"][0]["memory"]["peak_gib"] <= data["plans"][0]["memory"]["usable_gib"]
    assert data["plans"][0]["time"]["expected_hours"] > 0


def test_engines_print_the_same_plans() -> None:
    scan = CliRunner().invoke(cli, [*README_JOB, "--json", "--engine", "scan"])
    cpsat = CliRunner().invoke(cli, [*README_JOB, "--json", "--engine", "cpsat"])
    assert json.loads(scan.output)["plans"] == json.loads(cpsat.output)["plans"]


def test_infeasible_budget_exits_1_with_the_reason_and_no_traceback() -> None:
    result = CliRunner().invoke(cli, [*README_JOB[:-1], "0.05"])
    assert result.exit_code == 1
    assert "budget" in result.output
    assert "budget >=" in result.output
    assert "Traceback" not in result.output


def test_bad_inputs_exit_2_with_one_line() -> None:
    cases = [
        (["--tokens", "-5"], "invalid tokens"),
        (["--budget", "-3"], "invalid budget"),
        (["--deadline", "soon"], "invalid deadline"),
        (["--model", "llama-3.1-9b"], "Did you mean"),
        (["--methods", "fulll"], "invalid methods"),
    ]
    for (flag, value), expected in cases:
        options = dict(zip(README_JOB[1::2], README_JOB[2::2], strict=True))
        options[flag] = value
        args = ["plan", *(x for kv in options.items() for x in kv)]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, (flag, value, result.output)
        assert expected in result.output, (flag, value, result.output)
        assert "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_models_list() -> None:
    result = CliRunner().invoke(cli, ["models", "list", "--json"])
    assert result.exit_code == 0
    names = {m["name"] for m in json.loads(result.output)}
    assert {"llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "mistral-7b"} <= names


def test_plan_warns_when_a_price_is_older_than_the_threshold() -> None:
    result = CliRunner().invoke(cli, [*README_JOB, "--max-age-days", "1"])
    assert result.exit_code == 0
    assert "days old" in result.output and "ftsolve catalog import" in result.output
    fresh = CliRunner().invoke(cli, [*README_JOB, "--max-age-days", "100000"])
    assert "days old" not in fresh.output


def test_models_list_by_family() -> None:
    result = CliRunner().invoke(cli, ["models", "list", "--family", "qwen3", "--json"])
    assert result.exit_code == 0
    assert {m["family"] for m in json.loads(result.output)} == {"qwen3"}
