"""Mixture-of-experts and MLA config.json files: published parameter counts, refusals, CLI use.

The files under tests/configs/ are Hugging Face config.json files as published copies hold them
(the Hub itself is not reachable from the test machine):
- mixtral-8x7b-v0.1.json, qwen1.5-moe-a2.7b-chat.json, deepseek-moe-16b-base.json: the copies in
  github.com/mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py (commit 79d603f0), keys
  "Mixtral-8x7B-v0.1", "qwen2moe" and "deepseek".
- deepseek-v2-lite.json: the same file's "deepseek_v2_lite", which drops null values; its
  "q_lora_rank": null is put back (V2-Lite has a full q_proj: DeepSeek-V2 paper, appendix B).
- qwen3-30b-a3b.json: github.com/alibaba/InferSim hf_configs/qwen3-30B-A3B_config.json
  (commit c1c36d65), byte for byte.
- olmoe-1b-7b.json: a transformers-written OLMoE-1B-7B config.json from a public GitHub copy
  ("_name_or_path": "step23842-hf"); every field ftsolve reads equals allenai/OLMoE-1B-7B-0924's
  and transformers' documented OlmoeConfig defaults.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ftsolve._errors import CatalogError
from ftsolve.catalog import ModelArch, arch_from_config, load_catalog, load_config_json
from ftsolve.cli import cli
from ftsolve.solver._memory import ModelSizes

CONFIGS = Path(__file__).parent / "configs"
TOLERANCE = 0.015


def _arch(name: str) -> ModelArch:
    return load_config_json(CONFIGS / name)


def _close(computed: int, published_b: float) -> bool:
    return abs(computed / (published_b * 1e9) - 1.0) <= TOLERANCE


# (file, published total B, published active B). Active counts as these publishers count them:
# every parameter a token uses, the embedding table included.
PUBLISHED = [
    # https://mistral.ai/news/mixtral-of-experts: "46.7B total parameters but only uses 12.9B parameters per token"
    ("mixtral-8x7b-v0.1.json", 46.7, 12.9),
    # https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B: "14.3B parameters in total and 2.7B activated parameters"
    ("qwen1.5-moe-a2.7b-chat.json", 14.3, 2.7),
    # https://arxiv.org/abs/2409.02060 (OLMoE), Table 1: 1.3B active, 6.9B total parameters
    ("olmoe-1b-7b.json", 6.9, 1.3),
    # https://arxiv.org/abs/2401.06066 (DeepSeekMoE), section 5: 16.4B total, 2.8B activated parameters
    ("deepseek-moe-16b-base.json", 16.4, 2.8),
]


@pytest.mark.parametrize(("name", "total_b", "active_b"), PUBLISHED)
def test_total_and_active_params_match_the_published_counts(name: str, total_b: float, active_b: float) -> None:
    arch = _arch(name)
    assert _close(arch.total_params(), total_b), arch.total_params()
    assert _close(arch.active_params(), active_b), arch.active_params()


# "total_size" in each Hub checkpoint's model.safetensors.index.json, in bf16 (2 bytes a parameter),
# as public copies quote it. ftsolve leaves out the q_norm/k_norm weights of Qwen3 (2 x head_dim
# per layer) and OLMoE (q_dim + kv_dim per layer), as it does for the dense Qwen3 presets.
CHECKPOINT_BYTES = [
    ("mixtral-8x7b-v0.1.json", 93_405_585_408, 0),
    ("qwen1.5-moe-a2.7b-chat.json", 28_631_568_384, 0),
    ("qwen3-30b-a3b.json", 61_064_245_248, 48 * 2 * 128),
    ("olmoe-1b-7b.json", 13_838_323_712, 16 * (2048 + 2048)),
    ("deepseek-v2-lite.json", 31_412_968_448, 0),
]


@pytest.mark.parametrize(("name", "checkpoint_bytes", "left_out"), CHECKPOINT_BYTES)
def test_total_params_are_the_checkpoints_parameters(name: str, checkpoint_bytes: int, left_out: int) -> None:
    assert _arch(name).total_params() == checkpoint_bytes // 2 - left_out


def test_qwen3_30b_a3b() -> None:
    # https://huggingface.co/Qwen/Qwen3-30B-A3B: "30.5B in total and 3.3B activated",
    # "Number of Parameters (Non-Embedding): 29.9B".
    arch = _arch("qwen3-30b-a3b.json")
    assert _close(arch.total_params(), 30.5)  # the reader before MoE support gave 233.5B
    assert _close(arch.total_params() - arch.embedding_params(), 29.9)
    # The card's 3.3B is cut to one decimal, not rounded: the counting that gives Qwen1.5-MoE's
    # 2.7B gives 3.353B here (1.6% above 3.3B), so the check is on the card's digits.
    assert arch.active_params() == 3_353_020_416
    assert arch.active_params() // 10**8 == 33


def test_deepseek_v2_lite() -> None:
    # https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite: "15.7B total parameters, of which 2.4B
    # are activated for each token". DeepSeek counts activated parameters without the embedding
    # lookup (as its 21B for DeepSeek-V2 and 37B for V3 also do): matmul_params(active=True),
    # 2.451B, which the card cuts to 2.4B (2.1% above it, so the check is on the card's digits).
    arch = _arch("deepseek-v2-lite.json")
    assert _close(arch.total_params(), 15.7)
    assert arch.matmul_params(active=True) == 2_451_308_544
    assert arch.matmul_params(active=True) // 10**8 == 24


# transformers' DeepseekV3Config defaults are DeepSeek-V3's own shape
# (src/transformers/models/deepseek_v3/configuration_deepseek_v3.py, v4.55.4).
DEEPSEEK_V3: dict[str, Any] = {
    "model_type": "deepseek_v3",
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "qk_nope_head_dim": 128,
    "n_group": 8,
    "topk_group": 4,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "tie_word_embeddings": False,
}


def test_deepseek_v3() -> None:
    # https://arxiv.org/abs/2412.19437: "671B total parameters with 37B activated for each token"
    # (the multi-token-prediction module, which transformers does not load, is not in the 671B).
    arch = arch_from_config(DEEPSEEK_V3, "deepseek-v3")
    assert _close(arch.total_params(), 671)
    assert _close(arch.matmul_params(active=True), 37)


def test_layouts_are_read_into_the_architecture() -> None:
    qwen3 = _arch("qwen3-30b-a3b.json")
    assert (qwen3.num_experts, qwen3.experts_per_token, qwen3.expert_intermediate) == (128, 8, 768)
    assert (qwen3.dense_layers, qwen3.shared_expert_intermediate_size, qwen3.intermediate_size) == (0, 0, 6144)
    qwen15 = _arch("qwen1.5-moe-a2.7b-chat.json")
    assert (qwen15.shared_expert_intermediate_size, qwen15.shared_expert_gate, qwen15.attention_bias) == (
        5632,
        True,
        True,
    )
    lite = _arch("deepseek-v2-lite.json")
    assert (lite.dense_layers, lite.shared_expert_intermediate_size, lite.expert_intermediate) == (1, 2 * 1408, 1408)
    assert (lite.q_lora_rank, lite.kv_lora_rank, lite.q_dim) == (None, 512, 16 * (128 + 64))
    for name in ("mixtral-8x7b-v0.1.json", "olmoe-1b-7b.json"):
        arch = _arch(name)
        assert arch.expert_intermediate_size is None and arch.expert_intermediate == arch.intermediate_size


def test_the_mixtral_config_reads_as_the_preset() -> None:
    preset = load_catalog(user=False).model("mixtral-8x7b")
    arch = _arch("mixtral-8x7b-v0.1.json")
    assert arch.total_params() == preset.total_params()
    assert arch.matmul_params() == preset.matmul_params()
    assert arch.lora_params(16, "all-linear") == preset.lora_params(16, "all-linear")


def test_mla_projections_by_hand() -> None:
    # modeling_deepseek_v2.py: q_proj (no q_lora_rank), kv_a_proj_with_mqa, kv_b_proj, o_proj.
    lite = _arch("deepseek-v2-lite.json")
    h, n = 2048, 16
    linears = [(h, n * 192), (h, 512 + 64), (512, n * (128 + 128)), (n * 128, h)]
    assert lite.attention_params_per_layer() == sum(i * o for i, o in linears) == 13_762_560
    assert lite.norm_params_per_layer() == 2 * h + 512  # plus kv_a_layernorm
    assert lite.lora_params(8, "attention") == 8 * 27 * sum(i + o for i, o in linears)
    assert lite.lora_params(8, "qv") == 8 * 27 * ((h + n * 192) + (512 + n * 256))
    # With q_lora_rank the query goes through q_a_proj, q_a_layernorm and q_b_proj.
    v3 = arch_from_config(DEEPSEEK_V3, "deepseek-v3")
    h, n = 7168, 128
    linears = [(h, 1536), (1536, n * 192), (h, 512 + 64), (512, n * 256), (n * 128, h)]
    assert v3.attention_params_per_layer() == sum(i * o for i, o in linears)
    assert v3.norm_params_per_layer() == 2 * h + 1536 + 512


def test_expert_mlps_by_hand() -> None:
    qwen15 = _arch("qwen1.5-moe-a2.7b-chat.json")
    h, layers = 2048, 24
    expert, shared = 3 * h * 1408, 3 * h * 5632
    router, gate = h * 60, h  # gate: the Linear(hidden, 1) on the shared expert
    assert qwen15.mlp_params_per_layer() == 60 * expert + shared + router + gate
    assert qwen15.mlp_params_per_layer(active=True) == 4 * expert + shared + router + gate
    assert qwen15.lora_params(16, "mlp") == 16 * 3 * layers * (60 * (h + 1408) + (h + 5632))
    # NF4 quantizes the decoder layers' linears: everything but embeddings, lm_head and norms.
    norms = layers * 2 * h + h
    assert qwen15.linear_params_in_layers() == qwen15.total_params() - qwen15.embedding_params() - norms


def _qwen3_moe(**changes: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    return cfg | changes


def test_qwen_dense_layers_from_mlp_only_layers_and_decoder_sparse_step() -> None:
    base = arch_from_config(_qwen3_moe(), "q")
    only = arch_from_config(_qwen3_moe(mlp_only_layers=[0, 47]), "q")
    stepped = arch_from_config(_qwen3_moe(decoder_sparse_step=2), "q")  # layers 1, 3, ... stay sparse
    assert (only.dense_layers, stepped.dense_layers) == (2, 24)
    swap = base.mlp_params_per_layer() - base.dense_mlp_params()
    assert base.total_params() - only.total_params() == 2 * swap
    assert base.total_params() - stepped.total_params() == 24 * swap


def test_deepseek_layers_past_first_k_dense_replace_are_sparse() -> None:
    lite = _arch("deepseek-v2-lite.json")
    assert lite.sparse_layers == 26 and lite.dense_mlp_layers == 1
    assert lite.mlp_params() == 26 * lite.mlp_params_per_layer() + lite.dense_mlp_params()


def test_memory_model_sizes_see_the_expert_widths() -> None:
    qwen3 = ModelSizes.of(_arch("qwen3-30b-a3b.json"), 16, "all-linear")
    assert (qwen3.intermediate, qwen3.experts_per_token) == (768, 8)
    assert (qwen3.q_dim, qwen3.kv_dim) == (4096, 512)
    lite = ModelSizes.of(_arch("deepseek-v2-lite.json"), 16, "all-linear")
    assert (lite.intermediate, lite.experts_per_token) == (1408, 8)  # 6 routed + 2 shared experts' width
    mixtral = ModelSizes.of(load_catalog(user=False).model("mixtral-8x7b"), 16, "all-linear")
    assert (mixtral.intermediate, mixtral.experts_per_token) == (14336, 2)


_BASE = {
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "intermediate_size": 5632,
    "vocab_size": 151936,
}
REFUSED = [
    # A MoE family the reader does not know (Phi-3.5-MoE's layout).
    ({**_BASE, "model_type": "phimoe", "num_local_experts": 16, "num_experts_per_tok": 2}, "field num_local_experts"),
    # Experts on a family read as dense.
    ({**_BASE, "model_type": "llama", "num_experts": 8, "num_experts_per_tok": 2}, "field num_experts"),
    # DeepSeek's modeling code and transformers' place MoE layers differently unless it is 1.
    (json.loads((CONFIGS / "deepseek-v2-lite.json").read_text()) | {"moe_layer_freq": 2}, "field moe_layer_freq"),
    # Expert groups where the family has none.
    (_qwen3_moe(n_group=8, topk_group=4), "field n_group"),
    # Experts whose width is not in the file (transformers would fill in a default).
    ({k: v for k, v in _qwen3_moe().items() if k != "moe_intermediate_size"}, "missing field moe_intermediate_size"),
    # MLA with the query rank left out (transformers would take DeepSeek-V3's 1536).
    (
        {k: v for k, v in json.loads((CONFIGS / "deepseek-v2-lite.json").read_text()).items() if k != "q_lora_rank"},
        "missing field q_lora_rank",
    ),
    # Latent attention on a family read with ordinary attention (MiniCPM3's layout).
    ({**_BASE, "model_type": "minicpm3", "kv_lora_rank": 256, "q_lora_rank": 768}, "field kv_lora_rank"),
]


@pytest.mark.parametrize(("cfg", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_unknown_layouts_are_refused_with_the_field_named(tmp_path: Path, cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        arch_from_config(cfg, "x")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    result = CliRunner().invoke(cli, ["models", "show", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1


# huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json (the fields ftsolve reads): a small dense model.
QWEN25_05B = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
JOB = ["--tokens", "20M", "--seq-len", "1024", "--json"]


def _costs(output: str) -> list[float]:
    return [p["total_cost_usd"] for p in json.loads(output)["plans"]]


def _write(folder: Path, cfg: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder / "config.json"


def test_plan_from_config_equals_the_preset(tmp_path: Path) -> None:
    path = _write(tmp_path / "Qwen2.5-0.5B", QWEN25_05B)
    preset = CliRunner().invoke(cli, ["plan", "--model", "qwen2.5-0.5b", *JOB])
    assert preset.exit_code == 0, preset.output
    for given in (path, path.parent):  # the file, or the folder holding it
        result = CliRunner().invoke(cli, ["plan", "--config", str(given), *JOB])
        assert result.exit_code == 0, result.output
        assert _costs(result.output) == _costs(preset.output)
        assert json.loads(result.output)["job"]["model"]["name"] == "Qwen2.5-0.5B"


def test_plan_from_a_moe_config() -> None:
    result = CliRunner().invoke(cli, ["plan", "--config", str(CONFIGS / "qwen3-30b-a3b.json"), *JOB])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["job"]["model"]["expert_intermediate_size"] == 768


def test_compare_pareto_and_export_take_config(tmp_path: Path) -> None:
    path = str(_write(tmp_path / "m", QWEN25_05B))
    job = ["--config", path, "--tokens", "20M", "--seq-len", "1024"]
    for args in (
        ["compare", *job, "--json"],
        ["pareto", *job, "--points", "2", "--json"],
        ["export", "skypilot", *job],
    ):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, (args, result.output)
    moe = CliRunner().invoke(cli, ["export", "accelerate", "--config", str(CONFIGS / "qwen3-30b-a3b.json"), *job[2:]])
    assert moe.exit_code == 0, moe.output


def test_a_bad_moe_config_exits_2_with_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "m", _qwen3_moe(n_group=8))
    for command in ("plan", "compare"):
        result = CliRunner().invoke(cli, [command, "--config", str(path), *JOB])
        assert result.exit_code == 2, result.output
        assert "field n_group" in result.output and len(result.output.strip().splitlines()) == 1


def test_model_and_config_are_exclusive(tmp_path: Path) -> None:
    path = str(_write(tmp_path / "m", QWEN25_05B))
    result = CliRunner().invoke(cli, ["plan", "--model", "qwen2.5-0.5b", "--config", path, *JOB])
    assert result.exit_code == 2
    assert "not both" in result.output and len(result.output.strip().splitlines()) == 1


def test_a_job_file_names_a_config_relative_to_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "jobs" / "models" / "small", QWEN25_05B)
    preset = CliRunner().invoke(cli, ["plan", "--model", "qwen2.5-0.5b", *JOB])
    monkeypatch.chdir(tmp_path)  # not the job file's folder
    for model in ("models/small/config.json", "models/small"):
        job = tmp_path / "jobs" / "job.yaml"
        job.write_text(f"model: {model}\ntrain_tokens: 20M\nseq_len: 1024\n")
        result = CliRunner().invoke(cli, ["plan", "--job", str(job), "--json"])
        assert result.exit_code == 0, (model, result.output)
        assert _costs(result.output) == _costs(preset.output)
    job.write_text("model: models/missing/config.json\ntrain_tokens: 20M\nseq_len: 1024\n")
    result = CliRunner().invoke(cli, ["plan", "--job", str(job)])
    assert result.exit_code == 2 and "cannot read model config" in result.output
