"""Regenerate the command outputs shown in README.md.

    python scripts/update_readme.py

Every block between `<!-- run: CMD -->` and `<!-- end -->` is replaced by the output of CMD
(stdout and stderr), run with the installed `ftsolve`, so the README shows what the commands print.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(<!-- run: (?P<cmd>.+?) -->\n)```\n.*?```\n(<!-- end -->)", re.DOTALL)


def render(match: re.Match[str]) -> str:
    cmd = match.group("cmd")
    out = subprocess.run(shlex.split(cmd), capture_output=True, text=True, env=os.environ | {"COLUMNS": "160"})
    text = (out.stdout + out.stderr).rstrip("\n")
    return f"{match.group(1)}```\n$ {cmd}\n{text}\n```\n{match.group(3)}"


def main() -> None:
    text = README.read_text()
    README.write_text(BLOCK.sub(render, text))


if __name__ == "__main__":
    main()
