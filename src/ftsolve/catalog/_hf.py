"""Read a Hugging Face `config.json` from disk into a ModelArch. Never imports model code and
never downloads anything: the file is parsed as JSON and its fields are mapped by name."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ftsolve._errors import CatalogError
from ftsolve._files import JOB_FILE_MAX_BYTES, read_text_file
from ftsolve.catalog._models import ModelArch

# Field spellings across architectures (GPT-2/NeoX/Falcon/MPT/Phi use older names).
_ALIASES = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_heads": ("num_attention_heads", "n_head", "n_heads"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
}
# transformers' per-architecture defaults for tie_word_embeddings when the file omits it.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gpt2", "gpt_neo", "gptj", "mpt", "falcon", "bloom", "opt"}
# Architectures whose MLP has a gate (three matrices); the others have two.
_NOT_GATED = {"gpt2", "gpt_neox", "gpt_neo", "gptj", "phi", "falcon", "mpt", "bloom", "opt", "starcoder2"}
# Architectures whose q/k/v projections carry biases whatever the file says.
_QKV_BIAS = {"qwen", "qwen2", "qwen2_moe", "phi", "gpt_neox", "gpt2", "starcoder2", "bloom"}


# Mixture-of-experts layouts ftsolve sizes, by model_type: the layout fields each reads beyond
# the dense ones, as transformers' modeling_<type>.py builds the model (DeepSeek's own
# modeling_deepseek.py for "deepseek", DeepSeekMoE). Routing-only fields (norm_topk_prob,
# scoring_func, topk_method, routed_scaling_factor) change no size and are not read.
_QWEN_MOE = frozenset({"num_experts", "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers"})
_DEEPSEEK_MOE = frozenset(
    {"n_routed_experts", "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq"}
    | {"n_group", "topk_group"}  # expert groups route tokens; they hold no parameters
)
_MLA = frozenset({"kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"})
_LAYOUT_READERS: dict[str, frozenset[str]] = {
    "mixtral": frozenset({"num_local_experts"}),
    "olmoe": frozenset({"num_experts"}),
    "qwen2_moe": _QWEN_MOE | {"shared_expert_intermediate_size"},
    "qwen3_moe": _QWEN_MOE,
    "deepseek": _DEEPSEEK_MOE,
    "deepseek_v2": _DEEPSEEK_MOE | _MLA,
    "deepseek_v3": _DEEPSEEK_MOE | _MLA,
}
# Where each of those families keeps its number of routed experts.
_EXPERT_COUNT = {
    "mixtral": "num_local_experts",
    "olmoe": "num_experts",
    "qwen2_moe": "num_experts",
    "qwen3_moe": "num_experts",
    "deepseek": "n_routed_experts",
    "deepseek_v2": "n_routed_experts",
    "deepseek_v3": "n_routed_experts",
}
# Fields that change a model's size or layer layout unless they hold a neutral value (absent,
# null, 0, an empty list, or 1 for counts and strides). A config that sets one its model_type's
# reader does not list is refused rather than sized as if the field were not there.
_LAYOUT_FIELDS = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_num_experts",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "moe_shared_expert_intermediate_size",
    "n_shared_experts",
    "num_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "decoder_sparse_step",
    "mlp_only_layers",
    "n_group",
    "topk_group",
    *sorted(_MLA),
)
_NEUTRAL_AT_ONE = frozenset(
    {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "moe_layer_freq"}
    | {"decoder_sparse_step", "n_group", "topk_group"}
)


def _get(cfg: dict[str, Any], field: str, where: str) -> int:
    for key in _ALIASES[field]:
        if key in cfg:
            value = cfg[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise CatalogError(f"{where}: field {key}: expected a positive integer, got {value!r}")
            return value
    raise CatalogError(f"{where}: missing field {_ALIASES[field][0]} (or {', '.join(_ALIASES[field][1:])})")


def _opt_int(cfg: dict[str, Any], key: str, where: str) -> int | None:
    """A non-negative integer field, or None when it is absent or null."""
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CatalogError(f"{where}: field {key}: expected a non-negative integer, got {value!r}")
    return value


def _req_int(cfg: dict[str, Any], key: str, where: str) -> int:
    """A positive integer field the layout cannot be sized without."""
    value = _opt_int(cfg, key, where)
    if value is None:
        raise CatalogError(f"{where}: missing field {key}")
    if value == 0:
        raise CatalogError(f"{where}: field {key}: expected a positive integer, got 0")
    return value


def _refuse_unknown_layout(cfg: dict[str, Any], model_type: str, where: str) -> None:
    """CatalogError naming the first size-changing field this model_type's reader does not read."""
    known = _LAYOUT_READERS.get(model_type, frozenset())
    for key in _LAYOUT_FIELDS:
        value = cfg.get(key)
        neutral = value in (None, 0, False, []) or (key in _NEUTRAL_AT_ONE and value == 1)
        if key in known or neutral:
            continue
        kinds = ", ".join(sorted(_LAYOUT_READERS))
        raise CatalogError(
            f"{where}: field {key}: changes the model's size in a way ftsolve cannot read for model_type "
            f"{model_type!r} (it sizes the expert and latent-attention layouts of {kinds})"
        )


def _qwen_layout(cfg: dict[str, Any], model_type: str, layers: int, where: str) -> dict[str, Any]:
    """Dense layers and shared expert of Qwen2-MoE/Qwen3-MoE: layer i is sparse unless it is in
    mlp_only_layers or (i + 1) is not a multiple of decoder_sparse_step (modeling_qwen2_moe.py)."""
    step = _opt_int(cfg, "decoder_sparse_step", where) or 1
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise CatalogError(f"{where}: field mlp_only_layers: expected a list of layer indices, got {only!r}")
    sparse = sum(1 for i in range(layers) if i not in only and (i + 1) % step == 0)
    out: dict[str, Any] = {"dense_layers": layers - sparse}
    if model_type == "qwen2_moe":
        shared = _opt_int(cfg, "shared_expert_intermediate_size", where)
        if shared is None:
            raise CatalogError(f"{where}: missing field shared_expert_intermediate_size")
        out |= {"shared_expert_intermediate_size": shared, "shared_expert_gate": shared > 0}
    return out


def _deepseek_layout(cfg: dict[str, Any], layers: int, expert_width: int, where: str) -> dict[str, Any]:
    """Dense layers and shared experts of DeepSeekMoE/V2/V3: the first first_k_dense_replace
    layers are dense; n_shared_experts experts form one MLP n x moe_intermediate_size wide."""
    freq = cfg.get("moe_layer_freq")
    if freq not in (None, 1):
        # DeepSeek's modeling code skips layers with i % moe_layer_freq != 0; transformers' does not.
        raise CatalogError(f"{where}: field moe_layer_freq: {freq!r} places expert layers ambiguously; only 1 is read")
    first = _opt_int(cfg, "first_k_dense_replace", where) or 0
    shared = (_opt_int(cfg, "n_shared_experts", where) or 0) * expert_width
    return {"dense_layers": min(first, layers), "shared_expert_intermediate_size": shared}


def _experts(cfg: dict[str, Any], model_type: str, layers: int, where: str) -> dict[str, Any]:
    """ModelArch's mixture-of-experts fields (none for a dense model or family)."""
    if model_type not in _EXPERT_COUNT:
        return {}
    experts = _opt_int(cfg, _EXPERT_COUNT[model_type], where)
    if not experts or experts == 1:
        return {}
    out: dict[str, Any] = {"num_experts": experts, "experts_per_token": _req_int(cfg, "num_experts_per_tok", where)}
    if model_type in ("mixtral", "olmoe"):
        return out  # every expert is intermediate_size wide; no shared expert, no dense layers
    width = _req_int(cfg, "moe_intermediate_size", where)
    out["expert_intermediate_size"] = width
    if model_type.startswith("qwen"):
        out |= _qwen_layout(cfg, model_type, layers, where)
    else:
        out |= _deepseek_layout(cfg, layers, width, where)
    return {} if out["dense_layers"] >= layers else out


def _latent_attention(cfg: dict[str, Any], model_type: str, where: str) -> dict[str, Any]:
    """ModelArch's MLA fields for DeepSeek-V2/V3. transformers fills absent ones with DeepSeek-V3's
    values (q_lora_rank 1536), so each must be in the file: q_lora_rank null means a full q_proj."""
    if model_type not in ("deepseek_v2", "deepseek_v3"):
        return {}
    for key in sorted(_MLA):
        if key not in cfg:
            hint = " (null for a full q_proj)" if key == "q_lora_rank" else ""
            raise CatalogError(f"{where}: missing field {key}{hint}")
    out: dict[str, Any] = {k: _req_int(cfg, k, where) for k in sorted(_MLA - {"q_lora_rank"})}
    return out | {"q_lora_rank": _opt_int(cfg, "q_lora_rank", where) or None}


def arch_from_config(cfg: dict[str, Any], name: str, where: str = "config.json") -> ModelArch:
    """Map a parsed config.json to a ModelArch; errors name the missing or bad field.

    Mixtures of experts and MLA are read for the families in _LAYOUT_READERS; a size-changing
    field this reader does not understand raises CatalogError instead of being ignored.
    """
    if not isinstance(cfg, dict):
        raise CatalogError(f"{where}: expected a JSON object")
    model_type = str(cfg.get("model_type", "")).lower()
    if not model_type:
        raise CatalogError(f"{where}: missing field model_type")
    _refuse_unknown_layout(cfg, model_type, where)
    h = _get(cfg, "hidden_size", where)
    layers = _get(cfg, "num_layers", where)
    heads = _get(cfg, "num_heads", where)
    vocab = _get(cfg, "vocab_size", where)
    kv = cfg.get("num_key_value_heads") or cfg.get("num_kv_heads") or cfg.get("multi_query_group_num")
    if kv is None and (cfg.get("multi_query") is True and not cfg.get("new_decoder_architecture")):
        kv = 1
    kv = kv or heads
    inter = cfg.get("intermediate_size") or cfg.get("ffn_hidden_size") or cfg.get("n_inner") or cfg.get("ffn_dim")
    if inter is None and model_type in _NOT_GATED:
        inter = 4 * h
    if inter is None:
        raise CatalogError(f"{where}: missing field intermediate_size")
    if model_type == "qwen":
        # Qwen (v1) stores the sum of its two MLP input matrices (w1, w2) as intermediate_size.
        inter //= 2
    tied = cfg.get("tie_word_embeddings")
    if tied is None:
        tied = model_type in _TIED_BY_DEFAULT
    bias = bool(cfg.get("attention_bias") or cfg.get("bias") or cfg.get("qkv_bias")) or model_type in _QKV_BIAS
    try:
        return ModelArch(
            name=name,
            family=model_type,
            hidden_size=h,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=int(kv),
            head_dim=cfg.get("head_dim"),
            intermediate_size=int(inter),
            vocab_size=vocab,
            tie_word_embeddings=bool(tied),
            attention_bias=bias,
            # transformers' Gemma2Config defaults final_logit_softcapping to 30.0 where the file omits it.
            logit_softcap=cfg.get("final_logit_softcapping", 30.0 if model_type == "gemma2" else None) is not None,
            gated_mlp=model_type not in _NOT_GATED,
            **_experts(cfg, model_type, layers, where),
            **_latent_attention(cfg, model_type, where),
            source=where,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "config"
        raise CatalogError(f"{where}: field {field}: {first['msg']}") from None


def config_json_path(value: str, base: Path) -> Path | None:
    """The config.json a job file's `model` names, resolved against the job file's folder: a
    string ending in .json, or a folder holding a config.json. None: a preset name."""
    path = base / Path(value).expanduser()
    if value.endswith(".json") or _exists(path / "config.json", Path.is_file):
        return path
    return None


def _exists(path: Path, test: Callable[[Path], bool]) -> bool:
    """`test(path)`, False where the name cannot be a path at all (too long, a NUL byte)."""
    try:
        return test(path)
    except (OSError, ValueError):
        return False


def load_config_json(path: str | Path) -> ModelArch:
    """Read a local Hugging Face config.json (or a folder holding one)."""
    p = Path(path)
    if _exists(p, Path.is_dir):
        p = p / "config.json"
    text = read_text_file(p, "model config", CatalogError, JOB_FILE_MAX_BYTES)
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except (RecursionError, ValueError):  # nesting beyond the stack; integers beyond 4300 digits
        raise CatalogError(f"{p}: not a model config (nested too deeply or numbers too long)") from None
    # A Hub download keeps config.json in a folder named after the model; a renamed copy names itself.
    fallback = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    name = str(cfg.get("_name_or_path") or fallback) if isinstance(cfg, dict) else p.stem
    return arch_from_config(cfg, name, str(p))
