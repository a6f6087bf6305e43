"""Training stacks as input: their defaults, the switches that override them, and what each
mechanism does to the memory estimate."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from click.testing import CliRunner

import ftsolve
from ftsolve.catalog import load_catalog
from ftsolve.cli import cli
from ftsolve.solver import _coefficients as k
from ftsolve.solver._estimate import estimate_memory
from ftsolve.solver._memory import OPTIMIZERS, MemoryOptions, adapter_state_bytes
from ftsolve.solver._stacks import LOSS_BYTES_PER_LOGIT, STACKS
from ftsolve.solver._throughput import utilization

L8 = "llama-3.1-8b"
Method = Literal["full", "lora", "qlora"]


def test_every_architecture_in_the_gpu_table_has_its_own_utilization() -> None:
    # No silent default: an architecture without an entry would raise here.
    for gpu in load_catalog(user=False).gpus.values():
        assert 0 < utilization(gpu).value < 1, gpu.name
    gpus = load_catalog(user=False).gpus
    # Each architecture's measured GPUs are its own, and the architecture's figure for a GPU with no
    # measurement of its own is the fitted utilization per unit of efficiency times their median.
    for arch, measured in k.MATMUL_GPUS_BY_ARCH.items():
        assert all(g in k.MATMUL_EFFICIENCY and gpus[g].architecture == arch for g in measured), arch
    per_unit = [
        k.UTILIZATION_BY_ARCH_FITTED[a].value / k.MATMUL_EFFICIENCY[g].value
        for a, g in k.UTILIZATION_REFERENCE_GPU.items()
    ]
    ada = sorted(k.MATMUL_EFFICIENCY[g].value for g in k.MATMUL_GPUS_BY_ARCH["Ada"])[1]
    assert k.UTILIZATION_BY_ARCH["Ada"].value == pytest.approx(sum(per_unit) / 2 * ada, abs=1e-3)
    assert utilization(gpus["rtx-6000-ada"]).value == pytest.approx(k.UTILIZATION_BY_ARCH["Ada"].value, abs=1e-3)
    # A fitted architecture's GPU without a measurement: the fitted value scaled by the median.
    ampere = sorted(k.MATMUL_EFFICIENCY[g].value for g in k.MATMUL_GPUS_BY_ARCH["Ampere"])
    median = (ampere[1] + ampere[2]) / 2
    expected = k.UTILIZATION_BY_ARCH_FITTED["Ampere"].value * median / k.MATMUL_EFFICIENCY["a100-sxm-80gb"].value
    assert "a10g" not in k.MATMUL_EFFICIENCY and utilization(gpus["a10g"]).value == pytest.approx(expected)


def test_a_gpu_runs_at_its_architectures_utilization_scaled_by_its_matmul_efficiency() -> None:
    gpus = load_catalog(user=False).gpus
    assert set(k.MATMUL_EFFICIENCY) <= set(gpus)
    assert all(0.3 < e.value < 1.2 for e in k.MATMUL_EFFICIENCY.values())
    eff = {name: e.value for name, e in k.MATMUL_EFFICIENCY.items()}
    # The GPUs the fitted architectures were measured on keep the fitted value.
    for arch, ref in k.UTILIZATION_REFERENCE_GPU.items():
        assert utilization(gpus[ref]).value == k.UTILIZATION_BY_ARCH_FITTED[arch].value
    # A power-limited PCIe H100 reaches less of its peak than the SXM card, and runs that much slower.
    ratio = utilization(gpus["h100-pcie"]).value / utilization(gpus["h100-sxm"]).value
    assert ratio == pytest.approx(eff["h100-pcie"] / eff["h100-sxm"])
    assert ratio < 0.9
    # An architecture without fitted rows: the fitted utilization per unit of matmul efficiency.
    per_unit = [k.UTILIZATION_BY_ARCH_FITTED[a].value / eff[g] for a, g in k.UTILIZATION_REFERENCE_GPU.items()]
    assert utilization(gpus["rtx-4090"]).value == pytest.approx(sum(per_unit) / len(per_unit) * eff["rtx-4090"])
    assert "rtx-6000-ada" not in eff


def test_time_estimates_follow_the_gpus_matmul_efficiency() -> None:
    # Same job, same peak TFLOPS class: the estimate's compute time scales with 1 / utilization.
    pcie, sxm = (ftsolve.estimate_time(L8, gpu, method="lora", seq_len=2048) for gpu in ("h100-pcie", "h100-sxm"))
    assert pcie.utilization < sxm.utilization
    assert pcie.tokens_per_s_per_gpu < sxm.tokens_per_s_per_gpu


def test_every_stack_cites_its_sources_and_names_known_kinds() -> None:
    for stack in STACKS.values():
        assert stack.sources, stack.name
        assert stack.loss in LOSS_BYTES_PER_LOGIT
        assert all(fact and where for fact, where in stack.sources)


def test_a_stack_fills_what_the_job_leaves_unset() -> None:
    tune = ftsolve.JobSpec(model=L8, train_tokens=10**7, seq_len=2048, stack="torchtune").memory_options()
    assert (tune.loss, tune.adapter_dtype, tune.framework) == ("chunked", "bf16", "hf")
    own = ftsolve.JobSpec(model=L8, train_tokens=10**7, seq_len=2048, stack="torchtune", loss="fused")
    assert own.memory_options().loss == "fused"
    assert ftsolve.JobSpec(model=L8, train_tokens=10**7, seq_len=2048).memory_options().loss == "fp32-upcast"


def test_full_fine_tuning_keeps_the_precision_its_stack_loads_the_model_in() -> None:
    # transformers and DeepSpeed keep an fp32 master (16 B per parameter with AdamW's moments);
    # torchtune, LitGPT's configs, axolotl, Unsloth and ms-swift load the model in bf16 and torch
    # AdamW keeps its moments in the parameters' dtype: 2 + 2 + 4 = 8 B. A stated regime wins.
    def state_gib(stack: str, **fields: Any) -> float:
        job = ftsolve.JobSpec(model=L8, train_tokens=10**7, seq_len=2048, stack=stack, **fields)
        c = estimate_memory(L8, method="full", options=job.memory_options()).components_gib
        return c["weights"] + c["gradients"] + c["optimizer"]

    params_gib = load_catalog(user=False).model(L8).total_params() / 2**30
    assert state_gib("hf") == pytest.approx(16 * params_gib, rel=1e-3)
    for stack in ("torchtune", "litgpt", "axolotl", "unsloth", "ms-swift"):
        assert state_gib(stack) == pytest.approx(8 * params_gib, rel=1e-3), stack
    assert state_gib("torchtune", optimizer="adamw") == pytest.approx(state_gib("hf"))
    assert state_gib("hf", optimizer="adamw-bf16") == pytest.approx(state_gib("torchtune"))
    assert all(s.optimizer in OPTIMIZERS for s in STACKS.values())


def test_adapters_keep_their_own_dtypes_moments_whatever_the_models_regime() -> None:
    # PEFT keeps ms-swift's and axolotl's adapters in fp32 beside a bf16 model: their AdamW
    # moments are fp32 (8 B each), as under the hf stack; torchtune's bf16 adapters hold 4 B.
    def adapter_state(stack: str) -> float:
        job = ftsolve.JobSpec(model=L8, train_tokens=10**7, seq_len=2048, stack=stack)
        return estimate_memory(L8, method="lora", options=job.memory_options()).components_gib["optimizer"]

    assert adapter_state_bytes("adamw-bf16", "fp32") == (4.0, 4.0, 8.0)
    assert adapter_state_bytes("adamw-bf16", "bf16") == (2.0, 2.0, 4.0)
    assert adapter_state("ms-swift") == pytest.approx(adapter_state("hf"))
    assert adapter_state("axolotl") == pytest.approx(adapter_state("hf"))
    assert adapter_state("torchtune") == pytest.approx(adapter_state("hf") / 2)


def _est(method: Method = "lora", ckpt: bool = False, **opts: Any) -> ftsolve.MemoryEstimate:
    return estimate_memory(
        L8, method=method, seq_len=4096, micro_batch=2, gradient_checkpointing=ckpt, options=MemoryOptions(**opts)
    )


def test_logits_follow_how_the_loss_holds_them() -> None:
    logits = {loss: _est(loss=loss).components_gib["logits"] for loss in LOSS_BYTES_PER_LOGIT}
    assert logits["fused"] < logits["bf16"] < logits["chunked"] < logits["fp32-upcast"]
    ratio = logits["fp32-upcast"] / logits["fused"]
    assert ratio == pytest.approx(LOSS_BYTES_PER_LOGIT["fp32-upcast"] / LOSS_BYTES_PER_LOGIT["fused"], rel=1e-3)


def test_optimizer_in_backward_keeps_one_gradient_alive() -> None:
    plain = _est("full", optimizer="adamw-bf16")
    fused = _est("full", optimizer="adamw-bf16", optimizer_in_backward=True)
    # Llama-3.1-8B's largest weight is its embedding table: 128256 x 4096 bf16 values.
    assert fused.components_gib["gradients"] == pytest.approx(128256 * 4096 * 2 / 2**30, rel=1e-3)
    assert plain.components_gib["gradients"] > 10 * fused.components_gib["gradients"]


# Bytes per parameter of the gradient shard FSDP1 keeps: the flat parameter's dtype, fp32 where
# FSDP holds the trainable parameters in fp32 (accelerate's mixed precision: every stack it trains,
# whatever the optimizer), the model's dtype otherwise (LitGPT's bf16-true, a plain FSDP loop).
@pytest.mark.parametrize(
    ("stack", "optimizer", "fp32_params", "kept_bytes"),
    [
        ("hf", "adamw", None, 4.0),
        ("hf", "adamw-bf16", None, 4.0),
        ("axolotl", "adamw-8bit", None, 4.0),
        ("hf", "adamw-bf16", False, 2.0),
        ("litgpt", None, None, 2.0),
    ],
)
def test_fsdp1_cpu_offload_keeps_every_gradient_shard_on_the_gpu_until_backward_ends(
    stack: str, optimizer: str | None, fp32_params: bool | None, kept_bytes: float
) -> None:
    def est(method: Method = "full", **opts: Any) -> ftsolve.MemoryEstimate:
        options = MemoryOptions.for_stack(stack, optimizer=optimizer, fsdp_fp32_params=fp32_params, **opts)
        return estimate_memory(L8, method=method, seq_len=4096, n_gpus=4, sharding="zero3", options=options)

    fsdp1, fsdp2 = (est(offload_params=True, fsdp_version=v).components_gib for v in (1, 2))
    params = load_catalog(user=False).model(L8).total_params()
    # The parameters wait in CPU memory either way; FSDP1's gradient shards stay until backward ends.
    assert fsdp1["weights"] == fsdp2["weights"] == 0.0
    assert fsdp1["gradients"] == pytest.approx(params * kept_bytes / 4 / 2**30, abs=1e-3)  # shown to 3 decimals
    assert fsdp2["gradients"] == 0.0
    lora = est("lora", offload_params=True, fsdp_version=1).components_gib["gradients"]
    if stack == "litgpt":
        # Lightning's FlatParameter holds adapters and frozen weights together: a full-size gradient.
        assert lora == pytest.approx(fsdp1["gradients"], abs=1e-3)
    else:
        # The adapters' shards: fp32 adapters, as the same run without offload holds them (4 B / n).
        assert lora == pytest.approx(est("lora").components_gib["adapters"], abs=1e-3) and lora > 0


def test_fsdp_versions_follow_the_stack_and_are_checked() -> None:
    assert MemoryOptions.for_stack("hf").fsdp == 2  # what ftsolve's exports configure
    assert MemoryOptions.for_stack("litgpt").fsdp == 1  # Lightning's FSDPStrategy
    assert MemoryOptions.for_stack("hf", fsdp_version=1).fsdp == 1
    options = MemoryOptions.for_stack("deepspeed", offload_params=True, fsdp_version=1)
    est = estimate_memory(L8, method="full", n_gpus=4, sharding="zero3", options=options)
    assert est.components_gib["gradients"] == 0.0  # DeepSpeed's own offload keeps none
    with pytest.raises(ValueError, match="fsdp_version must be 1 or 2"):
        MemoryOptions(fsdp_version=3)
    with pytest.raises(ValueError, match="torchtune shards with FSDP2 only"):
        MemoryOptions.for_stack("torchtune", fsdp_version=1)


@pytest.mark.parametrize("version", [1, 2])
def test_fsdp_accumulation_under_no_sync_keeps_unsharded_gradients_with_cpu_offload_too(version: int) -> None:
    def unsharded(accum: int, offload: bool) -> float:
        options = MemoryOptions.for_stack("hf", offload_params=offload, fsdp_version=version)
        est = estimate_memory(L8, method="full", grad_accum=accum, n_gpus=4, sharding="zero3", options=options)
        return est.components_gib.get("unsharded_gradients", 0.0)

    whole = load_catalog(user=False).model(L8).total_params() * 2 / 2**30
    # Offloaded, no shard of them is among the gradients on the GPU: the whole unsharded gradient.
    assert unsharded(4, offload=True) == pytest.approx(whole, abs=1e-3)
    assert unsharded(4, offload=False) == pytest.approx(whole * 3 / 4, abs=1e-3)  # this GPU's shard is counted
    assert unsharded(1, offload=True) < whole / 5  # only the root unit's (embeddings)


def test_activation_offload_keeps_two_layers_on_the_gpu() -> None:
    kept = _est(activation_offload=True).components_gib["activations"]
    all_layers = _est().components_gib["activations"]
    assert kept == pytest.approx(all_layers * 2 / 32, rel=1e-3)  # 32 layers, two stay


def test_paged_optimizer_state_is_managed_memory_outside_torch_counters() -> None:
    paged = _est("full", optimizer="paged-adamw-8bit")
    plain = _est("full", optimizer="adamw-8bit")
    assert paged.components_gib["optimizer"] == 0.0
    assert paged.managed_gib == pytest.approx(plain.components_gib["optimizer"], rel=1e-3)
    assert paged.allocated_gib == pytest.approx(plain.allocated_gib - paged.managed_gib, rel=1e-3)
    assert paged.device_gib > paged.reserved_gib + paged.managed_gib - 1e-3


def test_variable_length_batches_reserve_beyond_allocated() -> None:
    fixed, varying = _est(ckpt=True), _est(ckpt=True, variable_length=True)
    assert fixed.reserved_gib == fixed.allocated_gib
    assert varying.allocated_gib == fixed.allocated_gib
    assert varying.reserved_gib > varying.allocated_gib
    # The caching allocator frees those cached blocks and retries before it reports out of
    # memory: they do not count against the card.
    assert varying.peak_gib == fixed.peak_gib
    assert "fragmentation" not in varying.components_gib


def test_stack_and_switches_reach_the_cli() -> None:
    def logits(*args: str) -> float:
        r = CliRunner().invoke(cli, ["estimate", "memory", "--model", L8, "--json", *args])
        assert r.exit_code == 0, r.output
        return float(json.loads(r.output)["components_gib"]["logits"])

    assert logits("--stack", "torchtune") == logits("--loss", "chunked") == logits("--chunked-loss")
    assert logits("--stack", "unsloth") < logits("--stack", "hf")
    r = CliRunner().invoke(cli, ["estimate", "memory", "--model", L8, "--stack", "nope"])
    assert r.exit_code == 2


def test_plan_takes_the_stack() -> None:
    args = ["plan", "--model", L8, "--tokens", "10M", "--seq-len", "2048", "--json", "--top", "1"]
    r_hf = CliRunner().invoke(cli, args)
    r_unsloth = CliRunner().invoke(cli, [*args, "--stack", "unsloth"])
    assert r_hf.exit_code == 0 and r_unsloth.exit_code == 0, r_unsloth.output
    assert r_hf.output != r_unsloth.output


def test_a_torchtune_job_is_never_planned_on_a_gpu_without_bf16() -> None:
    # torchtune's recipes raise on fp16 (Stack.requires_bf16); the same job on the hf stack may
    # take the V100, which trains in fp16.
    job = ftsolve.JobSpec(model="qwen2.5-0.5b", train_tokens=1_000_000, seq_len=1024, gpus=("v100-sxm2-16gb",))
    assert ftsolve.plan(job, top=1).plans
    with pytest.raises(ftsolve.NoFeasiblePlan, match="compatibility rules out all"):
        ftsolve.plan(job.model_copy(update={"stack": "torchtune"}), top=1)
    # The estimates apply the same rule.
    with pytest.raises(ftsolve.InvalidJobSpec, match="refuse fp16"):
        torchtune = MemoryOptions.for_stack("torchtune")
        ftsolve.estimate_time("qwen2.5-0.5b", "v100-sxm2-16gb", method="lora", options=torchtune)
    both = job.model_copy(update={"stack": "torchtune", "gpus": ("v100-sxm2-16gb", "a100-sxm-40gb")})
    assert {p.gpu for p in ftsolve.plan(both, top=20).plans} == {"a100-sxm-40gb"}


def test_a_time_estimate_states_its_band_wider_on_a_gpu_no_measured_run_used() -> None:
    measured = ftsolve.estimate_time(L8, "a100-sxm-80gb", method="qlora", seq_len=2048)
    unmeasured = ftsolve.estimate_time(L8, "l40s", method="qlora", seq_len=2048)
    assert measured.error_band == pytest.approx(k.TIME_BANDS["qlora/a100-sxm-80gb"], abs=1e-3)
    assert unmeasured.error_band == pytest.approx(k.TIME_BANDS["qlora"] + k.utilization_transfer_band(), abs=1e-3)
    # A bare parameter count guesses the shapes: the time band is at least its band.
    assert ftsolve.estimate_time(8e9, "h100-sxm", method="full").error_band >= 0.4
    assert 0.05 < k.utilization_transfer_band() < 0.5
    out = CliRunner().invoke(
        cli, ["estimate", "time", "--model", L8, "--gpu", "l40s", "--method", "qlora", "--tokens", "10M", "--json"]
    )
    assert out.exit_code == 0 and json.loads(out.output)["error_band"] == unmeasured.error_band
    text = (
        CliRunner()
        .invoke(cli, ["estimate", "time", "--model", L8, "--gpu", "l40s", "--method", "qlora", "--tokens", "10M"])
        .output
    )
    assert f"±{unmeasured.error_band:.0%}" in text


def test_a_plan_states_the_band_of_its_tokens_per_s() -> None:
    job = ftsolve.JobSpec(model=L8, train_tokens=20_000_000, seq_len=2048, methods=("lora", "qlora"), max_gpus=1)
    plans = ftsolve.plan(job.model_copy(update={"calibration": False}), top=5).plans
    assert plans
    for p in plans:
        assert p.time.tokens_per_s_band == pytest.approx(k.time_band(p.method, p.gpu), abs=1e-3)
    wider = [p for p in plans if p.gpu not in k.THROUGHPUT_MEASURED_GPUS]
    assert all(p.time.tokens_per_s_band > k.TIME_BANDS[p.method] for p in wider)
    args = ["explain", "--model", L8, "--tokens", "20M", "--seq-len", "2048", "--max-gpus", "1"]
    text = CliRunner().invoke(cli, args).output
    assert "tokens/s (±" in text


def _qlora(**opts: Any) -> ftsolve.MemoryEstimate:
    return estimate_memory(
        L8, method="qlora", seq_len=2048, gradient_checkpointing=True, options=MemoryOptions.for_stack(**opts)
    )


def test_prepare_model_for_kbit_training_casts_the_16_bit_parameters_and_the_residual_stream_to_fp32() -> None:
    upcast, plain = _qlora(stack="hf"), _qlora(stack="hf", kbit_upcast=False)
    assert STACKS["hf"].kbit_upcast and MemoryOptions.for_stack("hf").kbit_upcast
    # Llama-3.1-8B's 16-bit parameters under NF4: embeddings and lm_head (128256 x 4096 each, untied)
    # and the norms, 2 more bytes each in fp32.
    other = 2 * 128256 * 4096 + (2 * 32 + 1) * 4096
    extra = upcast.components_gib["weights"] - plain.components_gib["weights"]
    assert extra == pytest.approx(other * 2 / 2**30, rel=1e-3)
    # The checkpointed layer inputs are fp32: twice their bf16 size.
    assert upcast.components_gib["activations"] == pytest.approx(2 * plain.components_gib["activations"], rel=1e-3)
    # Not where PEFT or TRL skip it: a GPTQ base, a sharded QLoRA, stacks that do not run it, LoRA on 16 bits.
    assert _qlora(stack="hf", quant_kernel="gptq").components_gib["weights"] < upcast.components_gib["weights"]
    for stack in ("axolotl", "unsloth", "torchtune", "litgpt", "ms-swift", "accelerate-fsdp"):
        assert not STACKS[stack].kbit_upcast, stack
    zero3 = [
        estimate_memory(
            L8, method="qlora", seq_len=2048, n_gpus=2, sharding="zero3", options=MemoryOptions(kbit_upcast=u)
        )
        for u in (True, False)
    ]
    assert zero3[0].components_gib["weights"] == zero3[1].components_gib["weights"]
    lora = [_est(kbit_upcast=u).components_gib["weights"] for u in (True, False)]
    assert lora[0] == lora[1]


def test_the_kbit_upcast_switch_reaches_the_cli_and_the_transformers_export() -> None:
    from ftsolve._exports import render_export

    args = ["estimate", "memory", "--model", L8, "--method", "qlora", "--gpu", "l4", "--json"]
    on, off = (json.loads(CliRunner().invoke(cli, [*args, *flag]).output) for flag in ([], ["--no-kbit-upcast"]))
    assert on["components_gib"]["weights"] > off["components_gib"]["weights"]
    for upcast in (True, False):
        job = ftsolve.JobSpec(
            model=L8, train_tokens=5_000_000, seq_len=1024, methods=("qlora",), max_gpus=1, kbit_upcast=upcast
        )
        p = ftsolve.plan(job, top=1).plans[0]
        text = render_export("transformers", p, job, load_catalog(user=False))
        script = json.loads(text)["_ftsolve"]["script"]
        assert script["prepare_model_for_kbit_training"] is upcast


def test_matmul_efficiencies_are_read_against_the_catalogs_peaks() -> None:
    import re

    gpus = load_catalog(user=False).gpus
    # Sources that measured against another peak than gpus.csv's, each said in its note.
    other_peak = {"mi250x": 383.0 / 2, "gh200-96gb": 989.0, "gh200-144gb": 989.0}
    for name, eff in k.MATMUL_EFFICIENCY.items():
        reached, peak = (float(x) for x in re.findall(r"([\d.]+) of ([\d.]+) TFLOP/s", eff.source)[0])
        assert eff.value == pytest.approx(reached / peak, abs=6e-4), name
        expected = other_peak.get(name, gpus[name].tensor_tflops)
        assert peak == pytest.approx(expected, rel=2e-3), name


def test_torchtune_qlora_dequantizes_torchaos_nf4_eagerly_unless_compiled() -> None:
    """torchtune's LoRALinear runs torchao's linear_nf4, whose get_original_weight keeps int64
    indices and every intermediate of the weight it expands (14 B per element) and moves 35 B per
    element each time; torch.compile fuses that chain into a bitsandbytes-like kernel."""
    assert MemoryOptions.for_stack("torchtune").quant_kernel == "torchao"
    assert MemoryOptions.for_stack("torchtune", quant_kernel="bitsandbytes").quant_kernel == "bitsandbytes"
    eager, compiled = _qlora(stack="torchtune"), _qlora(stack="torchtune", compile=True)
    bnb = _qlora(stack="hf", kbit_upcast=False)
    largest = 4096 * 14336  # Llama-3.1-8B's MLP projections, its widest quantized linears
    assert eager.components_gib["dequant_workspace"] == pytest.approx(14 * largest / 2**30, abs=1e-3)
    assert compiled.components_gib["dequant_workspace"] == pytest.approx(2 * largest / 2**30, abs=1e-3)
    assert bnb.components_gib["dequant_workspace"] == pytest.approx(2 * largest / 2**30, abs=1e-3)
    assert eager.peak_gib > compiled.peak_gib

    gpu = "a100-sxm-80gb"
    times = {
        c: ftsolve.estimate_time(L8, gpu, method="qlora", options=MemoryOptions.for_stack("torchtune", compile=c))
        for c in (False, True)
    }
    # Forward, recompute and backward each expand every quantized linear: 3 x (35 - 4.5) B more per
    # linear parameter, at the bandwidth the dequantization streams at.
    catalog = load_catalog(user=False)
    linear, gb_per_s = catalog.models[L8].linear_params_in_layers(), catalog.gpu(gpu).memory_bandwidth_gb_per_s
    assert gb_per_s is not None
    bandwidth = gb_per_s * 1e9 * k.WEIGHT_STREAM_EFFICIENCY.value
    extra_s = 3 * linear * (35.0 - 4.5) / bandwidth
    assert times[False].step_s - times[True].step_s == pytest.approx(extra_s, rel=1e-6)
    assert times[False].tokens_per_s < times[True].tokens_per_s


def test_the_quant_kernel_reaches_the_cli_and_the_probe_says_it_runs_bitsandbytes() -> None:
    out = CliRunner().invoke(
        cli, ["estimate", "memory", "--model", L8, "--method", "qlora", "--quant-kernel", "torchao", "--json"]
    )
    assert out.exit_code == 0, out.output
    bad = CliRunner().invoke(cli, ["estimate", "memory", "--model", L8, "--method", "qlora", "--quant-kernel", "awq"])
    assert bad.exit_code == 2 and "torchao" in bad.output and "Traceback" not in bad.output
    job = ftsolve.JobSpec(model=L8, train_tokens=20_000_000, seq_len=2048, methods=("qlora",), stack="torchtune")
    catalog = load_catalog(user=False)
    plan = ftsolve.plan(job, catalog, top=1).plans[0]
    from ftsolve._probe import SCRIPT_NAME, build_probe

    script = build_probe(plan, job, catalog).files[SCRIPT_NAME]
    assert "bitsandbytes' NF4 dequantization, where the job has torchao" in script
    # A 16-bit plan of the same job dequantizes nothing: no such note.
    both = job.model_copy(update={"methods": ("lora", "qlora")})
    lora = next(p for p in ftsolve.plan(both, catalog, top=20).plans if p.weight_precision in ("bf16", "fp16"))
    assert "NF4 dequantization" not in build_probe(lora, both, catalog).files[SCRIPT_NAME]


def test_torchtune_is_never_planned_or_estimated_on_an_int8_base() -> None:
    # torchtune quantizes bases to torchao's NF4 only (no LLM.int8): an int8 LoRA is refused with the
    # reason, and a torchtune plan never uses one, where the hf stack may.
    torchtune = MemoryOptions.for_stack("torchtune")
    with pytest.raises(ftsolve.InvalidJobSpec, match="torchao's NF4 kernel"):
        estimate_memory(L8, method="lora", weight_precision="int8", options=torchtune)
    assert estimate_memory(L8, method="lora", weight_precision="int8", options=MemoryOptions()).peak_gib > 0
    from ftsolve.solver._grid import build_candidates
    from ftsolve.solver._memory import Q8

    job = ftsolve.JobSpec(model=L8, train_tokens=20_000_000, seq_len=2048, methods=("lora",))
    for stack, offered in (("hf", True), ("torchtune", False)):
        table = build_candidates(job.model_copy(update={"stack": stack}), load_catalog(user=False))
        assert len(table) > 0 and bool((table.quant == Q8).any()) is offered, stack
