"""Catalog import, inspection commands and config.json reading (issue 7)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from model_configs import LLAMA_31_8B

import ftsolve
from ftsolve import CatalogError, UnsafeOutput
from ftsolve.catalog import arch_from_config, load_config_json
from ftsolve.catalog._import import user_catalog_path
from ftsolve.cli import cli

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
LAMBDA_V8 = SHARED / "skypilot_v8_lambda_vms.csv"
EXTRACT = SHARED / "skypilot_gpu_offers.csv"
needs_shared = pytest.mark.skipif(not LAMBDA_V8.exists(), reason="../shared/data not present")


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    monkeypatch.setenv("FTSOLVE_HOME", str(folder))
    return folder


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@needs_shared
def test_import_skypilot_v8_lambda_file_and_plan_with_it(home: Path) -> None:
    code, out = run("catalog", "import", str(LAMBDA_V8), "--provider", "lambda", "--price-date", "2026-09-20")
    assert code == 0, out
    assert "imported 357 offers" in out
    cat = ftsolve.load_catalog()
    imported = [o for o in cat.offers if "skypilot_v8_lambda_vms.csv" in o.source]
    assert len(imported) == 357
    assert {o.gpu for o in imported} >= {"h100-sxm", "a100-sxm-80gb", "b200", "gh200-96gb"}
    h100x8 = next(o for o in imported if o.instance_type == "gpu_8x_h100_sxm5" and o.region == "us-east-1")
    assert h100x8.on_demand_usd_per_gpu_hour == pytest.approx(3.99, abs=0.005)
    job = ftsolve.JobSpec(model="llama-3.1-8b", train_tokens=20_000_000, seq_len=2048, providers=("lambda",))
    plans = ftsolve.plan(job, cat)
    assert all("skypilot_v8_lambda_vms.csv" in p.offer.source for p in plans.plans)


@needs_shared
def test_import_compact_extract(home: Path) -> None:
    code, out = run("catalog", "import", str(EXTRACT), "--price-date", "2026-08-01")
    assert code == 0, out
    providers = {o.provider for o in ftsolve.load_catalog().offers if "skypilot_gpu_offers.csv" in o.source}
    assert {"aws", "lambda", "vast", "verda", "nebius"} <= providers


def _own_csv(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "mine.csv"
    p.write_text(
        "provider,tier,instance_type,gpu,gpus_per_node,on_demand_usd_per_gpu_hour,"
        "interruptible_usd_per_gpu_hour,region,price_date,source\n" + body
    )
    return p


def test_user_offers_override_bundled_and_appear_in_plans(home: Path, tmp_path: Path) -> None:
    bundled = next(o for o in ftsolve.load_catalog().offers if o.provider == "verda" and o.gpu == "h100-sxm")
    body = (
        f"{bundled.provider},{bundled.tier},{bundled.instance_type},h100-sxm,{bundled.gpus_per_node},"
        f"0.11,,{bundled.region},2026-11-20,negotiated contract\n"
    )
    code, out = run("catalog", "import", str(_own_csv(tmp_path, body)))
    assert code == 0, out
    cat = ftsolve.load_catalog()
    mine = [o for o in cat.offers if o.key == bundled.key]
    assert len(mine) == 1 and mine[0].on_demand_usd_per_gpu_hour == 0.11
    job = ftsolve.JobSpec(model="llama-3.1-8b", train_tokens=20_000_000, seq_len=2048, markets=("on-demand",))
    assert ftsolve.plan(job, cat, top=1).plans[0].offer.key == bundled.key


def test_yaml_offers(home: Path, tmp_path: Path) -> None:
    p = tmp_path / "mine.yaml"
    p.write_text(
        "offers:\n  - {provider: acme, tier: reserved, instance_type: r8, gpu: a100-sxm-80gb,\n"
        "     gpus_per_node: 8,\n"
        "     on_demand_usd_per_gpu_hour: 1.1, interruptible_usd_per_gpu_hour: null, region: eu-1,\n"
        "     country: DE, price_date: 2026-11-01, source: contract 2026-11}\n"
    )
    code, out = run("catalog", "import", str(p))
    assert code == 0, out
    assert any(o.provider == "acme" and o.country == "DE" for o in ftsolve.load_catalog().offers)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("acme,t,x,h100-sxm,8,abc,,eu,2026-11-01,s\n", "row 2: field on_demand_usd_per_gpu_hour"),
        ("acme,t,x,h100-sxm,8,-1,,eu,2026-11-01,s\n", "must be positive"),
        ("acme,t,x,h100-sxm,8,1.0,2.0,eu,2026-11-01,s\n", "above on-demand"),
        ("acme,t,x,h100-sxmm,8,1.0,,eu,2026-11-01,s\n", "Did you mean h100-sxm"),
        (
            "acme,t,x,h100-sxm,8,1.0,,eu,2026-11-01,s\nacme,t,x,h100-sxm,8,1.0,,eu,2026-11-01,s\n",
            "row 3: duplicate",
        ),
        ("acme,t,x,h100-sxm,8,1.0,,eu,yesterday,s\n", "field price_date"),
    ],
)
def test_failed_import_names_file_row_field_and_leaves_catalog_intact(
    home: Path, tmp_path: Path, body: str, message: str
) -> None:
    good = _own_csv(tmp_path, "acme,t,ok,h100-sxm,8,1.0,,eu,2026-11-01,s\n")
    assert run("catalog", "import", str(good))[0] == 0
    before = user_catalog_path().read_bytes()
    bad = tmp_path / "bad.csv"
    bad.write_text(_own_csv(tmp_path, body).read_text())
    code, out = run("catalog", "import", str(bad))
    assert code == 2
    assert "bad.csv" in out and message in out
    assert len(out.strip().splitlines()) == 1
    assert user_catalog_path().read_bytes() == before
    assert [p.name for p in home.iterdir() if not p.name.endswith(".lock")] == ["offers.csv"]


def test_a_crash_while_writing_leaves_the_old_catalog(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("catalog", "import", str(_own_csv(tmp_path, "acme,t,a,h100-sxm,8,1.0,,eu,2026-11-01,s\n")))[0] == 0
    before = user_catalog_path().read_bytes()

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(UnsafeOutput, match="No space left on device"):
        ftsolve.catalog._import.merge_into_user_catalog(
            ftsolve.catalog._import.read_user_offers(
                _own_csv(tmp_path, "acme,t,b,h100-sxm,8,2.0,,eu,2026-11-01,s\n"), ftsolve.catalog.load_gpus()
            ).offers,
            ftsolve.catalog.load_gpus(),
        )
    assert user_catalog_path().read_bytes() == before
    assert [p.name for p in home.iterdir() if not p.name.endswith(".lock")] == ["offers.csv"]


def test_skypilot_file_errors(home: Path, tmp_path: Path) -> None:
    p = tmp_path / "vms.csv"
    p.write_text("InstanceType,AcceleratorName,AcceleratorCount,Price,Region,SpotPrice\nx,H100,8,cheap,r,\n")
    code, out = run("catalog", "import", str(p), "--provider", "acme")
    assert code == 2 and "row 2: field Price" in out
    p.write_text("InstanceType,Accelerator,Price\nx,H100,1\n")
    code, out = run("catalog", "import", str(p))
    assert code == 2 and "unrecognised columns" in out


def test_catalog_list_filters_and_json(home: Path) -> None:
    code, out = run("catalog", "list", "--gpu", "h100-sxm", "--provider", "lambda", "--json")
    assert code == 0
    rows = json.loads(out)
    assert rows and all(r["gpu"] == "h100-sxm" and r["provider"] == "lambda" for r in rows)
    code, out = run("catalog", "list", "--min-memory", "140", "--json", "--max-age-days", "100000")
    big = {"h200-sxm", "b200", "b300", "gb200", "mi300x", "mi325x", "h200-nvl", "gh200-144gb"}
    assert all(r["gpu"] in big for r in json.loads(out))
    code, out = run("catalog", "list", "--gpu", "h100-sxmm")
    assert code == 2 and "Did you mean h100-sxm" in out


def test_catalog_list_warns_about_old_prices(home: Path) -> None:
    result = CliRunner().invoke(cli, ["catalog", "list", "--max-age-days", "1"])
    assert result.exit_code == 0
    assert "older than 1 days" in result.output


def test_catalog_show_gpu_spelling_and_offer(home: Path) -> None:
    code, out = run("catalog", "show", "A100-80GB-SXM", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["name"] == "a100-sxm-80gb" and data["software_stack"] == "CUDA" and data["offers"] > 0
    offer = next(o for o in ftsolve.load_catalog().offers if o.provider == "runpod")
    code, out = run("catalog", "show", offer.key, "--json")
    assert code == 0 and "interruption_source" in json.loads(out)["effective"]
    code, out = run("catalog", "show", "zzz-9000")
    assert code == 2


def test_models_show_preset_and_config_json(tmp_path: Path) -> None:
    code, out = run("models", "show", "mixtral-8x7b", "--json")
    assert code == 0 and json.loads(out)["num_experts"] == 8
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "mixtral",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "intermediate_size": 14336,
                "vocab_size": 32000,
                "num_local_experts": 8,
                "num_experts_per_tok": 2,
                "tie_word_embeddings": False,
            }
        )
    )
    code, out = run("models", "show", "--config", str(cfg), "--json")
    assert code == 0
    assert json.loads(out)["total_params"] == ftsolve.load_catalog().model("mixtral-8x7b").total_params()


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"hidden_size": 4096}, "missing field model_type"),
        (
            {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000},
            "missing field num_attention_heads",
        ),
        (
            {
                "model_type": "llama",
                "hidden_size": "big",
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "vocab_size": 32000,
                "intermediate_size": 11008,
            },
            "field hidden_size",
        ),
        (
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "vocab_size": 32000,
            },
            "missing field intermediate_size",
        ),
    ],
)
def test_bad_config_json_gets_one_line(tmp_path: Path, cfg: dict[str, object], message: str) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(CatalogError, match=message):
        load_config_json(p)
    code, out = run("models", "show", "--config", str(p))
    assert code == 2 and message in out and len(out.strip().splitlines()) == 1
    p.write_text("{not json")
    code, out = run("models", "show", "--config", str(p))
    assert code == 2 and "not valid JSON" in out


def test_config_json_matches_presets() -> None:
    cat = ftsolve.load_catalog()
    assert arch_from_config(LLAMA_31_8B, "x").total_params() == cat.model("llama-3.1-8b").total_params()
    qwen = {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    }
    assert arch_from_config(qwen, "x").total_params() == cat.model("qwen2.5-7b").total_params()
    gemma = {
        "model_type": "gemma2",
        "hidden_size": 3584,
        "num_hidden_layers": 42,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "intermediate_size": 14336,
        "vocab_size": 256000,
    }
    assert arch_from_config(gemma, "x").total_params() == cat.model("gemma-2-9b").total_params()
