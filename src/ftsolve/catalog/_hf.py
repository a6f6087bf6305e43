"""Read a Hugging Face `config.json` from disk into a ModelArch. Never imports model code and
never downloads anything: the file is parsed as JSON and its fields are mapped by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ftsolve._errors import CatalogError
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


def _get(cfg: dict[str, Any], field: str, where: str) -> int:
    for key in _ALIASES[field]:
        if key in cfg:
            value = cfg[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise CatalogError(f"{where}: field {key}: expected a positive integer, got {value!r}")
            return value
    raise CatalogError(f"{where}: missing field {_ALIASES[field][0]} (or {', '.join(_ALIASES[field][1:])})")


def arch_from_config(cfg: dict[str, Any], name: str, where: str = "config.json") -> ModelArch:
    """Map a parsed config.json to a ModelArch; errors name the missing or bad field."""
    if not isinstance(cfg, dict):
        raise CatalogError(f"{where}: expected a JSON object")
    model_type = str(cfg.get("model_type", "")).lower()
    if not model_type:
        raise CatalogError(f"{where}: missing field model_type")
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
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 1
    topk = cfg.get("num_experts_per_tok") or cfg.get("moe_topk") or 1
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
            gated_mlp=model_type not in _NOT_GATED,
            num_experts=int(experts),
            experts_per_token=int(topk) if int(experts) > 1 else 1,
            source=where,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "config"
        raise CatalogError(f"{where}: field {field}: {first['msg']}") from None


def load_config_json(path: str | Path) -> ModelArch:
    """Read a local Hugging Face config.json (or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{p}: cannot read model config ({exc.strerror})") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    name = str(cfg.get("_name_or_path") or p.parent.name or p.stem) if isinstance(cfg, dict) else p.stem
    return arch_from_config(cfg, name, str(p))
