"""The plan table fits the console: no cut cell at 100 or 80 columns, every column when wide, memory
rounded so that what is used never looks above what is there."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

import ftsolve
from ftsolve import PlanSet
from ftsolve.cli import cli
from ftsolve.cli._common import PIPED_COLUMNS, console
from ftsolve.cli._render import render_markdown, render_plans

README_JOB = ["--model", "llama-3.1-8b", "--tokens", "50M", "--seq-len", "2048", "--deadline", "24h", "--budget", "300"]
ROW = re.compile(r"^(\d+)  ")
NOTE_PREFIXES = ("All plans: ", "Not shown at ", "  1. ")
WIDE_HEADERS = (
    "provider",
    "tier",
    "instance type",
    "region",
    "GPU",
    "nodes×GPUs",
    "method",
    "weights",
    "optimizer",
    "sharding",
    "grad ckpt",
    "micro-batch×accum",
    "market",
    "USD/GPU-h",
    "mem/GPU GiB",
    "% of card",
    "free GiB",
    "hours",
    "p90 hours",
    "cost USD",
)


@pytest.fixture(scope="module")
def readme_plans() -> PlanSet:
    job = ftsolve.JobSpec(
        model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24, budget_usd=300
    )
    return ftsolve.plan(job)


def _plan_output(columns: int) -> str:
    result = CliRunner().invoke(cli, ["plan", *README_JOB], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def _table(output: str) -> tuple[str, list[str], list[str]]:
    """The header line, the rows, and the lines after the table."""
    lines = output.splitlines()
    h = next(i for i, line in enumerate(lines) if line.startswith("#  "))
    assert set(lines[h + 1]) == {"─"}, output
    rows = []
    for line in lines[h + 2 :]:
        if not ROW.match(line):
            break
        rows.append(line)
    return lines[h], rows, lines[h + 2 + len(rows) :]


def _render(ps: PlanSet, capsys: pytest.CaptureFixture[str], wide: bool = False) -> str:
    capsys.readouterr()
    render_plans(ps, wide=wide)
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", [100, 80])
def test_the_readme_job_fits_without_a_cut_cell(columns: int, readme_plans: PlanSet) -> None:
    out = _plan_output(columns)
    assert "…" not in out
    assert max(map(len, out.splitlines())) <= columns, out
    header, rows, after = _table(out)
    # One line per plan, in rank order, each with its offer, GPU and cost whole: nothing cut or folded.
    assert [int(ROW.match(r).group(1)) for r in rows] == [p.rank for p in readme_plans.plans], out  # type: ignore[union-attr]
    assert after[0].startswith(NOTE_PREFIXES), out
    for row, p in zip(rows, readme_plans.plans, strict=True):
        assert f" {p.offer.provider}" in row and f" {p.gpu} " in row, row
        assert row.endswith(f"{p.total_cost_usd:.2f}"), row
    for name in ("offer", "GPUs", "method", "mem/GPU", "hours", "cost USD"):
        assert name in header, header
    # Columns that did not fit are named below the table, never silently lost.
    notes = "\n".join(line for line in after if line.startswith(NOTE_PREFIXES[:2]))
    for name in ("sharding", "grad ckpt", "market"):
        assert name in header or name in notes, out


def test_at_100_columns_memory_shows_use_and_headroom() -> None:
    header, rows, _ = _table(_plan_output(100))
    assert "mem/GPU" in header
    assert all(re.search(r" \d+%, [\d.]+ GiB free ", row) for row in rows), rows


def test_a_terminal_too_narrow_for_any_layout_folds_cells_rather_than_cutting_them() -> None:
    out = _plan_output(40)
    assert "…" not in out
    assert max(map(len, out.splitlines())) <= 40, out


def test_wide_shows_every_column(readme_plans: PlanSet, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "100")
        out = _render(readme_plans, capsys, wide=True)
    assert "…" not in out
    header, rows, _ = _table(out)
    headers = re.split(r"\s{2,}", header.strip())
    assert headers == ["#", *WIDE_HEADERS], header
    for row, p in zip(rows, readme_plans.plans, strict=True):
        for value in (p.offer.provider, p.offer.tier, p.offer.instance_type, p.offer.region, p.optimizer):
            assert value in row, row
        assert f"{p.micro_batch}×{p.grad_accum}" in row and f"{p.price_usd_per_gpu_hour:.2f}" in row, row


def test_gpus_read_as_nodes_times_gpus_per_node(readme_plans: PlanSet, capsys: pytest.CaptureFixture[str]) -> None:
    p = readme_plans.plans[0].model_copy(update={"nodes": 2, "n_gpus": 16})
    out = _render(readme_plans.model_copy(update={"plans": (p,)}), capsys)
    assert f" 2×8 {p.gpu} " in _table(out)[1][0]


@pytest.mark.parametrize(
    ("peak", "usable", "card"),
    [(31.24, 31.25, 31.9), (38.899, 38.9, 39.7), (15.75, 15.75, 16.07), (0.29, 0.3, 16.0), (171.96, 176.04, 179.6)],
)
def test_memory_rounds_used_down_so_it_never_shows_above_capacity(
    peak: float, usable: float, card: float, readme_plans: PlanSet, capsys: pytest.CaptureFixture[str]
) -> None:
    p = readme_plans.plans[0]
    memory = p.memory.model_copy(update={"peak_gib": peak, "usable_gib": usable, "card_gib": card})
    ps = readme_plans.model_copy(update={"plans": (p.model_copy(update={"memory": memory}),)})

    row = _table(_render(ps, capsys))[1][0]
    pct, free = re.search(r" (\d+)%, ([\d.]+) GiB free ", row).groups()  # type: ignore[union-attr]
    assert int(pct) <= 100 * peak / card and float(free) <= usable - peak + 1e-9, row

    for text in (_table(_render(ps, capsys, wide=True))[1][0], render_markdown(ps)):
        used, capacity = re.search(r"(\d+\.\d+)/(\d+\.\d+)", text).groups()  # type: ignore[union-attr]
        assert float(used) <= peak and float(used) <= float(capacity) <= usable, text
        assert len(used.split(".")[1]) == len(capacity.split(".")[1]), text  # never "31.2/31"


def test_columns_is_honoured_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "77")
    assert console().width == 77
    for unset_or_bad in ("", "abc", "0"):
        monkeypatch.setenv("COLUMNS", unset_or_bad)
        assert console().width == PIPED_COLUMNS
    monkeypatch.delenv("COLUMNS")
    assert console().width == PIPED_COLUMNS
