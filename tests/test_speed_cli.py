"""CLI start-up (issue 18): commands outside planning are imported when first named, and every
command is still listed, documented and runnable."""

from __future__ import annotations

import subprocess
import sys

import click
from click.testing import CliRunner

from ftsolve.cli import cli

LAZY = {"catalog", "models", "estimate", "campaign", "probe", "calibrate"}


def test_every_command_is_listed_and_found() -> None:
    assert LAZY | {"plan", "explain", "export", "schema", "compare", "pareto"} == set(cli.commands)
    estimate = cli.commands["estimate"]
    assert isinstance(estimate, click.Group) and {"memory", "time"} <= set(estimate.commands)
    out = CliRunner().invoke(cli, ["--help"]).output
    assert all(f"  {name} " in out for name in LAZY)
    assert CliRunner().invoke(cli, ["models", "list"]).exit_code == 0


def test_planning_does_not_import_the_other_commands() -> None:
    code = (
        "import sys\n"
        "from ftsolve.cli import cli\n"
        "try:\n"
        "    cli.main(['plan', '--model', 'llama-3.1-8b', '--tokens', '5M', '--seq-len', '512', '--json'],"
        " standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('MODULES', *sorted(m for m in sys.modules if m.startswith('ftsolve.cli.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split("MODULES", 1)[1].split())
    assert not loaded & {"ftsolve.cli._catalog", "ftsolve.cli._estimate", "ftsolve.cli._campaign", "ftsolve.cli._probe"}
