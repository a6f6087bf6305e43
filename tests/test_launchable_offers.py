"""Launchable means SkyPilot 0.14.1 can launch it: the bundled catalog marks launchable only offers of
SkyPilot clouds and, for Azure and GCP, only sizes and regions SkyPilot's catalogs have (scripts/build_offers.py
`skypilot_reason`, data/OFFERS.md "Launchable with SkyPilot 0.14.1"); the SkyPilot export of an Azure
Standard_ND96isr_H100_v5 plan runs one process per real GPU although SkyPilot's catalog says 12."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import build_offers

import ftsolve
from ftsolve import InvalidJobSpec, JobSpec, Plan
from ftsolve._exports import export_plan, skypilot_problem
from ftsolve._exports._launch import SKYPILOT_CLOUDS, SKYPILOT_VERSION
from ftsolve.catalog import load_gpus
from ftsolve.catalog._load import _bundled_offers

ROOT = Path(__file__).resolve().parents[1]
GPUS = load_gpus()
BUNDLED = _bundled_offers(GPUS)
CATALOG = ftsolve.load_catalog(user=False)

# The (size, region) pairs of the bundled Azure offers that SkyPilot's Azure catalog has: rows of
# coopslarhette/skypilot-catalog catalogs/v8/azure/vms.csv @20291d7e (and upstream catalogs/v6 @098741e7).
VERIFIED_AZURE = {
    *(
        (size, "eastus")
        for size in (
            "Standard_NC24ads_A100_v4",
            "Standard_NC48ads_A100_v4",
            "Standard_NC96ads_A100_v4",
            "Standard_NC40ads_H100_v5",
            "Standard_NC80adis_H100_v5",
            "Standard_ND96amsr_A100_v4",
            "Standard_ND96asr_v4",
            "Standard_ND96isr_H100_v5",
        )
    ),
    *(
        (size, "westus2")
        for size in (
            "Standard_NC24ads_A100_v4",
            "Standard_NC48ads_A100_v4",
            "Standard_NC96ads_A100_v4",
            "Standard_ND96asr_v4",
        )
    ),
}
# sky/catalog/data_fetchers/fetch_azure.py US_REGIONS; SkyPilot issue #6848.
AZURE_US_REGIONS = {
    "centralus",
    "eastus",
    "eastus2",
    "northcentralus",
    "southcentralus",
    "westcentralus",
    "westus",
    "westus2",
    "westus3",
}
# The catalog row, verbatim (coopslarhette/skypilot-catalog catalogs/v8/azure/vms.csv @20291d7e).
ND96ISR_H100_ROW = "Standard_ND96isr_H100_v5,H100,12,96.0,1900,H100,98.32,98.32,eastus,V2"
AZURE_VMS_HEADER = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,Generation"
)


# --- the bundled catalog -----------------------------------------------------------------------


def test_launchable_azure_offers_are_exactly_the_ones_skypilot_s_azure_catalog_has() -> None:
    azure = [o for o in BUNDLED if o.provider == "azure"]
    launchable = {(o.instance_type, o.region) for o in azure if o.launchable}
    assert launchable == VERIFIED_AZURE
    for o in azure:
        if o.launchable:
            assert o.region in AZURE_US_REGIONS, o.key
            assert not any(f in o.instance_type for f in ("H200", "GB200", "MI300X")), o.key
        else:
            assert o.not_launchable_reason.strip(), o.key
    by_reason = {o.not_launchable_reason for o in azure if not o.launchable}
    assert "SkyPilot 0.14.1's Azure catalog has no Standard_ND96isr_H200_v5 (its Azure fetcher has no H200 family)" in (
        by_reason
    )
    assert any("covers US regions only" in r for r in by_reason)


def test_no_launchable_offer_belongs_to_a_provider_skypilot_cannot_launch() -> None:
    assert not {o.provider for o in BUNDLED if o.launchable} - SKYPILOT_CLOUDS
    for provider in ("hyperstack", "jarvislabs", "crusoe", "scaleway"):
        offers = [o for o in BUNDLED if o.provider == provider]
        assert offers, provider
        for o in offers:
            assert (
                not o.launchable and f"SkyPilot {SKYPILOT_VERSION} has no {provider} cloud" in o.not_launchable_reason
            )


def test_skypilot_clouds_are_clouds_of_the_installed_skypilot() -> None:
    sky = pytest.importorskip("sky")
    from sky.utils import registry

    assert sky.__version__ == SKYPILOT_VERSION
    assert set(SKYPILOT_CLOUDS) <= set(registry.CLOUD_REGISTRY)
    assert not {"hyperstack", "jarvislabs", "crusoe", "scaleway"} & set(registry.CLOUD_REGISTRY)


def test_the_rule_s_reasons_fit_the_export_refusal_whole() -> None:
    # The export quotes a reason up to 120 characters (skypilot_problem); the rule's reasons fit.
    marked = 0
    for o in BUNDLED:
        if not o.launchable and o.not_launchable_reason == build_offers.skypilot_reason(
            o.provider, o.instance_type, o.region
        ):
            assert skypilot_problem(o) == f"the catalog marks it not launchable ({o.not_launchable_reason})", o.key
            marked += 1
    assert marked == 120  # 36 Azure and 44 GCP offers, 40 of providers SkyPilot 0.14.1 has no cloud for


def test_the_build_rule_keeps_an_earlier_reason_and_refuses_an_unknown_azure_size() -> None:
    assert build_offers.skypilot_reason("lambda", "gpu_1x_h100_sxm5", "us-east-1") == ""
    assert build_offers.skypilot_reason("azure", "Standard_ND96isr_H100_v5", "eastus") == ""
    assert "only in eastus, eastus2, westus" in build_offers.skypilot_reason(
        "azure", "Standard_ND96isr_H100_v5", "westus2"
    )
    assert "US regions only" in build_offers.skypilot_reason("azure", "Standard_ND96asr_v4", "westeurope")
    with pytest.raises(SystemExit, match="SKYPILOT_AZURE_SIZES"):
        build_offers.skypilot_reason("azure", "Standard_NC8as_T4_v3", "eastus")
    mi300x = next(o for o in BUNDLED if o.instance_type == "Standard_ND96isr_MI300X_v5")
    assert mi300x.not_launchable_reason.startswith("SkyPilot 0.14.1 knows no accelerator for Azure MI300X")


# The bundled GCP offers SkyPilot's GCP catalog has no row for (skypilot-catalog catalogs/v8/gcp/vms.csv
# @006059e0, data/OFFERS.md): instance-type prefix -> the bundled regions it lacks (None: every region).
GCP_MISSING = {
    "a2-highgpu-": {"europe-west1", "us-east4", "us-east5"},
    "a2-megagpu-": {"europe-west1", "us-east4", "us-east5"},
    "a2-ultragpu-": {"europe-west1"},
    "g2-standard-": {"us-east5"},
    "g4-standard-": None,
}


def test_launchable_gcp_offers_are_in_the_regions_skypilot_s_gcp_catalog_has_them_in() -> None:
    gcp = [o for o in BUNDLED if o.provider == "gcp"]
    assert len(gcp) == 115
    for o in gcp:
        prefix = next((p for p in GCP_MISSING if o.instance_type.startswith(p)), None)
        lacking = GCP_MISSING.get(prefix or "", set())
        missing = prefix is not None and (lacking is None or o.region in lacking)
        assert o.launchable is not missing, o.key
        if missing:
            assert o.not_launchable_reason.startswith("SkyPilot's GCP catalog (catalogs/v8/gcp/vms.csv) has no")
    assert sum(not o.launchable for o in gcp) == 44
    with pytest.raises(SystemExit, match="SKYPILOT_GCP_TYPES"):
        build_offers.skypilot_reason("gcp", "n1-standard-8", "us-central1")


# --- the SkyPilot export -----------------------------------------------------------------------


def _azure_plan(size: str, region: str, **job: object) -> tuple[JobSpec, Plan]:
    offer = next(o for o in BUNDLED if (o.provider, o.instance_type, o.region) == ("azure", size, region))
    fields: dict[str, object] = {"model": "llama-3.1-8b", "train_tokens": 50_000_000, "seq_len": 2048}
    spec = JobSpec.model_validate(fields | {"providers": ("azure",), "regions": (region,), "gpus": (offer.gpu,)} | job)
    plans = [p for p in ftsolve.plan(spec, CATALOG, top=20).plans if p.offer.key == offer.key]
    assert plans, offer.key
    return spec, plans[0]


def test_an_unlaunchable_azure_plan_is_refused_in_one_line_with_its_reason() -> None:
    job, p = _azure_plan("Standard_ND96isr_H200_v5", "westus2")
    with pytest.raises(InvalidJobSpec) as exc:
        export_plan("skypilot", p, job, CATALOG)
    message = str(exc.value)
    assert "\n" not in message and "--rank" in message
    assert "Azure catalog has no Standard_ND96isr_H200_v5" in message


def test_skypilot_s_catalog_says_12_gpus_for_the_8_gpu_nd96isr_h100_v5() -> None:
    pytest.importorskip("sky")
    pd = pytest.importorskip("pandas")
    from sky.catalog import common

    df = pd.read_csv(io.StringIO(f"{AZURE_VMS_HEADER}\n{ND96ISR_H100_ROW}\n"))
    assert common.get_accelerators_from_instance_type_impl(df, "Standard_ND96isr_H100_v5") == {"H100": 12}
    offer = next(o for o in BUNDLED if o.instance_type == "Standard_ND96isr_H100_v5" and o.region == "eastus")
    assert offer.gpus_per_node == 8 and offer.launchable


def test_the_nd96isr_h100_v5_export_runs_8_processes_per_node() -> None:
    # Single node, torchtune: torchrun's --nproc_per_node names 8, not SkyPilot's variable (12 there).
    job, p = _azure_plan("Standard_ND96isr_H100_v5", "eastus", stack="torchtune")
    assert (p.nodes, p.n_gpus, p.offer.gpus_per_node) == (1, 8, 8)
    task = export_plan("skypilot", p, job, CATALOG)
    assert task["resources"]["instance_type"] == "Standard_ND96isr_H100_v5"
    assert "--nproc_per_node 8 " in task["run"] and "SKYPILOT_NUM_GPUS_PER_NODE" not in task["run"]
    # Single node, axolotl: accelerate's config holds the process count.
    job, p = _azure_plan("Standard_ND96isr_H100_v5", "eastus")
    assert export_plan("accelerate", p, job, CATALOG)["num_processes"] == 8
    assert "SKYPILOT_NUM_GPUS_PER_NODE" not in export_plan("skypilot", p, job, CATALOG)["run"]
    # Two nodes: the launcher's total process count is nodes x 8.
    two = p.model_copy(update={"nodes": 2, "n_gpus": 16})
    run = export_plan("skypilot", two, job, CATALOG)["run"]
    assert '--num_processes "$((SKYPILOT_NUM_NODES * 8))"' in run and "SKYPILOT_NUM_GPUS_PER_NODE" not in run
    assert export_plan("accelerate", two, job, CATALOG)["num_processes"] == 16


def test_other_offers_keep_skypilot_s_gpu_count_variable() -> None:
    job, p = _azure_plan("Standard_ND96asr_v4", "eastus", stack="torchtune")
    assert p.n_gpus > 1
    assert '--nproc_per_node "$SKYPILOT_NUM_GPUS_PER_NODE"' in export_plan("skypilot", p, job, CATALOG)["run"]
