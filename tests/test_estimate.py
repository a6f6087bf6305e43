"""`estimate_memory` and `ftsolve estimate memory` (issue 3)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from model_configs import LLAMA_31_8B

import ftsolve
from ftsolve import InvalidJobSpec, MemoryOptions, estimate_memory
from ftsolve.cli import cli
from ftsolve.solver import _coefficients as k


def test_breakdown_sums_to_the_peak_and_checks_the_card() -> None:
    est = estimate_memory("llama-3.1-8b", method="qlora", seq_len=2048, gpu="rtx-4090")
    assert sum(est.components_gib.values()) == pytest.approx(est.peak_gib, abs=0.01)
    assert est.fits is True and est.usable_gib is not None and est.peak_gib < est.usable_gib
    big = estimate_memory("llama-3.1-70b", method="lora", seq_len=8192, gradient_checkpointing=False, gpu="rtx-4090")
    assert big.fits is False
    assert big.fits_with_headroom is False and est.fits_with_headroom is True


def test_a_peak_within_the_card_but_not_its_band_is_told_apart() -> None:
    # 13B QLoRA at 1,024 tokens on a 16 GB T4: the peak fits, the headroom plans keep does not.
    est = estimate_memory("llama-2-13b", method="qlora", seq_len=1024, gpu="t4")
    assert est.usable_gib is not None
    assert est.peak_gib <= est.usable_gib < est.peak_gib * (1.0 + est.headroom_band)
    assert est.fits is True and est.fits_with_headroom is False
    flags = ["--model", "llama-2-13b", "--method", "qlora", "--seq-len", "1024", "--gpu", "t4"]
    r = CliRunner().invoke(cli, ["estimate", "memory", *flags])
    assert r.exit_code == 0, r.output
    assert "the peak fits, but not with headroom" in r.output and f"{est.headroom_band:.0%} headroom" in r.output
    # A bare parameter count states a wider band, but plans keep the method's headroom all the same.
    guessed = estimate_memory(13e9, method="qlora", seq_len=1024, gpu="t4")
    assert guessed.error_band > guessed.headroom_band == est.headroom_band
    # A guessed shape that passes the headroom but not its own wider band says so.
    r = CliRunner().invoke(cli, ["estimate", "memory", "--params", "8B", "--method", "qlora", "--gpu", "l4"])
    assert r.exit_code == 0 and "the guessed shape's ±40% would need" in r.output, r.output


def test_memory_grows_with_the_things_that_should_grow_it() -> None:
    base = estimate_memory("llama-3.1-8b", method="lora")
    assert estimate_memory("llama-3.1-8b", method="lora", micro_batch=4).peak_gib > base.peak_gib
    assert estimate_memory("llama-3.1-8b", method="lora", seq_len=8192).peak_gib > base.peak_gib
    assert estimate_memory("llama-3.1-8b", method="lora", gradient_checkpointing=False).peak_gib > base.peak_gib
    assert (
        estimate_memory("llama-3.1-8b", method="full").peak_gib
        > base.peak_gib
        > estimate_memory("llama-3.1-8b", method="qlora").peak_gib
    )
    # Without checkpointing every layer keeps what dropout and eager attention add.
    stored = estimate_memory("llama-3.1-8b", method="lora", gradient_checkpointing=False)

    def activations(options: MemoryOptions) -> float:
        est = estimate_memory("llama-3.1-8b", method="lora", gradient_checkpointing=False, options=options)
        return est.components_gib["activations"]

    assert activations(MemoryOptions(lora_dropout=0.05)) > stored.components_gib["activations"]
    assert activations(MemoryOptions(flash_attention=False)) > stored.components_gib["activations"]
    chunked = estimate_memory("llama-3.1-8b", method="lora", options=MemoryOptions(loss="chunked"))
    assert chunked.components_gib["logits"] < base.components_gib["logits"]
    # Optimizer regimes swing full fine-tuning by about 2x (physics.md §2.1).
    mixed = estimate_memory("llama-3.1-8b", method="full", options=MemoryOptions(optimizer="adamw"))
    pure = estimate_memory("llama-3.1-8b", method="full", options=MemoryOptions(optimizer="adamw-bf16"))
    assert mixed.components_gib["optimizer"] == pytest.approx(3 * pure.components_gib["optimizer"], rel=0.01)
    sharded = estimate_memory("llama-3.1-8b", method="full", n_gpus=8, sharding="zero3")
    assert sharded.components_gib["optimizer"] == pytest.approx(mixed.components_gib["optimizer"] / 8, rel=0.01)


def test_config_json_and_param_count_inputs(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA_31_8B))
    from_file = estimate_memory(cfg, method="lora")
    assert from_file.peak_gib == pytest.approx(estimate_memory("llama-3.1-8b", method="lora").peak_gib)
    guessed = estimate_memory(8e9, method="lora")
    assert guessed.error_band > from_file.error_band
    assert guessed.params_b == pytest.approx(8.0, rel=0.05)


def test_bad_inputs_raise_one_clear_error() -> None:
    with pytest.raises(InvalidJobSpec, match="several GPUs"):
        estimate_memory("llama-3.1-8b", n_gpus=4)
    with pytest.raises(InvalidJobSpec, match="full fine-tuning trains 16-bit"):
        estimate_memory("llama-3.1-8b", method="full", weight_precision="nf4")
    with pytest.raises(ftsolve.UnknownCatalogEntry):
        estimate_memory("llama-9")


def test_cli_estimate_memory() -> None:
    r = CliRunner().invoke(
        cli,
        [
            "estimate",
            "memory",
            "--model",
            "llama-3.1-8b",
            "--method",
            "lora",
            "--json",
            "--gpu",
            "a100-sxm-80gb",
        ],
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["fits"] is True and "activations" in data["components_gib"]
    fsdp = ["estimate", "memory", "--model", "llama-3.1-8b", "--method", "full", "--gpus", "8", "--sharding", "zero3"]
    whole = []
    for accum in ("1", "4"):
        r = CliRunner().invoke(cli, [*fsdp, "--grad-accum", accum, "--json"])
        assert r.exit_code == 0, r.output
        whole.append(json.loads(r.output)["components_gib"]["unsharded_gradients"])
    assert whole[1] > 5 * whole[0] > 0
    r = CliRunner().invoke(cli, ["estimate", "memory", "--params", "7B", "--method", "qlora"])
    assert r.exit_code == 0 and "guessed from a parameter count" in r.output
    r = CliRunner().invoke(cli, ["estimate", "memory", "--model", "x", "--params", "7B"])
    assert r.exit_code == 2 and "exactly one of" in r.output


def test_cli_gptq_kernel_keeps_no_linear_inputs() -> None:
    def activations(*extra: str) -> float:
        args = ["estimate", "memory", "--model", "llama-3.1-8b", "--method", "qlora", "--no-ckpt", "--json"]
        r = CliRunner().invoke(cli, [*args, "--lora-targets", "qv", *extra])
        assert r.exit_code == 0, r.output
        return float(json.loads(r.output)["components_gib"]["activations"])

    assert activations("--quant-kernel", "gptq") < activations()
    with pytest.raises(InvalidJobSpec, match="quant_kernel"):
        estimate_memory("llama-3.1-8b", method="qlora", options=MemoryOptions(quant_kernel="awq"))


def _estimate_at(plan: ftsolve.Plan, job: ftsolve.JobSpec, **extra: object) -> ftsolve.MemoryEstimate:
    """estimate_memory at the plan's configuration (FSDP accumulates with unsharded gradients)."""
    return estimate_memory(
        job.model,
        method=plan.method,
        seq_len=job.seq_len,
        micro_batch=plan.micro_batch,
        grad_accum=plan.grad_accum,
        n_gpus=plan.n_gpus,
        sharding=plan.sharding,
        gradient_checkpointing=plan.gradient_checkpointing,
        lora_rank=job.lora_rank,
        **extra,  # type: ignore[arg-type]
    )


def test_planner_uses_the_same_memory_model() -> None:
    job = ftsolve.JobSpec(model="llama-3.1-8b", train_tokens=10_000_000, seq_len=2048, methods=("qlora",))
    p = ftsolve.plan(job, top=1).plans[0]
    assert _estimate_at(p, job).peak_gib == pytest.approx(p.memory.peak_gib, abs=0.01)
    # The headroom the estimate tests is the one the plan kept, and the plan's configuration passes it.
    on_card = _estimate_at(p, job, gpu=p.offer.gpu)
    assert on_card.headroom_band == pytest.approx(p.memory.band) and on_card.fits_with_headroom is True
    assert on_card.usable_gib == pytest.approx(p.memory.usable_gib, abs=0.01)

    # The headroom is the stack's band: LitGPT's and ms-swift's LoRA bands differ from hf's (LitGPT's
    # from LoRA's too, so a band of the method alone fails here as well).
    hf_lora = k.memory_band("lora", "hf")
    for stack in ("litgpt", "ms-swift"):
        stacked = ftsolve.JobSpec(
            model="llama-3.1-8b", train_tokens=10_000_000, seq_len=2048, methods=("lora",), stack=stack
        )
        q = ftsolve.plan(stacked, top=1).plans[0]
        est_s = _estimate_at(q, stacked, options=MemoryOptions.for_stack(stack), gpu=q.offer.gpu)
        assert est_s.headroom_band == pytest.approx(q.memory.band)
        assert est_s.headroom_band == pytest.approx(k.memory_band("lora", stack)) != pytest.approx(hf_lora)
    assert k.memory_band("lora", "litgpt") != pytest.approx(k.memory_band("lora", "no-such-stack"))


def test_double_quant_and_head_options_reach_the_cli_and_the_planner() -> None:
    def weights(*extra: str) -> float:
        args = ["estimate", "memory", "--model", "llama-3.1-8b", "--method", "qlora", "--json", *extra]
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, r.output
        return float(json.loads(r.output)["components_gib"]["weights"])

    assert weights("--no-double-quant") > weights()
    assert weights("--quantize-head") < weights()  # Llama-3.1-8B's untied head goes to NF4
    # LitGPT quantizes its head and runs no prepare_model_for_kbit_training.
    assert weights("--stack", "litgpt") == weights("--quantize-head", "--no-kbit-upcast")
    job = dict(model="llama-3.1-8b", train_tokens=10_000_000, seq_len=2048, methods=("qlora",))
    with_dq = ftsolve.plan(ftsolve.JobSpec(**job), top=1).plans[0]
    without = ftsolve.plan(ftsolve.JobSpec(**job, double_quant=False), top=1).plans[0]
    assert without.memory.components_gib["weights"] > with_dq.memory.components_gib["weights"]


def test_planner_holds_fsdp_gradients_whole_only_when_it_accumulates() -> None:
    from ftsolve.solver._grid import build_candidates
    from ftsolve.solver._memory import ZERO3

    job = ftsolve.JobSpec(model="llama-3.1-8b", train_tokens=10_000_000, seq_len=2048, methods=("full",))
    catalog = ftsolve.load_catalog(user=False)
    bf16_grads_gib = catalog.model("llama-3.1-8b").total_params() * 2 / 2**30  # 14.96 GiB
    t = build_candidates(job, catalog)
    fsdp = np.flatnonzero((t.shard == ZERO3) & (t.n_gpus > 1) & (t.micro_batch >= 1))
    seen = set()
    for i in fsdp[np.unique(t.pair[fsdp], return_index=True)[1]]:
        accum = int(t.grad_accum[i])
        est = estimate_memory(
            "llama-3.1-8b",
            method="full",
            seq_len=2048,
            micro_batch=int(t.micro_batch[i]),
            grad_accum=accum,
            n_gpus=int(t.n_gpus[i]),
            sharding="zero3",
            gradient_checkpointing=bool(t.ckpt[i]),
            lora_rank=job.lora_rank,
            catalog=catalog,
        )
        assert est.peak_gib == pytest.approx(float(t.peak_gib[i]), abs=0.01)
        whole = t.memory_gib(int(i))["unsharded_gradients"]
        assert whole == pytest.approx(est.components_gib["unsharded_gradients"], abs=0.01)
        # Accumulating under no_sync holds the whole bf16 gradient beside its shard.
        sharded = t.memory_gib(int(i))["gradients"]
        assert (whole + sharded > 0.9 * bf16_grads_gib) == (accum > 1)
        seen.add(accum > 1)
    assert seen == {True, False}


def test_a_plan_that_accumulates_under_fsdp_says_so() -> None:
    job = ftsolve.JobSpec(
        model="qwen2.5-14b",
        train_tokens=50_000_000,
        seq_len=2048,
        methods=("full",),
        global_batch_size=256,
        max_nodes=1,
        # Cards on which a 14.8B full fine-tune needs sharded optimizer state: ZeRO-1/2 fit most of
        # them, and FSDP (ZeRO-3) with accumulation is among the plans.
        gpus=("h100-sxm", "a100-sxm-80gb", "h200-sxm"),
    )
    plans = ftsolve.plan(job, top=20).plans
    # FSDP with accumulation may or may not rank among them (ZeRO-2 costs about the same here): the
    # candidates the planner scored give its plans directly.
    from ftsolve.solver._api import plan_from_row
    from ftsolve.solver._grid import build_candidates
    from ftsolve.solver._memory import ZERO3

    t = build_candidates(job, ftsolve.load_catalog())
    rows = np.flatnonzero(t.feasible() & (t.shard == ZERO3) & (t.grad_accum > 1))
    assert rows.size
    fsdp = [plan_from_row(job, t, int(i), 1, int(i)) for i in rows[:5]]
    for p in fsdp:
        whole = p.memory.components_gib["unsharded_gradients"]
        assert whole > 20  # 14.8B bf16 gradients, whole on every GPU but their own shard
        assert any(f"{whole:.1f} GiB of gradients stay unsharded" in a for a in p.assumptions)
    for p in plans:
        if p.grad_accum == 1:
            assert not any("no_sync" in a for a in p.assumptions)
