"""Solver speed: candidate-table build time, engine time and peak memory, per catalog size.

    python benchmarks/solver_speed.py [--sizes 1000,10000,100000] [--repeat 3] [--cli-runs 5] [--big 1000000]
                                      [--first-runs 3] [--big-runs 1] [--only-big]

Prints one row per (catalog, engine). Times are the best of `--repeat` warm runs; peak memory is
Python-level (tracemalloc) during one build + solve. Then the issue 6 and 18 targets: the median
of 30 warm library calls on the bundled catalog for the README's feasible plan and its infeasible
job (with the full explanation, and the issue's 70B job beside it), and the median wall time of
`ftsolve plan`, `ftsolve pareto` and an infeasible `ftsolve plan`, each a fresh process (import,
catalog load, plan, render), with its ratio to `plan` in the same run. The CLI is timed twice:
as the shell runs it (with PYTHONDONTWRITEBYTECODE=1 and no __pycache__, ftsolve's modules are
compiled on every run) and with bytecode cached, as an installed package runs (the cache goes to
a temporary PYTHONPYCACHEPREFIX, never into the source tree). Then campaigns of 3, 10 and 30 runs.
Last, the issue 15 item 6 rows: a user catalog of `--big` offers (the bundled offers replicated
with distinct instance types and regions and jittered prices, written as a CSV file) loaded with
`load_catalog` and planned for the README job in a fresh process, with its peak RSS, beside the
bundled catalog's cold load in a fresh process (`--big 0` skips the large catalog). A first load
of the file parses it and caches its columns (catalog/_cache.py): `--first-runs N` fresh
processes do, each with an empty cache; `--big-runs N` then load and plan the unchanged file in N
more fresh processes, which read the cache. One row each (the machine's noise shows); each target
is judged on the median of its rows. `--only-big` runs only these rows.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterable

import ftsolve
from ftsolve import Catalog, JobSpec, Offer
from ftsolve.solver._engines import ENGINES
from ftsolve.solver._grid import build_candidates

WARM_CALLS = 30


def synthetic(base: Catalog, n: int, seed: int = 0) -> Catalog:
    rng = random.Random(seed)
    gpus = [g for g, spec in base.gpus.items() if spec.tensor_tflops]
    offers = []
    for i in range(n):
        od = rng.uniform(0.2, 8.0)
        offers.append(
            Offer(
                provider=rng.choice(["p1", "p2", "p3", "aws", "runpod", "lambda"]),
                tier="t",
                instance_type=f"i{i}",
                gpu=rng.choice(gpus),
                source_gpu_name="x",
                gpus_per_node=rng.choice([1, 2, 4, 8]),
                on_demand_usd_per_gpu_hour=round(od, 4),
                interruptible_usd_per_gpu_hour=round(od * rng.uniform(0.2, 0.9), 4) if rng.random() < 0.5 else None,
                region=f"r{rng.randrange(20)}",
                country=rng.choice(["US", "FI", "DE"]),
                price_date=dt.date(2026, 10, 1),
                source="synthetic",
            )
        )
    return Catalog(gpus=base.gpus, offers=tuple(offers), models=base.models)


def median(xs: Iterable[float]) -> float:
    """The middle value (the upper one of an even count), as every table here reports it."""
    ordered = sorted(xs)
    return ordered[len(ordered) // 2]


def timings(repeat: int, fn: Callable[..., object], *args: object, **kwargs: object) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - t0)
    return sorted(times)


def best_of(repeat: int, fn: Callable[..., object], *args: object, **kwargs: object) -> float:
    return timings(repeat, fn, *args, **kwargs)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cli-runs", type=int, default=5)
    ap.add_argument("--big", type=int, default=1_000_000, help="offers in the large user catalog (0: skip)")
    ap.add_argument("--big-runs", type=int, default=1, help="fresh processes that load it from its cache")
    ap.add_argument("--first-runs", type=int, default=3, help="fresh processes that parse it (first loads)")
    ap.add_argument("--only-big", action="store_true", help="only the large catalog and the bundled cold load")
    args = ap.parse_args()
    if args.only_big:
        _big_catalog_rows(args.big, runs=args.big_runs, first_runs=args.first_runs)
        return
    job = README_JOB
    t0 = time.perf_counter()
    base = ftsolve.load_catalog()
    load_s = time.perf_counter() - t0
    cats = [("bundled", base)] + [(f"synthetic {n}", synthetic(base, n)) for n in map(int, args.sizes.split(","))]
    print(f"catalog load (cold, bundled): {load_s * 1000:.1f} ms")
    print(
        f"{'catalog':18s} {'offers':>7s} {'candidates':>10s} {'engine':>6s} {'build ms':>9s} "
        f"{'solve ms':>9s} {'plan() ms':>9s} {'peak MiB':>9s} {'solve/scan':>10s}"
    )
    measured: dict[str, float] = {}
    for name, cat in cats:
        build_candidates(job, cat)  # warm
        build_s = best_of(args.repeat, build_candidates, job, cat)
        table = build_candidates(job, cat)
        f = table.feasible()
        scan_solve = None
        for engine in ("scan", "cpsat"):
            eng = ENGINES[engine]()
            solve_s = best_of(args.repeat, eng.rank, table.total_cents, table.tie_rank, table.group, f, 5, True)
            scan_solve = scan_solve or solve_s
            total_s = best_of(args.repeat, ftsolve.plan, job, cat, engine=engine)
            tracemalloc.start()
            ftsolve.plan(job, cat, engine=engine)
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            print(
                f"{name:18s} {len(cat.offers):7d} {len(table):10d} {engine:>6s} {build_s * 1000:9.1f} "
                f"{solve_s * 1000:9.2f} {total_s * 1000:9.1f} {peak:9.1f} {solve_s / scan_solve:10.1f}"
            )
            measured[f"{name} {engine}"] = total_s
    _library_rows(base)
    _cli_rows(args.cli_runs)
    print(f"\n{'target (issue 6)':45s} measured    limit  met")
    for label, value, limit in (("100k offers, scan engine", measured.get("synthetic 100000 scan"), 1.0),):
        if value is None:
            print(f"{label:45s} {'not run':>9s} {limit * 1000:6.0f} ms")
            continue
        print(f"{label:45s} {value * 1000:6.0f} ms {limit * 1000:5.0f} ms  {'yes' if value < limit else 'NO'}")
    _campaign_rows(base)
    _big_catalog_rows(args.big, runs=args.big_runs, first_runs=args.first_runs)


README_JOB = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24, budget_usd=300)
README_INFEASIBLE = README_JOB.model_copy(update={"budget_usd": 0.5})  # the README's infeasible job
# The issue 18 job: no single change suffices; the explanation gives the frontier and a joint change.
JOB_70B = JobSpec(model="llama-3.1-70b", train_tokens=500_000_000, seq_len=4096, deadline_hours=2, budget_usd=50)


def _infeasible(job: JobSpec, catalog: Catalog) -> None:
    try:
        ftsolve.plan(job, catalog)
    except ftsolve.NoFeasiblePlan as exc:
        assert exc.infeasibility.relaxations  # the full explanation, with numbers
        return
    raise AssertionError("the job was meant to be infeasible")


def _library_rows(base: Catalog) -> None:
    """Median, best and worst of WARM_CALLS warm library calls on the bundled catalog."""
    calls: list[tuple[str, Callable[[], object], float]] = [
        ("feasible plan (README job, budget 300)", lambda: ftsolve.plan(README_JOB, base), 0.025),
        ("infeasible + explanation (README, budget 0.5)", lambda: _infeasible(README_INFEASIBLE, base), 0.1),
        ("infeasible + explanation (70B, 2 h, 50 USD)", lambda: _infeasible(JOB_70B, base), 0.1),
    ]
    print(f"\nwarm library calls on the bundled catalog, {WARM_CALLS} each (issue 18 targets on the median)")
    print(f"{'call':45s} {'best':>7s} {'median':>7s} {'worst':>7s} {'target':>7s}  met")
    for label, fn, limit in calls:
        fn()  # warm
        t = timings(WARM_CALLS, fn)
        med = median(t)
        print(
            f"{label:45s} {t[0] * 1000:4.0f} ms {med * 1000:4.0f} ms {t[-1] * 1000:4.0f} ms {limit * 1000:4.0f} ms"
            f"  {'yes' if med <= limit else 'NO'}"
        )


README_ARGS = ["--model", "llama-3.1-8b", "--seq-len", "2048", "--deadline", "24h"]
# (name, arguments, the exit code it must give: 1 is "no feasible plan", explained)
CLI_COMMANDS: list[tuple[str, list[str], int]] = [
    ("plan", ["plan", *README_ARGS, "--tokens", "50M", "--budget", "300"], 0),
    ("pareto", ["pareto", "--model", "llama-3.1-8b", "--tokens", "200M", "--seq-len", "2048"], 0),
    ("plan, infeasible", ["plan", *README_ARGS, "--tokens", "50M", "--budget", "0.5"], 1),  # the README's
]
CLI_LIMIT_S = 0.8


def _cli_rows(runs: int) -> None:
    """Each command's median wall time over `runs` fresh processes, interleaved so that a slower
    moment of the machine weighs on every command alike; the ratio to `plan` in the same mode."""
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        as_is = "ftsolve compiled on every run" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "as this shell runs"
        modes = [(as_is, dict(os.environ)), ("bytecode cached, as installed", {**env, "PYTHONPYCACHEPREFIX": cache})]
        for mode, mode_env in modes:
            for _, args, rc in CLI_COMMANDS:  # the first run of each writes the cache (and warms the disk)
                _cli_once(args, mode_env, rc)
            times: dict[str, list[float]] = {name: [] for name, _, _ in CLI_COMMANDS}
            for _ in range(runs):
                for name, args, rc in CLI_COMMANDS:
                    times[name].append(_cli_once(args, mode_env, rc))
            medians = {name: median(t) for name, t in times.items()}
            print(f"\nCLI end to end, {mode}: median of {runs} fresh processes (issue 18 target {CLI_LIMIT_S} s)")
            print(f"{'command':20s} {'median':>8s} {'best':>8s} {'vs plan':>8s}  met")
            for name, _, _ in CLI_COMMANDS:
                med = medians[name]
                print(
                    f"{name:20s} {med:6.2f} s {min(times[name]):6.2f} s {med / medians['plan']:7.2f}x"
                    f"  {'yes' if med <= CLI_LIMIT_S else 'NO'}"
                )


def _cli_once(args: list[str], env: dict[str, str], expected: int) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ftsolve", *args], capture_output=True, stdin=subprocess.DEVNULL, env=env
    )
    elapsed = time.perf_counter() - t0
    # A cheaper catalog or a faster model can make a budget feasible: the row would time another thing.
    if done.returncode != expected:
        raise RuntimeError(f"ftsolve {' '.join(args)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def campaign_of(n_runs: int) -> ftsolve.Campaign:
    """n runs in chains of three (probe, trial, final) over three models, sharing a budget, a
    deadline and an H100 quota; the shape of examples/campaign.yaml, repeated."""
    models = ("qwen3-4b", "llama-3.1-8b", "mistral-7b")
    runs = []
    for i in range(n_runs):
        chain, step = divmod(i, 3)
        tokens = (2_000_000, 100_000_000, 500_000_000)[step]
        job = JobSpec(model=models[chain % 3], train_tokens=tokens, seq_len=2048, methods=("lora",), max_gpus=16)
        after = (f"r{i - 1}",) if step else ()
        runs.append(ftsolve.Run(name=f"r{i}", job=job, after=after))
    return ftsolve.Campaign(
        runs=tuple(runs), budget_usd=20_000, deadline_hours=72, quotas=ftsolve.Quotas(gpu={"h100-sxm": 16})
    )


def _campaign_rows(base: Catalog) -> None:
    """Campaigns of 3, 10 and 30 runs (issue 19 targets: 10 proven optimal under 2 s, 30 with a
    stated gap under 10 s)."""
    head = f"{'campaign':10s} {'status':9s} {'gap':>7s} {'solve s':>8s} {'cost USD':>10s} {'finish h':>9s}"
    print(f"\n{head}  target met")
    for n, limit in ((3, 2.0), (10, 2.0), (30, 10.0)):
        result = ftsolve.plan_campaign(campaign_of(n), base, time_limit_s=limit)
        gap = "-" if result.gap is None else f"{result.gap:.2%}"
        met = result.solve_seconds < limit and (result.status == "optimal" or (n == 30 and result.gap is not None))
        print(
            f"{n:3d} runs   {result.status:9s} {gap:>7s} {result.solve_seconds:8.2f} "
            f"{result.total_cost_usd or 0:10.2f} {result.finish_hours or 0:9.1f}  {'yes' if met else 'NO'}"
        )


def write_big_catalog(path: str, n: int, seed: int = 0) -> None:
    """A user offers CSV of n offers: the bundled rows replicated, each copy with its own instance
    type and region and prices jittered by up to +-10% (the interruptible price never above the
    on-demand one), so that no offer overrides a bundled one and twins differ in price."""
    from ftsolve.catalog._load import _read_text

    rng = random.Random(seed)
    text = _read_text("offers.csv")
    reader = csv.reader(io.StringIO("".join(line for line in io.StringIO(text) if not line.startswith("#"))))
    header = next(reader)
    rows = list(reader)
    col = {name: i for i, name in enumerate(header)}
    od, spot = col["on_demand_usd_per_gpu_hour"], col["interruptible_usd_per_gpu_hour"]
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        for i in range(n):
            row = list(rows[i % len(rows)])
            copy = i // len(rows)
            row[col["instance_type"]] = f"{row[col['instance_type']]}-c{copy}"
            row[col["region"]] = f"{row[col['region']]}-{copy % 50}"
            factor = rng.uniform(0.9, 1.1)
            for c in (od, spot):
                if row[c]:
                    row[c] = f"{min(float(row[c]) * factor, 999.0):.4f}"
            if row[od] and row[spot] and float(row[spot]) > float(row[od]):
                row[spot] = row[od]
            w.writerow(row)


# Issue 15 item 6: a million offers loaded and planned in a fresh process.
BIG_TARGET_S = 5.0
BIG_TARGET_MIB = 600

_BIG_PROBE = """
import json, resource, sys, time
t0 = time.perf_counter()
import ftsolve
from ftsolve import JobSpec
t1 = time.perf_counter()
catalog = ftsolve.load_catalog(sys.argv[1] if len(sys.argv) > 1 else None, user=False)
t2 = time.perf_counter()
n = len(catalog.offers)
plans = None
if len(sys.argv) > 1:
    job = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, deadline_hours=24, budget_usd=300)
    plans = ftsolve.plan(job, catalog)
t3 = time.perf_counter()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "plan": t3 - t2, "offers": n, "peak_mib": usage.ru_maxrss / 1024,
                  "cpu": usage.ru_utime + usage.ru_stime, "first": plans.plans[0].offer.key if plans else None}))
"""


# The floor of any first load: pandas' C parser reading the same file as text cells, nothing else.
_PARSE_BASELINE = """
import json, sys, time
import pandas as pd
t0 = time.perf_counter()
pd.read_csv(sys.argv[1], dtype=str, keep_default_na=False, engine="c")
print(json.dumps({"parse": time.perf_counter() - t0}))
"""


def _baseline_parse_s(path: str) -> float:
    done = subprocess.run([sys.executable, "-c", _PARSE_BASELINE, path], capture_output=True, text=True, check=True)
    out: float = json.loads(done.stdout.strip().splitlines()[-1])["parse"]
    return out


def _probe(args: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _BIG_PROBE, *args], capture_output=True, text=True, check=False, env=env
    )
    if done.returncode:
        raise RuntimeError(f"probe exited {done.returncode}: {done.stderr[-800:]}")
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _big_catalog_rows(n: int, cold_runs: int = 5, runs: int = 1, first_runs: int = 3) -> None:
    """Issue 15 item 6: n offers loaded and planned in a fresh process under 5 s and 600 MiB peak
    RSS; the bundled catalog's cold load (median of fresh processes, import not counted). A first
    load parses the file and caches its columns; each of `first_runs` processes gets a cache
    folder of its own, so each is a first load. Then `runs` processes load the unchanged file from
    the cache. One row per process (this machine's speed varies by a quarter to a half from
    minute to minute); each target is judged on the median of its rows, with the slowest shown beside it.
    Each first load is preceded by a bare pandas.read_csv of the file in a fresh process: their
    ratio is this machine's speed taken out of the first load; that parse plus the plan is the floor
    of a first load through pandas, printed with what it leaves of the 5 s target.
    cpu s: the process's CPU time, import included (threads add up)."""
    cold = sorted(_probe([])["load"] for _ in range(cold_runs))
    print(
        f"\n{'catalog (fresh process)':44s} {'offers':>8s} {'load s':>7s} {'plan s':>7s} {'total s':>8s} "
        f"{'peak MiB':>9s} {'cpu s':>6s}"
    )
    print(f"{'bundled, cold load (median)':44s} {'':8s} {median(cold):7.3f}")
    if n <= 0:
        return
    seen: dict[str, list[tuple[float, float]]] = {"first load (parse, cache)": [], "later loads (cached)": []}
    baseline: list[float] = []
    first_plan_s: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "offers.csv")
        write_big_catalog(path, n)
        for i in range(first_runs + runs):
            if i < first_runs:  # interleaved, so that both see the machine at the same speed
                baseline.append(_baseline_parse_s(path))
                print(f"{f'{n:,} offers, bare pandas.read_csv (baseline)':44s} {'':8s} {baseline[-1]:7.2f}")
            # A cache folder per first load; the later loads read the last one's entry (catalog/_cache.py).
            env = dict(os.environ, FTSOLVE_HOME=os.path.join(tmp, f"home{min(i, first_runs - 1)}"))
            r = _probe([path], env)
            total = r["load"] + r["plan"]
            label = "first load (parse, cache)" if i < first_runs else "later loads (cached)"
            print(
                f"{f'{n:,} offers, {label}':44s} {int(r['offers']):8d} {r['load']:7.2f} {r['plan']:7.2f} "
                f"{total:8.2f} {r['peak_mib']:9.0f} {r['cpu']:6.2f}"
            )
            seen[label].append((total, r["peak_mib"]))
            if i < first_runs:
                first_plan_s.append(r["plan"])
    if baseline and seen["first load (parse, cache)"]:
        floor = median(baseline)
        print(
            f"first load + plan / bare pandas parse of the same file (medians, same runs): "
            f"{median(t for t, _ in seen['first load (parse, cache)']) / floor:.2f}x ({floor:.2f} s baseline)"
        )
        # What no work of ftsolve's own can go under while pandas parses: its parse of the file and
        # the plan. Whatever is left of the target is all the first load has for pandas' import, the
        # checks of every distinct cell, the hash of the file and the cache write.
        plan_s = median(first_plan_s)
        print(
            f"floor of a first load through pandas: bare parse + plan (medians) = {floor:.2f} + {plan_s:.2f} = "
            f"{floor + plan_s:.2f} s, leaving {BIG_TARGET_S - floor - plan_s:.2f} s of the {BIG_TARGET_S:.0f} s "
            "target for everything else"
        )
    for label, rows in seen.items():
        if not rows:
            continue
        totals, peaks = [t for t, _ in rows], [p for _, p in rows]
        median_s, median_mib = median(totals), median(peaks)
        met = median_s < BIG_TARGET_S and median_mib < BIG_TARGET_MIB
        print(
            f"target (issue 15): load + plan < {BIG_TARGET_S:.0f} s and peak < {BIG_TARGET_MIB} MiB, {label}: "
            f"median {median_s:.2f} s (slowest {max(totals):.2f} s), {median_mib:.0f} MiB (largest {max(peaks):.0f}) "
            f"of {len(rows)}: "
            f"{'yes' if met else 'NO'}"
        )

if __name__ == "__main__":
    main()
