"""The engine seam for coupled choices: CP-SAT against brute-force enumeration on small problems."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftsolve._errors import ChoiceProblemError
from ftsolve.solver._engines import (
    Budget,
    Choice,
    ChoiceProblem,
    ChoiceTable,
    CpSatEngine,
    Quota,
    ScanEngine,
    presolve_dominance,
)

PROVIDERS = 3


def _i(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


@st.composite
def tables(draw: st.DrawFn, index: int, timed: bool) -> ChoiceTable:
    n = draw(st.integers(1, 8))
    empty = st.sampled_from([-1] * 9 + [index])
    ints = st.lists
    key = draw(ints(st.integers(0, 30), min_size=n, max_size=n))
    columns = {
        # Cost is a column of its own: the objective key may be time or a weighted sum.
        "cost_cents": _i(draw(ints(st.integers(0, 40), min_size=n, max_size=n))),
        "gpus": _i(draw(ints(st.sampled_from([1, 2, 4, 8]), min_size=n, max_size=n))),
        "provider": _i(draw(ints(st.integers(0, PROVIDERS - 1), min_size=n, max_size=n))),
    }
    if timed:
        columns["start_min"] = _i(draw(ints(st.integers(0, 6), min_size=n, max_size=n)))
        columns["duration_min"] = _i(draw(ints(st.integers(0, 5), min_size=n, max_size=n)))
    optional = draw(st.booleans()) and draw(st.booleans())
    if optional:  # an optional run is worth doing only with a negative key (a reward)
        key = [k - 15 for k in key]
    return ChoiceTable(
        name=f"run{index}",
        key=_i(key),
        # Mostly at least one feasible row per table, so that the limits decide feasibility.
        feasible=np.array(draw(ints(st.booleans(), min_size=n, max_size=n)), dtype=bool) | (index != draw(empty)),
        tie_rank=_i(draw(st.permutations(list(range(n))))),
        columns=columns,
        optional=optional,
    )


@st.composite
def problems(draw: st.DrawFn, timed: bool = False) -> ChoiceProblem:
    k = draw(st.integers(2, 4))
    ts = tuple(draw(tables(i, timed)) for i in range(k))
    limits: list[Budget | Quota] = []
    if draw(st.booleans()) or not timed:
        limits.append(Budget(draw(st.integers(5 * k, 30 * k))))
    quota = Quota(
        "gpus",
        by="provider",
        limits={p: draw(st.sampled_from([1, 2, 4, 8, 12])) for p in range(PROVIDERS) if draw(st.booleans())},
        default_limit=draw(st.sampled_from([None, 8, 16])),
        window=("start_min", "duration_min") if timed else None,
    )
    if draw(st.booleans()) or timed:
        limits.append(quota)
    return ChoiceProblem(ts, tuple(limits))


@dataclass(frozen=True)
class Best:
    key: int
    tie: int


def _positions(t: ChoiceTable) -> list[int]:
    tie = t.tie_rank if t.tie_rank is not None else np.arange(len(t))
    order = sorted(range(len(t)), key=lambda r: (int(t.key[r]), int(tie[r]), r))
    pos = [0] * len(t)
    for p, r in enumerate(order):
        pos[r] = p
    return pos


def _meets_limits(problem: ChoiceProblem, rows: tuple[int | None, ...]) -> bool:
    """An independent checker: sums over the chosen rows, quotas at every integer instant."""
    chosen = [(t, r) for t, r in zip(problem.tables, rows, strict=True) if r is not None]
    for lim in problem.limits:
        if isinstance(lim, Budget):
            if sum(int(t.columns[lim.column][r]) for t, r in chosen) > lim.limit:
                return False
            continue
        for v in range(PROVIDERS):
            cap = lim.limit_of(v)
            mine = [(t, r) for t, r in chosen if t.columns[lim.by][r] == v]
            if cap is None:
                continue
            if lim.window is None:
                instants: list[int | None] = [None]
            else:
                instants = list(range(0, 12))
            for tau in instants:
                used = 0
                for t, r in mine:
                    if lim.window is not None:
                        s, d = int(t.columns[lim.window[0]][r]), int(t.columns[lim.window[1]][r])
                        if not (tau is not None and s <= tau < s + d):
                            continue
                    used += int(t.columns[lim.column][r])
                if used > cap:
                    return False
    return True


def brute_force(problem: ChoiceProblem) -> Best | None:
    """Lexicographic minimum of (Σ key, Σ position+1) over every choice meeting the limits."""
    options = []
    for t in problem.tables:
        rows: list[int | None] = [None] if t.optional else []
        options.append(rows + [int(r) for r in np.nonzero(t.feasible)[0]])
    best: Best | None = None
    for combo in itertools.product(*options):
        if not _meets_limits(problem, combo):
            continue
        cand = _score(problem, combo)
        if best is None or (cand.key, cand.tie) < (best.key, best.tie):
            best = cand
    return best


def _score(problem: ChoiceProblem, rows: tuple[int | None, ...]) -> Best:
    key = sum(int(t.key[r]) for t, r in zip(problem.tables, rows, strict=True) if r is not None)
    tie = sum(_positions(t)[r] + 1 for t, r in zip(problem.tables, rows, strict=True) if r is not None)
    return Best(key, tie)


def _assert_matches_brute_force(problem: ChoiceProblem, choice: Choice) -> None:
    best = brute_force(problem)
    if best is None:
        assert choice.status == "infeasible"
        assert choice.objective is None
        return
    assert choice.status == "optimal"
    assert choice.objective == choice.bound == best.key
    assert _score(problem, choice.rows) == best
    assert _meets_limits(problem, choice.rows)
    for t, r in zip(problem.tables, choice.rows, strict=True):
        assert (r is None and t.optional) or (r is not None and t.feasible[r])


@settings(max_examples=60, deadline=None)
@given(problems())
def test_cpsat_equals_brute_force_on_coupled_problems(problem: ChoiceProblem) -> None:
    _assert_matches_brute_force(problem, CpSatEngine().solve(problem))


@settings(max_examples=40, deadline=None)
@given(problems(timed=True))
def test_cpsat_equals_brute_force_with_quotas_over_time(problem: ChoiceProblem) -> None:
    _assert_matches_brute_force(problem, CpSatEngine().solve(problem))


@settings(max_examples=60, deadline=None)
@given(st.one_of(problems(), problems(timed=True)))
def test_presolve_keeps_the_optimum(problem: ChoiceProblem) -> None:
    reduced = presolve_dominance(problem)
    for before, after in zip(problem.tables, reduced.tables, strict=True):
        assert not np.any(after.feasible & ~before.feasible)
    assert brute_force(reduced) == brute_force(problem)
    _assert_matches_brute_force(problem, CpSatEngine(presolve=False).solve(problem))


def test_presolve_drops_a_dominated_row() -> None:
    # Row 1 costs more and uses more GPUs on the same provider than row 0: never needed.
    t = ChoiceTable(
        "run",
        _i([5, 6, 7]),
        np.ones(3, dtype=bool),
        columns={"cost_cents": _i([5, 6, 1]), "gpus": _i([2, 4, 4]), "provider": _i([0, 0, 0])},
    )
    problem = ChoiceProblem((t,), (Budget(10), Quota("gpus", by="provider", default_limit=8)))
    assert presolve_dominance(problem).tables[0].feasible.tolist() == [True, False, True]


def test_presolve_keeps_a_cheaper_row_that_runs_at_another_time() -> None:
    # Run b's row 0 is cheaper than row 1 and uses as many GPUs, but overlaps run a: with a
    # quota over time, rows that start or last differently are not comparable.
    shared = {"provider": _i([0, 0]), "gpus": _i([4, 4]), "cost_cents": _i([0, 0])}
    a = ChoiceTable(
        "a",
        _i([0]),
        np.ones(1, dtype=bool),
        columns={k: v[:1] for k, v in shared.items()} | {"start_min": _i([0]), "duration_min": _i([5])},
    )
    b = ChoiceTable(
        "b", _i([0, 1]), np.ones(2, dtype=bool), columns=shared | {"start_min": _i([0, 5]), "duration_min": _i([5, 5])}
    )
    quota = Quota("gpus", by="provider", limits={0: 4}, window=("start_min", "duration_min"))
    problem = ChoiceProblem((a, b), (quota,))
    assert presolve_dominance(problem).tables[1].feasible.tolist() == [True, True]
    assert CpSatEngine().solve(problem).rows == (0, 1)


@settings(max_examples=30, deadline=None)
@given(problems())
def test_same_problem_same_choice(problem: ChoiceProblem) -> None:
    engine = CpSatEngine(seed=7)
    assert engine.solve(problem) == engine.solve(problem) == CpSatEngine(seed=7).solve(problem)


@settings(max_examples=40, deadline=None)
@given(problems())
def test_scan_and_cpsat_agree_on_uncoupled_tables(problem: ChoiceProblem) -> None:
    uncoupled = ChoiceProblem(problem.tables)
    scan, cpsat = ScanEngine().solve(uncoupled), CpSatEngine().solve(uncoupled)
    assert scan == cpsat
    _assert_matches_brute_force(uncoupled, scan)


def test_scan_refuses_a_coupled_problem() -> None:
    t = ChoiceTable("run", _i([1, 2]), np.ones(2, dtype=bool), columns={"cost_cents": _i([1, 2])})
    with pytest.raises(ChoiceProblemError, match="CpSatEngine"):
        ScanEngine().solve(ChoiceProblem((t,), (Budget(3),)))


def test_cpsat_names_variables_after_what_they_choose() -> None:
    from ortools.sat.python import cp_model

    from ftsolve.solver._engines import _CpSatModel

    t = ChoiceTable(
        "final",
        _i([3, 1]),
        np.ones(2, dtype=bool),
        columns={"cost_cents": _i([3, 1])},
        row_names=("H100x8-lora-spot", "A100x4-qlora-od"),
    )
    model = _CpSatModel(ChoiceProblem((t,), (Budget(2),)), seed=0, time_limit_s=5.0).model
    assert isinstance(model, cp_model.CpModel)
    names = [v.name for v in model.proto.variables]
    assert names == ["pick[final][H100x8-lora-spot]", "pick[final][A100x4-qlora-od]"]
    assert [c.name for c in model.proto.constraints] == ["one[final]", "budget"]


def test_infeasible_and_empty_tables() -> None:
    t = ChoiceTable("a", _i([1]), np.zeros(1, dtype=bool), columns={"cost_cents": _i([1])})
    assert CpSatEngine().solve(ChoiceProblem((t,), (Budget(5),))).status == "infeasible"
    assert ScanEngine().solve(ChoiceProblem((t,))).status == "infeasible"
    opt = ChoiceTable("b", _i([4]), np.ones(1, dtype=bool), columns={"cost_cents": _i([1])}, optional=True)
    choice = CpSatEngine().solve(ChoiceProblem((opt,), (Budget(5),)))
    assert (choice.status, choice.rows, choice.objective) == ("optimal", (None,), 0)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ChoiceTable("a", np.array([1.5]), np.ones(1, dtype=bool)), "integer"),
        (lambda: ChoiceTable("a", _i([1, 2]), np.ones(1, dtype=bool)), "shape"),
        (lambda: ChoiceTable("a", _i([1]), np.ones(1, dtype=bool), columns={"gpus": _i([1, 2])}), "gpus"),
        (lambda: ChoiceProblem((ChoiceTable("a", _i([1]), np.ones(1, dtype=bool)),), (Budget(1),)), "cost_cents"),
    ],
)
def test_malformed_problems_are_refused(build: object, message: str) -> None:
    with pytest.raises(ChoiceProblemError, match=message):
        build()  # type: ignore[operator]


def test_keys_too_large_are_refused() -> None:
    t = ChoiceTable("a", _i([0, 2**61]), np.ones(2, dtype=bool), columns={"cost_cents": _i([1, 0])})
    with pytest.raises(ChoiceProblemError, match="too large"):
        CpSatEngine().solve(ChoiceProblem((t,), (Budget(1),)))
