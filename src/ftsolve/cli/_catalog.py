"""`ftsolve catalog …` and `ftsolve models …`: inspect, validate and import catalog data."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import click
from rich.table import Table

from ftsolve._errors import CatalogError, UnknownCatalogEntry
from ftsolve.catalog import load_catalog, load_config_json, provider_defaults, resolve_gpu
from ftsolve.catalog._import import (
    ImportReport,
    merge_into_user_catalog,
    offers_format,
    read_offers_text,
    read_skypilot,
    user_offers_from_text,
)
from ftsolve.catalog._load import Catalog, deep_discounts, load_gpus, stale_offers
from ftsolve.catalog._models import MAX_PLAUSIBLE_DISCOUNT, Offer, PriceKind, echo
from ftsolve.catalog._update import DEFAULT_SOURCE, DEFAULT_TIMEOUT_S, SKYPILOT_PROVIDERS, FetchProgress, update_catalog
from ftsolve.cli._common import console, errors, one_line, plain


def _filtered(
    cat: Catalog,
    gpu: str | None,
    provider: str | None,
    region: str | None,
    country: str | None,
    min_memory: float | None,
) -> list[Offer]:
    offers = list(cat.offers)
    if gpu:
        wanted = {g.strip() for g in gpu.split(",")}
        unknown = [g for g in wanted if g not in cat.gpus]
        if unknown:
            raise UnknownCatalogEntry("GPU", unknown[0], list(cat.gpus))
        offers = [o for o in offers if o.gpu in wanted]
    if provider:
        allowed = {p.strip().lower() for p in provider.split(",")}
        offers = [o for o in offers if o.provider.lower() in allowed]
    if region:
        offers = [o for o in offers if o.region.lower() in {r.strip().lower() for r in region.split(",")}]
    if country:
        offers = [o for o in offers if (o.country or "") in {c.strip().upper() for c in country.split(",")}]
    if min_memory is not None:
        offers = [o for o in offers if cat.gpus[o.gpu].memory_gib >= min_memory]
    return offers


def _warn_stale(offers: list[Offer], max_age_days: int) -> None:
    old = stale_offers(offers, max_age_days)
    if old:
        oldest = min(o.price_date for o in old)
        click.echo(
            f"warning: {len(old)} of {len(offers)} offers have prices older than {max_age_days} days "
            f"(oldest {oldest}); refresh them with `ftsolve catalog update` or `ftsolve catalog import`",
            err=True,
        )


@click.group("catalog")
def catalog_group() -> None:
    """Offers and GPUs: list, show, validate, import, update."""


@catalog_group.command("list")
@click.option("--gpu", help="Canonical GPU ids, comma-separated.")
@click.option("--provider", help="Providers, comma-separated.")
@click.option("--region", help="Regions, comma-separated.")
@click.option("--country", help="ISO country codes, comma-separated.")
@click.option("--min-memory", type=float, help="Minimum GPU memory in GiB.")
@click.option("--max-age-days", type=int, default=180, show_default=True, help="Warn about older prices.")
@click.option("--limit", type=int, default=40, show_default=True, help="Rows in the table (JSON has all).")
@click.option("--offers", "offers_path", type=click.Path(dir_okay=False), help="Extra offers file.")
@click.option("--json", "as_json", is_flag=True)
@errors
def catalog_list(
    gpu: str | None,
    provider: str | None,
    region: str | None,
    country: str | None,
    min_memory: float | None,
    max_age_days: int,
    limit: int,
    offers_path: str | None,
    as_json: bool,
) -> None:
    """List offers, cheapest on-demand GPU-hour first."""
    cat = load_catalog(offers_path)
    offers = _filtered(cat, gpu, provider, region, country, min_memory)
    offers.sort(key=lambda o: (o.on_demand_usd_per_gpu_hour or o.interruptible_usd_per_gpu_hour or 0, o.key))
    _warn_stale(offers, max_age_days)
    if as_json:
        click.echo(json.dumps([o.model_dump(mode="json") for o in offers], indent=2))
        return
    t = Table(title=f"{len(offers)} offers")
    for col in (
        "provider",
        "tier",
        "instance",
        "region",
        "cc",
        "GPU",
        "per node",
        "on-demand $/GPU-h",
        "interruptible $/GPU-h",
        "price date",
    ):
        t.add_column(col)
    for o in offers[:limit]:
        t.add_row(
            o.provider,
            o.tier,
            o.instance_type,
            o.region,
            o.country or "",
            o.gpu,
            str(o.gpus_per_node),
            _price(o.on_demand_usd_per_gpu_hour, o.price_kind),
            _price(o.interruptible_usd_per_gpu_hour, o.interruptible_price_kind),
            o.price_date.isoformat() + ("*" if o.price_date_estimated else ""),
        )
    console().print(t)
    if len(offers) > limit:
        click.echo(f"... {len(offers) - limit} more (--limit, or --json for all). * = estimated date")


def _price(usd: float | None, kind: PriceKind) -> str:
    if usd is None:
        return "-"
    return f"{usd:.3f}" if kind == "list" else f"{usd:.3f} {kind}"


@catalog_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@errors
def catalog_show(name: str, as_json: bool) -> None:
    """Show a GPU (canonical id or a provider's spelling) or an offer (provider/tier/instance/region)."""
    cat = load_catalog()
    offer = next((o for o in cat.offers if o.key == name), None)
    if offer is not None:
        d = provider_defaults(offer.provider)
        data = offer.model_dump(mode="json") | {
            "effective": {
                "interruption_rate_per_hour": offer.interruption_rate_per_hour
                if offer.interruption_rate_per_hour is not None
                else d.interruption_rate_per_hour,
                "interruption_source": "offer"
                if offer.interruption_rate_per_hour is not None
                else d.interruption_source,
                "storage_usd_per_gb_month": offer.storage_usd_per_gb_month or d.storage_usd_per_gb_month,
                "storage_source": "offer" if offer.storage_usd_per_gb_month else d.storage_source,
                "provisioning_minutes": d.provisioning_minutes,
                "provisioning_source": d.provisioning_source,
                "inter_node_gbit_per_s": d.inter_node_gbit_per_s,
                "network_source": d.network_source,
                "egress_usd_per_gb": d.egress_usd_per_gb,
                "egress_source": d.egress_source,
            }
        }
    else:
        gpu_id = name if name in cat.gpus else resolve_gpu(name, known_memory_gib=None)
        if gpu_id is None or gpu_id not in cat.gpus:
            keys = list(cat.gpus) + [o.key for o in cat.offers]
            raise UnknownCatalogEntry("GPU or offer", name, keys)
        g = cat.gpus[gpu_id]
        offers = [o for o in cat.offers if o.gpu == gpu_id]
        data = g.model_dump(mode="json") | {
            "software_stack": g.software_stack,
            "usable_memory_gib": round(g.memory_gib * 0.95, 2),
            "offers": len(offers),
            "cheapest_on_demand_usd_per_gpu_hour": min(
                (o.on_demand_usd_per_gpu_hour for o in offers if o.on_demand_usd_per_gpu_hour), default=None
            ),
            "cheapest_interruptible_usd_per_gpu_hour": min(
                (o.interruptible_usd_per_gpu_hour for o in offers if o.interruptible_usd_per_gpu_hour),
                default=None,
            ),
        }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    width = max(len(k) for k in data)
    for key, value in data.items():
        if isinstance(value, dict):
            for k2, v2 in value.items():
                click.echo(f"{key + '.' + k2:{width + 28}s} {plain(v2)}")
        else:
            click.echo(f"{key:{width + 28}s} {plain(value)}")


def _read_any(path: Path, provider: str | None, price_date: str | None) -> ImportReport:
    gpus = load_gpus()
    text = read_offers_text(path)
    fmt = offers_format(text, path)
    if fmt in ("yaml", "ftsolve"):
        return user_offers_from_text(text, path, gpus)
    date, estimated = _price_date(path, price_date)
    guess = provider or (path.parent.name if fmt == "skypilot" and path.name == "vms.csv" else None)
    report = read_skypilot(text, str(path), gpus, provider=guess, price_date=lambda _p: (date, estimated))
    if estimated:
        report.warnings.append(f"no --price-date given: prices dated {date} (file modification date, estimated)")
    return report


def _price_date(path: Path, price_date: str | None) -> tuple[dt.date, bool]:
    """The --price-date, else the file's modification date as an estimate (SkyPilot files carry none)."""
    if price_date:
        try:
            return dt.date.fromisoformat(price_date), False
        except ValueError:
            raise CatalogError(f"invalid --price-date {echo(price_date)}: use YYYY-MM-DD") from None
    today = dt.date.today()
    try:
        modified = dt.date.fromtimestamp(path.stat().st_mtime)
    except (OSError, OverflowError, ValueError):
        return today, True
    # A clock-skewed mtime in the future would date every offer after today.
    return min(modified, today), True


@catalog_group.command("validate")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--provider", help="Cloud name for a SkyPilot vms.csv.")
@errors
def catalog_validate(path: Path, provider: str | None) -> None:
    """Check an offers file (ftsolve CSV/YAML or SkyPilot) without importing it."""
    report = _read_any(path, provider or "unnamed", "2000-01-01")
    for w in report.warnings + _discount_warnings(report.offers):
        click.echo(f"warning: {one_line(w)}", err=True)
    click.echo(f"ok: {len(report.offers)} offers" + _skipped_text(report))


_MAX_DISCOUNT_LINES = 20


def _discount_warnings(offers: list[Offer]) -> list[str]:
    """One line per offer whose interruptible price is implausibly far under on-demand."""
    deep = deep_discounts(offers)
    lines = [
        f"{echo(o.key, 80)}: interruptible {o.interruptible_usd_per_gpu_hour:g} USD/GPU-h is "
        f"{(o.interruptible_discount or 0.0):.0%} under on-demand {o.on_demand_usd_per_gpu_hour:g} "
        f"(more than {MAX_PLAUSIBLE_DISCOUNT:.0%}; kind {o.interruptible_price_kind}): check it is not a "
        "'from' price (price kind floor) or a stale one"
        for o in deep[:_MAX_DISCOUNT_LINES]
    ]
    if len(deep) > _MAX_DISCOUNT_LINES:
        lines.append(f"... and {len(deep) - _MAX_DISCOUNT_LINES} more offers with such discounts")
    return lines


def _skipped_text(report: ImportReport) -> str:
    return _skipped_rows(report.skipped)


def _skipped_rows(skipped: Counter[str]) -> str:
    if not skipped:
        return ""
    top = ", ".join(f"{n} {reason}" for reason, n in skipped.most_common(4))
    return f"; skipped {sum(skipped.values())} rows ({top})"


@catalog_group.command("import")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--provider", help="Cloud name for a SkyPilot vms.csv (default: its folder name).")
@click.option("--price-date", help="Date of the prices, YYYY-MM-DD (SkyPilot files carry none).")
@click.option("--dry-run", is_flag=True, help="Validate and report; write nothing.")
@errors
def catalog_import(path: Path, provider: str | None, price_date: str | None, dry_run: bool) -> None:
    """Import offers into the user catalog (SkyPilot v8 vms.csv, the compact extract, or your own CSV/YAML).

    User offers override bundled ones with the same provider/tier/instance/region. The user catalog
    is rewritten atomically: a failed import leaves it as it was.
    """
    report = _read_any(path, provider, price_date)
    for w in report.warnings:
        click.echo(f"warning: {one_line(w)}", err=True)
    if not report.offers:
        raise CatalogError(f"{path}: no usable offers" + _skipped_text(report))
    if dry_run:
        click.echo(f"would import {len(report.offers)} offers" + _skipped_text(report))
        return
    target = merge_into_user_catalog(report.offers, load_gpus())
    click.echo(f"imported {len(report.offers)} offers into {target}" + _skipped_text(report))


@catalog_group.command("update")
@click.option(
    "--from",
    "source",
    metavar="URL_OR_PATH",
    default=DEFAULT_SOURCE,
    help="Base URL of SkyPilot's catalogs/v8/ files, or a local folder laid out like it (default: "
    "skypilot-org/skypilot-catalog on GitHub).",
)
@click.option("--providers", metavar="LIST", help=f"Only these clouds (default all: {', '.join(SKYPILOT_PROVIDERS)}).")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for the server (to connect, and for each piece of data).",
)
@click.option("--dry-run", is_flag=True, help="Download and validate; write nothing.")
@errors
def catalog_update(source: str, providers: str | None, timeout_s: float, dry_run: bool) -> None:
    """Refresh prices from SkyPilot's v8 catalog files (the only command that uses the network).

    Each provider's <provider>/vms.csv is downloaded, validated and merged into the user catalog in
    one atomic write, its prices dated with the fetch date and sourced with the file's URL. A
    provider without a file there is reported and skipped; any other failure writes nothing.
    """
    with _download_progress() as progress:
        report = update_catalog(
            source,
            providers=providers.split(",") if providers is not None else None,
            timeout_s=timeout_s,
            dry_run=dry_run,
            progress=progress,
        )
    for p in report.providers:
        if p.missing:
            click.echo(f"warning: {p.provider}: no file at {one_line(p.location)}; skipped", err=True)
        for w in p.warnings:
            click.echo(f"warning: {p.provider}: {one_line(w)}", err=True)
    for p in report.providers:
        if not p.missing:
            click.echo(f"{p.provider}: {p.offers} offers" + _skipped_rows(Counter(p.skipped)))
    dates = sorted({o.price_date for o in report.offers})
    dated = f"prices dated {dates[0]}" + (f" to {dates[-1]}" if len(dates) > 1 else "")
    if any(o.price_date_estimated for o in report.offers):
        dated += " (the files' modification dates, estimated)"
    found = len(report.providers) - len(report.missing)
    what = f"{len(report.offers)} offers from {found} provider{'s' if found > 1 else ''}"
    if report.path is None:
        click.echo(f"would update {what}; {dated}")
    else:
        click.echo(f"updated {what} into {report.path}; {dated}")


@contextlib.contextmanager
def _download_progress() -> Iterator[Callable[[FetchProgress], None] | None]:
    """A progress bar on stderr while files download, only when stderr is a terminal."""
    err = console(stderr=True)
    if not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TransferSpeedColumn

    columns = (TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        tasks: dict[int, TaskID] = {}

        def show(step: FetchProgress) -> None:
            # One bar per file: updating a bar's total to None (size not known yet) keeps the old one.
            if step.index not in tasks:
                for done in tasks.values():
                    bar.remove_task(done)
                tasks.clear()
                tasks[step.index] = bar.add_task(f"{step.index}/{step.count} {step.provider}", total=None)
            bar.update(tasks[step.index], completed=step.done_bytes, total=step.total_bytes)

        yield show


@click.group("models")
def models_group() -> None:
    """Model presets and Hugging Face config.json files."""


@models_group.command("list")
@click.option("--family", help="Only this family (llama, qwen2, ...).")
@click.option("--json", "as_json", is_flag=True)
@errors
def models_list(family: str | None, as_json: bool) -> None:
    """List model presets with their parameter counts."""
    catalog = load_catalog(user=False)
    rows = [
        {
            "name": m.name,
            "family": m.family,
            "params_b": round(m.total_params() / 1e9, 3),
            "published_params_b": m.published_params_b,
            "layers": m.num_layers,
            "hidden_size": m.hidden_size,
            "experts": m.num_experts,
            "source": m.source,
        }
        for m in catalog.models.values()
        if family is None or m.family == family
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        click.echo(f"{plain(r['name']):32s} {r['params_b']:8.2f}B  {r['family']:8s} {plain(r['source'])}")


@models_group.command("show")
@click.argument("name", required=False)
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="A local config.json (or folder).")
@click.option("--lora-rank", type=int, default=16, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@errors
def models_show(name: str | None, config_path: Path | None, lora_rank: int, as_json: bool) -> None:
    """Show one architecture: shape, parameter counts, LoRA size and weight bytes."""
    if config_path is not None:
        arch = load_config_json(config_path)
    elif name:
        arch = load_catalog(user=False).model(name)
    else:
        raise CatalogError("give a preset NAME or --config PATH")
    data = arch.model_dump(mode="json") | {
        "total_params": arch.total_params(),
        "active_params": arch.active_params(),
        "active_matmul_params": arch.matmul_params(active=True),
        f"lora_params_r{lora_rank}_all_linear": arch.lora_params(lora_rank, "all-linear"),
        "bf16_weights_gb": round(arch.total_params() * 2 / 1e9, 2),
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for key, value in data.items():
        click.echo(f"{key:32s} {plain(value)}")
