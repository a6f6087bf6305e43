"""Prices a plan can trust (issue 15): price kinds, launchable offers, complete hardware rows,
EU countries for the EU providers, and the deep-discount warning of `catalog validate`."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import ftsolve
from ftsolve import CatalogError
from ftsolve.catalog import Offer, OfferArrays, load_gpus, parse_offers
from ftsolve.catalog._arrays import PRICE_KIND_CODES, planning_prices
from ftsolve.catalog._import import offers_to_csv, read_skypilot, user_offers_from_text
from ftsolve.catalog._load import _bundled_offers, deep_discounts, hardware_gaps
from ftsolve.catalog._models import PRICE_KINDS
from ftsolve.cli import cli
from ftsolve.solver._job import EEA_COUNTRIES

GPUS = load_gpus()
BUNDLED = _bundled_offers(GPUS)
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
HEADER = (
    "provider,tier,instance_type,gpu,gpus_per_node,on_demand_usd_per_gpu_hour,"
    "interruptible_usd_per_gpu_hour,region,price_date,source"
)


def _offer(**fields: object) -> Offer:
    base: dict[str, object] = {
        "provider": "acme",
        "tier": "std",
        "instance_type": "a1",
        "gpu": "h100-sxm",
        "source_gpu_name": "H100",
        "gpus_per_node": 8,
        "on_demand_usd_per_gpu_hour": 4.0,
        "interruptible_usd_per_gpu_hour": 1.5,
        "region": "eu-1",
        "country": "DE",
        "price_date": dt.date(2026, 10, 1),
        "source": "my contract",
    }
    return Offer.model_validate(base | fields)


# --- price kinds -------------------------------------------------------------------------------


def test_kinds_and_launchability_round_trip_through_csv_and_yaml() -> None:
    offers = [
        _offer(instance_type=f"k-{kind}", price_kind=kind, interruptible_price_kind=other)
        for kind, other in zip(PRICE_KINDS, reversed(PRICE_KINDS), strict=True)
    ]
    offers.append(_offer(instance_type="far", launchable=False, not_launchable_reason="no region a launcher takes"))
    back = parse_offers(offers_to_csv(offers), "round trip", GPUS)
    assert sorted(back, key=lambda o: o.key) == sorted(offers, key=lambda o: o.key)
    yaml_text = (
        "offers:\n  - {provider: acme, tier: std, instance_type: y1, gpu: h100-sxm, gpus_per_node: 1,\n"
        "     on_demand_usd_per_gpu_hour: 4, interruptible_usd_per_gpu_hour: 0.5, region: eu-1,\n"
        "     price_date: 2026-10-01, source: page, price_kind: list, interruptible_price_kind: floor,\n"
        "     launchable: false, not_launchable_reason: ordered by e-mail}\n"
    )
    (y,) = user_offers_from_text(yaml_text, Path("offers.yaml"), GPUS).offers
    assert (y.price_kind, y.interruptible_price_kind, y.launchable) == ("list", "floor", False)


def test_an_older_file_loads_as_launchable_list_prices() -> None:
    (o,) = parse_offers(f"{HEADER}\nacme,std,a1,h100-sxm,8,2.5,1.0,eu-1,2026-10-01,my contract\n", "old", GPUS)
    assert (o.price_kind, o.interruptible_price_kind, o.launchable, o.not_launchable_reason) == (
        "list",
        "list",
        True,
        "",
    )


def test_the_interruptible_kind_defaults_to_the_offer_kind() -> None:
    text = f"{HEADER},price_kind\nacme,std,a1,h100-sxm,8,2.5,1.0,eu-1,2026-10-01,market,observed\n"
    (o,) = parse_offers(text, "market", GPUS)
    assert o.interruptible_price_kind == "observed"
    assert _offer(price_kind="estimate").interruptible_price_kind == "estimate"


@pytest.mark.parametrize(
    ("extra_header", "extra_cells", "message"),
    [
        ("price_kind", "cheap", r"row 2: field price_kind: must be one of 'list', 'observed', 'floor' or 'estimate'"),
        ("launchable", "maybe", r"row 2: field launchable: expected true or false"),
        ("launchable", "false", r"row 2: an offer that is not launchable needs a not_launchable_reason"),
        ("not_launchable_reason", "why not", r"row 2: not_launchable_reason is set on a launchable offer"),
    ],
)
def test_bad_kind_or_launchability_is_refused_with_the_field(extra_header: str, extra_cells: str, message: str) -> None:
    text = f"{HEADER},{extra_header}\nacme,std,a1,h100-sxm,8,2.5,1.0,eu-1,2026-10-01,src,{extra_cells}\n"
    with pytest.raises(CatalogError, match=message):
        parse_offers(text, "bad.csv", GPUS)


def test_bundled_nebius_b300_interruptible_is_a_floor_and_its_on_demand_a_list_price() -> None:
    b300 = [o for o in BUNDLED if o.provider == "nebius" and o.gpu == "b300"]
    assert b300
    for o in b300:
        assert o.interruptible_usd_per_gpu_hour == pytest.approx(0.99)
        assert (o.price_kind, o.interruptible_price_kind) == ("list", "floor")
        assert not o.launchable


def test_bundled_price_kinds_follow_their_sources() -> None:
    kinds = {(o.provider, o.price_kind) for o in BUNDLED}
    # Marketplace and broker snapshots of unknown date are estimates, never list prices.
    assert not {("vast", "list"), ("shadeform", "list"), ("primeintellect", "list")} & kinds
    assert all(o.price_kind == "floor" for o in BUNDLED if o.provider == "tensordock")  # "From" prices
    assert all(o.price_kind == "estimate" for o in BUNDLED if o.provider == "seeweb")  # currency unverified
    # A market price without a known date is never called observed.
    for o in BUNDLED:
        if o.price_date_estimated:
            assert "observed" not in (o.price_kind, o.interruptible_price_kind), o.key


def test_planning_prices_leave_out_floors_unless_allowed() -> None:
    offers = [
        _offer(instance_type="spot-floor", interruptible_price_kind="floor"),
        _offer(instance_type="all-floor", price_kind="floor"),
        _offer(instance_type="list"),
    ]
    arrays = OfferArrays.of(offers)
    assert arrays.interruptible_kind.tolist() == [PRICE_KIND_CODES["floor"], PRICE_KIND_CODES["floor"], 0]
    od, spot = planning_prices(arrays)
    assert od.tolist()[0] == 4.0 and np.isnan(spot[0])
    assert np.isnan(od[1]) and np.isnan(spot[1])
    assert (od[2], spot[2]) == (4.0, 1.5)
    od_all, spot_all = planning_prices(arrays, allow_floor=True)
    assert od_all.tolist() == [4.0, 4.0, 4.0] and spot_all.tolist() == [1.5, 1.5, 1.5]
    assert np.isnan(arrays.on_demand).sum() == 0  # the catalog's own arrays are not changed


def test_offer_arrays_carry_kinds_and_launchability_of_the_bundled_catalog() -> None:
    arrays = OfferArrays.of(BUNDLED)
    assert arrays.launchable.sum() == sum(o.launchable for o in BUNDLED)
    floors = {BUNDLED[i].key for i in np.flatnonzero(arrays.interruptible_kind == PRICE_KIND_CODES["floor"])}
    assert floors and all(k.startswith("nebius/") for k in floors if "tensordock" not in k)


# --- deep discounts ----------------------------------------------------------------------------


def test_validate_warns_on_interruptible_more_than_80_percent_under_on_demand(tmp_path: Path) -> None:
    path = tmp_path / "offers.csv"
    path.write_text(
        f"{HEADER}\n"
        "acme,std,deep,h100-sxm,8,10,1.5,eu-1,2026-10-01,page\n"
        "acme,std,edge,h100-sxm,8,10,2.0,eu-1,2026-10-01,page\n"
        "acme,std,fair,h100-sxm,8,10,4.0,eu-1,2026-10-01,page\n"
    )
    result = CliRunner().invoke(cli, ["catalog", "validate", str(path)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.output
    assert "acme/std/deep/eu-1" in warnings[0] and "85% under on-demand" in warnings[0]
    assert "ok: 3 offers" in result.output


def test_the_bundled_deep_discounts_include_every_nebius_floor() -> None:
    deep = {o.key for o in deep_discounts(BUNDLED)}
    nebius_floor = {o.key for o in BUNDLED if o.provider == "nebius" and o.interruptible_price_kind == "floor"}
    assert {k for k in nebius_floor if "B300" in k or "B200" in k or "H100" in k or "H200" in k} <= deep


# --- launchable offers ---------------------------------------------------------------------------

# A launcher's region spelling: one token (us-east-1, FIN-01, helsinki-finland-1, default). Vast's
# SkyPilot regions are the one exception SkyPilot itself writes ("Texas, US, NA").
_REGION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def test_offers_without_a_launchable_region_are_marked_with_a_reason() -> None:
    for o in BUNDLED:
        if o.launchable:
            assert o.provider == "vast" or _REGION.match(o.region), o.key
            assert o.region != "default" or o.provider == "hyperbolic", o.key  # hyperbolic's own region name
        else:
            assert o.not_launchable_reason.strip(), o.key
    for region in ("all (list price)", "any (RunPod chooses the data centre)", "marketplace (host-dependent)"):
        marked = [o for o in BUNDLED if o.region == region]
        assert marked and not any(o.launchable for o in marked), region


def test_a_skypilot_row_without_a_region_is_imported_as_not_launchable() -> None:
    text = (
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
        "ECS1GPU8,H100,1,16,256.0,1.89,,,\n"
        "ECS1GPU7,L40S,1,8,32.0,0.85,it-fr2,,\n"
    )
    report = read_skypilot(text, "vms.csv", GPUS, provider="seeweb", price_date=lambda _p: (dt.date(2026, 8, 1), False))
    by_region = {o.region: o for o in report.offers}
    assert not by_region["default"].launchable and "no region" in by_region["default"].not_launchable_reason
    assert by_region["it-fr2"].launchable


# --- hardware rows -------------------------------------------------------------------------------


def test_every_gpu_with_a_bundled_offer_has_memory_bandwidth_and_dense_16bit_tflops() -> None:
    for name in sorted({o.gpu for o in BUNDLED}):
        gpu = GPUS[name]
        assert gpu.memory_gib > 0 and gpu.memory_bandwidth_gb_per_s and gpu.tensor_tflops, name
    assert "rtx-4000-sff-ada" in {o.gpu for o in BUNDLED}


def test_an_offer_of_a_gpu_without_hardware_figures_is_refused_naming_the_field() -> None:
    assert hardware_gaps(GPUS["a10g"]) == ["tensor_tflops"]
    text = f"{HEADER}\naws,od,g5.xlarge,a10g,1,1.0,0.4,us-east-1,2026-10-01,catalog\n"
    with pytest.raises(CatalogError, match=r"row 2: field gpu: a10g has no tensor_tflops"):
        parse_offers(text, "aws.csv", GPUS)
    sky = (
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
        "g5.xlarge,A10G,1,4,16.0,1.006,us-east-1,,0.4\n"
    )
    report = read_skypilot(sky, "vms.csv", GPUS, provider="aws", price_date=lambda _p: (dt.date(2026, 8, 1), False))
    assert not report.offers and report.skipped == {"a10g: no tensor_tflops in gpus.csv": 1}


def test_bundled_gpu_architectures_have_a_utilization_coefficient() -> None:
    from ftsolve.solver._coefficients import UTILIZATION_BY_ARCH

    assert {GPUS[o.gpu].architecture for o in BUNDLED} <= set(UTILIZATION_BY_ARCH)


# --- countries and Vast ----------------------------------------------------------------------------


def test_hetzner_and_ovhcloud_offers_are_in_eu_countries() -> None:
    eu_providers = [o for o in BUNDLED if o.provider in ("hetzner", "ovhcloud")]
    assert {o.provider for o in eu_providers} == {"hetzner", "ovhcloud"}
    assert all(o.country in EEA_COUNTRIES for o in eu_providers)
    assert {(o.instance_type, o.region, o.country) for o in eu_providers if o.provider == "hetzner"} >= {
        ("GEX63", "hel1", "FI"),
        ("GEX131", "fsn1", "DE"),
        ("GEX131", "nbg1", "DE"),
    }


def test_a_vast_spot_price_is_kept_when_the_catalog_has_one() -> None:
    text = (
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region\n"
        '1x-H100_SXM-32-65536,H100,1,32,64.0,,1.87,0.95,"Texas, US, NA"\n'
        '1x-RTX_4090-32-65536,RTX4090,1,32,64.0,,0.40,0.00,"Germany, DE, EU"\n'
    )
    report = read_skypilot(text, "vms.csv", GPUS, provider="vast", price_date=lambda _p: (dt.date(2026, 8, 1), False))
    by_gpu = {o.gpu: o for o in report.offers}
    h100 = by_gpu["h100-sxm"]
    assert h100.interruptible_usd_per_gpu_hour == pytest.approx(0.95)
    assert (h100.price_kind, h100.interruptible_price_kind) == ("observed", "observed")
    assert by_gpu["rtx-4090"].interruptible_usd_per_gpu_hour is None  # 0.00 is "no bid price"


def test_bundled_vast_offers_carry_interruptible_prices_estimated_from_the_marketplace() -> None:
    # SkyPilot's Vast catalog has no bid price; the bundled offers scale their on-demand price by the
    # marketplace's median bid/ask ratio of the GPU (scripts/build_offers.py, dated and sourced).
    vast = [o for o in BUNDLED if o.provider == "vast"]
    priced = [o for o in vast if o.interruptible_usd_per_gpu_hour]
    assert {o.gpu for o in priced} >= {"rtx-4090", "rtx-5090", "h100-sxm", "l40s"}
    for o in priced:
        assert o.interruptible_price_kind == "estimate" and "GhcFrank/investment-os@4101807" in o.notes
        od, spot = o.on_demand_usd_per_gpu_hour, o.interruptible_usd_per_gpu_hour
        assert od is not None and spot is not None
        assert 0.5 < spot / od < 0.9
    assert all(
        o.gpu
        in (
            "rtx-3090",
            "rtx-a6000",
            "rtx-6000-ada",
            "a40",
            "a100-sxm-40gb",
            "b200",
            "h100-nvl",
            "h200-sxm",
            "rtx-pro-6000-blackwell",
            "v100-sxm2-16gb",
        )
        for o in vast
        if o not in priced
    )


# --- what a plan says of its price -----------------------------------------------------------------


def _plan_on(offer: Offer, **job: object) -> ftsolve.Plan:
    from ftsolve import Catalog, JobSpec, load_catalog

    base = load_catalog(user=False)
    cat = Catalog(gpus=base.gpus, offers=(offer,), models=base.models)
    spec = JobSpec.model_validate({"model": "llama-3.1-8b", "train_tokens": 10**7, "seq_len": 2048} | job)
    return ftsolve.plan(spec, cat, top=1).plans[0]


def test_every_plan_price_line_shows_kind_and_date() -> None:
    job = ftsolve.JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24)
    for p in ftsolve.plan(job, top=10).plans:
        line = p.cost_items[0].source
        kind = p.offer.price_kind if p.market == "on-demand" else p.offer.interruptible_price_kind
        assert f"({kind} price)" in line and f"dated {p.price_date.isoformat()}" in line


def test_estimated_prices_and_deep_discounts_are_flagged_in_the_plan() -> None:
    listed = _plan_on(_offer(interruptible_usd_per_gpu_hour=None))
    assert not any("estimate" in a or "under on-demand" in a for a in listed.assumptions)
    guessed = _plan_on(_offer(interruptible_usd_per_gpu_hour=None, price_kind="estimate"))
    assert any("on-demand price is an estimate" in a for a in guessed.assumptions)
    deep = _plan_on(_offer(interruptible_usd_per_gpu_hour=0.4), markets=("interruptible",))
    assert deep.market == "interruptible"
    assert any("interruptible price 90% under on-demand" in a for a in deep.assumptions)
