"""Terminal rendering with rich. Only formatting: every number comes from the library.

Every string that came from data (a provider, region, model name, note or source) goes through
`plain` for the terminal, `_md` for Markdown and `_xml` for SVG, so it is shown, never obeyed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from html import escape
from io import BytesIO
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from ftsolve._errors import InvalidJobSpec
from ftsolve._files import write_atomically
from ftsolve.cli._common import console, plain
from ftsolve.solver import Infeasibility, Plan, PlanSet
from ftsolve.solver._job import JobSpec
from ftsolve.solver._sweeps import CompareRow, FrontierPoint


def _cells(*values: object) -> list[str]:
    return [plain(v) for v in values]


def _heading(title: str, rest: str = "") -> Text:
    return Text.assemble((plain(title), "bold"), plain(rest))


def _model_name(job: JobSpec) -> str:
    return job.model if isinstance(job.model, str) else job.model.name


def render_plans(ps: PlanSet) -> None:
    con = console()
    job = ps.job
    model = _model_name(job)
    limits = []
    if job.deadline_hours is not None:
        limits.append(f"deadline {job.deadline_hours:g} h at {job.deadline_confidence:.0%}")
    if job.budget_usd is not None:
        limits.append(f"budget {job.budget_usd:g} USD")
    con.print(
        _heading(
            model,
            f" ({ps.model_params_b:.2f}B params), {job.train_tokens / 1e6:g}M tokens, "
            f"seq {job.seq_len}; {', '.join(limits) or 'no deadline or budget'}",
        )
    )
    con.print(
        plain(
            f"{ps.feasible} of {ps.candidates} candidates feasible; engine {ps.engine}; "
            f"prices dated {ps.price_dates[0]} to {ps.price_dates[1]}"
        )
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
        t.add_column(col, justify="right" if col in ("#", "GPUs", "mem/GPU GiB", "hours", "cost USD") else "left")
    for p in ps.plans:
        hours = f"{p.time.expected_hours:.1f}"
        if p.market != "on-demand":
            hours += f" (p{p.time.confidence * 100:.0f} {p.time.quantile_hours:.1f})"
        t.add_row(
            *_cells(
                p.rank,
                f"{p.offer.provider} {p.offer.region} {p.gpu}",
                p.n_gpus,
                p.method,
                p.weight_precision,
                p.sharding,
                "on" if p.gradient_checkpointing else "off",
                p.market if p.market != "fallback" else f"fallback ({p.time.interruptible_fraction:.0%} spot)",
                f"{p.memory.peak_gib:.1f}/{p.memory.usable_gib:.0f}",
                hours,
                f"{p.total_cost_usd:.2f}",
            )
        )
    con.print(t)
    for p in ps.plans:
        con.print(f"  {p.rank}. {plain(p.why)}")
    best = ps.plans[0]
    items = ", ".join(f"{plain(c.name)} {c.usd:.2f}" for c in best.cost_items)
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
    con.print(f"Plan 1 price: {plain(best.cost_items[0].source)}")
    for line in ps.rejected:
        con.print(f"Not chosen: {plain(line)}")


def render_infeasible(inf: Infeasibility) -> None:
    con = console(stderr=True)
    con.print(f"No feasible plan: {plain(inf.summary)}")
    if inf.ruled_out_by:
        counts = ", ".join(f"{plain(k)} rules out {v}" for k, v in inf.ruled_out_by.items() if v)
        con.print(f"Of {inf.candidates} candidates: {counts}.")
    for note in inf.notes:
        con.print(f"Note: {plain(note)}")


def render_explain(ps: PlanSet, p: Plan) -> None:
    con = console()
    o = p.offer
    con.print(
        _heading(
            f"Plan {p.rank}",
            f": {p.n_gpus}x {p.gpu} on {o.provider} {o.tier} {o.instance_type} ({o.region}"
            f"{', ' + o.country if o.country else ''}), {p.nodes} node(s)",
        )
    )
    con.print(
        plain(
            f"  {p.method} with {p.weight_precision} weights, optimizer {p.optimizer}, sharding {p.sharding}, "
            f"gradient checkpointing {'on' if p.gradient_checkpointing else 'off'}, "
            f"micro-batch {p.micro_batch} x accumulation {p.grad_accum}, market {p.market}"
        )
    )
    con.print(f"  why: {plain(p.why)}")
    con.print(_heading("Memory per GPU", " (GiB)"))
    for name, gib in p.memory.components_gib.items():
        if gib:
            con.print(f"  {plain(name):20s} {gib:9.2f}")
    con.print(
        f"  {'peak':20s} {p.memory.peak_gib:9.2f} of {p.memory.usable_gib:.2f} usable ({p.memory.card_gib:g} card)"
    )
    t = p.time
    con.print(_heading("Time", " (hours)"))
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
    con.print(_heading("Cost", " (USD)"))
    for c in p.cost_items:
        con.print(f"  {plain(c.name):20s} {c.usd:9.2f}  {plain(c.detail)}")
    con.print(f"  {'total':20s} {p.total_cost_usd:9.2f}")
    con.print(_heading("Limits"))
    for name, value in p.slack.items():
        binding = "  (binding)" if name.split("_")[0] in p.binding_constraints else ""
        con.print(f"  slack {plain(name):14s} {value:9.2f}{binding}")
    con.print(_heading("Sources and assumptions"))
    seen = set()
    for c in p.cost_items:
        if c.source not in seen:
            seen.add(c.source)
            con.print(f"  {plain(c.name)}: {plain(c.source)}")
    for a in p.assumptions:
        con.print(f"  {plain(a)}")
    if ps.rejected:
        con.print(_heading("Options that lost"))
        for line in ps.rejected:
            con.print(f"  {plain(line)}")


# Characters that would end a table cell or start a link, an image, raw HTML or a code span.
_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\|[]<>`*_"})


def _md(value: object) -> str:
    """Text for one Markdown cell or line: one line, its Markdown syntax escaped with backslashes."""
    return plain(value).translate(_MD_SPECIAL)


def render_markdown(ps: PlanSet) -> str:
    """The plans as a Markdown table, with the reasons below it."""
    job = ps.job
    model = _md(_model_name(job))
    lines = [
        f"**{model}**, {job.train_tokens / 1e6:g}M tokens, seq {job.seq_len}"
        + (f", deadline {job.deadline_hours:g} h" if job.deadline_hours else "")
        + (f", budget {job.budget_usd:g} USD" if job.budget_usd else ""),
        "",
        "| # | offer | GPUs | method | precision | sharding | ckpt | market | mem/GPU GiB | hours | p-hours "
        "| cost USD |",
        "|---|---|---:|---|---|---|---|---|---:|---:|---:|---:|",
    ]
    for p in ps.plans:
        lines.append(
            f"| {p.rank} | {_md(p.offer.provider)} {_md(p.offer.region)} {_md(p.gpu)} | {p.n_gpus} | "
            f"{_md(p.method)} | {_md(p.weight_precision)} | {_md(p.sharding)} | "
            f"{'on' if p.gradient_checkpointing else 'off'} | {_md(p.market)} | "
            f"{p.memory.peak_gib:.1f}/{p.memory.usable_gib:.0f} | {p.time.expected_hours:.1f} | "
            f"{p.time.quantile_hours:.1f} | {p.total_cost_usd:.2f} |"
        )
    lines.append("")
    lines += [f"{p.rank}. {_md(p.why)}" for p in ps.plans]
    lines += [f"- Not chosen: {_md(r)}" for r in ps.rejected]
    lines.append(
        f"\nPrices dated {ps.price_dates[0]} to {ps.price_dates[1]}; p-hours at {job.deadline_confidence:.0%}."
    )
    return "\n".join(lines)


def render_compare(rows: list[CompareRow], by: str) -> None:
    t = Table()
    for col in (by, "fits", "GPUs", "method", "market", "provider", "hours", "cost USD", "what stops it"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            *_cells(
                r.option,
                "yes" if r.feasible else "no",
                r.n_gpus or "",
                r.method or "",
                r.market or "",
                r.provider or "",
                f"{r.expected_hours:.1f}" if r.expected_hours is not None else "",
                f"{r.total_cost_usd:.2f}" if r.total_cost_usd is not None else "",
                r.blocked_by,
            )
        )
    console().print(t)


def render_pareto(points: list[FrontierPoint], sweep: str) -> None:
    t = Table(title=f"expected cost against finish time, sweeping the {sweep}")
    for col in (
        f"{sweep} {'h' if sweep == 'deadline' else 'USD'}",
        "cost USD",
        "hours",
        "p-hours",
        "plan",
        "frontier",
    ):
        t.add_column(col)
    for p in points:
        t.add_row(
            f"{p.limit:.2f}",
            f"{p.total_cost_usd:.2f}" if p.feasible else "-",
            f"{p.expected_hours:.2f}" if p.feasible else "-",
            f"{p.quantile_hours:.2f}" if p.feasible else "-",
            plain(p.label or "no plan"),
            "*" if p.on_frontier else "",
        )
    console().print(t)


@contextmanager
def progress_bar(total: int, enabled: bool = True) -> Iterator[Callable[[], None]]:
    """A progress bar on a terminal; silent when output is piped or `enabled` is False."""
    con = Console(stderr=True)
    if not enabled or not con.is_terminal:
        yield lambda: None
        return
    with Progress(console=con, transient=True) as progress:
        task = progress.add_task("sweeping", total=total)
        yield lambda: progress.advance(task)


def write_plot(path: Path, points: list[FrontierPoint], job: JobSpec) -> None:
    """The frontier as SVG (dependency-free) or PNG (needs matplotlib)."""
    ok = [p for p in points if p.feasible]
    if not ok:
        raise InvalidJobSpec("nothing to plot: no sweep value has a feasible plan")
    if path.suffix.lower() == ".png":
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise InvalidJobSpec("PNG plots need matplotlib (pip install matplotlib); or write .svg") from None
        fig, ax = plt.subplots(figsize=(8, 5))
        ax.plot([p.quantile_hours for p in ok], [p.total_cost_usd for p in ok], "o-")
        for p in ok:
            if p.on_frontier:
                # A "$" would start mathtext: labels are data, shown as they are.
                label = plain(p.label or "").replace("$", r"\$")
                ax.annotate(label, (p.quantile_hours or 0, p.total_cost_usd or 0), fontsize=7)
        ax.set_xlabel(f"finish time at {job.deadline_confidence:.0%} (h)")
        ax.set_ylabel("expected total cost (USD)")
        png = BytesIO()
        fig.savefig(png, format="png", dpi=120)
        plt.close(fig)
        # Through write_atomically like the SVG: never onto a link or FIFO, the old mode kept.
        write_atomically(path, png.getvalue())
        return
    if path.suffix.lower() != ".svg":
        raise InvalidJobSpec(f"invalid plot file {path.name!r}: use .svg or .png")
    write_atomically(path, _svg(ok, job))


def _xml(value: object) -> str:
    # XML 1.0 forbids most control characters; plain() replaces them, escape() the markup.
    return escape(plain(value))


def _svg(points: list[FrontierPoint], job: JobSpec) -> str:
    w, h, m = 720, 440, 70
    xs = [p.quantile_hours or 0.0 for p in points]
    ys = [p.total_cost_usd or 0.0 for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1

    def sx(x: float) -> float:
        return m + (x - x0) / (x1 - x0) * (w - 2 * m)

    def sy(y: float) -> float:
        return h - m - (y - y0) / (y1 - y0) * (h - 2 * m)

    model = _model_name(job)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2}" y="24" text-anchor="middle" font-size="14">'
        f"{_xml(model)}: expected cost vs finish time</text>",
        f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
        f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
        f'<text x="{w / 2}" y="{h - 25}" text-anchor="middle">finish time at {job.deadline_confidence:.0%} (h): '
        f"{x0:.1f} to {x1:.1f}</text>",
        f'<text x="18" y="{h / 2}" transform="rotate(-90 18 {h / 2})" text-anchor="middle">expected total cost '
        f"(USD): {y0:.2f} to {y1:.2f}</text>",
    ]
    frontier = sorted((p for p in points if p.on_frontier), key=lambda p: p.quantile_hours or 0.0)
    if len(frontier) > 1:
        path = " ".join(f"{sx(p.quantile_hours or 0):.1f},{sy(p.total_cost_usd or 0):.1f}" for p in frontier)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for p in points:
        colour = "#1f77b4" if p.on_frontier else "#999999"
        cx, cy = sx(p.quantile_hours or 0), sy(p.total_cost_usd or 0)
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{colour}"/>')
        if p.on_frontier:
            parts.append(
                f'<text x="{cx + 6:.1f}" y="{cy - 6:.1f}">{_xml(p.label or "")} ({p.total_cost_usd:.2f} USD)</text>'
            )
    parts.append("</svg>\n")
    return "\n".join(parts)
