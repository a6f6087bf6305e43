"""`ftsolve probe` (a short measured run of a plan) and `ftsolve calibrate` (what it measured,
and the user's logs, fitted into corrections that plans then use)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ftsolve._calibration import (
    Calibration,
    Correction,
    Given,
    StoredRecord,
    calibration_path,
    fit_measurement,
    forget,
    load_calibration,
    merge,
    read_measurements,
    update_calibration,
)
from ftsolve._calibration._records import recipe_fields
from ftsolve._errors import InvalidJobSpec, NoFeasiblePlan, UnsafeOutput
from ftsolve._files import write_atomically
from ftsolve._probe import RECORD_NAME, SCRIPT_NAME, TASK_NAME, build_probe
from ftsolve.catalog import load_catalog
from ftsolve.cli._common import console, errors, plain
from ftsolve.cli._options import RECIPE_FIELDS, GroupedCommand, field_options, job_from_options, job_options
from ftsolve.cli._render import render_infeasible
from ftsolve.solver import PlanSet, plan
from ftsolve.solver._memory import SHARD_NAMES


def _plans(o: dict[str, Any], rank: int) -> PlanSet:
    job = job_from_options(o)
    try:
        result = plan(job, load_catalog(o["offers"]), engine=o["engine"], top=max(rank, 5))
    except NoFeasiblePlan as exc:
        if o["json"]:
            click.echo(exc.infeasibility.model_dump_json(indent=2))
        else:
            render_infeasible(exc.infeasibility)
        sys.exit(exc.exit_code)
    if not 1 <= rank <= len(result.plans):
        raise InvalidJobSpec(f"invalid rank {rank}: there are {len(result.plans)} plans")
    return result


@click.command("probe", cls=GroupedCommand)
@job_options
@click.option("--rank", type=int, default=1, show_default=True, help="Which plan to probe.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("ftsolve-probe"),
    show_default=True,
    help="Folder for the probe script and its SkyPilot task.",
)
@click.option("--steps", type=int, default=5, show_default=True, help="Timed optimizer steps.")
@click.option("--warmup", type=int, default=2, show_default=True, help="Untimed steps before them.")
@errors
def probe_cmd(rank: int, out: Path, steps: int, warmup: int, **o: Any) -> None:
    """Write a short measured run of a plan: a script (torch + transformers/peft on one GPU, random
    tokens) and a SkyPilot task for the plan's offer. Its record goes to `ftsolve calibrate`."""
    result = _plans(o, rank)
    chosen = result.plans[rank - 1]
    probe = build_probe(chosen, result.job, load_catalog(o["offers"]), steps=steps, warmup=warmup)
    if out.is_symlink():
        raise UnsafeOutput(f"{out} is a symbolic link; give --out a folder of your own")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnsafeOutput(f"{out}: cannot create the folder ({exc.strerror or type(exc).__name__})") from None
    for name, text in probe.files.items():
        write_atomically(out / name, text)
    c = probe.config
    if o["json"]:
        summary = {
            "folder": str(out),
            "files": list(probe.files),
            "config": c.model_dump(mode="json"),
            "predicted": probe.predicted,
            "notes": list(probe.notes),
        }
        click.echo(json.dumps(summary, indent=2))
        return
    con = console()
    con.print(f"wrote {plain(out)}: {', '.join(probe.files)}")
    con.print(
        plain(
            f"probes plan {rank} on one {chosen.gpu}: {c.model_name}, {c.method} {c.weight_precision}, "
            f"seq {c.seq_len} x micro-batch {c.micro_batch} x {c.grad_accum} accumulated, "
            f"checkpointing {'on' if c.gradient_checkpointing else 'off'}"
        )
    )
    p = probe.predicted
    con.print(f"  predicted {p['tokens_per_s']:,.0f} tokens/s, peak {p['reserved_gib']:.2f} GiB reserved")
    for note in probe.notes:
        con.print(plain(f"  the probe {note}"))
    if TASK_NAME in probe.files:
        con.print(f"run it: cd {plain(out)} && sky launch -c ftsolve-probe {TASK_NAME}")
        con.print(f"then:   scp ftsolve-probe:sky_workdir/{RECORD_NAME} . && ftsolve calibrate {RECORD_NAME}")
    else:
        con.print(
            f"SkyPilot cannot launch this offer as the catalog states it: run python {SCRIPT_NAME} on a "
            f"{plain(chosen.gpu)}, then ftsolve calibrate {RECORD_NAME}"
        )


# --- calibrate -----------------------------------------------------------------------------------


def _given(o: dict[str, Any]) -> Given:
    if o["model"] is not None and o["config_path"] is not None:
        raise InvalidJobSpec("give --model or --config, not both")
    config: dict[str, Any] = {
        "model": o["model"].lower() if o["model"] else None,
        "method": o["method"],
        "weight_precision": o["precision"],
        "seq_len": o["seq_len"],
        "micro_batch": o["micro_batch"],
        "grad_accum": o["grad_accum"],
        "n_gpus": o["n_gpus"],
        "nodes": o["nodes"],
        "sharding": o["sharding"],
        "gradient_checkpointing": o["ckpt"],
        "lora_rank": o["lora_rank"],
        "stack": o["stack"],
    }
    if o["config_path"] is not None:
        from ftsolve.catalog import load_config_json

        config["model"] = load_config_json(o["config_path"])
    recipe = {name: o[name] for name in recipe_fields() if o.get(name) is not None}
    if recipe:
        config["recipe"] = recipe
    date = o["date"].date() if o["date"] is not None else None
    return Given(gpu=o["gpu"], date=date, config={k: v for k, v in config.items() if v is not None})


def _ratio(measured: float | None, predicted: float | None) -> str:
    return f"x{measured / predicted:.2f}" if measured and predicted else ""


def _show_record(r: StoredRecord) -> None:
    con = console()
    m, c = r.measurement, r.measurement.config
    con.print(
        plain(
            f"{m.source}  ({m.kind}, {m.date})  {m.gpu}  {m.stack}/{c.method}: {c.model_name}, "
            f"seq {c.seq_len} x micro-batch {c.micro_batch} x {c.grad_accum}, {c.n_gpus} GPU(s) {c.sharding}"
        )
    )
    if m.tokens_per_s is not None and r.predicted_tokens_per_s is not None:
        con.print(
            f"  tokens/s   measured {m.tokens_per_s:>12,.0f}   predicted {r.predicted_tokens_per_s:>12,.0f}   "
            f"throughput {_ratio(m.tokens_per_s, r.predicted_tokens_per_s)}"
        )
    if r.memory_metric is not None and r.predicted_memory_gib is not None:
        measured = m.peak_reserved_gib if r.memory_metric == "reserved" else m.peak_allocated_gib
        con.print(
            f"  peak GiB   measured {measured or 0:>12.2f}   predicted {r.predicted_memory_gib:>12.2f}   "
            f"({r.memory_metric}) activation memory x{r.memory_scale or 1:.2f}"
        )
    for note in r.notes:
        con.print(plain(f"  note: {note}"))


def _correction_line(c: Correction) -> str:
    parts = [f"{c.gpu} {c.stack}/{c.method}:"]
    if c.throughput_factor is not None:
        parts.append(f"tokens/s x{c.throughput_factor:.3f} (±{c.throughput_band or 0:.0%})")
    if c.memory_scale is not None:
        parts.append(f"activation memory x{c.memory_scale:.3f} (±{c.memory_band or 0:.0%})")
    parts.append(f"from {len(c.records)} record(s), latest {c.date}")
    return plain(" ".join(parts))


def _list(cal: Calibration, as_json: bool) -> None:
    if as_json:
        click.echo(cal.model_dump_json(indent=2))
        return
    con = console()
    if not cal.corrections:
        con.print(f"no calibrations in {plain(calibration_path())}; add some with `ftsolve calibrate FILE`")
        return
    con.print(f"calibrations in {plain(calibration_path())}:")
    for c in cal.corrections:
        con.print("  " + _correction_line(c))
        for r in c.records:
            con.print(plain(f"      {r.measurement.date}  {r.measurement.kind}  {r.measurement.source}"))


@click.command("calibrate")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--gpu", help="GPU id of runs whose log does not name it (h100-sxm).")
@click.option("--model", help="Model preset of the runs a log does not describe.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Or their config.json.")
@click.option("--method", type=click.Choice(["full", "lora", "qlora"]))
@click.option("--precision", type=click.Choice(["auto", "16-bit", "int8", "nf4"]))
@click.option("--seq-len", type=int)
@click.option("--micro-batch", type=int, help="Sequences per GPU per micro-batch.")
@click.option("--grad-accum", type=int)
@click.option("--gpus", "n_gpus", type=int, help="GPUs of the run (tokens/s are over all of them).")
@click.option("--nodes", type=int)
@click.option("--sharding", type=click.Choice(list(SHARD_NAMES)))
@click.option("--ckpt/--no-ckpt", default=None, help="Gradient checkpointing.")
@field_options(RECIPE_FIELDS)
@click.option("--date", type=click.DateTime(formats=["%Y-%m-%d"]), help="Date of the runs (default: the file's).")
@click.option("--replace", is_flag=True, help="Drop earlier records of the corrections these update.")
@click.option("--dry-run", is_flag=True, help="Show the fit; store nothing.")
@click.option("--list", "list_", is_flag=True, help="Show the stored calibrations.")
@click.option("--forget", metavar="WHAT", help="Remove calibrations: all, GPU, GPU/STACK or GPU/STACK/METHOD.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@errors
def calibrate_cmd(
    files: tuple[Path, ...], replace: bool, dry_run: bool, list_: bool, forget: str | None, as_json: bool, **o: Any
) -> None:
    """Fit corrections to the throughput and memory models from measured runs: probe records
    (`ftsolve probe`), Trainer trainer_state.json, torchtune or axolotl logs, or a JSON/CSV table of
    configuration, tokens_per_s and peak_reserved_gib / peak_allocated_gib. Plans then use them
    (--no-calibration ignores them)."""
    if forget is not None:
        _forget(forget, as_json)
        return
    if list_ or not files:
        _list(load_calibration(), as_json)
        return
    given = _given(o)
    catalog = load_catalog(user=False)
    fitted = [fit_measurement(m, catalog) for path in files for m in read_measurements(path, given)]
    if dry_run:
        new = merge(load_calibration(), fitted, replace=replace)
    else:
        new = update_calibration(lambda cal: merge(cal, fitted, replace=replace))
    touched = [c for c in new.corrections if c.key in {r.measurement.key for r in fitted}]
    if as_json:
        payload = {
            "records": [r.model_dump(mode="json") for r in fitted],
            "corrections": [c.model_dump(mode="json", exclude={"records"}) for c in touched],
            "stored": None if dry_run else str(calibration_path()),
        }
        click.echo(json.dumps(payload, indent=2))
        return
    for r in fitted:
        _show_record(r)
    con = console()
    con.print("corrections" + (" (dry run, not stored):" if dry_run else f" stored in {plain(calibration_path())}:"))
    for c in touched:
        con.print("  " + _correction_line(c))


def _forget(selector: str, as_json: bool) -> None:
    removed: list[Correction] = []

    def change(cal: Calibration) -> Calibration:
        new, gone = forget(cal, selector)
        removed.extend(gone)
        return new

    update_calibration(change)
    if as_json:
        click.echo(json.dumps({"removed": [list(c.key) for c in removed]}))
        return
    if not removed and selector.strip().lower() != "all":
        raise InvalidJobSpec(f"no calibration matches {selector!r}; see `ftsolve calibrate --list`")
    console().print(plain(f"removed {len(removed)} calibration(s) from {calibration_path()}"))

