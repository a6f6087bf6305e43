"""Throughput and time model (issue 4): published multi-GPU behaviour and the time inputs."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
from click.testing import CliRunner

import ftsolve
from ftsolve import estimate_time
from ftsolve.cli import cli


def test_zero3_over_pcie_or_slow_links_is_slower_per_gpu_than_nvlink() -> None:
    kw = partial(estimate_time, "llama-3.1-8b", method="full", seq_len=2048, micro_batch=1, sharding="zero3")
    nvlink = kw("a100-sxm-80gb", n_gpus=8)
    pcie = kw("a100-pcie-80gb", n_gpus=8)
    # Same 312 TFLOP/s tensor peak; only the interconnect differs.
    assert pcie.tokens_per_s_per_gpu < nvlink.tokens_per_s_per_gpu
    assert pcie.exposed_communication_s > nvlink.exposed_communication_s
    two_nodes = kw("a100-sxm-80gb", n_gpus=16, nodes=2, inter_node_gbit_per_s=100)
    assert two_nodes.tokens_per_s_per_gpu < nvlink.tokens_per_s_per_gpu
    assert two_nodes.scaling_efficiency < nvlink.scaling_efficiency


def test_lora_under_ddp_moves_only_adapter_gradients() -> None:
    arch = ftsolve.load_catalog().model("llama-3.1-8b")
    lora = estimate_time(
        "llama-3.1-8b",
        "a100-pcie-80gb",
        method="lora",
        n_gpus=8,
        sharding="ddp",
        gradient_checkpointing=False,
        lora_rank=16,
    )
    full = estimate_time(
        "llama-3.1-8b",
        "a100-pcie-80gb",
        method="full",
        n_gpus=8,
        sharding="ddp",
        gradient_checkpointing=False,
    )
    # Ring all-reduce: 2(n-1)/n x (trainable parameters x gradient bytes) over the bus.
    ratio = lora.communication_s / full.communication_s
    expected = arch.lora_params(16, "all-linear") * 4.0 / (arch.total_params() * 2.0)
    assert ratio == pytest.approx(expected, rel=1e-6)
    assert lora.exposed_communication_s == 0.0


def test_method_checkpointing_and_quantization_order_the_speed() -> None:
    def tps(**kw: object) -> float:
        return estimate_time("llama-3.1-8b", "h100-sxm", seq_len=2048, micro_batch=2, **kw).tokens_per_s  # type: ignore[arg-type]

    assert tps(method="lora", gradient_checkpointing=False) > tps(method="full", gradient_checkpointing=False)
    assert tps(method="lora", gradient_checkpointing=False) > tps(method="lora", gradient_checkpointing=True)
    assert tps(method="lora") > tps(method="qlora")


def test_padding_and_evaluation_lengthen_the_run() -> None:
    packed = estimate_time("llama-3.1-8b", "h100-sxm", train_tokens=100_000_000)
    padded = estimate_time("llama-3.1-8b", "h100-sxm", train_tokens=100_000_000, real_token_fraction=0.5)
    assert padded.hours == pytest.approx(2 * packed.hours)  # type: ignore[operator]
    job = ftsolve.JobSpec(
        model="llama-3.1-8b",
        train_tokens=50_000_000,
        seq_len=2048,
        methods=("lora",),
        markets=("on-demand",),
        gpus=("h100-sxm",),
        max_gpus=1,
    )
    base = ftsolve.plan(job, top=1).plans[0]
    with_eval = ftsolve.plan(job.model_copy(update={"eval_fraction": 0.1}), top=1).plans[0]
    assert base.time.evaluation_hours == 0
    assert with_eval.time.evaluation_hours > 0
    # The cheapest plan may switch to a faster configuration (per-hour billing can absorb the
    # evaluation), so check that evaluation is part of its time and never makes the plan cheaper.
    t = with_eval.time
    parts = t.training_hours + t.evaluation_hours + t.startup_hours + t.checkpoint_hours + t.preemption_rework_hours
    assert t.expected_hours == pytest.approx(parts, abs=1e-3)
    # Costs are summed and ranked in whole cents: with per-hour billing both plans bill the same
    # hours, and the plans may differ by the cent their items round to.
    assert with_eval.total_cost_usd >= base.total_cost_usd - 0.01 - 1e-9


def test_bf16_less_cards_use_the_fp16_peak_and_every_gpu_with_data_estimates() -> None:
    v100 = estimate_time("llama-3.2-1b", "v100-sxm2-16gb", method="lora")
    assert v100.peak_tflops == 125.0
    with pytest.raises(ftsolve.InvalidJobSpec, match="no tensor peak"):
        estimate_time("llama-3.2-1b", "a10g")


def test_cli_estimate_time() -> None:
    r = CliRunner().invoke(
        cli,
        [
            "estimate",
            "time",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--method",
            "full",
            "--gpus",
            "8",
            "--sharding",
            "zero3",
            "--tokens",
            "1B",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["tokens_per_s"] > 0 and data["hours"] > 0 and 0 < data["scaling_efficiency"] <= 1
    r = CliRunner().invoke(
        cli,
        [
            "estimate",
            "time",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--gpus",
            "6",
            "--nodes",
            "4",
            "--sharding",
            "ddp",
        ],
    )
    assert r.exit_code == 2 and "do not split evenly" in r.output


def test_dequantization_traffic_follows_what_each_kernel_keeps_for_backward() -> None:
    from ftsolve.solver._throughput import dequant_bytes_per_param

    ckpt = np.array([0, 1], dtype=np.int64)
    # bitsandbytes keeps the NF4 weight and dequantizes in forward, backward and recompute.
    assert dequant_bytes_per_param("bitsandbytes", ckpt).tolist() == pytest.approx([2 * 4.5, 3 * 4.5])
    # auto-gptq's torch path saves the fp16 weight it made: forward and recompute dequantize
    # (18.5 B each, qlinear_cuda_old.py), backward reads the saved weight (2 B).
    assert dequant_bytes_per_param("gptq", ckpt).tolist() == pytest.approx([18.5 + 2.0, 2 * 18.5 + 2.0])


def test_a_faster_host_cpu_shortens_the_per_layer_overhead_only() -> None:
    # The per-layer launch overhead is host-bound: twice the host's single-thread speed halves it
    # (benchmarks/throughput_accuracy.py reads optimum-benchmark's Ryzen 9 7950X host as 2.25).
    from ftsolve.solver import _coefficients as k

    def step(seq_len: int, host: float) -> ftsolve.TimeEstimate:
        return estimate_time("llama-2-7b", "rtx-4090", method="qlora", seq_len=seq_len, micro_batch=1, host_speed=host)

    layers = ftsolve.load_catalog().model("llama-2-7b").num_layers
    for seq_len in (256, 4096):
        ref, fast = step(seq_len, 1.0), step(seq_len, 2.0)
        saved = ref.compute_s - fast.compute_s  # one micro-batch, checkpointed: three passes
        assert saved == pytest.approx(3 * layers * k.PER_LAYER_PASS_S.value / 2, rel=1e-6)
        assert fast.tokens_per_s > ref.tokens_per_s
    # The gain is the larger share at short sequences, where the step is launch-bound.
    assert step(256, 2.0).tokens_per_s / step(256, 1.0).tokens_per_s > step(4096, 2.0).tokens_per_s / step(
        4096, 1.0
    ).tokens_per_s
    assert k.HOST_SPEED_BY_CPU["AMD Ryzen 9 7950X"].value == pytest.approx(5.7 / 3.4 * 1.19 * 1.13, abs=0.005)
    with pytest.raises(ftsolve.InvalidJobSpec, match="host_speed"):
        ftsolve.JobSpec.build(model="llama-3.1-8b", train_tokens=1e6, seq_len=512, host_speed=0)


def test_a_plan_on_a_stated_host_says_so_and_runs_faster() -> None:
    job = ftsolve.JobSpec(
        model="llama-3.1-8b", train_tokens=20_000_000, seq_len=512, methods=("qlora",), gpus=("rtx-4090",), max_gpus=1
    )
    ref = ftsolve.plan(job, top=1).plans[0]
    fast = ftsolve.plan(job.model_copy(update={"host_speed": 2.25}), top=1).plans[0]
    assert fast.time.tokens_per_s > ref.time.tokens_per_s
    assert not any("--host-speed" in a for a in ref.assumptions)
    assert any(a.startswith("host CPU at 2.25x") and "ms of launch overhead" in a for a in fast.assumptions)


def test_estimate_time_names_a_stated_host() -> None:
    args = ["estimate", "time", "--model", "llama-2-7b", "--gpu", "rtx-4090", "--method", "qlora", "--seq-len", "256"]
    plain, fast = (CliRunner().invoke(cli, args + extra) for extra in ([], ["--host-speed", "2.25"]))
    assert plain.exit_code == fast.exit_code == 0
    assert "--host-speed" not in plain.output and "host CPU 2.25x an EPYC 7742" in fast.output.splitlines()[0]
    tokens = [float(r.output.split("-> ")[1].split(" tokens/s")[0].replace(",", "")) for r in (plain, fast)]
    assert tokens[1] > tokens[0]


def test_the_optimizer_step_moves_what_trains_and_its_partition() -> None:
    # The step reads and writes the trained weights, their gradients and the optimizer state once
    # (MemoryTerms.stepped); the frozen base of LoRA and QLoRA is never stepped.
    from ftsolve import MemoryOptions
    from ftsolve.solver import _coefficients as k

    def opt_s(method: str, **kw: object) -> float:
        options = kw.pop("options", None)
        est = estimate_time("llama-2-7b", "a100-sxm-80gb", method=method, options=options, **kw)  # type: ignore[arg-type]
        return est.optimizer_s

    bandwidth = 2039e9 * k.WEIGHT_STREAM_EFFICIENCY.value  # A100-80GB, gpus.csv
    # LoRA: 16-bit or NF4 base, the same step: the adapters' fp32 weight, gradient and AdamW state.
    lora = opt_s("lora")
    assert lora == pytest.approx(opt_s("qlora"), rel=1e-9)
    assert lora < 0.01 * opt_s("full")
    # Full fine-tuning under ZeRO-2 steps this GPU's 1/8 of the parameters, then gathers them.
    full = opt_s("full", n_gpus=8, sharding="ddp")
    assert opt_s("full", n_gpus=8, sharding="zero2") == pytest.approx(full / 8, rel=1e-9)
    assert full > 2 * 6.7e9 * (2 + 2 + 12) / bandwidth * 0.9  # weights, gradients, fp32 master and moments
    # A paged optimizer's state is stepped too, wherever the driver keeps it.
    assert opt_s("full", options=MemoryOptions(optimizer="paged-adamw")) == pytest.approx(opt_s("full"), rel=1e-9)
