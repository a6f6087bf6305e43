"""Terminal rendering with rich. Only formatting: every number comes from the library.

Every string that came from data (a provider, region, model name, note or source) goes through
`plain` for the terminal, `_md` for Markdown and `_xml` for SVG, so it is shown, never obeyed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape
from io import BytesIO
from pathlib import Path

from rich import box
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from ftsolve._errors import InvalidJobSpec
from ftsolve._files import write_atomically
from ftsolve.catalog import Offer, rate_on
from ftsolve.cli._common import console, plain
from ftsolve.solver import Infeasibility, MemoryBreakdown, Plan, PlanSet
from ftsolve.solver._job import JobSpec
from ftsolve.solver._money import Money, money
from ftsolve.solver._pipeline import MICRO_BATCH_SPEED_TOLERANCE
from ftsolve.solver._plans import MicroBatchChoice
from ftsolve.solver._sweeps import CompareRow, FrontierPoint


def _cells(*values: object) -> list[str]:
    return [plain(v) for v in values]


def _heading(title: str, rest: str = "") -> Text:
    return Text.assemble((plain(title), "bold"), plain(rest))


def _model_name(job: JobSpec) -> str:
    return job.model if isinstance(job.model, str) else job.model.name


# The default plan table fits this many columns; a narrower console gets fewer or shorter columns,
# never cut cells. `wide` shows every column at whatever width that takes.
TABLE_COLUMNS = 100


def _down(x: float, digits: int = 1) -> float:
    # Rounded down: a used figure never looks larger than it is, so never above its capacity. The
    # inner round() drops float noise (0.29 * 100 is 28.999...).
    scale = 10.0**digits
    return math.floor(round(x * scale, 6)) / scale


def _gib(x: float) -> str:
    return f"{_down(x):.1f}" if abs(x) < 10 else f"{_down(x, 0):.0f}"


def _headroom_gib(m: MemoryBreakdown) -> float:
    """Memory a process still has on each GPU beyond the predicted peak."""
    return m.usable_gib - m.peak_gib


def _used_pct(m: MemoryBreakdown) -> str:
    return f"{_down(100 * m.peak_gib / m.card_gib, 0):.0f}%"


def _topology(p: Plan) -> str:
    """Nodes x GPUs per node, "2×8"; an uneven split says so in words."""
    if p.nodes >= 1 and p.n_gpus % p.nodes == 0:
        return f"{p.nodes}×{p.n_gpus // p.nodes}"
    return f"{p.n_gpus} on {p.nodes} nodes"


_REMARK = re.compile(r"\s*\(.*\)\s*$")
_SHORT_REGION_CHARS = 10


def _short_region(o: Offer) -> str:
    """The region when short ("us-east-1", "FIN-03"), else its country code, else its first word."""
    region = _REMARK.sub("", o.region) or o.region
    if len(region) <= _SHORT_REGION_CHARS:
        return region
    if o.country:
        return o.country
    return re.split(r"[-\s,]", region)[0][:_SHORT_REGION_CHARS]


def _p_label(p: Plan) -> str:
    return f"p{p.time.confidence * 100:.0f}"


def _hours(p: Plan) -> str:
    expected, quantile = f"{p.time.expected_hours:.1f}", f"{p.time.quantile_hours:.1f}"
    return expected if quantile == expected else f"{expected} ({_p_label(p)} {quantile})"


def _market(p: Plan, interruptible: str = "spot") -> str:
    if p.market == "fallback":
        return f"fallback ({p.time.interruptible_fraction:.0%} spot)"
    return interruptible if p.market == "interruptible" else p.market


@dataclass(frozen=True)
class _Column:
    """One table column: its forms, fullest first, each a header and a cell maker."""

    key: str
    forms: tuple[tuple[str, Callable[[Plan], str]], ...]
    right: bool = False


_DEFAULT_COLUMNS = (
    _Column("rank", (("#", lambda p: str(p.rank)),), right=True),
    _Column(
        "offer",
        (
            ("offer", lambda p: f"{p.offer.provider} {p.offer.region}"),
            ("offer", lambda p: f"{p.offer.provider} {_short_region(p.offer)}"),
            ("offer", lambda p: p.offer.provider),
        ),
    ),
    _Column("gpus", (("GPUs", lambda p: f"{_topology(p)} {p.gpu}"),)),
    _Column(
        "method",
        (("method", lambda p: f"{p.method} {p.weight_precision}"), ("method", lambda p: p.method)),
    ),
    _Column("sharding", (("sharding", lambda p: p.sharding),)),
    _Column("grad_ckpt", (("grad ckpt", lambda p: "on" if p.gradient_checkpointing else "off"),)),
    _Column(
        "market", (("market", _market), ("market", lambda p: "fallback" if p.market == "fallback" else _market(p)))
    ),
    _Column(
        "memory",
        (
            ("mem/GPU", lambda p: f"{_used_pct(p.memory)}, {_gib(_headroom_gib(p.memory))} GiB free"),
            ("mem/GPU", lambda p: f"{_used_pct(p.memory)}, {_gib(_headroom_gib(p.memory))} free"),
            ("mem/GPU", lambda p: _used_pct(p.memory)),
        ),
    ),
    _Column("hours", (("hours", _hours), ("hours", lambda p: f"{p.time.expected_hours:.1f}")), right=True),
    _Column("cost", (("cost {cur}", lambda p: f"{p.total_cost_usd:.2f}"),), right=True),
)

# How the default table narrows, step by step, until it fits: (column, its next form or None to hide
# it, only when every plan has the same value there). A hidden column with one value becomes a note.
_NARROWING: tuple[tuple[str, int | None, bool], ...] = (
    ("grad_ckpt", None, True),
    ("sharding", None, True),
    ("market", 1, False),
    ("method", 1, False),
    ("offer", 1, False),
    ("memory", 1, False),
    ("grad_ckpt", None, False),
    ("sharding", None, False),
    ("offer", 2, False),
    ("hours", 1, False),
    ("memory", 2, False),
    ("market", None, False),
)

_WIDE_COLUMNS = (
    _Column("rank", (("#", lambda p: str(p.rank)),), right=True),
    _Column("provider", (("provider", lambda p: p.offer.provider),)),
    _Column("tier", (("tier", lambda p: p.offer.tier),)),
    _Column("instance", (("instance type", lambda p: p.offer.instance_type),)),
    _Column("region", (("region", lambda p: p.offer.region),)),
    _Column("gpu", (("GPU", lambda p: p.gpu),)),
    _Column("gpus", (("nodes×GPUs", _topology),), right=True),
    _Column("method", (("method", lambda p: p.method),)),
    _Column("weights", (("weights", lambda p: p.weight_precision),)),
    _Column("optimizer", (("optimizer", lambda p: p.optimizer),)),
    _Column("sharding", (("sharding", lambda p: p.sharding),)),
    _Column("grad_ckpt", (("grad ckpt", lambda p: "on" if p.gradient_checkpointing else "off"),)),
    _Column("batch", (("micro-batch×accum", lambda p: f"{p.micro_batch}×{p.grad_accum}"),), right=True),
    _Column("market", (("market", lambda p: _market(p, interruptible="interruptible")),)),
    _Column("price", (("{cur}/GPU-h", lambda p: f"{p.price_usd_per_gpu_hour:.2f}"),), right=True),
    _Column(
        "memory",
        (("mem/GPU GiB", lambda p: f"{_down(p.memory.peak_gib):.1f}/{_down(p.memory.usable_gib):.1f}"),),
        right=True,
    ),
    _Column("mem_pct", (("% of card", lambda p: _used_pct(p.memory)),), right=True),
    _Column("free", (("free GiB", lambda p: f"{_down(_headroom_gib(p.memory)):.1f}"),), right=True),
    _Column("hours", (("hours", lambda p: f"{p.time.expected_hours:.1f}"),), right=True),
    _Column("p_hours", (("{p} hours", lambda p: f"{p.time.quantile_hours:.1f}"),), right=True),
    _Column("cost", (("cost {cur}", lambda p: f"{p.total_cost_usd:.2f}"),), right=True),
)


def _table(
    plans: Sequence[Plan], columns: Sequence[_Column], forms: dict[str, int | None], currency: str = "USD"
) -> Table:
    """`plans` under the given form of each column (absent: the fullest; None: hidden)."""
    # Two spaces between columns, a rule under the headers, nothing at the edges: compact, and a
    # row stays one line for grep. A table that cannot fit folds its cells rather than cutting them.
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1))
    shown = [(c, c.forms[form]) for c in columns if (form := forms.get(c.key, 0)) is not None]
    p_label = _p_label(plans[0]) if plans else "p"
    for c, (header, _) in shown:
        label = header.replace("{p}", p_label).replace("{cur}", currency)
        t.add_column(label, justify="right" if c.right else "left", overflow="fold")
    for p in plans:
        t.add_row(*_cells(*(cell(p) for _, (_, cell) in shown)))
    return t


def _width(con: Console, t: Table) -> int:
    return con.measure(t, options=con.options.update_width(10_000)).maximum


@dataclass(frozen=True)
class _Fitted:
    table: Table
    same: tuple[str, ...]  # "sharding none": a hidden column whose value every plan shares
    hidden: tuple[str, ...]  # headers of hidden columns whose values differ


def _fit(con: Console, plans: Sequence[Plan], width: int, currency: str = "USD") -> _Fitted:
    """The fullest form of the default table that fits `width` (the narrowest, folding, when none does).

    Narrowing steps are taken in order until the table fits; then each is undone, most important
    first, where the table still fits without it (hiding a column may leave room for a longer form).
    """
    forms: dict[str, int | None] = {}

    def fits(trial: dict[str, int | None]) -> bool:
        return _width(con, _table(plans, _DEFAULT_COLUMNS, trial, currency)) <= width

    def values(key: str) -> set[str]:
        column = next(c for c in _DEFAULT_COLUMNS if c.key == key)
        return {plain(column.forms[0][1](p)) for p in plans}

    taken: list[tuple[str, int | None, int | None]] = []
    for key, form, only_when_same in _NARROWING:
        if fits(forms):
            break
        before = forms.get(key, 0)
        if before is None or (only_when_same and len(values(key)) > 1):
            continue
        forms[key] = form
        taken.append((key, before, form))
    for key, before, after in reversed(taken):
        if forms[key] == after and fits(forms | {key: before}):
            forms[key] = before
    same, hidden = [], []
    for c in _DEFAULT_COLUMNS:
        if forms.get(c.key, 0) is None:
            shown = values(c.key)
            if len(shown) == 1:
                same.append(f"{c.forms[0][0]} {shown.pop()}")
            else:
                hidden.append(c.forms[0][0])
    return _Fitted(_table(plans, _DEFAULT_COLUMNS, forms, currency), tuple(same), tuple(hidden))


def _in_currency(ps: PlanSet) -> tuple[PlanSet, str]:
    """The plans with every amount in the job's display currency, and its code: for text only (the
    JSON stays in US dollars, as its field names say)."""
    m = money(ps.job)
    if m.code == "USD":
        return ps, "USD"

    def one(p: Plan) -> Plan:
        slack = {k: m.value(v) if k == "budget_usd" else v for k, v in p.slack.items()}
        items = tuple(c.model_copy(update={"usd": round(m.value(c.usd), 2)}) for c in p.cost_items)
        return p.model_copy(
            update={
                # The sum of the rounded items, so that they add up to the total here too.
                "total_cost_usd": round(sum(c.usd for c in items), 2),
                "price_usd_per_gpu_hour": m.value(p.price_usd_per_gpu_hour),
                "cost_items": items,
                "cost_at_confidence_usd": None
                if p.cost_at_confidence_usd is None
                else round(m.value(p.cost_at_confidence_usd), 2),
                "rate_sensitivity": tuple(
                    c.model_copy(update={"cost_usd": round(m.value(c.cost_usd), 2)}) for c in p.rate_sensitivity
                ),
                "slack": slack,
            }
        )

    return ps.model_copy(update={"plans": [one(p) for p in ps.plans]}), m.code


def render_plans(ps: PlanSet, wide: bool = False) -> None:
    """The ranked plans: a table that fits the console (`wide`: every column), then the reasons.

    The default table never grows past TABLE_COLUMNS and narrows with the console by hiding or
    shortening its least important columns; `wide` shows every column, however wide that is.
    """
    con = console()
    text_width = con.width if wide else min(con.width, TABLE_COLUMNS)
    ps, cur = _in_currency(ps)
    job = ps.job
    model = _model_name(job)
    limits = []
    if job.deadline_hours is not None:
        limits.append(f"deadline {job.deadline_hours:g} h at {job.deadline_confidence:.0%}")
    if job.budget_usd is not None:
        at = f" at {job.budget_confidence:.0%}" if job.budget_confidence is not None else ""
        limits.append(f"budget {job.budget_usd:g} USD{at}")

    def say(line: str | Text) -> None:
        con.print(line, width=text_width)

    say(
        _heading(
            model,
            f" ({ps.model_params_b:.2f}B params), {job.train_tokens / 1e6:g}M tokens, "
            f"seq {job.seq_len}; {', '.join(limits) or 'no deadline or budget'}",
        )
    )
    say(
        plain(
            f"{ps.feasible} of {ps.candidates} candidates feasible; engine {ps.engine}; "
            f"prices dated {ps.price_dates[0]} to {ps.price_dates[1]}"
        )
    )
    if note := money(job).note():
        say(plain(note))
    if wide:
        t = _table(ps.plans, _WIDE_COLUMNS, {}, cur)
        # Every column in full, even past the console's edge: a wide table is wrapped, never cut.
        con.width = max(con.width, _width(con, t))
        con.print(t)
    else:
        fitted = _fit(con, ps.plans, text_width, cur)
        con.print(fitted.table)
        if fitted.same:
            say(f"All plans: {', '.join(fitted.same)}.")
        if fitted.hidden:
            say(f"Not shown at {text_width} columns: {', '.join(fitted.hidden)} (--wide shows every column).")
    for p in ps.plans:
        say(f"  {p.rank}. {plain(p.why)}")
    best = ps.plans[0]
    items = ", ".join(f"{plain(c.name)} {c.usd:.2f}" for c in best.cost_items)
    say(f"Plan 1 cost breakdown ({cur}): {items} = {best.total_cost_usd:.2f}")
    if best.cost_at_confidence_usd is not None and job.budget_confidence is not None:
        say(
            f"Plan 1 cost at {job.budget_confidence:.0%}: {best.cost_at_confidence_usd:.2f} {cur} "
            "(the budget is judged on it; trials and failed attempts at their expected cost)"
        )
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
    say(f"Plan 1 time: {phases}; {tb.tokens_per_s:,.0f} tokens/s (±{tb.tokens_per_s_band:.0%})")
    say(f"Plan 1 price: {plain(best.cost_items[0].source)}")
    for line in ps.rejected:
        say(f"Not chosen: {plain(line)}")


def render_infeasible(inf: Infeasibility) -> None:
    con = console(stderr=True)
    # Wrapped like the plan table's text: at the console's width, at most TABLE_COLUMNS.
    width = min(con.width, TABLE_COLUMNS)
    con.print(f"No feasible plan: {plain(inf.summary)}", width=width)
    if inf.ruled_out_by:
        counts = ", ".join(f"{plain(k)} rules out {v}" for k, v in inf.ruled_out_by.items() if v)
        con.print(f"Of {inf.candidates} candidates: {counts}.", width=width)
    for note in inf.notes:
        con.print(f"Note: {plain(note)}", width=width)


def _micro_batch_words(mb: MicroBatchChoice) -> str:
    if mb.largest_fitting <= mb.chosen:
        return f"micro-batch {mb.chosen}: the largest that fits with headroom and holds the global batch"
    return (
        f"micro-batch {mb.chosen}: the smallest within {MICRO_BATCH_SPEED_TOLERANCE:.0%} of the fastest; "
        f"{mb.largest_fitting}, the largest that fits, is {mb.largest_speedup_pct:.1f}% faster at "
        f"{mb.largest_peak_gib:.1f} GiB peak per GPU"
    )


def render_explain(ps: PlanSet, p: Plan) -> None:
    con = console()
    shown, cur = _in_currency(ps)
    # The same plan, its amounts in the display currency.
    p = next((c for c, q in zip(shown.plans, ps.plans, strict=True) if q is p), p)
    ps = shown
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
    if (mb := p.micro_batch_choice) is not None:
        con.print(f"  {_micro_batch_words(mb)}")
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
    # The quantile counts preemptions; the model's tokens/s band is printed beside tokens/s below.
    con.print(f"  {'finish at p' + format(t.confidence * 100, '.0f'):20s} {t.quantile_hours:9.2f}  (preemptions only)")
    con.print(f"  {t.tokens_per_s:,.0f} tokens/s (±{t.tokens_per_s_band:.0%}); step {t.step_s:.3f} s")
    if t.checkpoint_interval_hours is not None:
        con.print(
            f"  interruptible share {t.interruptible_fraction:.0%}, checkpoint every "
            f"{t.checkpoint_interval_hours:.2f} h at {t.interruption_rate_per_hour or 0:.3g} preemptions/h"
        )
    if t.switch_after_lost_hours is not None:
        con.print(
            f"  adaptive: resume on on-demand once {t.switch_after_lost_hours:.2f} h are lost to preemptions "
            f"({t.switch_probability or 0:.0%} of runs)"
        )
    target = "deadline" if ps.job.deadline_hours is not None else f"p{t.confidence * 100:.0f}"
    for case in p.rate_sensitivity:
        if case.rate_factor != 1.0:
            word = "half" if case.rate_factor < 1 else "double"
            con.print(
                f"  at {word} the rate ({case.interruption_rate_per_hour:.3g}/h): cost {case.cost_usd:.2f} {cur}, "
                f"P(meet {target}) {case.meets_deadline:.1%}"
            )
    con.print(_heading("Cost", f" ({cur})"))
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
    ps, cur = _in_currency(ps)
    job = ps.job
    model = _md(_model_name(job))
    lines = [
        f"**{model}**, {job.train_tokens / 1e6:g}M tokens, seq {job.seq_len}"
        + (f", deadline {job.deadline_hours:g} h" if job.deadline_hours else "")
        + (f", budget {job.budget_usd:g} USD" if job.budget_usd else ""),
        "",
        "| # | offer | GPUs | method | precision | sharding | grad ckpt | market | mem/GPU GiB | free GiB | hours "
        f"| p-hours | cost {cur} |",
        "|---|---|---:|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for p in ps.plans:
        lines.append(
            f"| {p.rank} | {_md(p.offer.provider)} {_md(p.offer.region)} {_md(p.gpu)} | {_topology(p)} | "
            f"{_md(p.method)} | {_md(p.weight_precision)} | {_md(p.sharding)} | "
            f"{'on' if p.gradient_checkpointing else 'off'} | {_md(p.market)} | "
            f"{_down(p.memory.peak_gib):.1f}/{_down(p.memory.usable_gib):.1f} ({_used_pct(p.memory)}) | "
            f"{_down(_headroom_gib(p.memory)):.1f} | {p.time.expected_hours:.1f} | "
            f"{p.time.quantile_hours:.1f} | {p.total_cost_usd:.2f} |"
        )
    lines.append("")
    lines += [f"{p.rank}. {_md(p.why)}" for p in ps.plans]
    lines += [f"- Not chosen: {_md(r)}" for r in ps.rejected]
    lines.append(
        f"\nPrices dated {ps.price_dates[0]} to {ps.price_dates[1]}; p-hours at {job.deadline_confidence:.0%}."
    )
    return "\n".join(lines)


def render_compare(rows: list[CompareRow], by: str, m: Money | None = None) -> None:
    m = m or Money(rate_on("USD"))
    t = Table()
    for col in (by, "fits", "GPUs", "method", "market", "provider", "hours", f"cost {m.code}", "what stops it"):
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
                f"{m.value(r.total_cost_usd):.2f}" if r.total_cost_usd is not None else "",
                r.blocked_by,
            )
        )
    console().print(t)


def render_pareto(points: list[FrontierPoint], sweep: str, m: Money | None = None) -> None:
    m = m or Money(rate_on("USD"))
    t = Table(title=f"expected cost against finish time, sweeping the {sweep}")
    for col in (
        f"{sweep} {'h' if sweep == 'deadline' else 'USD'}",  # the limits swept, as the job states them
        f"cost {m.code}",
        "hours",
        "p-hours",
        "plan",
        "frontier",
    ):
        t.add_column(col)
    for p in points:
        t.add_row(
            f"{p.limit:.2f}",
            f"{m.value(p.total_cost_usd):.2f}" if p.feasible and p.total_cost_usd is not None else "-",
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
