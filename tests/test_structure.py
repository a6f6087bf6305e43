"""House rules the code keeps (issue 18): functions short enough to read at once."""

from __future__ import annotations

import ast
from pathlib import Path

SOLVER = Path(__file__).resolve().parents[1] / "src" / "ftsolve" / "solver"


def test_no_solver_function_is_longer_than_80_lines() -> None:
    long = []
    for path in sorted(SOLVER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long
    assert len(list(SOLVER.glob("*.py"))) > 10  # the folder is where the test looks
