"""Terminal rendering with rich. Only formatting: every number comes from the library."""

from __future__ import annotations

from rich.table import Table

from ftsolve.cli._common import console
from ftsolve.solver import Infeasibility, Plan, PlanSet


def render_plans(ps: PlanSet) -> None:
    con = console()
    job = ps.job
    model = job.model if isinstance(job.model, str) else job.model.name
    limits = []
    if job.deadline_hours is not None:
        limits.append(f"deadline {job.deadline_hours:g} h at {job.deadline_confidence:.0%}")
    if job.budget_usd is not None:
        limits.append(f"budget {job.budget_usd:g} USD")
    con.print(
        f"[bold]{model}[/] ({ps.model_params_b:.2f}B params), {job.train_tokens / 1e6:g}M tokens, "
        f"seq {job.seq_len}; {', '.join(limits) or 'no deadline or budget'}"
    )
    con.print(
        f"{ps.feasible} of {ps.candidates} candidates feasible; engine {ps.engine}; "
        f"prices dated {ps.price_dates[0]} to {ps.price_dates[1]}"
    )
    t = Table(show_lines=False)
    for col in (
        "#",
        "offer",
        "GPUs",
        "method",
        "precision",
        "sharding",
        "ckpt",
        "market",
        "mem/GPU GiB",
        "hours",
        "cost USD",
    ):
        t.add_column(
            col, justify="right" if col in ("#", "GPUs", "mem/GPU GiB", "hours", "cost USD") else "left"
        )
    for p in ps.plans:
        hours = f"{p.time.expected_hours:.1f}"
        if p.market != "on-demand":
            hours += f" (p{p.time.confidence * 100:.0f} {p.time.quantile_hours:.1f})"
        t.add_row(
            str(p.rank),
            f"{p.offer.provider} {p.offer.region} {p.gpu}",
            f"{p.n_gpus}",
            p.method,
            p.weight_precision,
            p.sharding,
            "on" if p.gradient_checkpointing else "off",
            p.market if p.market != "fallback" else f"fallback ({p.time.interruptible_fraction:.0%} spot)",
            f"{p.memory.peak_gib:.1f}/{p.memory.usable_gib:.0f}",
            hours,
            f"{p.total_cost_usd:.2f}",
        )
    con.print(t)
    for p in ps.plans:
        con.print(f"  {p.rank}. {p.why}")
    best = ps.plans[0]
    items = ", ".join(f"{c.name} {c.usd:.2f}" for c in best.cost_items)
    con.print(f"Plan 1 cost breakdown (USD): {items} = {best.total_cost_usd:.2f}")
    tb = best.time
    phases = (
        f"training {tb.training_hours:.2f} h, start-up {tb.startup_hours:.2f} h, "
        f"checkpoints {tb.checkpoint_hours:.2f} h"
    )
    if tb.preemption_rework_hours:
        phases += f", expected rework {tb.preemption_rework_hours:.2f} h"
    if tb.checkpoint_interval_hours is not None:
        phases += (
            f"; checkpoint every {tb.checkpoint_interval_hours:.2f} h "
            f"at {tb.interruption_rate_per_hour or 0:.2g} preemptions/h"
        )
    con.print(f"Plan 1 time: {phases}; {tb.tokens_per_s:,.0f} tokens/s")
    con.print(f"Plan 1 price: {best.cost_items[0].source}")
    for line in ps.rejected:
        con.print(f"Not chosen: {line}")


def render_infeasible(inf: Infeasibility) -> None:
    con = console(stderr=True)
    con.print(f"No feasible plan: {inf.summary}")
    if inf.ruled_out_by:
        counts = ", ".join(f"{k} rules out {v}" for k, v in inf.ruled_out_by.items() if v)
        con.print(f"Of {inf.candidates} candidates: {counts}.")


def render_explain(ps: PlanSet, p: Plan) -> None:
    con = console()
    o = p.offer
    con.print(
        f"[bold]Plan {p.rank}[/]: {p.n_gpus}x {p.gpu} on {o.provider} {o.tier} {o.instance_type} ({o.region}"
        f"{', ' + o.country if o.country else ''}), {p.nodes} node(s)"
    )
    con.print(
        f"  {p.method} with {p.weight_precision} weights, optimizer {p.optimizer}, sharding {p.sharding}, "
        f"gradient checkpointing {'on' if p.gradient_checkpointing else 'off'}, "
        f"micro-batch {p.micro_batch} x accumulation {p.grad_accum}, market {p.market}"
    )
    con.print(f"  why: {p.why}")
    con.print("[bold]Memory per GPU[/] (GiB)")
    for name, gib in p.memory.components_gib.items():
        if gib:
            con.print(f"  {name:20s} {gib:9.2f}")
    con.print(
        f"  {'peak':20s} {p.memory.peak_gib:9.2f} of {p.memory.usable_gib:.2f} usable "
        f"({p.memory.card_gib:g} card)"
    )
    t = p.time
    con.print("[bold]Time[/] (hours)")
    for label, value in (
        ("training", t.training_hours),
        ("evaluation", t.evaluation_hours),
        ("start-up", t.startup_hours),
        ("checkpoints", t.checkpoint_hours),
        ("preemption rework", t.preemption_rework_hours),
        ("expected finish", t.expected_hours),
    ):
        con.print(f"  {label:20s} {value:9.2f}")
    con.print(f"  {'finish at p' + format(t.confidence * 100, '.0f'):20s} {t.quantile_hours:9.2f}")
    con.print(f"  {t.tokens_per_s:,.0f} tokens/s; step {t.step_s:.3f} s")
    if t.checkpoint_interval_hours is not None:
        con.print(
            f"  interruptible share {t.interruptible_fraction:.0%}, checkpoint every "
            f"{t.checkpoint_interval_hours:.2f} h at {t.interruption_rate_per_hour or 0:.3g} preemptions/h"
        )
    con.print("[bold]Cost[/] (USD)")
    for c in p.cost_items:
        con.print(f"  {c.name:20s} {c.usd:9.2f}  {c.detail}")
    con.print(f"  {'total':20s} {p.total_cost_usd:9.2f}")
    con.print("[bold]Limits[/]")
    for name, value in p.slack.items():
        binding = "  (binding)" if name.split("_")[0] in p.binding_constraints else ""
        con.print(f"  slack {name:14s} {value:9.2f}{binding}")
    con.print("[bold]Sources and assumptions[/]")
    seen = set()
    for c in p.cost_items:
        if c.source not in seen:
            seen.add(c.source)
            con.print(f"  {c.name}: {c.source}")
    for a in p.assumptions:
        con.print(f"  {a}")
    if ps.rejected:
        con.print("[bold]Options that lost[/]")
        for line in ps.rejected:
            con.print(f"  {line}")
