"""Catalog loading, GPU name resolution and offer-file validation."""

from __future__ import annotations

from pathlib import Path

import pytest

import ftsolve
from ftsolve import CatalogError
from ftsolve.catalog import load_gpus, resolve_gpu

GPUS = load_gpus()
MEM = {name: g.memory_gib for name, g in GPUS.items()}

HEADER = (
    "provider,tier,instance_type,gpu,gpus_per_node,on_demand_usd_per_gpu_hour,"
    "interruptible_usd_per_gpu_hour,region,price_date,source\n"
)
GOOD = "acme,std,a1,h100-sxm,8,2.5,1.0,eu-1,2026-10-01,my contract\n"


@pytest.mark.parametrize(
    ("name", "memory", "hint", "count", "expected"),
    [
        ("A100", 40.0, "gpu_1x_a100", 1, "a100-pcie-40gb"),
        ("A100", 40.0, "gpu_1x_a100_sxm4", 1, "a100-sxm-40gb"),
        ("A100", 40.0, "p4d.24xlarge", 8, "a100-sxm-40gb"),
        ("A100-80GB", 80.0, "1x_A100-80GB_SECURE", 1, "a100-pcie-80gb"),
        ("A100 80GB SXM (NDamsr A100 v4)", 80.0, "Standard_ND96amsr_A100_v4", 8, "a100-sxm-80gb"),
        ("H100", 80.0, "gpu_1x_h100_pcie", 1, "h100-pcie"),
        ("H100", 80.0, "p5.48xlarge", 8, "h100-sxm"),
        ("H100", 93.6, "1x-H100_NVL-32-65536", 1, "h100-nvl"),
        ("H100-80G-PCIe-NVLink", 80.0, "n3-H100x8-NVLink", 8, "h100-pcie"),
        ("NVIDIA L4 24GB", 24.0, "", 1, "l4"),
        ("NVIDIA A10 24GB", 24.0, "", 1, "a10"),
        ("A10G", 24.0, "g5.xlarge", 1, "a10g"),
        ("RTXPRO6000S", 95.6, "", 1, "rtx-pro-6000-blackwell"),
        ("RTX6000-Ada", 48.0, "", 1, "rtx-6000-ada"),
        ("RTX6000", 24.0, "gpu_1x_rtx6000", 1, None),  # Turing Quadro: not modelled
        ("RTX4090", 48.0, "", 1, None),  # modified 48 GB card: memory does not match
        ("A800", 80.0, "", 1, None),
    ],
)
def test_resolve_gpu(name: str, memory: float, hint: str, count: int, expected: str | None) -> None:
    assert resolve_gpu(name, memory, hint, count, MEM) == expected


def test_bundled_catalog_loads_with_sources_and_dates() -> None:
    cat = ftsolve.load_catalog()
    assert len(cat.offers) > 1000
    providers = {o.provider for o in cat.offers}
    assert {"lambda", "aws", "runpod", "vast", "verda", "nebius", "coreweave", "gcp", "azure"} <= providers
    assert all(o.source and o.price_date for o in cat.offers)
    assert all(o.gpu in cat.gpus for o in cat.offers)


def _write(tmp_path: Path, body: str, header: str = HEADER) -> Path:
    p = tmp_path / "offers.csv"
    p.write_text(header + body)
    return p


def test_user_offers_override_and_appear(tmp_path: Path) -> None:
    cat = ftsolve.load_catalog(_write(tmp_path, GOOD))
    mine = [o for o in cat.offers if o.provider == "acme"]
    assert len(mine) == 1 and mine[0].on_demand_usd_per_gpu_hour == 2.5


@pytest.mark.parametrize(
    ("body", "header", "message"),
    [
        (GOOD, HEADER.replace("region,", ""), "missing column(s) region"),
        (
            "acme,std,a1,h100-sxm,8,-2,,eu-1,2026-10-01,src\n",
            HEADER,
            "row 2: field on_demand_usd_per_gpu_hour",
        ),
        ("acme,std,a1,h100-sxm,8,0,,eu-1,2026-10-01,src\n", HEADER, "must be positive"),
        ("acme,std,a1,h100-sxm,8,abc,,eu-1,2026-10-01,src\n", HEADER, "is not a number"),
        ("acme,std,a1,h100-sxm,8,1.0,2.0,eu-1,2026-10-01,src\n", HEADER, "above on-demand"),
        ("acme,std,a1,h100-sxmm,8,1.0,,eu-1,2026-10-01,src\n", HEADER, "field gpu: unknown GPU"),
        (GOOD + GOOD, HEADER, "row 3: duplicate offer"),
        ("acme,std,a1,h100-sxm,8,1.0,,eu-1,01/10/2026,src\n", HEADER, "field price_date"),
    ],
)
def test_bad_offer_files_name_file_row_and_field(tmp_path: Path, body: str, header: str, message: str) -> None:
    path = _write(tmp_path, body, header)
    with pytest.raises(CatalogError, match=r"offers\.csv") as info:
        ftsolve.load_catalog(path)
    assert message in str(info.value)


def test_the_bundled_files_are_read_once_and_no_catalog_changes_another(monkeypatch: pytest.MonkeyPatch) -> None:
    from ftsolve.catalog import _load

    first = ftsolve.load_catalog(user=False)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the bundled offers were read again")

    monkeypatch.setattr(_load, "read_offer_table", refuse)
    monkeypatch.setattr(_load, "_table", refuse)
    again = ftsolve.load_catalog(user=False)
    assert again.offers == first.offers
    # Each load has a GPU dict of its own, and the shared columns refuse writes.
    again.gpus.pop("h100-sxm")  # type: ignore[attr-defined]
    assert "h100-sxm" in ftsolve.load_catalog(user=False).gpus and "h100-sxm" in load_gpus()
    with pytest.raises(ValueError, match="read-only"):
        again.offers.numbers["on_demand_usd_per_gpu_hour"][0] = 0.0
    assert ftsolve.estimate_time("llama-3.1-8b", "h100-sxm").tokens_per_s_per_gpu > 0
