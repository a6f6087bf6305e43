"""Output safety (issue 17): data is shown, never obeyed; errors are one line; outputs are regular files."""

from __future__ import annotations

import csv
import json
import os
import re
import stat
import sys
import types
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import click
import pytest
from click.testing import CliRunner, Result

import ftsolve
from ftsolve._errors import FtsolveError, NoFeasiblePlan
from ftsolve.catalog import load_catalog
from ftsolve.catalog._load import OFFER_COLUMNS
from ftsolve.cli import cli
from ftsolve.cli._common import MESSAGE_MAX_CHARS, errors, one_line, plain
from ftsolve.cli._render import render_compare, render_explain, render_markdown, render_pareto, render_plans, write_plot
from ftsolve.solver import PlanSet
from ftsolve.solver._sweeps import CompareRow, FrontierPoint

JOB = ["--model", "llama-3.1-8b", "--tokens", "50M", "--seq-len", "2048"]
MARKUP_PROVIDER = "acme[/]"
MARKUP_REGION = "[link=http://x]y[/link]"
MARKUP_INSTANCE = "[bold red]big"


def _runner() -> CliRunner:
    apart: dict[str, Any] = {"mix_stderr": False}  # click < 8.2; later versions keep stderr apart
    try:
        return CliRunner(**apart)
    except TypeError:
        return CliRunner()


def _invoke(*args: str, command: click.Command = cli) -> Result:
    return _runner().invoke(command, list(args))


def _offers_file(tmp_path: Path, **fields: str) -> Path:
    """One very cheap H100 offer, so that it wins every plan; `fields` override its strings."""
    row = dict.fromkeys(OFFER_COLUMNS, "")
    row |= {
        "provider": "acme",
        "tier": "default",
        "instance_type": "big",
        "gpu": "h100-sxm",
        "source_gpu_name": "H100",
        "gpus_per_node": "8",
        "on_demand_usd_per_gpu_hour": "0.01",
        "billing": "per-hour",
        "region": "r1",
        "country": "US",
        "price_date": "2026-11-01",
        "source": "a test",
    } | fields
    path = tmp_path / "offers.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, list(row))
        writer.writeheader()
        writer.writerow(row)
    return path


def _planset(tmp_path: Path) -> PlanSet:
    """Two plans on the one cheap offer, planned by the library (no CLI)."""
    catalog = load_catalog(_offers_file(tmp_path), replace=True)
    job = ftsolve.JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048)
    return ftsolve.plan(job, catalog, top=2)


def _with_strings(ps: PlanSet, why: str | None = None, **offer_fields: str) -> PlanSet:
    """`ps` with offer strings (and reasons) the catalog would not let through: model_copy skips validation."""
    plans = [
        p.model_copy(update={"offer": p.offer.model_copy(update=offer_fields)} | ({"why": why} if why else {}))
        for p in ps.plans
    ]
    return ps.model_copy(update={"plans": plans, "rejected": [why] if why else ps.rejected})


@pytest.fixture
def markup_offers(tmp_path: Path) -> Path:
    return _offers_file(
        tmp_path, provider=MARKUP_PROVIDER, region=MARKUP_REGION, instance_type=MARKUP_INSTANCE, notes="[i]n"
    )


# 1. rich markup in catalog strings


def test_markup_in_offer_strings_is_printed_literally(markup_offers: Path) -> None:
    result = _invoke("plan", *JOB, "--offers", str(markup_offers), "--top", "2", "--wide")
    assert result.exit_code == 0, result.output
    assert MARKUP_PROVIDER in result.output
    assert MARKUP_REGION in result.output
    assert "Traceback" not in result.output


def test_explain_prints_markup_literally(markup_offers: Path) -> None:
    result = _invoke("explain", *JOB, "--offers", str(markup_offers))
    assert result.exit_code == 0, result.output
    for text in (MARKUP_PROVIDER, MARKUP_REGION, MARKUP_INSTANCE):
        assert text in result.output


def test_compare_prints_markup_literally(markup_offers: Path) -> None:
    result = _invoke("compare", *JOB, "--offers", str(markup_offers))
    assert result.exit_code == 0, result.output
    assert MARKUP_PROVIDER in result.output


def test_markup_in_a_config_model_name_is_printed_literally(tmp_path: Path) -> None:
    config = json.loads((Path(__file__).parent / "configs" / "olmoe-1b-7b.json").read_text())
    config["_name_or_path"] = "[bold]m[/][/]"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = _invoke("estimate", "memory", "--config", str(path))
    assert result.exit_code == 0, result.output
    assert "[bold]m[/][/]" in result.output
    result = _invoke("plan", "--config", str(path), "--tokens", "10M", "--seq-len", "1024", "--top", "1")
    assert result.exit_code == 0, result.output
    assert "[bold]m[/][/]" in result.output


# 2. Markdown


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def _assert_cells_intact(markdown: str, rows: int) -> None:
    header = next(line for line in markdown.splitlines() if line.startswith("| # |"))
    body = [line for line in markdown.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(body) == rows, markdown
    assert all(_unescaped_pipes(line) == _unescaped_pipes(header) for line in body), markdown


def test_markdown_cells_escape_pipes(tmp_path: Path) -> None:
    offers = _offers_file(tmp_path, provider="a|b", region="r|1")
    result = _invoke("plan", *JOB, "--offers", str(offers), "--markdown", "--top", "2")
    assert result.exit_code == 0, result.output
    _assert_cells_intact(result.output, 2)
    assert "a\\|b r\\|1" in result.output


def test_markdown_cells_turn_newlines_into_spaces(tmp_path: Path) -> None:
    ps = _with_strings(_planset(tmp_path), provider="a|b\nc", region="r\r\n1", why="x\ny|z")
    markdown = render_markdown(ps)
    _assert_cells_intact(markdown, 2)
    assert "a\\|b c r  1" in markdown
    assert "1. x y\\|z" in markdown


def test_markdown_escapes_links_and_html(tmp_path: Path) -> None:
    offers = _offers_file(tmp_path, provider="[x](http://evil)<b>")
    result = _invoke("plan", *JOB, "--offers", str(offers), "--markdown", "--top", "1")
    assert result.exit_code == 0, result.output
    assert "\\[x\\](http://evil)\\<b\\>" in result.output
    assert "[x](" not in result.output.replace("\\[x\\](", "")


# 4. plot files


def _pareto(plot: Path, *extra: str) -> Result:
    return _invoke("pareto", *JOB, "--points", "2", "--plot", str(plot), *extra)


def _one_error_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_plot_onto_a_symlink_is_refused_and_the_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    link = tmp_path / "plot.svg"
    link.symlink_to(target)
    result = _pareto(link)
    assert result.exit_code == 2
    assert "symbolic link" in _one_error_line(result)
    assert target.read_text() == "keep me"
    assert link.is_symlink()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_plot_onto_a_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "plot.svg"
    os.mkfifo(fifo)
    result = _pareto(fifo)
    assert result.exit_code == 2
    assert "special file" in _one_error_line(result)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_plot_overwrite_keeps_the_file_mode(tmp_path: Path) -> None:
    plot = tmp_path / "plot.svg"
    plot.write_text("old")
    plot.chmod(0o600)
    result = _pareto(plot)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(plot.stat().st_mode) == 0o600
    assert plot.read_text().startswith("<svg")
    assert not list(tmp_path.glob(".plot.svg.*"))  # no temporary file left beside it


class _FakeFigure:
    def savefig(self, fname: Any, **kwargs: Any) -> None:
        fname.write(b"\x89PNG fake")  # a file object: the figure never opens the path itself


class _FakeAxes:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


@pytest.fixture
def fake_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for matplotlib (not a dependency) that records nothing and saves fixed bytes."""
    matplotlib = types.ModuleType("matplotlib")
    pyplot = types.ModuleType("matplotlib.pyplot")
    matplotlib.use = lambda *args: None  # type: ignore[attr-defined]
    matplotlib.pyplot = pyplot  # type: ignore[attr-defined]
    pyplot.subplots = lambda **kwargs: (_FakeFigure(), _FakeAxes())  # type: ignore[attr-defined]
    pyplot.close = lambda fig: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "matplotlib", matplotlib)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)


@pytest.mark.usefixtures("fake_matplotlib")
def test_png_plot_goes_through_the_same_safe_write(tmp_path: Path) -> None:
    target = tmp_path / "target.png"
    target.write_bytes(b"keep")
    link = tmp_path / "link.png"
    link.symlink_to(target)
    result = _pareto(link)
    assert result.exit_code == 2
    assert "symbolic link" in _one_error_line(result)
    assert target.read_bytes() == b"keep"
    plot = tmp_path / "plot.png"
    plot.write_bytes(b"old")
    plot.chmod(0o600)
    assert _pareto(plot).exit_code == 0
    assert plot.read_bytes() == b"\x89PNG fake" and stat.S_IMODE(plot.stat().st_mode) == 0o600


# 5. the error wrapper


def _raising(exc: BaseException) -> click.Command:
    @click.command()
    @errors
    def command() -> None:
        raise exc

    return command


class _Custom(FtsolveError):
    exit_code = 7


def test_error_messages_are_one_capped_line() -> None:
    result = _invoke(command=_raising(FtsolveError("first\nsecond\r\x1b[2Jthird\t" + "x" * 5000)))
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert line.startswith("Error: first second [2Jthird x")
    assert "\x1b" not in result.stderr
    assert len(line) <= len("Error: ") + MESSAGE_MAX_CHARS


def test_the_exception_carries_the_exit_code() -> None:
    result = _invoke(command=_raising(_Custom("custom")))
    assert result.exit_code == 7
    assert _one_error_line(result) == "Error: custom"


def test_no_feasible_plan_exits_1_with_one_line() -> None:
    job = ftsolve.JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, budget_usd=0.05)
    with pytest.raises(NoFeasiblePlan) as info:
        ftsolve.plan(job)
    result = _invoke(command=_raising(info.value))
    assert result.exit_code == 1
    assert "budget" in _one_error_line(result)


@pytest.mark.parametrize("exc", [MemoryError(), RecursionError("maximum depth"), OverflowError("int too large")])
def test_resource_errors_exit_2_with_one_line(exc: BaseException) -> None:
    result = _invoke(command=_raising(exc))
    assert result.exit_code == 2
    assert _one_error_line(result).startswith("Error: input too large")


def test_bugs_keep_their_traceback() -> None:
    result = _invoke(command=_raising(KeyError("bug")))
    assert isinstance(result.exception, KeyError)


def test_one_line_helpers() -> None:
    assert plain("a\x1b[2Jb\x07c\u202ed\x9be") == "a [2Jb c d e"
    assert one_line("a \n\n b") == "a b"
    assert len(one_line("y" * 10_000)) == MESSAGE_MAX_CHARS


# 6. terminal control sequences


CONTROL = "evil\x1b[2J\x1b]0;owned\x07\x9b31m\u202e"


def _assert_no_controls(text: str) -> None:
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", text), repr(text)


def test_control_characters_never_reach_the_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The catalog may refuse such names on load; the renderers do not rely on it.
    ps = _with_strings(_planset(tmp_path), provider=CONTROL, region=CONTROL, instance_type=CONTROL, why=CONTROL)
    render_plans(ps)
    render_explain(ps, ps.plans[0])
    print(render_markdown(ps))
    out = capsys.readouterr().out
    assert out.count("evil [2J ]0;owned") >= 6
    _assert_no_controls(out)


def _point(hours: float, cost: float, label: str) -> FrontierPoint:
    return FrontierPoint(
        limit=hours,
        feasible=True,
        total_cost_usd=cost,
        expected_hours=hours,
        quantile_hours=hours,
        label=label,
        on_frontier=True,
    )


def test_control_characters_never_reach_compare_or_pareto(capsys: pytest.CaptureFixture[str]) -> None:
    row = CompareRow(
        option=CONTROL,
        feasible=True,
        n_gpus=1,
        method=CONTROL,
        market=CONTROL,
        provider=CONTROL,
        expected_hours=1.0,
        total_cost_usd=1.0,
        blocked_by=CONTROL,
    )
    point = _point(1.0, 1.0, CONTROL)
    render_compare([row], "gpu")
    render_pareto([point], "deadline")
    out = capsys.readouterr().out
    assert "evil [2J" in out
    _assert_no_controls(out)


def test_svg_labels_are_escaped_xml(tmp_path: Path) -> None:
    ps = _planset(tmp_path)
    label = CONTROL + "<script>&"
    points = [_point(1.0, 2.0, label), _point(2.0, 1.0, label)]
    path = tmp_path / "plot.svg"
    write_plot(path, points, ps.job)
    text = path.read_text()
    ElementTree.fromstring(text)  # well-formed: no control characters, markup escaped
    assert "<script>" not in text and "&lt;script&gt;&amp;" in text


def test_control_characters_in_a_config_name_never_reach_the_terminal(tmp_path: Path) -> None:
    config: dict[str, Any] = json.loads((Path(__file__).parent / "configs" / "olmoe-1b-7b.json").read_text())
    config["_name_or_path"] = "m\x1b[2J\x1b]0;t\x07"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    for args in (["memory"], ["time", "--gpu", "h100-sxm"]):
        result = _invoke("estimate", *args, "--config", str(path))
        if result.exit_code == 2 and "control" in result.stderr:
            pytest.skip("model names with control characters are refused on load")
        assert result.exit_code == 0, result.output
        assert "m [2J ]0;t" in result.output
        _assert_no_controls(result.output)
