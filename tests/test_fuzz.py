"""Robustness fuzz (issue 17): random CLI invocations and random library jobs never crash.

The generators and the checks live in benchmarks/fuzz.py, whose long run
(`python benchmarks/fuzz.py --cli 10000 --jobs 10000`) counts failures by kind; here a short
profile for CI. FTSOLVE_FUZZ_EXAMPLES raises the number of examples of each property.

CLI: argv from the real commands and options with sane and hostile values (huge and non-finite
numbers, unicode, rich markup, newlines, formulas, /dev/null, non-UTF-8 files, YAML alias bombs);
no traceback, exit code 0, 1 or 2, one line of error output on exit 2, JSON that parses.
Library: `plan(JobSpec.build(...), small random catalog)` raises an FtsolveError or returns plans
that pass check_plan, with finite, non-negative figures within the budget.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import fuzz

EXAMPLES = int(os.environ.get("FTSOLVE_FUZZ_EXAMPLES", "50"))
# No shrinking: a case is a seed of fuzz's own generators, and the failure message prints the
# reproducer (argv or job) itself.
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow],
)
# A run is interrupted (and fails) after this. A run over fuzz.SLOW_S that finishes is counted by
# the benchmark, not failed here.
TIMEOUT_S = 2 * fuzz.SLOW_S


def _failures(outcome: fuzz.Outcome) -> list[tuple[str, str, str]]:
    return [p for p in outcome.problems if p[0] != fuzz.SLOW or p[1] == "interrupted"]


seeds = st.integers(0, 2**32 - 1)


@pytest.fixture(scope="module")
def files_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of fuzz's input files (a Path, so that a failing example prints short)."""
    root = tmp_path_factory.mktemp("fuzz")
    fuzz.make_files(root)
    return root


@FUZZ
@given(seed=seeds)
def test_cli_fuzz_no_traceback_and_one_line_errors(files_root: Path, seed: int) -> None:
    case = fuzz.cli_case(random.Random(seed), fuzz.make_files(files_root))  # cached per folder
    outcome = fuzz.run_cli(case, TIMEOUT_S)
    if _failures(outcome):
        pytest.fail(fuzz.describe(case, outcome, files_root), pytrace=False)


@FUZZ
@given(seed=seeds)
def test_library_fuzz_plans_are_valid_or_errors_are_ours(seed: int) -> None:
    case = fuzz.job_case(random.Random(seed))
    outcome = fuzz.run_job(case, TIMEOUT_S)
    if _failures(outcome):
        pytest.fail(fuzz.describe(case, outcome), pytrace=False)


def test_every_hostile_file_once(files_root: Path) -> None:
    """Each hostile job, config, offers and output file once, through the option that reads it."""
    failed = []
    for case in fuzz.targeted_cases(fuzz.make_files(files_root), values=False):
        outcome = fuzz.run_cli(case, TIMEOUT_S)
        if _failures(outcome):
            failed.append(fuzz.describe(case, outcome, files_root))
    if failed:
        pytest.fail(f"{len(failed)} hostile files mishandled:\n" + "\n".join(failed[:20]), pytrace=False)
