"""The staged candidate pipeline, and the rules it shares with the stand-alone estimates (an
estimate is a one-row table: same compatibility rules, same bus bandwidth, same margin)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import cast

import numpy as np
import pytest

import ftsolve
from ftsolve import InvalidJobSpec, JobSpec, estimate_memory, estimate_time
from ftsolve.solver import _pipeline
from ftsolve.solver._grid import build_candidates
from ftsolve.solver._job import Method
from ftsolve.solver._memory import METHOD_NAMES, Q16, SHARD_NAMES, ZERO3, MemoryOptions

CATALOG = ftsolve.load_catalog(user=False)
SOLVER = Path(ftsolve.__file__).parent / "solver"


def test_each_stage_returns_a_small_frozen_record() -> None:
    job = JobSpec(model="llama-3.2-1b", train_tokens=10**7, seq_len=1024, gpus=("h100-sxm", "mi300x"), max_nodes=2)
    opts = job.memory_options()
    table = build_candidates(job, CATALOG)
    sizes = table.sizes
    arr = _pipeline.planning_arrays(job, CATALOG)
    rows = _pipeline.offer_rows(job, CATALOG, arr, prune=True)
    physics = _pipeline.pair_physics(job, opts, sizes, rows.hardware)
    cands = _pipeline.candidates(rows, physics)
    runs = _pipeline.run_inputs(job, opts, sizes, arr, cands, physics)
    for record in (rows, rows.hardware, physics, physics.memory, cands, runs):
        assert dataclasses.is_dataclass(record)
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.__setattr__(dataclasses.fields(record)[0].name, None)
    # Every row is one offer on one market and node count; its hardware setup has its GPU count.
    assert np.array_equal(rows.hardware.n_gpus[rows.hw], rows.n_gpus)
    assert np.array_equal(
        cands.runnable, physics.compatible[cands.pair] & (physics.memory.micro_batch[cands.pair] >= 1)
    )
    assert np.array_equal(runs.priced, np.flatnonzero(cands.runnable))
    assert len(table) <= len(cands)  # fallbacks nobody needs are dropped after pricing
    assert np.array_equal(table.runnable, table.masks["compatibility"] & table.masks["memory"])
    # Unpriced candidates never finish and cost nothing.
    assert np.isinf(table.expected_hours[~table.runnable]).all()
    assert (table.total_cents[~table.runnable] == 0).all()


def test_deepspeed_zero_on_one_gpu_is_planned_and_estimated_alike() -> None:
    job = JobSpec(
        model="llama-3.2-1b", train_tokens=10**7, seq_len=1024, gpus=("h100-sxm",), max_gpus=1, stack="deepspeed"
    )
    t = build_candidates(job, CATALOG)
    one = np.flatnonzero((t.n_gpus == 1) & (t.shard == ZERO3))
    assert one.size  # DeepSpeed runs ZeRO stages on one GPU (ZeRO-Offload is built on them)
    i = int(one[0])
    est = estimate_memory(
        "llama-3.2-1b",
        method=cast("Method", METHOD_NAMES[int(t.method[i])]),
        seq_len=1024,
        micro_batch=int(t.micro_batch[i]),
        grad_accum=int(t.grad_accum[i]),
        n_gpus=1,
        sharding="zero3",
        gradient_checkpointing=bool(t.ckpt[i]),
        lora_rank=job.lora_rank,
        options=job.memory_options(),
        catalog=CATALOG,
    )
    assert est.peak_gib == pytest.approx(float(t.peak_gib[i]), abs=1e-3)
    # Outside DeepSpeed one GPU shards nothing: neither the table nor an estimate has it.
    hf = build_candidates(job.model_copy(update={"stack": "hf"}), CATALOG)
    assert not ((hf.n_gpus == 1) & (hf.shard != 0)).any()
    with pytest.raises(InvalidJobSpec, match="one GPU shards nothing"):
        estimate_memory("llama-3.2-1b", n_gpus=1, sharding="zero3", catalog=CATALOG)
    with pytest.raises(InvalidJobSpec, match="one GPU shards nothing"):
        estimate_time("llama-3.2-1b", "h100-sxm", n_gpus=1, sharding="zero3", catalog=CATALOG)
    estimate_time(
        "llama-3.2-1b", "h100-sxm", sharding="zero3", options=MemoryOptions(stack="deepspeed"), catalog=CATALOG
    )


def test_a_quantized_base_on_amd_is_masked_by_the_table_and_refused_by_the_estimates() -> None:
    job = JobSpec(model="llama-3.2-1b", train_tokens=10**7, seq_len=1024, gpus=("mi300x",), methods=("qlora", "lora"))
    t = build_candidates(job, CATALOG)
    # QLoRA's NF4 and LoRA's int8 bases are quantized; 16-bit LoRA runs.
    assert (t.method == METHOD_NAMES.index("qlora")).any()
    assert np.array_equal(t.masks["compatibility"], t.quant == Q16)
    for estimate in (
        lambda: estimate_memory("llama-3.2-1b", method="qlora", gpu="mi300x", catalog=CATALOG),
        lambda: estimate_time("llama-3.2-1b", "mi300x", method="qlora", catalog=CATALOG),
    ):
        with pytest.raises(InvalidJobSpec, match="NVIDIA GPUs only"):
            estimate()


def test_multi_node_candidates_and_time_estimates_share_the_bus() -> None:
    job = JobSpec(
        model="llama-3.1-8b", train_tokens=10**8, seq_len=2048, methods=("full",), gpus=("h100-sxm",), max_gpus=32
    )
    t = build_candidates(job, CATALOG)
    rows = np.flatnonzero((t.nodes > 1) & t.runnable)
    assert rows.size
    for i in rows[:: max(1, rows.size // 5)]:
        offer = t.offers[int(t.offer_idx[i])]
        est = estimate_time(
            "llama-3.1-8b",
            offer.gpu,
            method="full",
            seq_len=2048,
            micro_batch=int(t.micro_batch[i]),
            grad_accum=int(t.grad_accum[i]),
            n_gpus=int(t.n_gpus[i]),
            nodes=int(t.nodes[i]),
            sharding=SHARD_NAMES[int(t.shard[i])],
            gradient_checkpointing=bool(t.ckpt[i]),
            inter_node_gbit_per_s=float(t.offer_arrays.inter_node_gbit[int(t.offer_idx[i])]),
            catalog=CATALOG,
        )
        assert est.tokens_per_s == pytest.approx(float(t.tokens_per_s[i]), rel=1e-12)


def test_the_margin_is_applied_once_and_the_components_sum_to_the_peak() -> None:
    job = JobSpec(model="llama-3.1-8b", train_tokens=10**7, seq_len=2048, gpus=("a100-sxm-80gb",))
    t = build_candidates(job, CATALOG)
    for i in np.flatnonzero(t.runnable)[::97]:
        assert sum(t.memory_gib(int(i)).values()) == pytest.approx(float(t.peak_gib[i]), rel=1e-9)
    est = estimate_memory("llama-3.1-8b", micro_batch=4, catalog=CATALOG)
    assert sum(est.components_gib.values()) == pytest.approx(est.peak_gib, abs=0.01)


def _function_lengths(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    return [
        (f"{path.name}:{node.name}", (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def test_no_solver_function_is_longer_than_a_screen() -> None:
    long = [(name, n) for path in sorted(SOLVER.glob("*.py")) for name, n in _function_lengths(path) if n > 80]
    assert long == []


# JobSpec's module is being reworked (the job's vocabulary, issue 18): drop it from here when that lands.
_PRIVATE_CATALOG_IMPORTS_LEFT = {"_job.py"}


def test_the_solver_uses_the_catalogs_public_names_only() -> None:
    private = set()
    for path in sorted(SOLVER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ftsolve.catalog._"):
                private.add(path.name)
    assert private <= _PRIVATE_CATALOG_IMPORTS_LEFT
