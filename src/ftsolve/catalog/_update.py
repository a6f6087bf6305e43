"""Refreshing prices: `ftsolve catalog update` downloads SkyPilot's v8 catalog files and merges them into
the user catalog. This is the only code in ftsolve that uses the network.

    resolve_origin     --from: a base URL (default: skypilot-catalog's raw files) or a local folder
    fetch_catalogs     <base>/<provider>/vms.csv for each provider, size- and time-limited; 404 = missing
    offers_of          the files through the same importer as `ftsolve catalog import` (read_skypilot)
    merge              one atomic write of the user catalog under its lock (merge_into_user_catalog)

Every file is downloaded and validated before the user catalog is touched, so a failed or interrupted
update leaves it as it was.
"""

from __future__ import annotations

import datetime as dt
import socket
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ftsolve._errors import CatalogError, UnknownCatalogEntry
from ftsolve._files import MIB, OFFERS_FILE_MAX_BYTES
from ftsolve.catalog._import import (
    SKYPILOT_V8_COLUMNS,
    merge_into_user_catalog,
    read_offers_text,
    read_skypilot,
    user_catalog_path,
)
from ftsolve.catalog._load import _table, load_catalog
from ftsolve.catalog._models import GpuSpec, Offer, echo
from ftsolve.catalog._skypilot_facts import SKYPILOT_NOTES, completed, skypilot_tier

# SkyPilot reads its catalogs from here (sky/catalog/common.py: the hosted catalog of the schema
# version its release uses, v8 for SkyPilot 0.10-0.14).
DEFAULT_SOURCE = "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v8/"
DEFAULT_TIMEOUT_S = 60.0

# SkyPilot clouds whose v8 vms.csv prices a whole GPU instance in one row, as read_skypilot reads it,
# and that ftsolve has offers or defaults for. Not here: gcp (a GPU's price is a separate accelerator
# row added to its host VM's row, which the importer does not join), mithril (placeholder or
# auction-floor prices, ../shared/data/SOURCES.md), fluidstack (no v8 file; its bundled offer comes
# from v9), and clouds ftsolve knows nothing about (oci, lium, spheron, yotta, daytona, ...).
SKYPILOT_PROVIDERS = (
    "aws",
    "azure",
    "cudo",
    "hyperbolic",
    "hyperstack",
    "jarvislabs",
    "lambda",
    "nebius",
    "primeintellect",
    "runpod",
    "seeweb",
    "shadeform",
    "vast",
    "verda",
)

_CHUNK_BYTES = 256 * 1024
_MISSING_STATUS = (404, 410)


@dataclass(frozen=True)
class Origin:
    """Where the files come from: a base URL ending in '/', or a local folder laid out like catalogs/v8/."""

    base: str
    folder: Path | None

    def location(self, provider: str) -> str:
        """The URL or path of a provider's vms.csv: the source its offers name."""
        if self.folder is not None:
            return str(self.folder / provider / "vms.csv")
        return urllib.parse.urljoin(self.base, f"{provider}/vms.csv")


@dataclass(frozen=True)
class FetchProgress:
    """One step of a download, for a progress indicator: file `index` of `count`."""

    provider: str
    index: int
    count: int
    done_bytes: int
    total_bytes: int | None


@dataclass(frozen=True)
class Fetched:
    """A provider's vms.csv as downloaded or read, with the date its prices are given."""

    provider: str
    location: str
    text: str
    price_date: dt.date
    date_estimated: bool


@dataclass(frozen=True)
class ProviderUpdate:
    """What one provider's file gave: offers, rows skipped by reason, or missing (no file there)."""

    provider: str
    location: str
    offers: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    missing: bool = False


@dataclass(frozen=True)
class UpdateReport:
    """The outcome of an update: per provider, the offers merged, and the user catalog written."""

    origin: Origin
    providers: tuple[ProviderUpdate, ...]
    offers: tuple[Offer, ...]
    path: Path | None  # None on a dry run

    @property
    def missing(self) -> list[str]:
        return [p.provider for p in self.providers if p.missing]


def resolve_origin(source: str) -> Origin:
    """--from as an Origin: an http(s) URL, a file:// URL or a local folder."""
    try:
        parsed = urllib.parse.urlsplit(source)
        _ = parsed.port  # a port out of range or not a number
    except ValueError as exc:
        raise CatalogError(f"--from {echo(source, 80)}: not a valid URL ({exc})") from None
    if parsed.scheme in ("http", "https"):
        if not parsed.netloc:
            raise CatalogError(f"--from {echo(source, 80)}: the URL names no host")
        if any(ch.isspace() or not ch.isprintable() for ch in source):
            raise CatalogError(f"--from {echo(source, 80)}: a URL has no spaces; write a space as %20")
        return Origin(source if source.endswith("/") else source + "/", None)
    path = Path(_url2pathname(parsed.path)) if parsed.scheme == "file" else Path(source)
    if len(parsed.scheme) > 1 and parsed.scheme != "file":  # one letter: a Windows drive (C:\...)
        raise CatalogError(
            f"--from {echo(source, 80)}: unsupported URL scheme {parsed.scheme!r}; give an http(s) URL or a folder"
        )
    if not path.is_dir():
        raise CatalogError(
            f"--from {echo(source, 80)}: not a folder (expected a folder laid out like catalogs/v8/, "
            "with <provider>/vms.csv files) nor an http(s) URL"
        )
    return Origin(str(path.resolve()), path.resolve())


def select_providers(names: Iterable[str] | None) -> tuple[str, ...]:
    """The providers to refresh: all of SKYPILOT_PROVIDERS, or the named ones (each must be one)."""
    if names is None:
        return SKYPILOT_PROVIDERS
    chosen = tuple(dict.fromkeys(n.strip().lower() for n in names if n.strip()))
    for name in chosen:
        if name not in SKYPILOT_PROVIDERS:
            raise UnknownCatalogEntry("SkyPilot provider", name, list(SKYPILOT_PROVIDERS))
    if not chosen:
        raise CatalogError(f"--providers is empty; give some of {', '.join(SKYPILOT_PROVIDERS)}")
    return chosen


def fetch_catalogs(
    origin: Origin,
    providers: Sequence[str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    today: dt.date | None = None,
    progress: Callable[[FetchProgress], None] | None = None,
    max_bytes: int | None = None,
) -> tuple[list[Fetched], list[str]]:
    """(the files found, the providers whose file is missing). A downloaded file's prices are dated
    `today` (the fetch date); a local file's by its modification date, as an estimate."""
    today = today or dt.date.today()
    limit = OFFERS_FILE_MAX_BYTES if max_bytes is None else max_bytes
    found: list[Fetched] = []
    missing: list[str] = []
    for index, provider in enumerate(providers, start=1):
        where = origin.location(provider)

        def step(done: int, total: int | None, provider: str = provider, index: int = index) -> None:
            if progress is not None:
                progress(FetchProgress(provider, index, len(providers), done, total))

        step(0, None)
        if origin.folder is not None:
            fetched = _read_local(Path(where), provider, today)
        else:
            fetched = _download(where, provider, timeout_s, limit, step, today)
        if fetched is None:
            missing.append(provider)
        else:
            found.append(fetched)
    return found, missing


def _read_local(path: Path, provider: str, today: dt.date) -> Fetched | None:
    if not path.exists():
        return None
    text = read_offers_text(path)
    try:
        # A clock-skewed modification time in the future would date every offer after today.
        modified = min(dt.date.fromtimestamp(path.stat().st_mtime), today)
    except (OSError, OverflowError, ValueError):
        modified = today
    return Fetched(provider, str(path), text, modified, True)


def _offline(url: str, reason: str) -> CatalogError:
    host = urllib.parse.urlsplit(url).netloc
    return CatalogError(
        f"cannot download {url} ({reason}). To fix: check the connection to {host} and run the update again, "
        "or fetch catalogs/v8/<provider>/vms.csv elsewhere and run `ftsolve catalog update --from FOLDER`; "
        "plans keep using the catalog you have"
    )


def _url2pathname(path: str) -> str:
    import urllib.request

    return urllib.request.url2pathname(path)


def _reason(exc: BaseException) -> str:
    import urllib.error

    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        inner = exc.reason
        return _reason(inner) if isinstance(inner, BaseException) else " ".join(str(inner).split())
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(exc, socket.gaierror):
        return "host name not found; offline?"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split())[:120] or type(exc).__name__


def _download(
    url: str,
    provider: str,
    timeout_s: float,
    max_bytes: int,
    step: Callable[[int, int | None], None],
    today: dt.date,
) -> Fetched | None:
    """The text of one file, None when the server has none (404/410); one-line errors otherwise.
    `timeout_s` bounds the connection and every wait for data."""
    # Imported here: ssl alone adds ~60 ms to every `ftsolve catalog ...` command that never downloads.
    import http.client
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": "ftsolve-catalog-update"})
    chunks: list[bytes] = []
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            if total is not None and total > max_bytes:
                raise _too_large(url, max_bytes)
            done = 0
            while chunk := response.read(_CHUNK_BYTES):
                done += len(chunk)
                if done > max_bytes:
                    raise _too_large(url, max_bytes)
                chunks.append(chunk)
                step(done, total)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the response, and with it the connection
        if exc.code in _MISSING_STATUS:
            return None
        raise CatalogError(
            f"cannot download {url} (HTTP {exc.code} {' '.join(str(exc.reason).split())[:80]}); try again later, "
            "or run `ftsolve catalog update --from FOLDER` with files fetched elsewhere"
        ) from None
    except ValueError as exc:  # http.client.InvalidURL, which resolve_origin's checks should prevent
        raise CatalogError(f"--from: {echo(url, 120)} is not a valid URL ({exc})") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        raise _offline(url, _reason(exc)) from None
    try:
        text = b"".join(chunks).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{url}: not UTF-8 text (byte {exc.start}); is it a SkyPilot vms.csv?") from None
    return Fetched(provider, url, text, today, False)


def _too_large(url: str, max_bytes: int) -> CatalogError:
    return CatalogError(f"{url}: larger than {max_bytes // MIB} MiB; is --from the catalogs/v8/ folder?")


def offers_of(
    fetched: Fetched, gpus: Mapping[str, GpuSpec], countries: Mapping[tuple[str, str], str]
) -> tuple[list[Offer], ProviderUpdate]:
    """A provider's offers from its file, through `catalog import`'s reader, dated and sourced by the
    fetch. A file that is not a SkyPilot v8 vms.csv, or has a broken value, refuses the update."""
    header = _table(fetched.text, fetched.location)[0]
    absent = [c for c in SKYPILOT_V8_COLUMNS if c not in header]
    if absent:
        # A captive portal's page or an error page served with 200 lands here too.
        raise CatalogError(
            f"{fetched.location}: not a SkyPilot v8 vms.csv (no {absent[0]} column); "
            "--from takes the catalogs/v8/ folder or its URL"
        )
    report = read_skypilot(
        fetched.text,
        fetched.location,
        gpus,
        provider=fetched.provider,
        price_date=lambda _p: (fetched.price_date, fetched.date_estimated),
        source=lambda _p: fetched.location,
        country=lambda provider, region: countries.get((provider, region)) or _country_in_region(provider, region),
        tier=skypilot_tier,
        notes=lambda provider: SKYPILOT_NOTES.get(provider, ""),
    )
    offers = [completed(o) for o in report.offers]
    summary = ProviderUpdate(
        fetched.provider, fetched.location, len(offers), dict(report.skipped), tuple(report.warnings)
    )
    return offers, summary


def _country_in_region(provider: str, region: str) -> str:
    # RunPod and Prime Intellect name regions by country code; Vast as "Bavaria, DE, EU".
    if provider in ("runpod", "primeintellect"):
        code = region.strip()
    elif provider == "vast":
        parts = [p.strip() for p in region.split(",")]
        code = parts[1] if len(parts) > 1 else ""
    else:
        return ""
    return code if len(code) == 2 and code.isascii() and code.isalpha() else ""


def bundled_countries(offers: Iterable[Offer]) -> dict[tuple[str, str], str]:
    """(provider, region) -> country as the bundled catalog records it (each with its source there):
    SkyPilot's files carry no country, and --eu-only needs one."""
    out: dict[tuple[str, str], str] = {}
    for o in offers:
        if o.country:
            out.setdefault((o.provider, o.region), o.country)
    return out


def update_catalog(
    source: str = DEFAULT_SOURCE,
    *,
    providers: Iterable[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    dry_run: bool = False,
    today: dt.date | None = None,
    progress: Callable[[FetchProgress], None] | None = None,
    path: Path | None = None,
) -> UpdateReport:
    """Download SkyPilot's v8 vms.csv of each provider from `source` (a base URL or a folder laid out
    like catalogs/v8/), validate them and merge their offers into the user catalog in one atomic write.

    Same offer key: the fetched offer replaces the stored one, unless the stored price is newer.
    A provider without a file there is reported and skipped; any other failure raises CatalogError
    (exit 2) before the user catalog is touched.
    """
    origin = resolve_origin(source)
    chosen = select_providers(providers)
    fetched, missing = fetch_catalogs(origin, chosen, timeout_s=timeout_s, today=today, progress=progress)
    if not fetched:
        raise CatalogError(
            f"no SkyPilot v8 vms.csv for {', '.join(chosen)} under {origin.base}; "
            "--from takes the catalogs/v8/ folder (or its URL), with one <provider>/vms.csv per provider"
        )
    bundled = load_catalog(user=False)
    countries = bundled_countries(bundled.offers)
    offers: list[Offer] = []
    summaries: dict[str, ProviderUpdate] = {p: ProviderUpdate(p, origin.location(p), missing=True) for p in missing}
    for f in fetched:
        got, summaries[f.provider] = offers_of(f, bundled.gpus, countries)
        offers += got
    if not offers:
        raise CatalogError(f"no usable offers in the files under {origin.base}; the user catalog is unchanged")
    target = None
    if not dry_run:
        target = merge_into_user_catalog(offers, bundled.gpus, path or user_catalog_path(), keep_newer=True)
    return UpdateReport(origin, tuple(summaries[p] for p in chosen), tuple(offers), target)
