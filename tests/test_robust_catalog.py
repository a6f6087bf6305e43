"""The user offer catalog and offer-file import under concurrency, kills and malformed input (issue 17)."""

from __future__ import annotations

import datetime as dt
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from ftsolve import CatalogError
from ftsolve.catalog import Offer, load_catalog, load_gpus, parse_offers
from ftsolve.catalog._import import merge_into_user_catalog, offers_to_csv, read_skypilot, read_user_offers
from ftsolve.cli._main import cli

GPUS = load_gpus()
SRC = str(Path(__file__).resolve().parents[1] / "src")
HEADER = (
    "provider,tier,instance_type,gpu,gpus_per_node,on_demand_usd_per_gpu_hour,"
    "interruptible_usd_per_gpu_hour,region,price_date,source,country,storage_usd_per_gb_month,"
    "interruption_rate_per_hour\n"
)
SKY_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
H100_INFO = "\"{'Gpus': [{'Name': 'H100', 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 655360}\""


def _offer(name: str, **changes: object) -> Offer:
    data: dict[str, object] = {
        "provider": "acme",
        "tier": "t",
        "instance_type": name,
        "gpu": "h100-sxm",
        "source_gpu_name": "H100",
        "gpus_per_node": 8,
        "on_demand_usd_per_gpu_hour": 2.0,
        "region": "eu",
        "price_date": dt.date(2026, 10, 1),
        "source": "test",
    }
    return Offer.model_validate(data | changes)


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    monkeypatch.setenv("FTSOLVE_HOME", str(folder))
    return folder


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output  # stdout and stderr together (click 8.1 and 8.2 alike)


def _assert_one_line_error(code: int, out: str, *needles: str) -> None:
    assert code == 2, out
    assert "Traceback" not in out
    lines = [line for line in out.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), out
    assert len(lines[0]) < 400
    for needle in needles:
        assert needle in lines[0]


# 1. Concurrent imports -------------------------------------------------------------------------

_IMPORTER = """
import datetime as dt, sys
from ftsolve.catalog import Offer, load_gpus
from ftsolve.catalog._import import merge_into_user_catalog
gpus, who = load_gpus(), sys.argv[1]
for i in range(8):
    offer = Offer(provider=who, tier="t", instance_type=f"x{i}", gpu="h100-sxm", source_gpu_name="H100",
                  gpus_per_node=8, on_demand_usd_per_gpu_hour=2.0, region="eu",
                  price_date=dt.date(2026, 10, 1), source="test")
    merge_into_user_catalog([offer], gpus)
"""


def _env(home: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p)
    return os.environ | {"FTSOLVE_HOME": str(home), "PYTHONPATH": path}


def test_concurrent_imports_keep_both_imports_offers(tmp_path: Path) -> None:
    for attempt in range(5):
        home = tmp_path / f"home{attempt}"
        procs = [
            subprocess.Popen([sys.executable, "-c", _IMPORTER, who], env=_env(home), stderr=subprocess.PIPE)
            for who in ("alpha", "beta")
        ]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err.decode()
        offers = read_user_offers(home / "offers.csv", GPUS).offers
        assert sorted(o.key for o in offers) == sorted(f"{w}/t/x{i}/eu" for w in ("alpha", "beta") for i in range(8))


def test_concurrent_cli_imports(tmp_path: Path) -> None:
    home = tmp_path / "home"
    files = []
    for who in ("alpha", "beta"):
        f = tmp_path / f"{who}.csv"
        f.write_text(HEADER + "".join(f"{who},t,x{i},h100-sxm,8,2.0,,eu,2026-10-01,s,,,\n" for i in range(20)))
        files.append(f)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "ftsolve", "catalog", "import", str(f)], env=_env(home), stderr=subprocess.PIPE
        )
        for f in files
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    assert len(read_user_offers(home / "offers.csv", GPUS).offers) == 40


# 2. Offers survive a re-read --------------------------------------------------------------------


def test_notes_with_comment_lines_commas_and_quotes_round_trip() -> None:
    notes = ['first line\n# not a comment, "quoted", x', "a,b\n#\n# x", 'plain "q"', "#leading hash"]
    offers = [_offer(f"i{k}", notes=n) for k, n in enumerate(notes)]
    offers.append(_offer("hashed", provider="#1cloud"))
    back = parse_offers(offers_to_csv(offers), "user offers.csv", GPUS)
    assert sorted(back, key=lambda o: o.key) == sorted(offers, key=lambda o: o.key)


def test_comment_rows_outside_quotes_are_skipped(tmp_path: Path) -> None:
    text = (
        '# schema_version: 1, a "quote" here opens nothing\n'
        + HEADER
        + "acme,t,a,h100-sxm,8,2.0,,eu,2026-10-01,s,,,\n"
        + "# a comment row, skipped\n"
        + '"#acme",t,b,h100-sxm,8,2.0,,eu,2026-10-01,s,,,\n'
    )
    offers = parse_offers(text, "x.csv", GPUS)
    assert [o.provider for o in offers] == ["acme", "#acme"]


def test_a_row_with_more_values_than_columns_is_refused() -> None:
    with pytest.raises(CatalogError, match="row 2: 14 values for 13 columns"):
        parse_offers(HEADER + "acme,t,a,h100-sxm,8,2.0,,eu,2026-10-01,s,,,,\n", "x.csv", GPUS)


def test_merge_keeps_offers_whose_notes_hold_hash_lines(home: Path) -> None:
    merge_into_user_catalog([_offer("a", notes="one\n# two"), _offer("b")], GPUS)
    merge_into_user_catalog([_offer("c")], GPUS)
    offers = {o.instance_type: o for o in read_user_offers(home / "offers.csv", GPUS).offers}
    assert sorted(offers) == ["a", "b", "c"] and offers["a"].notes == "one\n# two"


# 3. Killed writes ---------------------------------------------------------------------------------


def test_merge_removes_stale_temporaries(home: Path) -> None:
    merge_into_user_catalog([_offer("a")], GPUS)
    stale = home / ".offers.csv.123.tmp"
    stale.write_text("half a catalog")
    merge_into_user_catalog([_offer("b")], GPUS)
    assert not stale.exists()
    assert sorted(o.instance_type for o in read_user_offers(home / "offers.csv", GPUS).offers) == ["a", "b"]


_WRITER = """
import datetime as dt, pathlib, sys
from ftsolve.catalog import Offer, load_gpus
from ftsolve.catalog._import import merge_into_user_catalog
gpus = load_gpus()
def offers(tag):
    return [Offer(provider="acme", tier=tag, instance_type=f"x{i}", gpu="h100-sxm", source_gpu_name="H100",
                  gpus_per_node=8, on_demand_usd_per_gpu_hour=2.0, region="eu", notes="n" * 200,
                  price_date=dt.date(2026, 10, 1), source="test") for i in range(3000)]
batches = [offers("a"), offers("b")]
pathlib.Path(sys.argv[1]).write_text("ready")
k = 0
while True:
    merge_into_user_catalog(batches[k % 2], gpus)
    k += 1
"""


def test_a_kill_during_a_write_leaves_a_whole_catalog(home: Path, tmp_path: Path) -> None:
    merge_into_user_catalog([_offer("first")], GPUS)
    for attempt in range(4):
        ready = tmp_path / f"ready{attempt}"
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(ready)], env=_env(home))
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2 + 0.15 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        offers = read_user_offers(home / "offers.csv", GPUS).offers
        assert len(offers) in (1, 3001, 6001)
    merge_into_user_catalog([_offer("last")], GPUS)
    assert not list(home.glob(".offers.csv.*.tmp"))
    assert any(o.instance_type == "last" for o in read_user_offers(home / "offers.csv", GPUS).offers)


_STUCK_WRITER = """
import datetime as dt, os, pathlib, sys, time
from ftsolve.catalog import Offer, load_gpus
from ftsolve.catalog._import import merge_into_user_catalog

def stuck(src, dst):  # the temporary file is complete: be killed before the rename
    pathlib.Path(sys.argv[1]).write_text("ready")
    time.sleep(60)

os.replace = stuck
offer = Offer(provider="acme", tier="t", instance_type="new", gpu="h100-sxm", source_gpu_name="H100",
              gpus_per_node=8, on_demand_usd_per_gpu_hour=2.0, region="eu",
              price_date=dt.date(2026, 10, 1), source="test")
merge_into_user_catalog([offer], load_gpus())
"""


def test_a_kill_before_the_rename_leaves_the_old_catalog_and_a_temporary_the_next_merge_removes(
    home: Path, tmp_path: Path
) -> None:
    merge_into_user_catalog([_offer("old")], GPUS)
    before = (home / "offers.csv").read_bytes()
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", _STUCK_WRITER, str(ready)], env=_env(home))
    deadline = time.monotonic() + 60
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert ready.exists()
    assert len(list(home.glob(".offers.csv.*.tmp"))) == 1
    assert (home / "offers.csv").read_bytes() == before
    merge_into_user_catalog([_offer("next")], GPUS)
    assert not list(home.glob(".offers.csv.*.tmp"))
    assert sorted(o.instance_type for o in read_user_offers(home / "offers.csv", GPUS).offers) == ["next", "old"]


def test_a_failed_rename_leaves_the_old_catalog(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    merge_into_user_catalog([_offer("a")], GPUS)
    before = (home / "offers.csv").read_bytes()

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(Exception, match="No space left"):
        merge_into_user_catalog([_offer("b")], GPUS)
    assert (home / "offers.csv").read_bytes() == before
    assert not list(home.glob(".offers.csv.*.tmp"))


# 4. Offer values -------------------------------------------------------------------------------------

_GOOD = {
    "on_demand_usd_per_gpu_hour": "2.0",
    "gpus_per_node": "8",
    "price_date": "2026-10-01",
    "country": "",
    "storage_usd_per_gb_month": "",
    "interruption_rate_per_hour": "",
}


def _csv(**cells: str) -> str:
    c = _GOOD | cells
    return HEADER + (
        f"acme,t,x,h100-sxm,{c['gpus_per_node']},{c['on_demand_usd_per_gpu_hour']},,eu,{c['price_date']},src,"
        f"{c['country']},{c['storage_usd_per_gb_month']},{c['interruption_rate_per_hour']}\n"
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("on_demand_usd_per_gpu_hour", "inf", "must be a finite number, got 'inf'"),
        ("on_demand_usd_per_gpu_hour", "nan", "must be a finite number"),
        ("on_demand_usd_per_gpu_hour", "1e400", "must be a finite number"),
        ("on_demand_usd_per_gpu_hour", "9" * 400, "must be a finite number"),
        ("on_demand_usd_per_gpu_hour", "1500", "must be at most 1000"),
        ("storage_usd_per_gb_month", "inf", "must be a finite number"),
        ("interruption_rate_per_hour", "nan", "must be a finite number"),
        ("interruption_rate_per_hour", "-1", "must be at least 0"),
        ("gpus_per_node", "8.9", "'8.9' is not a whole number"),
        ("gpus_per_node", "eight", "is not a whole number"),
        ("gpus_per_node", "0", "must be at least 1"),
        ("price_date", "9999-12-31", "must not be in the future"),
        ("country", "deu", "2-letter ISO 3166"),
        ("country", "1x", "2-letter ISO 3166"),
        ("country", "x" * 5000, "2-letter ISO 3166"),
    ],
)
def test_bad_offer_values_are_refused_in_one_line(field: str, value: str, message: str) -> None:
    with pytest.raises(CatalogError) as info:
        parse_offers(_csv(**{field: value}), "o.csv", GPUS)
    text = str(info.value)
    assert text.startswith(f"o.csv, row 2: field {field}: ")
    assert message in text and "\n" not in text and len(text) < 200


def test_country_codes_are_upper_cased() -> None:
    assert parse_offers(_csv(country=" de "), "o.csv", GPUS)[0].country == "DE"
    assert _offer("x", country="fi").country == "FI"


def test_tomorrow_is_a_valid_price_date() -> None:
    tomorrow = (dt.date.today() + dt.timedelta(days=1)).isoformat()
    assert parse_offers(_csv(price_date=tomorrow), "o.csv", GPUS)[0].price_date.isoformat() == tomorrow


@pytest.mark.parametrize(
    "changes",
    [
        {"on_demand_usd_per_gpu_hour": math.inf},
        {"on_demand_usd_per_gpu_hour": math.nan},
        {"interruptible_usd_per_gpu_hour": 2000.0, "on_demand_usd_per_gpu_hour": None},
        {"gpus_per_node": 8.9},
        {"storage_usd_per_gb_month": math.inf},
        {"price_date": dt.date(9999, 12, 31)},
        {"country": "Germany"},
        {"provider": "a\nb"},
    ],
)
def test_the_library_model_holds_the_same_rules(changes: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        _offer("x", **changes)


# 5. Offer files ------------------------------------------------------------------------------------


def test_non_utf8_and_oversized_files_give_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_bytes(HEADER.encode() + b"acme,t,x,h100-sxm,8,2.0,,eu,2026-10-01,caf\xe9,,,\n")
    with pytest.raises(CatalogError, match="not UTF-8"):
        read_user_offers(bad, GPUS)
    if Path("/dev/zero").exists():
        with pytest.raises(CatalogError, match="larger than"):
            read_user_offers(Path("/dev/zero"), GPUS)


def test_yaml_alias_bomb_is_refused_fast(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\noffers: [*a8, *a8, *a8]\n")
    start = time.monotonic()
    with pytest.raises(CatalogError, match="YAML refused"):
        read_user_offers(bomb, GPUS)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (", country: NO", "quote it"),
        (", on_demand_usd_per_gpu_hour: .inf", "must be a finite number"),
        (", gpus_per_node: 8.9", "is not a whole number"),
        (", notes: [1, 2]", "expected one value"),
        (", price_date: 9999-12-31", "must not be in the future"),
    ],
)
def test_yaml_offers_pass_the_same_checks(tmp_path: Path, extra: str, message: str) -> None:
    p = tmp_path / "o.yaml"
    p.write_text(
        "offers:\n  - {provider: acme, tier: r, instance_type: r8, gpu: a100-sxm-80gb, gpus_per_node: 8,\n"
        "     on_demand_usd_per_gpu_hour: 1.1, interruptible_usd_per_gpu_hour: null, region: eu-1,\n"
        f"     price_date: 2026-11-01, source: c, price_date_estimated: true{extra}}}\n"
    )
    with pytest.raises(CatalogError, match=message) as info:
        read_user_offers(p, GPUS)
    assert "\n" not in str(info.value)


def test_yaml_booleans_and_lower_case_country(tmp_path: Path) -> None:
    p = tmp_path / "o.yaml"
    p.write_text(
        "- {provider: acme, tier: r, instance_type: r8, gpu: a100-sxm-80gb, gpus_per_node: 8,\n"
        "   on_demand_usd_per_gpu_hour: 1.1, interruptible_usd_per_gpu_hour: null, region: eu-1,\n"
        "   price_date: 2026-11-01, source: c, price_date_estimated: true, country: de}\n"
    )
    (offer,) = read_user_offers(p, GPUS).offers
    assert offer.price_date_estimated and offer.country == "DE"


def _sky(*rows: str) -> str:
    return SKY_HEADER + "".join(r + "\n" for r in rows)


def _read_sky(text: str) -> tuple[int, dict[str, int], list[str]]:
    report = read_skypilot(text, "vms.csv", GPUS, provider="acme", price_date=lambda _p: (dt.date(2026, 10, 1), False))
    return len(report.offers), dict(report.skipped), report.warnings


GOOD_SKY = f"p5.48xlarge,H100,8.0,192,2048,98.32,us-east-1,{H100_INFO},"


@pytest.mark.parametrize(
    "info",
    [
        '"[1, 2]"',
        "\"{'Gpus': 5}\"",
        "\"{'Gpus': [5]}\"",
        "\"{'Gpus': [{'MemoryInfo': {'SizeInMiB': 'big'}}]}\"",
        "\"{'Gpus': [{'MemoryInfo': 7}], 'TotalGpuMemoryInMiB': 1e999}\"",
        '"' + "(" * 300 + '"',
        "\"{'TotalGpuMemoryInMiB': " + "9" * 5000 + '}"',
        '"' + "[" * 100_000 + '"',
        "\"__import__('os')\"",
    ],
)
def test_unreadable_gpu_info_is_a_warning_not_a_traceback(info: str) -> None:
    offers, skipped, warnings = _read_sky(_sky(GOOD_SKY, f"p5.48xlarge,H100,8.0,192,2048,98.32,eu-west-1,{info},"))
    assert offers == 2 and not skipped
    assert warnings == ["1 rows have an unreadable GpuInfo; their GPUs were matched by name"]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("x,H100,0.5,1,1,2.0,r,,", "fractional GPU count (a share of one GPU)"),
        ("x,H100,128,1,1,20.0,r,,", "gpus_per_node: must be at most 64; check for a typo"),
        ("x,H100,1,1,1,20000,r,,", "on_demand_usd_per_gpu_hour: must be at most 1000; check for a typo"),
        ("x,A800,1,1,1,2.0,r,,", "not a modelled GPU: A800"),
        ("x,,,1,1,2.0,r,,", "no accelerator (CPU instance)"),
    ],
)
def test_rows_ftsolve_cannot_model_are_skipped_and_counted(row: str, reason: str) -> None:
    offers, skipped, _ = _read_sky(_sky(GOOD_SKY, row))
    assert offers == 1 and skipped == {reason: 1}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("x,H100,eight,1,1,2.0,r,,", "field AcceleratorCount: 'eight' is not a number"),
        ("x,H100,0,1,1,2.0,r,,", "field AcceleratorCount: empty or zero"),
        ("x,H100," + "9" * 400 + ",1,1,2.0,r,,", "field AcceleratorCount: must be a finite number"),
        ("x,H100,8,1,1,nan,r,,", "field Price: must be a finite number, got 'nan'"),
        ("x,H100,8,1,1,inf,r,,", "field Price: must be a finite number"),
        ("x,H100,8,1,1,-3,r,,", "field Price: must not be negative"),
        ("x,H100,8,1,1," + "9" * 400 + ",r,,", "field Price: must be a finite number"),
        ("x,H100,8,1,1,2.0,r,,1e400", "field SpotPrice: must be a finite number"),
        ('x,H100,8,1,1,2.0,r,"unterminated', "not valid CSV"),
    ],
)
def test_malformed_skypilot_numbers_refuse_the_file_in_one_line(row: str, message: str) -> None:
    with pytest.raises(CatalogError, match=r"vms\.csv") as info:
        _read_sky(_sky(GOOD_SKY, row))
    assert message in str(info.value) and "\n" not in str(info.value) and len(str(info.value)) < 200


def test_skypilot_text_in_skip_reasons_is_one_short_line() -> None:
    _, skipped, _ = _read_sky(_sky(GOOD_SKY, f'x,"A800\n{"Z" * 500}",1,1,1,2.0,r,,'))
    (reason,) = skipped
    assert "\n" not in reason and len(reason) < 80


# 6. Through the CLI ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "needles"),
    [
        ("o.csv", _csv(on_demand_usd_per_gpu_hour="inf"), ("o.csv, row 2", "finite")),
        ("o.csv", _csv(country="x" * 5000), ("field country",)),
        ("o.csv", _csv(price_date="9999-12-31"), ("future",)),
        ("o.csv", HEADER.encode() + b"\xff\xfe\n", ("not UTF-8",)),
        ("o.csv", HEADER + 'acme,t,x,h100-sxm,8,2.0,,eu,2026-10-01,"s\n' + "y" * 200_000, ("not valid CSV",)),
        ("o.yaml", "offers: [[[[[[", ("not valid YAML",)),
        ("o.yaml", "a: &a [1]\noffers: " + "[" * 5000, ("o.yaml",)),
        ("vms.csv", _sky("x,H100,8,1,1,nan,r,,"), ("field Price", "finite")),
        ("vms.csv", _sky("x,H100,eight,1,1,2.0,r,,"), ("AcceleratorCount",)),
        ("vms.csv", "Instance,Price\nx,1\n", ("unrecognised columns",)),
    ],
)
@pytest.mark.parametrize("command", ["validate", "import"])
def test_cli_errors_are_one_line_with_exit_code_2(
    home: Path, tmp_path: Path, name: str, content: str | bytes, needles: tuple[str, ...], command: str
) -> None:
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    args = ["catalog", command, str(p)] + (["--price-date", "2026-10-01"] if command == "import" else [])
    code, out = _cli(*args)
    _assert_one_line_error(code, out, *needles)
    assert "y" * 50 not in out and "x" * 50 not in out
    assert not (home / "offers.csv").exists()


def test_cli_import_then_list_by_upper_cased_country(home: Path, tmp_path: Path) -> None:
    p = tmp_path / "o.csv"
    p.write_text(_csv(country="de"))
    code, out = _cli("catalog", "import", str(p))
    assert code == 0, out
    assert [o.country for o in load_catalog().offers if o.provider == "acme"] == ["DE"]
    code, out = _cli("catalog", "list", "--provider", "acme", "--country", "DE", "--json")
    assert code == 0 and '"country": "DE"' in out


def test_cli_future_price_date_skips_every_row(home: Path, tmp_path: Path) -> None:
    p = tmp_path / "vms.csv"
    p.write_text(_sky(GOOD_SKY))
    code, out = _cli("catalog", "import", str(p), "--provider", "aws", "--price-date", "9999-12-31")
    _assert_one_line_error(code, out, "no usable offers", "price_date: must not be in the future")


def test_cli_import_into_an_unusable_home_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_a_folder = tmp_path / "home"
    not_a_folder.write_text("a file, not a folder")
    monkeypatch.setenv("FTSOLVE_HOME", str(not_a_folder))
    p = tmp_path / "o.csv"
    p.write_text(_csv())
    code, out = _cli("catalog", "import", str(p))
    _assert_one_line_error(code, out, "cannot lock the user catalog")
