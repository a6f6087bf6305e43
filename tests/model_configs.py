"""Hugging Face config.json contents shared by tests (fields as published on the Hub)."""

from __future__ import annotations

# huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json (the fields ftsolve reads).
LLAMA_31_8B: dict[str, object] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}
