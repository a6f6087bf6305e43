"""`ftsolve estimate memory`: one configuration's peak memory per GPU, as a breakdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ftsolve._calibration import correct_time_estimate
from ftsolve._errors import InvalidJobSpec
from ftsolve._units import parse_count
from ftsolve.cli._common import console, errors, plain
from ftsolve.cli._options import FC, RECIPE_FIELDS, field_option, field_options
from ftsolve.solver import JobSpec
from ftsolve.solver._estimate import MemoryEstimate, estimate_memory, estimate_time
from ftsolve.solver._memory import SHARD_NAMES, MemoryOptions


def _target(model: str | None, config_path: Path | None, params: str | None) -> str | Path | float:
    """The one model description given: a preset name, a config.json path or a parameter count."""
    if sum(x is not None for x in (model, config_path, params)) != 1:
        raise InvalidJobSpec("give exactly one of --model, --config or --params")
    if config_path is not None:
        return config_path
    return float(parse_count(params, "params")) if params else str(model)


def recipe_options(fn: FC) -> FC:
    """The training-recipe options of `estimate memory` and `estimate time`: JobSpec's recipe fields,
    with the flags, help and defaults `plan` has, and --chunked-loss for --loss chunked."""
    fn = click.option("--chunked-loss", is_flag=True, help="Same as --loss chunked.")(fn)
    return field_options(RECIPE_FIELDS)(fn)


def _given_or_default(o: dict[str, Any], name: str) -> Any:
    """The flag's value, or JobSpec's default for the field where it was not typed."""
    return JobSpec.model_fields[name].get_default() if o.get(name) is None else o[name]


def recipe_from_options(o: dict[str, Any]) -> MemoryOptions:
    """MemoryOptions from the recipe switches: the stack's defaults under what was given."""
    if o["chunked_loss"] and o["loss"] not in (None, "chunked"):
        raise InvalidJobSpec(f"--chunked-loss contradicts --loss {o['loss']}")
    given = {name: _given_or_default(o, name) for name in RECIPE_FIELDS if name not in ("stack", "lora_rank")}
    if o["chunked_loss"]:
        given["loss"] = "chunked"
    # A field whose JobSpec default is None stays None here: MemoryOptions then takes the stack's.
    try:
        return MemoryOptions.for_stack(_given_or_default(o, "stack"), **given)
    except ValueError as exc:
        raise InvalidJobSpec(str(exc)) from None


@click.group("estimate")
def estimate_group() -> None:
    """Estimates for one configuration: peak memory, step time and throughput."""


@estimate_group.command("memory")
@click.option("--model", help="Model preset, e.g. llama-3.1-8b.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="A local config.json (or folder).")
@click.option("--params", help="Only a parameter count (7B, 70e9): a Llama-shaped guess, wider error band.")
@click.option("--method", type=click.Choice(["full", "lora", "qlora"]), default="lora", show_default=True)
@click.option("--precision", type=click.Choice(["auto", "16-bit", "int8", "nf4"]), default="auto", show_default=True)
@click.option("--seq-len", type=int, default=2048, show_default=True)
@click.option("--micro-batch", type=int, default=1, show_default=True)
@click.option(
    "--grad-accum", type=int, default=1, show_default=True, help="Micro-batches per step (FSDP holds them unsharded)."
)
@click.option("--gpus", "n_gpus", type=int, default=1, show_default=True)
@click.option("--sharding", type=click.Choice(list(SHARD_NAMES)), default="none", show_default=True)
@click.option("--ckpt/--no-ckpt", default=True, show_default=True, help="Gradient checkpointing.")
@recipe_options
@click.option("--gpu", help="Check the fit on this GPU (canonical id).")
@click.option("--json", "as_json", is_flag=True)
@errors
def estimate_memory_cmd(
    model: str | None,
    config_path: Path | None,
    params: str | None,
    method: str,
    precision: str,
    seq_len: int,
    micro_batch: int,
    grad_accum: int,
    n_gpus: int,
    sharding: str,
    ckpt: bool,
    gpu: str | None,
    as_json: bool,
    **recipe: Any,
) -> None:
    """Peak GPU memory per GPU, by component, for one training configuration."""
    target = _target(model, config_path, params)
    opts = recipe_from_options(recipe)
    est = estimate_memory(
        target,
        method=method,  # type: ignore[arg-type]
        seq_len=seq_len,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        n_gpus=n_gpus,
        sharding=sharding,
        gradient_checkpointing=ckpt,
        weight_precision=precision,  # type: ignore[arg-type]
        lora_rank=_given_or_default(recipe, "lora_rank"),
        options=opts,
        gpu=gpu,
    )
    if as_json:
        click.echo(est.model_dump_json(indent=2))
        return
    con = console()
    # plain(): the model name and its source come from a config.json or a flag.
    con.print(
        plain(
            f"{est.model} ({est.params_b:.2f}B), {est.method} {est.weight_precision}, seq {est.seq_len} x "
            f"micro-batch {est.micro_batch} x {est.grad_accum} accumulated, {est.n_gpus} GPU(s) {est.sharding}, "
            f"checkpointing {'on' if est.gradient_checkpointing else 'off'}"
        )
    )
    for name, gib in est.components_gib.items():
        if gib:
            con.print(f"  {plain(name):18s} {gib:9.2f} GiB")
    con.print(
        f"  {'peak per GPU':18s} {est.peak_gib:9.2f} GiB  (±{est.error_band:.0%}; {plain(est.architecture_source)})"
    )
    con.print(
        f"  as torch reports it: {est.allocated_gib:.2f} GiB allocated, {est.reserved_gib:.2f} GiB reserved; "
        f"nvidia-smi about {est.device_gib:.2f} GiB"
    )
    if est.gpu is not None:
        con.print(f"  {plain(est.gpu)}: usable {est.usable_gib:.1f} GiB -> {_verdict(est)}")


def _verdict(est: MemoryEstimate) -> str:
    """Whether the peak fits, and whether it does with the headroom a plan keeps for the band."""
    if not est.fits:
        return "does NOT fit"
    need = f"{est.peak_gib * (1.0 + est.headroom_band):.1f} GiB with the {est.headroom_band:.0%} headroom plans keep"
    if est.fits_with_headroom:
        wider = est.peak_gib * (1.0 + est.error_band)
        if wider > (est.usable_gib or 0.0):  # a guessed shape: its own band is wider than the headroom
            return f"fits ({need}; the guessed shape's ±{est.error_band:.0%} would need {wider:.1f} GiB)"
        return f"fits ({need})"
    return f"the peak fits, but not with headroom: {need}; plans leave it out unless --memory-margin is smaller"


@estimate_group.command("time")
@click.option("--model", help="Model preset, e.g. llama-3.1-8b.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="A local config.json (or folder).")
@click.option("--params", help="Only a parameter count (7B, 70e9).")
@click.option("--gpu", required=True, help="Canonical GPU id, e.g. h100-sxm.")
@click.option("--method", type=click.Choice(["full", "lora", "qlora"]), default="lora", show_default=True)
@click.option("--seq-len", type=int, default=2048, show_default=True)
@click.option("--micro-batch", type=int, default=1, show_default=True)
@click.option("--grad-accum", type=int, default=1, show_default=True)
@click.option("--gpus", "n_gpus", type=int, default=1, show_default=True)
@click.option("--nodes", type=int, default=1, show_default=True)
@click.option("--sharding", type=click.Choice(list(SHARD_NAMES)), default="none", show_default=True)
@click.option("--ckpt/--no-ckpt", default=True, show_default=True, help="Gradient checkpointing.")
@click.option("--network-gbit", type=float, help="Inter-node network per node in Gbit/s (default 100).")
@click.option("--precision", type=click.Choice(["auto", "16-bit", "int8", "nf4"]), default="auto", show_default=True)
@recipe_options
@field_option("train_tokens")
@field_option("real_token_fraction")
@field_option("host_speed")
@click.option("--json", "as_json", is_flag=True)
@errors
def estimate_time_cmd(
    model: str | None,
    config_path: Path | None,
    params: str | None,
    gpu: str,
    method: str,
    seq_len: int,
    micro_batch: int,
    grad_accum: int,
    n_gpus: int,
    nodes: int,
    sharding: str,
    ckpt: bool,
    network_gbit: float | None,
    train_tokens: int | None,
    real_token_fraction: float | None,
    host_speed: float | None,
    as_json: bool,
    precision: str,
    **recipe: Any,
) -> None:
    """Step time and tokens/s of one configuration, with the communication it exposes."""
    target = _target(model, config_path, params)
    if real_token_fraction is None:
        real_token_fraction = JobSpec.model_fields["real_token_fraction"].get_default()
    if not 0 < real_token_fraction <= 1:
        raise InvalidJobSpec(f"invalid --real-token-fraction {real_token_fraction}: must be in (0, 1]")
    speed = JobSpec.model_fields["host_speed"].get_default() if host_speed is None else host_speed
    est = estimate_time(
        target,
        gpu,
        method=method,  # type: ignore[arg-type]
        seq_len=seq_len,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        n_gpus=n_gpus,
        nodes=nodes,
        sharding=sharding,
        gradient_checkpointing=ckpt,
        weight_precision=precision,  # type: ignore[arg-type]
        lora_rank=_given_or_default(recipe, "lora_rank"),
        options=recipe_from_options(recipe),
        inter_node_gbit_per_s=network_gbit,
        train_tokens=train_tokens,
        real_token_fraction=real_token_fraction,
        host_speed=speed,
    )
    # A measurement of this GPU, stack and method (`ftsolve calibrate`) rules over the model.
    est = correct_time_estimate(est, recipe_from_options(recipe).stack)
    if as_json:
        click.echo(est.model_dump_json(indent=2))
        return
    con = console()
    con.print(
        plain(
            f"{est.model} {est.method} on {est.n_gpus}x {est.gpu} ({est.nodes} node(s), {est.sharding}), "
            f"seq {est.seq_len} x micro-batch {est.micro_batch} x accumulation {est.grad_accum}"
            + (f"; host CPU {speed:g}x an EPYC 7742 (--host-speed)" if speed != 1.0 else "")
        )
    )
    con.print(
        f"  FLOPs per token      {est.flops_per_token / 1e9:9.1f} G (peak {est.peak_tflops:g} TFLOP/s, "
        f"utilization {est.utilization:.2f})"
    )
    con.print(f"  compute per step     {est.compute_s:9.3f} s")
    con.print(f"  communication        {est.communication_s:9.3f} s ({est.exposed_communication_s:.3f} s exposed)")
    con.print(f"  optimizer step       {est.optimizer_s:9.3f} s")
    con.print(
        f"  step                 {est.step_s:9.3f} s  -> {est.tokens_per_s:,.0f} tokens/s "
        f"(±{est.error_band:.0%}; {est.tokens_per_s_per_gpu:,.0f} per GPU, scaling efficiency "
        f"{est.scaling_efficiency:.0%})"
    )
    if est.hours is not None:
        # The band bounds predicted / measured tokens/s - 1, so the hours it takes are the predicted
        # hours times (1 - band) to (1 + band).
        shortest, longest = est.hours * max(0.0, 1 - est.error_band), est.hours * (1 + est.error_band)
        con.print(f"  training             {est.hours:9.2f} h  ({shortest:.2f}-{longest:.2f} h)")
