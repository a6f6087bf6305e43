"""The README's tour shows what the commands really print (scripts/update_readme.py writes it)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ftsolve.cli import cli

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- run: (?P<cmd>.+?) -->\n```\n\$ (?P=cmd)\n(?P<out>.*?)```\n<!-- end -->", re.DOTALL)
BLOCKS = BLOCK.findall((ROOT / "README.md").read_text())


def _clean(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def test_the_readme_has_a_tour() -> None:
    commands = [cmd for cmd, _ in BLOCKS]
    assert any("--budget 0.5" in c for c in commands)  # an infeasible request
    assert any("No feasible plan" in out for _, out in BLOCKS)
    assert any("--methods full" in c for c in commands)  # a multi-GPU full fine-tune
    assert any(c.startswith("python examples/") for c in commands)  # a library call


@pytest.mark.parametrize(("cmd", "shown"), BLOCKS, ids=[c[:60] for c, _ in BLOCKS])
def test_readme_block_matches_the_command(cmd: str, shown: str) -> None:
    argv = shlex.split(cmd)
    if argv[0] == "ftsolve":
        # The README is rendered 160 columns wide, whatever the terminal running the tests.
        result = CliRunner(env={"COLUMNS": "160"}).invoke(cli, argv[1:])
        printed = result.output
        # The infeasible request really is infeasible: exit 1 with its explanation; the rest plan.
        assert result.exit_code == (1 if "No feasible plan" in shown else 0), printed
    else:
        proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=ROOT, check=False)
        printed = proc.stdout + proc.stderr
    assert _clean(printed) == _clean(shown), f"README block for {cmd!r} is stale: run scripts/update_readme.py"
