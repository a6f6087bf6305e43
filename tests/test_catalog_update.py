"""`ftsolve catalog update`: SkyPilot's v8 files from a local HTTP server (never the real network),
validated, merged atomically, and shown in plans with their fetch date and URL (issue 15, item 5)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

import ftsolve
from ftsolve import CatalogError
from ftsolve.catalog import load_catalog
from ftsolve.catalog._import import user_catalog_path
from ftsolve.catalog._skypilot_facts import skypilot_tier
from ftsolve.catalog._update import (
    DEFAULT_SOURCE,
    SKYPILOT_PROVIDERS,
    FetchProgress,
    fetch_catalogs,
    resolve_origin,
    update_catalog,
)
from ftsolve.cli import cli

FIXTURES = Path(__file__).parent / "fixtures" / "exports"
LAMBDA_V8 = (FIXTURES / "skypilot_v8_lambda_vms.csv").read_bytes()
EXTRACT = FIXTURES / "skypilot_gpu_offers.csv"
SKY_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
H100_INFO = "\"{'Gpus': [{'Name': 'H100', 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 81920}\""
# A price no bundled offer has, so a plan that shows it shows the fetched offer.
DISTINCT_PRICE = 0.4321
CHEAP_H100 = (SKY_HEADER + f"gpu_1x_h100_pcie,H100,1,26,200,{DISTINCT_PRICE},us-east-1,{H100_INFO},\n").encode()
TODAY = dt.date.today()


@pytest.fixture(autouse=True)
def no_real_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any host but this machine fails as if offline: a test can never reach the real network."""
    real = socket.getaddrinfo

    def local_only(host: object, *args: object, **kwargs: object) -> object:
        if host not in ("127.0.0.1", "localhost", b"127.0.0.1", b"localhost"):
            raise socket.gaierror(socket.EAI_NONAME, "no network in tests")
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", local_only)
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    monkeypatch.setenv("FTSOLVE_HOME", str(folder))
    return folder


Route = bytes | int | Callable[[], bytes]


@dataclass
class Server:
    """A catalogs/v8/ folder over HTTP: `routes` maps '<provider>/vms.csv' to a body, an HTTP status,
    or a callable (run per request, e.g. to stall); anything else is 404."""

    url: str
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    closing: threading.Event = field(default_factory=threading.Event)

    def location(self, provider: str) -> str:
        return f"{self.url}{provider}/vms.csv"


@pytest.fixture()
def server() -> Iterator[Server]:
    state = Server(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.removeprefix("/catalogs/v8/")
            state.requests.append(path)
            route = state.routes.get(path, 404)
            if callable(route):
                route = route()
            if isinstance(route, int):
                self.send_error(route)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Length", str(len(route)))
            self.end_headers()
            self.wfile.write(route)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Quiet(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            # A client that gave up (a timeout test) breaks the pipe; printed, it would land in
            # the output a later CliRunner captures.
            pass

    httpd = Quiet(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/catalogs/v8/"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.closing.set()
        httpd.shutdown()
        httpd.server_close()


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def update(server: Server, *args: str) -> tuple[int, str]:
    return run("catalog", "update", "--from", server.url, *args)


def _one_error_line(out: str) -> str:
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, out
    assert "Traceback" not in out, out
    return errors[0]


def test_update_then_plan_shows_the_fetched_price_with_its_date_and_url(home: Path, server: Server) -> None:
    server.routes["lambda/vms.csv"] = CHEAP_H100
    code, out = update(server, "--providers", "lambda")
    assert code == 0, out
    assert f"updated 1 offers from 1 provider into {user_catalog_path()}; prices dated {TODAY}" in out

    plan_args = ["plan", "--model", "llama-3.1-8b", "--train-tokens", "20M", "--seq-len", "2048"]
    code, out = run(*plan_args, "--providers", "lambda", "--json")
    assert code == 0, out
    best = json.loads(out)["plans"][0]
    assert best["price_usd_per_gpu_hour"] == pytest.approx(DISTINCT_PRICE)
    assert best["price_date"] == TODAY.isoformat()
    assert best["offer"]["source"] == server.location("lambda")
    assert best["offer"]["price_date_estimated"] is False
    assert best["offer"]["price_kind"] == "list"  # Lambda's own price list, dated by the fetch
    assert best["offer"]["country"] == "US"  # from the bundled catalog's lambda us-east-1

    code, out = run(*plan_args, "--providers", "lambda", "--top", "1")
    assert code == 0, out
    assert f"{DISTINCT_PRICE} USD/GPU-h (list price) dated {TODAY}" in out


def test_a_full_provider_file_replaces_the_bundled_offers_of_that_provider(home: Path, server: Server) -> None:
    before = [o for o in load_catalog().offers if o.provider == "lambda"]
    server.routes["lambda/vms.csv"] = LAMBDA_V8
    code, out = update(server, "--providers", "lambda")
    assert code == 0, out
    assert "lambda: 357 offers; skipped 51 rows" in out
    after = [o for o in load_catalog().offers if o.provider == "lambda"]
    # The bundled lambda offers come from the same file: every key is replaced, none added or doubled.
    assert sorted(o.key for o in after) == sorted(o.key for o in before)
    assert {o.price_date for o in after} == {TODAY}
    assert {o.source for o in after} == {server.location("lambda")}
    by_key = {o.key: o for o in before}
    assert all(o.country == by_key[o.key].country for o in after)


def _vms_csv(rows: list[dict[str, str]]) -> bytes:
    """A v8 vms.csv rebuilt from the compact extract's rows of one cloud (memory per GPU in GpuInfo)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(SKY_HEADER.strip().split(","))
    for r in rows:
        mem = r["accelerator_memory_gib"]
        gpu = {"Name": r["accelerator_name"], "MemoryInfo": {"SizeInMiB": float(mem or 0) * 1024}}
        info = repr({"Gpus": [gpu]})
        w.writerow(
            [
                r["instance_type"],
                r["accelerator_name"],
                r["accelerator_count"],
                r["vcpus"],
                r["memory_gib"],
                r["price_per_hour"],
                r["region"],
                info if mem else "",
                r["spot_price_per_hour"],
            ]
        )
    return out.getvalue().encode()


def test_every_provider_of_the_bundled_snapshot_updates_onto_the_same_keys(home: Path, server: Server) -> None:
    """The bundled SkyPilot offers were built from these files: an update of them changes dates and
    sources, never keys (tier, region) or countries, so no offer is listed twice."""
    with open(EXTRACT, newline="") as f:
        rows = list(csv.DictReader(f))
    clouds = sorted({r["cloud"] for r in rows} & set(SKYPILOT_PROVIDERS))
    assert {"aws", "lambda", "shadeform", "primeintellect", "vast", "verda", "seeweb"} <= set(clouds)
    for cloud in clouds:
        server.routes[f"{cloud}/vms.csv"] = _vms_csv([r for r in rows if r["cloud"] == cloud])
    bundled = load_catalog(user=False).offers
    report = update_catalog(server.url, providers=clouds)
    assert report.missing == []
    fetched = {o.key: o for o in report.offers}
    for cloud in clouds:
        built = f"skypilot-org/skypilot-catalog catalogs/v8/{cloud}/vms.csv (see SOURCES.md)"
        old = {o.key: o for o in bundled if o.source == built}
        new = {k: o for k, o in fetched.items() if o.provider == cloud}
        assert set(new) == set(old), cloud
        assert all(o.country == old[k].country for k, o in new.items()), cloud
    seeweb = [o for o in report.offers if o.provider == "seeweb"]
    assert seeweb and {o.price_kind for o in seeweb} == {"estimate"}  # a EUR price printed as USD, still
    assert all("likely EUR" in o.notes and o.currency == "EUR" and o.usd_per_unit for o in seeweb)
    # Vast's file has no bid price: the refreshed offers get the bundled ones' estimate.
    old_vast = {o.key: o for o in bundled if o.provider == "vast"}
    new_vast = [o for o in report.offers if o.provider == "vast"]
    assert any(o.interruptible_usd_per_gpu_hour for o in new_vast)
    for o in new_vast:
        assert o.interruptible_usd_per_gpu_hour == old_vast[o.key].interruptible_usd_per_gpu_hour, o.key
    merged = load_catalog().offers
    assert len({o.key for o in merged}) == len(merged)


def test_tiers_match_the_bundled_catalog_for_every_skypilot_cloud() -> None:
    for o in load_catalog(user=False).offers:
        from_skypilot = f"skypilot-org/skypilot-catalog catalogs/v8/{o.provider}/vms.csv (see SOURCES.md)"
        if o.source == from_skypilot or o.provider == "azure":
            assert skypilot_tier(o.provider, o.instance_type) == o.tier, o.key
    assert skypilot_tier("shadeform", "nebius_H100-sxm5") == "via nebius"
    assert skypilot_tier("primeintellect", "datacrunch__8xH100") == "via datacrunch"


def test_a_provider_missing_upstream_is_reported_and_skipped(home: Path, server: Server) -> None:
    server.routes["lambda/vms.csv"] = CHEAP_H100
    server.routes["runpod/vms.csv"] = 410
    code, out = update(server, "--providers", "lambda,vast,runpod")
    assert code == 0, out
    assert f"warning: vast: no file at {server.location('vast')}; skipped" in out
    assert f"warning: runpod: no file at {server.location('runpod')}; skipped" in out
    assert "updated 1 offers from 1 provider" in out
    assert sorted(server.requests) == ["lambda/vms.csv", "runpod/vms.csv", "vast/vms.csv"]


def test_by_default_every_known_provider_is_fetched_from_the_base(home: Path, server: Server) -> None:
    server.routes["lambda/vms.csv"] = CHEAP_H100
    code, out = update(server)
    assert code == 0, out
    assert sorted(server.requests) == sorted(f"{p}/vms.csv" for p in SKYPILOT_PROVIDERS)
    assert "gcp" not in SKYPILOT_PROVIDERS  # its GPU prices are rows of their own, not per instance


def test_no_file_anywhere_is_an_error(home: Path, server: Server) -> None:
    code, out = update(server, "--providers", "lambda,vast")
    assert code == 2
    assert "no SkyPilot v8 vms.csv for lambda, vast under" in _one_error_line(out)
    assert not user_catalog_path().exists()


def _catalog_with_one_update(server: Server) -> bytes:
    server.routes["lambda/vms.csv"] = LAMBDA_V8
    code, out = update(server, "--providers", "lambda")
    assert code == 0, out
    return user_catalog_path().read_bytes()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_offline_is_one_line_that_says_what_to_do(home: Path, server: Server) -> None:
    before = _catalog_with_one_update(server)
    code, out = run("catalog", "update", "--from", f"http://127.0.0.1:{_closed_port()}/", "--providers", "lambda")
    assert code == 2
    line = _one_error_line(out)
    assert "cannot download" in line and "To fix" in line and "--from FOLDER" in line
    assert user_catalog_path().read_bytes() == before


def test_the_default_source_is_skypilot_catalog_and_offline_it_fails_cleanly(home: Path) -> None:
    assert DEFAULT_SOURCE == "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v8/"
    origin = resolve_origin(DEFAULT_SOURCE)
    assert origin.location("lambda") == DEFAULT_SOURCE + "lambda/vms.csv"
    # The network guard makes raw.githubusercontent.com unresolvable, as on a machine offline.
    code, out = run("catalog", "update", "--providers", "lambda")
    assert code == 2
    line = _one_error_line(out)
    assert f"cannot download {DEFAULT_SOURCE}lambda/vms.csv (host name not found; offline?)" in line


def test_a_stalled_server_times_out(home: Path, server: Server) -> None:
    def stall() -> bytes:
        server.closing.wait(3)
        return CHEAP_H100

    server.routes["lambda/vms.csv"] = stall
    start = time.monotonic()
    code, out = update(server, "--providers", "lambda", "--timeout", "0.3")
    assert code == 2
    assert "(timed out)" in _one_error_line(out)
    assert time.monotonic() - start < 2.5


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (500, "HTTP 500"),
        (b"<!doctype html><html><body>Sign in to this network</body></html>\n", "vast/vms.csv: not a SkyPilot"),
        (b"provider,price\nacme,1\n", "no InstanceType column"),
        ((SKY_HEADER + "gpu_1x_h100_pcie,H100,1,26,200,cheap,us-east-1,,\n").encode(), "row 2: field Price"),
        (b"\xff\xfe not utf-8", "not UTF-8"),
    ],
)
def test_a_bad_file_refuses_the_whole_update(home: Path, server: Server, body: Route, message: str) -> None:
    before = _catalog_with_one_update(server)
    server.routes["lambda/vms.csv"] = CHEAP_H100
    server.routes["vast/vms.csv"] = body
    code, out = update(server, "--providers", "lambda,vast")
    assert code == 2, out
    assert message in _one_error_line(out)
    assert user_catalog_path().read_bytes() == before  # lambda's good file was not merged either


def test_a_file_from_the_extract_format_is_refused(home: Path, server: Server) -> None:
    server.routes["lambda/vms.csv"] = EXTRACT.read_bytes()
    code, out = update(server, "--providers", "lambda")
    assert code == 2
    assert "not a SkyPilot v8 vms.csv" in _one_error_line(out)


def test_an_interrupted_update_leaves_the_user_catalog_as_it_was(home: Path, server: Server) -> None:
    before = _catalog_with_one_update(server)
    server.routes["lambda/vms.csv"] = CHEAP_H100
    server.routes["vast/vms.csv"] = CHEAP_H100

    def interrupt(step: FetchProgress) -> None:
        if step.provider == "vast" and step.done_bytes:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        update_catalog(server.url, providers=["lambda", "vast"], progress=interrupt)
    assert user_catalog_path().read_bytes() == before
    assert [p.name for p in home.iterdir() if p.suffix == ".tmp"] == []


def test_a_failed_write_leaves_the_user_catalog_as_it_was(
    home: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _catalog_with_one_update(server)
    server.routes["lambda/vms.csv"] = CHEAP_H100

    def refuse(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("ftsolve._files.os.replace", refuse)
    code, out = update(server, "--providers", "lambda")
    assert code == 2
    assert "No space left on device" in _one_error_line(out)
    assert user_catalog_path().read_bytes() == before
    assert [p.name for p in home.iterdir() if p.suffix == ".tmp"] == []


def test_updates_are_idempotent_and_keep_the_users_own_offers(home: Path, server: Server, tmp_path: Path) -> None:
    own = tmp_path / "mine.csv"
    own.write_text(
        "provider,tier,instance_type,gpu,gpus_per_node,on_demand_usd_per_gpu_hour,"
        "interruptible_usd_per_gpu_hour,region,price_date,source\n"
        "acme,std,a1,h100-sxm,8,2.5,,eu-1,2026-10-01,my contract\n"
    )
    assert run("catalog", "import", str(own))[0] == 0
    first = _catalog_with_one_update(server)
    assert _catalog_with_one_update(server) == first
    offers = ftsolve.catalog._import.read_user_offers(user_catalog_path(), load_catalog().gpus).offers
    assert len(offers) == 358
    assert any(o.provider == "acme" for o in offers)


def _folder(tmp_path: Path, files: dict[str, bytes], modified: dt.date) -> Path:
    root = tmp_path / "catalogs" / "v8"
    for provider, body in files.items():
        path = root / provider / "vms.csv"
        path.parent.mkdir(parents=True)
        path.write_bytes(body)
        stamp = time.mktime(modified.timetuple()) + 12 * 3600
        os.utime(path, (stamp, stamp))
    return root


def test_from_a_local_folder_dates_prices_by_the_files(home: Path, tmp_path: Path) -> None:
    month_ago = TODAY - dt.timedelta(days=30)
    root = _folder(tmp_path, {"lambda": CHEAP_H100}, month_ago)
    code, out = run("catalog", "update", "--from", str(root), "--providers", "lambda,vast")
    assert code == 0, out
    assert f"prices dated {month_ago} (the files' modification dates, estimated)" in out
    assert "warning: vast: no file at" in out
    (offer,) = ftsolve.catalog._import.read_user_offers(user_catalog_path(), load_catalog().gpus).offers
    assert offer.source == str((root / "lambda" / "vms.csv").resolve())
    assert (offer.price_date, offer.price_date_estimated) == (month_ago, True)
    # file:// URLs name the same folder.
    code, out = run("catalog", "update", "--from", root.resolve().as_uri(), "--providers", "lambda", "--dry-run")
    assert code == 0, out


def test_the_newest_price_wins(home: Path, tmp_path: Path) -> None:
    key_fields = "lambda,on-demand/spot,gpu_1x_h100_pcie,h100-pcie,1"
    newer = tmp_path / "newer.csv"
    newer.write_text(
        "provider,tier,instance_type,gpu,gpus_per_node,on_demand_usd_per_gpu_hour,"
        f"interruptible_usd_per_gpu_hour,region,price_date,source\n{key_fields},2.22,,us-east-1,{TODAY},quote\n"
    )
    assert run("catalog", "import", str(newer))[0] == 0
    root = _folder(tmp_path, {"lambda": CHEAP_H100}, TODAY - dt.timedelta(days=30))
    code, out = run("catalog", "update", "--from", str(root), "--providers", "lambda")
    assert code == 0, out
    (offer,) = ftsolve.catalog._import.read_user_offers(user_catalog_path(), load_catalog().gpus).offers
    assert (offer.on_demand_usd_per_gpu_hour, offer.source) == (2.22, "quote")


def test_dry_run_writes_nothing(home: Path, server: Server) -> None:
    server.routes["lambda/vms.csv"] = CHEAP_H100
    code, out = update(server, "--providers", "lambda", "--dry-run")
    assert code == 0, out
    assert f"would update 1 offers from 1 provider; prices dated {TODAY}" in out
    assert not user_catalog_path().exists()


def test_progress_reports_each_file_as_it_downloads(server: Server) -> None:
    server.routes["lambda/vms.csv"] = LAMBDA_V8
    server.routes["vast/vms.csv"] = CHEAP_H100
    steps: list[FetchProgress] = []
    found, missing = fetch_catalogs(resolve_origin(server.url), ["lambda", "runpod", "vast"], progress=steps.append)
    assert [f.provider for f in found] == ["lambda", "vast"] and missing == ["runpod"]
    assert [(s.index, s.count) for s in steps if s.done_bytes == 0] == [(1, 3), (2, 3), (3, 3)]
    last = {s.provider: s for s in steps}
    assert (last["lambda"].done_bytes, last["lambda"].total_bytes) == (len(LAMBDA_V8), len(LAMBDA_V8))
    assert (last["vast"].done_bytes, last["vast"].total_bytes) == (len(CHEAP_H100), len(CHEAP_H100))


def test_the_progress_bar_is_drawn_only_on_a_terminal(
    home: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["lambda/vms.csv"] = LAMBDA_V8
    code, out = update(server, "--providers", "lambda")
    assert code == 0
    assert out.splitlines()[0].startswith("lambda: 357 offers")  # piped: no bar, no stray lines

    terminal = io.StringIO()
    monkeypatch.setattr(
        "ftsolve.cli._catalog.console",
        lambda stderr=False: Console(file=terminal, force_terminal=True, width=100),
    )
    code, out = update(server, "--providers", "lambda")
    assert code == 0, out
    assert "1/1 lambda" in terminal.getvalue()
    assert "1/1 lambda" not in out


def test_a_file_over_the_size_limit_is_refused(server: Server) -> None:
    server.routes["lambda/vms.csv"] = LAMBDA_V8
    with pytest.raises(CatalogError, match="larger than 0 MiB"):
        fetch_catalogs(resolve_origin(server.url), ["lambda"], max_bytes=1000)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--providers", "lamda"), "unknown SkyPilot provider 'lamda'. Did you mean lambda?"),
        (("--providers", "gcp"), "unknown SkyPilot provider 'gcp'"),
        (("--providers", ","), "--providers is empty"),
        (("--timeout", "0"), "Invalid value for '--timeout'"),
        (("--from", "ftp://example.org/v8/"), "unsupported URL scheme 'ftp'"),
        (("--from", "https:///v8/"), "the URL names no host"),
        (("--from", "no/such/folder"), "not a folder"),
        (("--from", "http://[::1/v8/"), "not a valid URL"),
        (("--from", "http://127.0.0.1:99999/v8/"), "not a valid URL (Port out of range"),
        (("--from", "http://127.0.0.1:x/v8/"), "not a valid URL"),
        (("--from", "http://127.0.0.1/my mirror/v8/"), "write a space as %20"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(home: Path, args: tuple[str, ...], message: str) -> None:
    code, out = run("catalog", "update", *args)
    assert code == 2
    assert message in out
    assert "Traceback" not in out
