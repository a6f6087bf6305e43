"""Parameter, memory and FLOP arithmetic pinned to the worked numbers in physics.md."""

from __future__ import annotations

import numpy as np
import pytest

import ftsolve
from ftsolve.solver import _coefficients as k
from ftsolve.solver._memory import (
    DDP,
    FULL,
    LORA,
    NONE,
    Q4,
    Q16,
    QLORA,
    ZERO2,
    ZERO3,
    MemoryOptions,
    MemoryTerms,
    ModelSizes,
    memory_terms,
)
from ftsolve.solver._throughput import flops_per_token

CAT = ftsolve.load_catalog()
L8, L70 = CAT.model("llama-3.1-8b"), CAT.model("llama-3.1-70b")


def _a(x: int) -> np.ndarray:
    return np.array([x], dtype=np.int64)


def test_parameter_counts_match_physics_table() -> None:
    # physics.md §1 table
    assert L8.attention_params_per_layer() == 41_943_040
    assert L8.mlp_params_per_layer() == 176_160_768
    assert L8.total_params() == 8_030_261_248
    assert L70.attention_params_per_layer() == 150_994_944
    assert L70.mlp_params_per_layer() == 704_643_072
    assert L70.total_params() == 70_553_706_496
    assert L8.matmul_params() == pytest.approx(7.505e9, rel=1e-3)
    assert L70.matmul_params() == pytest.approx(69.503e9, rel=1e-3)


def test_moe_total_and_active_params() -> None:
    mix = CAT.model("mixtral-8x7b")  # physics.md §1: 46.7B total, 12.9B active
    assert mix.total_params() / 1e9 == pytest.approx(46.7, rel=0.005)
    active = mix.total_params() - mix.num_layers * (mix.num_experts - mix.experts_per_token) * mix.expert_mlp_params()
    assert active / 1e9 == pytest.approx(12.9, rel=0.01)


@pytest.mark.parametrize("preset", [m.name for m in CAT.models.values()])
def test_every_preset_matches_its_published_count(preset: str) -> None:
    m = CAT.model(preset)
    assert m.published_params_b is not None
    assert m.total_params() / 1e9 == pytest.approx(m.published_params_b, rel=0.005)


def test_lora_parameters_r16_all_linear() -> None:
    # physics.md §2.3: 1,310,720 per layer / 41.9M (8B); 2,588,672 / 207.1M (70B)
    assert L8.lora_params(16, "all-linear") == 1_310_720 * 32
    assert L70.lora_params(16, "all-linear") == 2_588_672 * 80


def _terms(
    arch: ftsolve.ModelArch,
    method: int,
    quant: int,
    shard: int,
    ckpt: int,
    n: int,
    opt: str = "adamw",
    *,
    options: MemoryOptions | None = None,
    accumulating: bool = False,
) -> MemoryTerms:
    opts = options or MemoryOptions(optimizer=opt)
    sizes = ModelSizes.of(arch, 16, "all-linear", opts.framework)
    a = (_a(method), _a(quant), _a(shard), _a(ckpt), _a(n))
    return memory_terms(sizes, opts, 2048, *a, accumulating=accumulating)


def _static_gib(t: MemoryTerms) -> dict[str, float]:
    return {name: float(v[0]) for name, v in t.static.items()}


def test_model_states_match_worked_totals() -> None:
    # physics.md §6: 8B full 16 B/param on one GPU = 128.5 GB of states
    t = _terms(L8, FULL, Q16, NONE, 0, 1)
    states = sum(float(t.static[c][0]) for c in ("weights", "gradients", "optimizer"))
    assert states / 1e9 == pytest.approx(128.5, rel=0.002)
    # pure bf16 regime: 64.2 GB
    t = _terms(L8, FULL, Q16, NONE, 0, 1, "adamw-bf16")
    states = sum(float(t.static[c][0]) for c in ("weights", "gradients", "optimizer"))
    assert states / 1e9 == pytest.approx(64.2, rel=0.002)
    # ZeRO-3 over 8 GPUs: 16.1 GB per GPU
    t = _terms(L8, FULL, Q16, ZERO3, 0, 8)
    states = sum(float(t.static[c][0]) for c in ("weights", "gradients", "optimizer"))
    assert states / 1e9 == pytest.approx(16.06, rel=0.005)


def test_qlora_and_lora_base_weights() -> None:
    # physics.md §2.4: QLoRA base 5.70 GB (8B) and 39.52 GB (70B); bf16 base 16.06 / 141.11 GB. These
    # keep the 16-bit parameters in 16 bits (no prepare_model_for_kbit_training, which doubles them).
    plain = MemoryOptions(kbit_upcast=False)
    q8 = float(_terms(L8, QLORA, Q4, NONE, 0, 1, options=plain).static["weights"][0])
    assert q8 / 1e9 == pytest.approx(5.70, abs=0.02)
    q70 = float(_terms(L70, QLORA, Q4, NONE, 0, 1, options=plain).static["weights"][0])
    assert q70 / 1e9 == pytest.approx(39.52, abs=0.05)
    upcast = float(_terms(L8, QLORA, Q4, NONE, 0, 1).static["weights"][0])
    assert upcast - q8 == pytest.approx(2 * (2 * 128256 * 4096 + 65 * 4096), rel=1e-3)
    assert float(_terms(L8, LORA, Q16, NONE, 0, 1).static["weights"][0]) / 1e9 == pytest.approx(16.06, abs=0.01)
    # adapter states, fp32 + AdamW: 0.67 GB (8B) and 3.31 GB (70B)
    lora8 = _terms(L8, LORA, Q16, NONE, 0, 1).static
    adapter8 = sum(float(lora8[c][0]) for c in ("adapters", "gradients", "optimizer"))
    assert adapter8 / 1e9 == pytest.approx(0.67, abs=0.01)
    lora70 = _terms(L70, LORA, Q16, NONE, 0, 1).static
    adapter70 = sum(float(lora70[c][0]) for c in ("adapters", "gradients", "optimizer"))
    assert adapter70 / 1e9 == pytest.approx(3.31, abs=0.02)


def test_activation_coefficient_and_checkpointing() -> None:
    # physics.md §3.2: c = 2(6 + 2kd/h + 4I/h) ≈ 41 bytes·s·b·h per layer. The doc rounds the
    # K/V term to 0.5 for both sizes; exactly, 2kd/h is 0.5 for 8B and 0.25 for 70B.
    assert ModelSizes.of(L8, 16, "all-linear").activation_units(True, True) == pytest.approx(41.0)
    assert ModelSizes.of(L70, 16, "all-linear").activation_units(True, True) == pytest.approx(40.5)
    # Frozen linear layers keep no copy of their input: LoRA on q,v saves the attention input
    # but neither MLP input: 41 - 2(1 + I/h) = 32 for Llama-3-8B.
    assert ModelSizes.of(L8, 16, "qv").activation_units(True, False) == pytest.approx(32.0)
    # §3.5: lean c=41 → 11.0 GB (8B) without checkpointing, 0.54 GB of stored layer inputs plus
    # one re-materialized layer (0.344 GB) with it; the implementations' extra copies are the
    # calibrated ACTIVATION_SCALE (fitted on measured.csv).
    scale = k.ACTIVATION_SCALE.value
    act = float(_terms(L8, FULL, Q16, NONE, 0, 1).per_sample["activations"][0])
    assert act / 1e9 == pytest.approx(11.0 * scale, rel=0.01)
    # The re-materialized layer comes after the loss has freed the logits, so it only counts
    # where it is larger than they are: at s=2048 Llama-3-8B's logits (2048 x 128256 values)
    # are, and the stored inputs alone remain.
    ckpt = _terms(L8, FULL, Q16, NONE, 1, 1).per_sample
    logits = float(ckpt["logits"][0])
    # The hf stack's loss upcasts the logits: 12 bytes per value at its peak (_stacks.py).
    assert logits == pytest.approx(2048 * L8.vocab_size * 12.0)
    assert 0.344e9 * scale < logits
    assert float(ckpt["activations"][0]) / 1e9 == pytest.approx(0.54, abs=0.01)

    # With eager attention and a fused loss the layer is the larger: it adds what exceeds them.
    def eager(ckpt: int) -> dict[str, np.ndarray]:
        opts = MemoryOptions(loss="fused", flash_attention=False)
        sizes = ModelSizes.of(L8, 16, "all-linear")
        return memory_terms(sizes, opts, 2048, _a(FULL), _a(Q16), _a(NONE), _a(ckpt), _a(1)).per_sample

    per_layer = float(eager(0)["activations"][0]) / L8.num_layers
    small = float(eager(1)["logits"][0])
    assert per_layer > small
    stored = 2.0 * 2048 * L8.hidden_size * L8.num_layers
    assert float(eager(1)["activations"][0]) == pytest.approx(stored)
    assert float(eager(1)["recompute"][0]) == pytest.approx(per_layer - small)


def test_deepspeed_holds_18_bytes_per_parameter() -> None:
    # physics.md §2.1: DeepSpeed's estimator counts 2 (bf16 weights) + 4 (fp32 grads) + 4 (fp32
    # master) + 8 (moments) = 18 B/param; ZeRO-3 over 8 GPUs divides all of it.
    sizes = ModelSizes.of(L8, 16, "all-linear")
    t = memory_terms(sizes, MemoryOptions(stack="deepspeed"), 2048, _a(FULL), _a(Q16), _a(ZERO3), _a(1), _a(8))
    states = sum(float(t.static[c][0]) for c in ("weights", "gradients", "optimizer"))
    assert states == pytest.approx(18.0 * L8.total_params() / 8)


def test_lora_dropout_replaces_the_adapted_inputs_and_bitsandbytes_keeps_its_inputs() -> None:
    s8 = ModelSizes.of(L8, 16, "all-linear")
    i = L8.intermediate_size / L8.hidden_size  # 3.5
    # With dropout, each adapted module keeps a dropped-out bf16 copy and a 1-byte mask of its
    # input (1.5 units) instead of the input: q, k, v, o (1 unit each) and gate, up, down (1, 1, I/h).
    plain = s8.activation_units(True, True)
    dropout = s8.activation_units(True, True, lora_dropout=True)
    assert dropout == pytest.approx(plain - 2 * (2 + i) + 2 * 1.5 * (3 + 1 + 2 + i))
    # LitGPT's fused QKV takes one dropout for q, k and v.
    fused = s8.activation_units(True, True, lora_dropout=True, fused_qkv=True)
    assert fused == pytest.approx(dropout - 2 * 1.5 * 2)
    # bitsandbytes linears keep their input A: LoRA on q,v over an NF4 base also keeps the MLP
    # inputs, i.e. as much as LoRA on all linear layers without dropout.
    qv_16 = s8.activation_units(True, False, lora_targets="qv")
    qv_nf4 = s8.activation_units(True, False, lora_targets="qv", quantized_base=True)
    assert qv_nf4 - qv_16 == pytest.approx(2 * (1 + i))
    assert qv_nf4 == pytest.approx(plain)
    # In the planner's terms: a GPTQ kernel keeps no input, so its activations equal a bf16 base's.
    opts = MemoryOptions(lora_targets="qv")
    gptq = MemoryOptions(lora_targets="qv", quant_kernel="gptq")
    sizes_qv = ModelSizes.of(L8, 16, "qv")

    def act(o: MemoryOptions, quant: int) -> float:
        t = memory_terms(sizes_qv, o, 2048, _a(QLORA if quant else LORA), _a(quant), _a(NONE), _a(0), _a(1))
        return float(t.per_sample["activations"][0])

    assert act(opts, Q4) > act(opts, Q16) == pytest.approx(act(gptq, Q4))


@pytest.mark.parametrize("kernel", ["bitsandbytes", "gptq"])
def test_dequantization_workspace_follows_the_kernel(kernel: str) -> None:
    sizes = ModelSizes.of(L8, 16, "all-linear")
    t = memory_terms(sizes, MemoryOptions(quant_kernel=kernel), 2048, _a(QLORA), _a(Q4), _a(NONE), _a(1), _a(1))
    # bitsandbytes dequantizes one linear at a time, the widest being an MLP matrix (h x I) in
    # bf16; GPTQ kernels dequantize inside the matmul.
    widest = 0.0 if kernel == "gptq" else L8.hidden_size * L8.intermediate_size * 2.0
    assert float(t.static["dequant_workspace"][0]) == pytest.approx(widest)


def _static(arch: ftsolve.ModelArch, opts: MemoryOptions, name: str) -> float:
    sizes = ModelSizes.of(arch, 16, "all-linear")
    t = memory_terms(sizes, opts, 2048, _a(QLORA), _a(Q4), _a(NONE), _a(0), _a(1))
    return float(t.static[name][0])


def test_quantized_head_is_stored_in_nf4_and_dequantized_whole() -> None:
    # LitGPT's bitsandbytes plugin quantizes lm_head too (the default there); transformers does not.
    head = L8.vocab_size * L8.hidden_size
    nf4 = k.NF4_BYTES_PER_PARAM.value
    litgpt, hf = MemoryOptions(stack="litgpt"), MemoryOptions()
    workspace = _static(L8, litgpt, "dequant_workspace") - _static(L8, hf, "dequant_workspace")
    assert workspace == pytest.approx(head * 2.0)
    # Llama-3.1-8B's head is untied: its 16-bit copy is replaced by an NF4 one.
    assert _static(L8, litgpt, "weights") - _static(L8, hf, "weights") == pytest.approx(head * (nf4 - 2.0))
    assert _static(L8, MemoryOptions(quantized_head=True), "weights") == _static(L8, litgpt, "weights")
    no_head = MemoryOptions(stack="litgpt", quantized_head=False)
    assert _static(L8, no_head, "weights") == _static(L8, hf, "weights")
    # A tied head stays behind as the 16-bit input embedding; the NF4 head comes on top.
    tied = CAT.model("llama-3.2-1b")
    assert tied.tie_word_embeddings
    gain = _static(tied, MemoryOptions(quantized_head=True), "weights") - _static(tied, hf, "weights")
    assert gain == pytest.approx(tied.vocab_size * tied.hidden_size * nf4)


def test_double_quantization_saves_the_block_constants() -> None:
    # QLoRA paper §3: 4.5 bits per parameter without double quantization, 4.127 with it.
    with_dq = _static(L8, MemoryOptions(), "weights")
    without = _static(L8, MemoryOptions(double_quant=False), "weights")
    assert without - with_dq == pytest.approx(L8.linear_params_in_layers() * (0.5625 - 0.516))


def test_deepspeed_reduce_buckets_do_not_shrink_with_the_trainable_size() -> None:
    # stage_1_and_2.py allocates two reduce_bucket_size buffers at every backward with overlap_comm,
    # stage3.py one; "auto" is hidden_size**2 (transformers' DeepSpeed integration).
    ds = MemoryOptions.for_stack("deepspeed")
    auto = float(L8.hidden_size) ** 2 * 2.0
    for method, quant in ((FULL, Q16), (LORA, Q16), (QLORA, Q4)):
        assert float(_terms(L8, method, quant, ZERO2, 1, 2, options=ds).static["comm_buckets"][0]) == auto * 2
        assert float(_terms(L8, method, quant, ZERO3, 1, 2, options=ds).static["comm_buckets"][0]) == auto
    qwen_zero2 = MemoryOptions.for_stack("deepspeed", deepspeed_bucket_elements=2e8)  # Qwen's ds_config_zero2.json
    assert float(_terms(L8, LORA, Q16, ZERO2, 1, 1, options=qwen_zero2).static["comm_buckets"][0]) == 2 * 2e8 * 2.0


def test_ddp_adds_gradient_buckets_zero3_adds_gathered_layers() -> None:
    ddp = _terms(L8, FULL, Q16, DDP, 1, 2).static
    assert float(ddp["comm_buckets"][0]) == pytest.approx(L8.total_params() * 2.0)
    z3 = _terms(L8, FULL, Q16, ZERO3, 1, 8).static
    layer = L8.attention_params_per_layer() + L8.mlp_params_per_layer()
    # Two layers in bf16, and the root unit (embedding and untied head) with its gradient.
    root = L8.embedding_params()
    assert float(z3["gathered_shards"][0]) == pytest.approx(2 * layer * 2 + root * 2)
    assert float(z3["unsharded_gradients"][0]) == pytest.approx(root * 2)
    lora = _terms(L8, LORA, Q16, ZERO3, 1, 8).static  # a frozen root has no gradient
    assert float(lora["gathered_shards"][0]) == pytest.approx(2 * layer * 2 + root * 2)
    assert float(lora["unsharded_gradients"][0]) == 0.0


def _fsdp(method: int, framework: str, n: int, accumulating: bool) -> dict[str, float]:
    opts = MemoryOptions(optimizer="adamw-bf16", stack=framework)
    return _static_gib(_terms(L8, method, Q16, ZERO3, 1, n, options=opts, accumulating=accumulating))


@pytest.mark.parametrize("n", [2, 8])
def test_fsdp_accumulation_holds_gradients_unsharded(n: int) -> None:
    # FSDP's no_sync() (how accelerate and Lightning Fabric accumulate) keeps every unit's gradient
    # whole until the syncing micro-batch: the full bf16 gradient per GPU, 2 B/param.
    total = L8.total_params()
    acc, one = _fsdp(FULL, "hf", n, True), _fsdp(FULL, "hf", n, False)
    assert acc["gradients"] == one["gradients"] == pytest.approx(total * 2 / n)
    assert acc["gradients"] + acc["unsharded_gradients"] == pytest.approx(total * 2)
    assert one["unsharded_gradients"] == pytest.approx(L8.embedding_params() * 2)  # the root unit only
    # Adapters (PEFT wraps them in their own units) accumulate their own gradients only.
    lora = _fsdp(LORA, "hf", n, True)
    assert lora["gradients"] + lora["unsharded_gradients"] == pytest.approx(L8.lora_params(16, "all-linear") * 4)
    # Lightning keeps adapters and frozen weights in one FlatParameter with one full-size gradient.
    lit_acc, lit_one = _fsdp(LORA, "litgpt", n, True), _fsdp(LORA, "litgpt", n, False)
    assert lit_acc["gradients"] + lit_acc["unsharded_gradients"] == pytest.approx(total * 2)
    assert lit_one["gradients"] == pytest.approx(total * 2 / n)
    assert lit_one["unsharded_gradients"] == 0.0
    # DeepSpeed accumulates into its partitioned fp32 gradients: nothing is held whole.
    ds = _terms(L8, FULL, Q16, ZERO3, 1, n, options=MemoryOptions(stack="deepspeed"), accumulating=True)
    assert float(ds.static["unsharded_gradients"][0]) == 0.0


def test_litgpt_holds_a_tied_table_twice() -> None:
    # LitGPT's GPT has its own lm_head beside wte and its converter copies a tied table into it.
    tied = CAT.model("llama-3.2-1b")
    table = tied.vocab_size * tied.hidden_size
    hf, lit = ModelSizes.of(tied, 16, "all-linear"), ModelSizes.of(tied, 16, "all-linear", "litgpt")
    assert lit.total_params - hf.total_params == table
    assert lit.embedding_params == 2 * table == 2 * hf.embedding_params
    untied = ModelSizes.of(L8, 16, "all-linear", "litgpt")
    assert untied == ModelSizes.of(L8, 16, "all-linear")


def test_flops_per_token_match_worked_numbers() -> None:
    # physics.md §7 (s=2048): 8B full 45.0 G (+1.6 G attention), +ckpt 60.0 G; LoRA 30.3 G, +ckpt 45.3 G
    sizes = ModelSizes.of(L8, 16, "all-linear")
    attn = 1.61e9
    assert float(flops_per_token(sizes, 2048, _a(FULL), _a(0))[0]) == pytest.approx(45.0e9 + attn, rel=0.005)
    assert float(flops_per_token(sizes, 2048, _a(LORA), _a(0))[0]) == pytest.approx(30.3e9 + attn, rel=0.005)
    full_ckpt = float(flops_per_token(sizes, 2048, _a(FULL), _a(1))[0])
    assert full_ckpt == pytest.approx(60.0e9 + attn * 4 / 3, rel=0.005)
    sizes70 = ModelSizes.of(L70, 16, "all-linear")
    assert float(flops_per_token(sizes70, 2048, _a(FULL), _a(0))[0]) == pytest.approx(417e9 + 8.1e9, rel=0.005)


def _one_gpu(method: int, quant: int, ckpt: int, opts: MemoryOptions) -> dict[str, float]:
    return _static_gib(_terms(L8, method, quant, NONE, ckpt, 1, options=opts))


@pytest.mark.parametrize("optimizer", ["adamw", "adamw-8bit", "adamw-fp32"])
def test_trained_embedding_copies_keep_the_model_dtype(optimizer: str) -> None:
    # PEFT's modules_to_save copies keep the base dtype (only adapter weights are upcast to fp32)
    # and torch optimizers keep state in the parameter's dtype: bf16 AdamW copies are 2+2+4 B/param.
    table = L8.embedding_params()
    plain = _one_gpu(LORA, Q16, 1, MemoryOptions(optimizer=optimizer))
    copies = _one_gpu(LORA, Q16, 1, MemoryOptions(optimizer=optimizer, train_embeddings=True))
    w, g, o = {"adamw": (2, 2, 4), "adamw-8bit": (2, 2, 2.03), "adamw-fp32": (4, 4, 8)}[optimizer]
    assert copies["adapters"] - plain["adapters"] == pytest.approx(table * w)
    assert copies["gradients"] - plain["gradients"] == pytest.approx(table * g)
    assert copies["optimizer"] - plain["optimizer"] == pytest.approx(table * o)
    # DeepSpeed gives every trainable parameter an fp32 gradient, master and moments.
    ds = _one_gpu(LORA, Q16, 1, MemoryOptions(stack="deepspeed", train_embeddings=True))
    ds_plain = _one_gpu(LORA, Q16, 1, MemoryOptions(stack="deepspeed"))
    assert sum(ds.values()) - sum(ds_plain.values()) == pytest.approx(table * (2 + 4 + 12))


def test_autocast_on_an_fp32_model_keeps_bf16_weight_copies() -> None:
    fp32 = MemoryOptions(optimizer="adamw-fp32")
    head = L8.vocab_size * L8.hidden_size
    linear = L8.linear_params_in_layers()
    # Frozen weights: the bf16 copy each matmul saves for its input's gradient, for every layer
    # without checkpointing and for the re-materialized layer with it.
    assert _one_gpu(LORA, Q16, 0, fp32)["autocast_copies"] == pytest.approx((linear + head) * 2)
    assert _one_gpu(LORA, Q16, 1, fp32)["autocast_copies"] == pytest.approx((linear / 32 + head) * 2)
    # Trained weights: autocast caches their copies for the whole forward, checkpointed or not.
    assert _one_gpu(FULL, Q16, 1, fp32)["autocast_copies"] == pytest.approx((linear + head) * 2)
    # A bf16 model computes on its own weights; a quantized base has its dequantization workspace.
    assert _one_gpu(LORA, Q16, 0, MemoryOptions())["autocast_copies"] == 0.0
    assert _one_gpu(QLORA, Q4, 0, fp32)["autocast_copies"] == 0.0


def _step(method: int, shard: int, n: int, step: str, optimizer: str = "adamw-bf16", **kw: object) -> MemoryTerms:
    opts = MemoryOptions.for_stack("hf", optimizer=optimizer, optimizer_step=step, **kw)
    return _terms(L8, method, Q16, shard, 1, n, options=opts)


def test_foreach_adamw_holds_a_copy_of_the_second_moments_through_the_step() -> None:
    # torch AdamW's multi-tensor path: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), one
    # moment-sized temporary for every trainable parameter at once; the fused kernel needs none.
    foreach, fused = _step(FULL, NONE, 1, "foreach"), _step(FULL, NONE, 1, "fused")
    assert float(foreach.step[0]) == pytest.approx(L8.total_params() * 2.0)  # bf16 moments
    assert float(fused.step[0]) == 0.0
    assert _static_gib(foreach) == _static_gib(fused)
    # The step runs after backward freed the activations and logits: the peak rises by the excess.
    b = _a(1)
    dynamic = float(foreach.per_sample_total()[0])
    assert float(foreach.peak_bytes(b)[0] - fused.peak_bytes(b)[0]) == pytest.approx(L8.total_params() * 2.0 - dynamic)
    parts = foreach.parts(b)
    assert sum(float(v[0]) for v in parts.values()) == pytest.approx(float(foreach.peak_bytes(b)[0]))
    # Mixed precision keeps fp32 moments; a LoRA step copies only the adapters' moments.
    assert float(_step(FULL, NONE, 1, "foreach", "adamw").step[0]) == pytest.approx(L8.total_params() * 4.0)
    lora = _step(LORA, NONE, 1, "foreach", "adamw")
    assert float(lora.step[0]) == pytest.approx(L8.lora_params(16, "all-linear") * 4.0)


def test_optimizer_step_temporaries_reuse_what_backward_frees_and_need_torch_adamw() -> None:
    # Under FSDP the gathered layers and unsharded gradients are gone before the step: the step's
    # shard-sized copy fits in them. 8-bit, paged and DeepSpeed optimizers update in place.
    sharded = _step(FULL, ZERO3, 8, "foreach")
    freed = sum(float(sharded.static[c][0]) for c in ("gathered_shards", "unsharded_gradients"))
    assert float(sharded.step[0]) == pytest.approx(max(L8.total_params() * 2.0 / 8 - freed, 0.0))
    assert float(_step(FULL, NONE, 1, "foreach", "adamw-8bit").step[0]) == 0.0
    # Under DeepSpeed a torch AdamW client optimizer steps the fp32 partition of this GPU; its own
    # FusedAdam (the stack's default) updates in place.
    assert float(_terms(L8, FULL, Q16, ZERO2, 1, 2, options=MemoryOptions.for_stack("deepspeed")).step[0]) == 0.0
    ds = MemoryOptions.for_stack("deepspeed", optimizer_step="foreach")
    assert float(_terms(L8, FULL, Q16, ZERO2, 1, 2, options=ds).step[0]) == pytest.approx(L8.total_params() * 4.0 / 2)
    # Stepped in each gradient's hook, one parameter's copy at most.
    in_bwd = _step(FULL, NONE, 1, "foreach", optimizer_in_backward=True)
    assert float(in_bwd.step[0]) == pytest.approx(L8.vocab_size * L8.hidden_size * 2.0)


def test_the_step_is_net_of_what_accumulation_frees_too() -> None:
    # FSDP accumulating under no_sync holds whole gradients until the step, which frees them first.
    opts = MemoryOptions(optimizer="adamw-bf16", optimizer_step="foreach")
    acc = _terms(L8, FULL, Q16, ZERO3, 1, 2, options=opts, accumulating=True)
    one = _terms(L8, FULL, Q16, ZERO3, 1, 2, options=opts, accumulating=False)
    assert float(acc.step[0]) < float(one.step[0])
    swapped = one.with_static("unsharded_gradients", acc.static["unsharded_gradients"])
    assert float(swapped.step[0]) == pytest.approx(float(acc.step[0]))


def test_a_micro_batch_fits_only_where_the_step_fits_too() -> None:
    from ftsolve.solver._memory import max_micro_batch

    t = _step(FULL, NONE, 1, "foreach")
    room = float(t.static_total()[0]) + float(t.step[0]) - 1.0  # a byte short of the step's copy
    assert max_micro_batch(t, np.array([room]), _a(8))[0] == 0
    assert max_micro_batch(t, np.array([room + 2.0 + float(t.per_sample_total()[0])]), _a(1))[0] == 1


def test_stacks_state_how_their_optimizer_steps() -> None:
    from ftsolve.solver._stacks import OPTIMIZER_STEPS, STACKS

    assert {s.optimizer_step for s in STACKS.values()} <= set(OPTIMIZER_STEPS)
    assert STACKS["litgpt"].optimizer_step == "foreach"  # torch.optim.AdamW without fused=True
    assert STACKS["torchtune"].optimizer_step == "fused"  # its configs set fused: True
    assert MemoryOptions.for_stack("litgpt").optimizer_step == "foreach"
    assert MemoryOptions.for_stack("litgpt", optimizer_step="fused").optimizer_step == "fused"


def test_a_softcapped_head_keeps_one_more_16_bit_logits_tensor_unless_the_loss_is_fused() -> None:
    from ftsolve.catalog import arch_from_config

    gemma2 = ftsolve.load_catalog(user=False).model("gemma-2-9b")
    assert gemma2.logit_softcap
    plain = gemma2.model_copy(update={"logit_softcap": False})
    s, b = 4096, 2
    from ftsolve.solver._memory import dynamic_factor

    extra = s * b * gemma2.vocab_size * 2.0 / 2**30 * dynamic_factor()  # tanh's bf16 output, GiB, planned

    def logits(arch: object, loss: str) -> float:
        opts = MemoryOptions.for_stack("hf", loss=loss)
        est = ftsolve.estimate_memory(arch, method="lora", seq_len=s, micro_batch=b, options=opts)  # type: ignore[arg-type]
        return est.components_gib["logits"]

    assert logits(gemma2, "bf16") - logits(plain, "bf16") == pytest.approx(extra, rel=0.01)
    assert logits(gemma2, "fused") == pytest.approx(logits(plain, "fused"))
    # Read from config.json: Gemma-2 sets final_logit_softcapping, Gemma-3 leaves it null.
    cfg = {"model_type": "gemma2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 1000, "final_logit_softcapping": 30.0}
    assert arch_from_config(cfg, "g2").logit_softcap
    assert not arch_from_config(cfg | {"final_logit_softcapping": None}, "g3").logit_softcap
    # transformers' Gemma2Config caps by default where the file omits the field.
    assert arch_from_config({k2: v for k2, v in cfg.items() if k2 != "final_logit_softcapping"}, "g2").logit_softcap
    # torchtune's Gemma-2 caps the hidden states before the output projection, not the logits.
    tt = MemoryOptions.for_stack("torchtune")
    same = [ftsolve.estimate_memory(a, method="lora", seq_len=s, micro_batch=b, options=tt) for a in (gemma2, plain)]
    assert same[0].components_gib["logits"] == pytest.approx(same[1].components_gib["logits"])
