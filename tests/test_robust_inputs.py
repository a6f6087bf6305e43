"""Hostile and careless job input (issue 17): every reproducer is refused in one line with exit 2,
or planned with finite, non-negative, checked figures; never a traceback or a wrapped cost."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

import ftsolve
from ftsolve import InvalidJobSpec, JobSpec, NoFeasiblePlan, check_plan
from ftsolve.cli import cli
from ftsolve.solver._cost import MAX_CENTS, _cents

BASE = ["--model", "qwen3-4b", "--tokens", "10M", "--seq-len", "1024"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def assert_one_line_exit_2(result: Result, *needles: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output[:500]
    for needle in needles:
        assert needle in lines[0]


def alias_bomb(levels: int = 9) -> str:
    text = 'model: qwen3-4b\na: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for name in "bcdefghijk"[: levels - 1]:
        text += f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]\n"
        prev = name
    return text


@pytest.mark.parametrize("levels", [6, 9])
def test_a_yaml_alias_bomb_job_file_is_refused_in_one_line(tmp_path: Path, levels: int) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(alias_bomb(levels))
    result = invoke("plan", "--job", str(job), "--tokens", "10M", "--seq-len", "512")
    # Six levels expand to 531k nodes (within the budget) and then fail as unknown fields: one line.
    assert_one_line_exit_2(result, str(job))
    assert "lol" not in result.output


def test_an_endless_or_binary_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    assert_one_line_exit_2(invoke("plan", "--job", "/dev/zero", *BASE[2:]), "larger than")
    assert_one_line_exit_2(invoke("plan", "--config", "/dev/zero", *BASE[2:]), "larger than")
    binary = tmp_path / "job.yaml"
    binary.write_bytes(b"model: qwen3-4b\nsecret: \xff\xfe top secret\n")
    result = invoke("plan", "--job", str(binary), *BASE[2:])
    assert_one_line_exit_2(result, "not UTF-8")
    assert "secret" not in result.output
    bad_config = tmp_path / "config.json"
    bad_config.write_bytes(b"\x80\x81")
    assert_one_line_exit_2(invoke("plan", "--config", str(bad_config), *BASE[2:]), "not UTF-8")


def test_an_unknown_field_is_named_but_the_file_is_not_echoed(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("model: qwen3-4b\n" + "x" * 1000 + ": 1\n")
    result = invoke("plan", "--job", str(job), *BASE[2:])
    assert_one_line_exit_2(result, "unknown field")
    assert len(result.output) < 300


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--tokens", "1e400"), ("--budget", "9" * 400), ("--deadline", "9" * 400), ("--tokens", "1" * 400)],
)
def test_numbers_too_large_for_a_float_are_refused(flag: str, value: str) -> None:
    args = [*BASE, flag, value] if flag != "--tokens" else ["--model", "qwen3-4b", "--seq-len", "512", flag, value]
    assert_one_line_exit_2(invoke("plan", *args), "invalid")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dataset_gb", math.inf),
        ("download_mb_per_s", 1e-300),
        ("train_tokens", 10**30),
        ("time_value_usd_per_hour", 1e15),
        ("time_value_usd_per_hour", math.inf),
        ("lora_dropout", math.nan),
        ("deadline_hours", True),
        ("seq_len", True),
        ("gpu_quota", {"aws": -1}),
        ("gpu_quota", {"": 5}),
        ("countries", ("Deutschland",)),
        ("budget_usd", math.nan),
    ],
)
def test_library_jobs_refuse_non_finite_absurd_and_mistyped_values(field: str, value: object) -> None:
    fields: dict[str, object] = {"model": "qwen3-4b", "train_tokens": 10**7, "seq_len": 512, field: value}
    with pytest.raises(InvalidJobSpec) as err:
        JobSpec.build(**fields)
    assert field in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "args",
    [
        ["--objective", "weighted", "--time-value", "1e15"],
        ["--objective", "weighted", "--time-value", "inf"],
        ["--lora-rank", "0"],
        ["--quota", "=5"],
        ["--quota", "aws=-1"],
        ["--confidence", "nan"],
    ],
)
def test_cli_refuses_absurd_flags(args: list[str]) -> None:
    assert_one_line_exit_2(invoke("plan", *BASE, *args), "invalid")


def test_pareto_needs_at_least_two_points_and_explains_when_nothing_fits() -> None:
    assert_one_line_exit_2(invoke("pareto", *BASE, "--points", "0"), "points")
    result = invoke(
        "pareto",
        "--model",
        "llama-3.1-405b",
        "--tokens",
        "1B",
        "--seq-len",
        "512",
        "--max-gpus",
        "1",
        "--gpu",
        "rtx-4090",
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1
    assert "No feasible plan" in result.output


def test_country_codes_are_normalized_so_lowercase_matches() -> None:
    job = JobSpec(model="qwen3-4b", train_tokens=10**7, seq_len=512, countries=("de", "uk"))
    assert job.countries == ("DE", "GB")
    result = ftsolve.plan(job.model_copy(update={"countries": ("DE",)}), top=1)
    assert result.plans[0].offer.country == "DE"


def test_cents_conversion_clips_instead_of_wrapping() -> None:
    cents = _cents(np.array([1.234, np.inf, np.nan, 1e30, -1e30]))
    assert cents.tolist() == [123, MAX_CENTS, MAX_CENTS, MAX_CENTS, -MAX_CENTS]
    assert (cents.astype(np.int64) * 10).min() > np.iinfo(np.int64).min  # ten items still sum safely


def test_a_405b_job_on_512_gpus_plans_with_finite_checked_figures() -> None:
    job = JobSpec(model="llama-3.1-405b", train_tokens=10**9, seq_len=512, max_gpus=512, max_nodes=64)
    result = ftsolve.plan(job, top=3)
    for p in result.plans:
        assert 0 < p.total_cost_usd < 1e9
        assert 0 < p.time.expected_hours < 1e6
        assert check_plan(job, ftsolve.load_catalog(), p) == []


def test_an_impossible_job_is_explained_not_crashed() -> None:
    job = JobSpec(model="qwen3-4b", train_tokens=10**15, seq_len=32768, deadline_hours=1, methods=("lora", "qlora"))
    with pytest.raises(NoFeasiblePlan) as err:
        ftsolve.plan(job)
    assert "deadline" in str(err.value)


def test_check_plan_rejects_negative_figures() -> None:
    job = JobSpec(model="qwen3-4b", train_tokens=10**7, seq_len=512)
    p = ftsolve.plan(job, top=1).plans[0]
    first = p.cost_items[0]
    shifted = (first.model_copy(update={"usd": -1.0}), *p.cost_items[1:])
    bad = p.model_copy(update={"cost_items": shifted, "slack": {**p.slack, "memory_gib": -0.5}})
    problems = check_plan(job, ftsolve.load_catalog(), bad)
    assert any("is -1.0" in x for x in problems)
    assert any("slack memory_gib is -0.5" in x for x in problems)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["estimate", "memory", "--model", "qwen3-4b", "--method", "lora", "--lora-rank", "0"], "lora_rank"),
        (["estimate", "memory", "--model", "qwen3-4b", "--method", "lora", "--lora-dropout", "nan"], "lora_dropout"),
        (
            ["estimate", "time", "--model", "qwen3-4b", "--gpu", "h100-sxm", "--gpus", "16", "--network-gbit", "-1"],
            "inter_node_gbit_per_s",
        ),
    ],
)
def test_estimates_refuse_values_no_run_has(args: list[str], field: str) -> None:
    assert_one_line_exit_2(invoke(*args), field)


@pytest.mark.parametrize(
    "args", [["plan", "--lora-rank", "stray"], ["plann"], ["plan", "--stack", "nope"], ["export", "excel"]]
)
def test_usage_errors_are_one_line_with_where_to_look(args: list[str]) -> None:
    result = invoke(*args)
    assert_one_line_exit_2(result, "Error:", "--help")


def test_integers_too_long_to_print_and_names_too_long_for_a_path(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"hidden_size": ' + "9" * 5000 + "}")
    assert_one_line_exit_2(invoke("plan", "--config", str(config), *BASE[2:]), "numbers too long")
    job = tmp_path / "job.toml"
    job.write_text("train_tokens = " + "9" * 5000 + "\n")
    assert_one_line_exit_2(invoke("plan", "--job", str(job), "--model", "qwen3-4b", "--seq-len", "512"), "TOML")
    assert_one_line_exit_2(invoke("estimate", "memory", "--model", "9" * 400), "unknown model")
    assert_one_line_exit_2(invoke("plan", *BASE, "--quota", "aws=\u00b2"), "--quota")


def test_architectures_beyond_any_real_model_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 10,000,000"):
        ftsolve.ModelArch(
            name="tiny", family="llama", hidden_size=10**400, num_layers=2, num_heads=4, num_kv_heads=4,
            intermediate_size=128, vocab_size=1000,
        )  # fmt: skip
    with pytest.raises(InvalidJobSpec, match="real_token_fraction"):
        JobSpec.build(model="qwen3-4b", train_tokens=10**7, seq_len=512, real_token_fraction=1e-300)


def test_every_plan_within_a_margin_is_the_same_from_both_engines() -> None:
    job = JobSpec(model="qwen3-4b", train_tokens=10**7, seq_len=512, gpus=("h100-sxm", "l40s"))
    scan = ftsolve.plan(job, within=0.5, engine="scan")
    cpsat = ftsolve.plan(job, within=0.5, engine="cpsat")
    assert len(scan.plans) > 5
    assert [p.model_dump() for p in scan.plans] == [p.model_dump() for p in cpsat.plans]


def test_large_caps_score_launchable_node_counts_only() -> None:
    from ftsolve.solver._grid import build_candidates, launchable_node_counts

    assert launchable_node_counts(4).tolist() == [1, 2, 3, 4]
    assert launchable_node_counts(100).tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96]
    job = JobSpec(model="llama-3.1-70b", train_tokens=10**8, seq_len=2048, max_gpus=4096, max_nodes=512)
    table = build_candidates(job, ftsolve.load_catalog())
    assert set(np.unique(table.nodes).tolist()) <= set(launchable_node_counts(512).tolist())
    assert len(table) < 400_000


def test_formula_text_is_written_as_text_and_read_back_unchanged(tmp_path: Path) -> None:
    from ftsolve.catalog import load_gpus
    from ftsolve.catalog._import import offers_to_csv
    from ftsolve.catalog._load import parse_offers

    src = tmp_path / "mine.csv"
    src.write_text(
        "provider,tier,instance_type,gpu,gpus_per_node,on_demand_usd_per_gpu_hour,"
        "interruptible_usd_per_gpu_hour,region,price_date,source,notes\n"
        'acme,t,=HYPERLINK("http://x"),h100-sxm,8,2.5,,eu,2026-11-01,@src,+1 -2\n'
    )
    offers = parse_offers(src.read_text(), "mine.csv", load_gpus())
    text = offers_to_csv(offers)
    assert "'=HYPERLINK" in text and ",'@src," in text and ",'+1 -2" in text
    assert ",=" not in text and ",2.5," in text  # numbers are not escaped
    assert parse_offers(text, "again.csv", load_gpus()) == offers


def test_export_out_refuses_links_and_keeps_a_files_mode(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "task.yaml"
    link.symlink_to(target)
    result = invoke("export", "skypilot", *BASE, "--out", str(link))
    assert_one_line_exit_2(result, "symbolic link")
    assert target.read_text() == "keep me"
    private = tmp_path / "private.yaml"
    private.write_text("old")
    private.chmod(0o600)
    assert invoke("export", "skypilot", *BASE, "--out", str(private)).exit_code == 0
    assert private.stat().st_mode & 0o777 == 0o600
    assert "ftsolve plan 1" in private.read_text()


def test_a_huge_job_file_is_refused_by_size_and_content_is_never_echoed(tmp_path: Path) -> None:
    big = tmp_path / "job.yaml"
    big.write_text("model: qwen3-4b\nnotes: " + "x" * (4 * 1024 * 1024) + "\n")
    assert_one_line_exit_2(invoke("plan", "--job", str(big)), "larger than 1 MiB")
    shadow = tmp_path / "shadow"
    shadow.write_text("root:$6$secretsecret:19000:0:99999:7:::\nbin:*:19000\n")
    result = invoke("plan", "--job", str(shadow), *BASE[2:])
    assert_one_line_exit_2(result, "not valid YAML")
    assert "secret" not in result.output
    assert_one_line_exit_2(invoke("estimate", "memory", "--params", "1e30"), "parameter count")
