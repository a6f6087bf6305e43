"""AMD Instinct offers in the bundled catalog (issue 15, item 3): every one dated, sourced, of a stated
price kind and located; those no launcher can start say why and are refused by the SkyPilot export;
an MI300X or MI325X LoRA job gets a plan. The offers the shared snapshots lack come from the project's
data/extra_offers.csv through scripts/build_offers.py, with the checks the shared file gets."""

from __future__ import annotations

import collections
import csv
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import build_offers

import ftsolve
from ftsolve import InvalidJobSpec, JobSpec
from ftsolve._exports import export_plan, skypilot_problem
from ftsolve._exports._text import clean
from ftsolve.catalog import load_gpus
from ftsolve.catalog._load import _bundled_offers, _offer_from_row
from ftsolve.catalog._models import PRICE_KINDS
from ftsolve.solver._hardware import usable_gib

ROOT = Path(__file__).resolve().parents[1]
PROJECT_EXTRA = ROOT / "data" / "extra_offers.csv"
SHARED_EXTRA = ROOT.parent / "shared" / "data" / "extra_gpu_prices.csv"
GPUS = load_gpus()
BUNDLED = _bundled_offers(GPUS)
CATALOG = ftsolve.load_catalog(user=False)
AMD = [o for o in BUNDLED if GPUS[o.gpu].vendor == "amd"]
JOB = JobSpec(
    model="llama-3.1-8b",
    train_tokens=50_000_000,
    seq_len=2048,
    deadline_hours=24,
    budget_usd=300,
    methods=("lora",),
)


def _project_rows() -> list[dict[str, str]]:
    with open(PROJECT_EXTRA, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# --- the data file and the build ---------------------------------------------------------------


def test_the_project_file_has_exactly_the_columns_of_the_shared_extra_prices() -> None:
    with open(PROJECT_EXTRA, newline="", encoding="utf-8") as f:
        assert tuple(csv.DictReader(f).fieldnames or ()) == build_offers.EXTRA_COLUMNS
    if SHARED_EXTRA.exists():
        with open(SHARED_EXTRA, newline="", encoding="utf-8") as f:
            assert tuple(csv.DictReader(f).fieldnames or ()) == build_offers.EXTRA_COLUMNS


def test_the_bundled_catalog_holds_every_project_offer_as_the_build_makes_it() -> None:
    # Same path as the build (extra_rows, then the loader's own row check), compared field by field with
    # the bundled offers.csv: a data/extra_offers.csv edit without a rebuild fails here.
    skipped: collections.Counter[str] = collections.Counter()
    mem = {name: g.memory_gib for name, g in GPUS.items()}
    rows = build_offers.extra_rows(PROJECT_EXTRA, GPUS, mem, skipped)
    assert not skipped and len(rows) == len(_project_rows())
    bundled = {o.key: o for o in BUNDLED}
    lines = []
    for at, row in rows:
        lines.append(int(at.removeprefix("extra_offers.csv, line ")))  # errors name the file's own line
        built = _offer_from_row(row, at, GPUS)
        assert bundled.get(built.key) == built, at
    assert lines == list(range(2, len(rows) + 2))


def test_every_project_offer_keeps_its_row_s_provenance_and_per_gpu_price() -> None:
    by_key = {(o.provider, o.instance_type, o.region): o for o in BUNDLED}
    for row in _project_rows():
        o = by_key[(row["provider"], row["instance_type"], row["region"])]
        assert o.source == row["source"] and o.price_date.isoformat() == row["price_date"]
        assert o.country == row["country"] and o.notes.startswith(row["notes"])
        n = int(row["gpus_per_instance"])
        assert o.gpus_per_node == n
        assert o.on_demand_usd_per_gpu_hour == pytest.approx(float(row["on_demand_usd_per_instance_hour"]) / n)
        spot = row["spot_usd_per_instance_hour"]
        assert o.interruptible_usd_per_gpu_hour == (pytest.approx(float(spot) / n) if spot else None)


def test_a_project_row_is_refused_as_a_shared_one_would_be(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = {name: g.memory_gib for name, g in GPUS.items()}
    header = ",".join(build_offers.EXTRA_COLUMNS)
    path = tmp_path / "extra_offers.csv"
    monkeypatch.setattr(build_offers, "PROJECT_EXTRA", path)
    cases = {
        # a provider without stated price kinds
        "acme,on-demand,x1,MI300X 192GB,1,2.0,,per-hour,r1,US,,2026-09-01,page,": "EXTRA_KINDS",
        # notes the build would cut
        "crusoe,on-demand,x1,MI300X 192GB,1,2.0,,per-hour,r1,US,,2026-09-01,page," + "n" * 301: "notes longer",
    }
    for line, message in cases.items():
        path.write_text(f"{header}\n{line}\n")
        with pytest.raises(SystemExit, match=message):
            build_offers.extra_rows(path, GPUS, mem, collections.Counter())
    path.write_text("provider,gpu\ncrusoe,MI300X\n")
    with pytest.raises(SystemExit, match="expected the columns"):
        build_offers.extra_rows(path, GPUS, mem, collections.Counter())


# --- the AMD offers --------------------------------------------------------------------------------


def test_the_catalog_prices_mi300x_and_mi325x_at_several_providers() -> None:
    providers = collections.defaultdict(set)
    for o in AMD:
        providers[o.gpu].add(o.provider)
    assert len(providers["mi300x"]) >= 3 and providers["mi325x"]
    assert "mi250x" not in providers  # no primary hourly price (data/OFFERS.md)


def test_every_amd_offer_has_a_price_kind_date_source_and_country() -> None:
    no_country = []
    for o in AMD:
        assert o.price_kind in PRICE_KINDS and o.interruptible_price_kind in PRICE_KINDS, o.key
        assert o.price_date.year >= 2025 and not o.price_date_estimated, o.key
        assert o.source.strip(), o.key
        if o.country is None:
            no_country.append(o)
        else:
            assert re.fullmatch(r"[A-Z]{2}", o.country), o.key
    # Only RunPod's tier price, whose data centre RunPod chooses, has no country; it cannot be launched.
    assert all(o.provider == "runpod" and o.region.startswith("any") and not o.launchable for o in no_country)


def test_not_launchable_amd_offers_say_why_and_the_skypilot_export_refuses_them() -> None:
    refused = 0
    for provider in sorted({o.provider for o in AMD if not o.launchable}):
        job = JOB.model_copy(update={"providers": (provider,), "gpus": ("mi300x", "mi325x")})
        for p in ftsolve.plan(job, CATALOG, top=3).plans:
            offer = p.offer
            assert not offer.launchable and offer.not_launchable_reason.strip(), offer.key
            with pytest.raises(InvalidJobSpec, match="cannot be exported as a SkyPilot task") as err:
                export_plan("skypilot", p, job, CATALOG)
            assert f"the catalog marks it not launchable ({clean(offer.not_launchable_reason, 120)})" in str(err.value)
            refused += 1
    assert refused >= 3
    # The reasons of the project's offers fit the refusal whole.
    project = {(r["provider"], r["instance_type"], r["region"]) for r in _project_rows()}
    for o in AMD:
        if (o.provider, o.instance_type, o.region) in project and not o.launchable:
            assert len(o.not_launchable_reason) <= 120, o.key


def test_a_crusoe_offer_in_crusoe_s_own_spelling_is_refused_for_its_cloud_not_its_names() -> None:
    (crusoe,) = [o for o in AMD if o.provider == "crusoe"]
    assert not crusoe.launchable and crusoe.region == "us-east1-a"
    assert "SkyPilot 0.14.1 has no crusoe cloud" in crusoe.not_launchable_reason
    problem = skypilot_problem(crusoe)
    assert problem is not None and "not launchable" in problem and "no crusoe cloud" in problem


# --- plans -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["mi300x", "mi325x"])
def test_a_lora_job_gets_a_plan_on_each_amd_gpu(gpu: str) -> None:
    plans = ftsolve.plan(JOB.model_copy(update={"gpus": (gpu,)}), CATALOG).plans
    assert plans
    best = plans[0]
    offered = {o.key for o in AMD if o.gpu == gpu}
    assert best.gpu == gpu and best.method == "lora" and best.offer.key in offered
    assert JOB.budget_usd is not None and JOB.deadline_hours is not None
    assert best.total_cost_usd <= JOB.budget_usd
    assert best.time.expected_hours <= JOB.deadline_hours
    # The usable memory is the planner's figure for the GPU: the device total less the driver's share,
    # or (MI325X, whose total no source reports) 98% of the nominal 256 GiB.
    assert best.memory.usable_gib == pytest.approx(usable_gib(GPUS[gpu]))
    assert best.memory.peak_gib < best.memory.usable_gib


def test_mi325x_usable_memory_comes_from_its_nominal_size_until_a_device_total_is_sourced() -> None:
    from ftsolve.solver._coefficients import USABLE_MEMORY_FRACTION

    mi325x, mi300x = GPUS["mi325x"], GPUS["mi300x"]
    assert mi325x.visible_memory_mib is None and mi300x.visible_memory_mib is not None
    assert usable_gib(mi325x) == pytest.approx(256 * USABLE_MEMORY_FRACTION.value)
    assert usable_gib(mi300x) < mi300x.memory_gib


def test_the_cli_plans_an_mi325x_lora_job_and_names_the_price_source() -> None:
    from click.testing import CliRunner

    from ftsolve.cli import cli

    args = ["plan", "--model", "llama-3.1-8b", "--train-tokens", "50M", "--seq-len", "2048"]
    args += ["--deadline-hours", "24h", "--budget-usd", "300", "--gpus", "mi325x", "--methods", "lora"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "mi325x" in result.output and "lora" in result.output
    assert "digitalocean.com/pricing/gpu-droplets" in result.output.replace("\n", "")
