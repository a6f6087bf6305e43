"""Catalog records: GPU hardware, rentable offers and model architectures.

Every field carries its unit in its name. Prices are USD per GPU-hour (an instance price is
divided by its GPU count when the catalog is built), memory is GiB (2**30 bytes).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Vendor = Literal["nvidia", "amd", "intel"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GpuSpec(_Frozen):
    """One GPU model. Figures from gpus.csv; `source` says where each came from."""

    name: str = Field(description="canonical id, e.g. 'h100-sxm'")
    display_name: str
    vendor: Vendor
    architecture: str
    memory_gib: float = Field(gt=0, description="nominal memory; HBM/GDDR sizes are binary")
    memory_bandwidth_gb_per_s: float | None = Field(default=None, gt=0)
    tensor_tflops: float | None = Field(
        default=None,
        gt=0,
        description="dense 16-bit tensor peak used for training: bf16, or fp16 without bf16",
    )
    supports_bf16: bool
    flash_attention_2: bool
    form_factor: str
    interconnect: str
    nvlink_bandwidth_gb_per_s: float | None = None
    skypilot_names: tuple[str, ...] = ()
    source: str

    @property
    def software_stack(self) -> str:
        """The vendor's training stack: CUDA, ROCm or SynapseAI (Gaudi)."""
        return {"nvidia": "CUDA", "amd": "ROCm", "intel": "SynapseAI"}[self.vendor]

    @property
    def has_nvlink_fabric(self) -> bool:
        """True when all GPUs of a node talk over NVLink/NVSwitch or an equivalent fabric."""
        return self.form_factor in ("sxm", "oam")


Billing = Literal["per-second", "per-minute", "per-hour", "monthly"]


class Offer(_Frozen):
    """One rentable instance type in one region, priced per GPU-hour."""

    provider: str
    tier: str = Field(description="offering or tier, e.g. 'secure', 'community', 'on-demand/spot'")
    instance_type: str
    gpu: str = Field(description="canonical GPU id (GpuSpec.name)")
    source_gpu_name: str = Field(description="the provider's own spelling of the GPU")
    gpus_per_node: int = Field(ge=1, le=64)
    on_demand_usd_per_gpu_hour: float | None = Field(default=None, gt=0)
    interruptible_usd_per_gpu_hour: float | None = Field(default=None, gt=0)
    billing: Billing = "per-hour"
    region: str
    country: str | None = None
    storage_usd_per_gb_month: float | None = Field(default=None, gt=0)
    interruption_rate_per_hour: float | None = Field(default=None, ge=0)
    price_date: dt.date
    price_date_estimated: bool = Field(
        default=False, description="True when the source gave no date and it was bounded from context"
    )
    source: str
    notes: str = ""

    @model_validator(mode="after")
    def _prices(self) -> Offer:
        if self.on_demand_usd_per_gpu_hour is None and self.interruptible_usd_per_gpu_hour is None:
            raise ValueError("offer has neither an on-demand nor an interruptible price")
        od, spot = self.on_demand_usd_per_gpu_hour, self.interruptible_usd_per_gpu_hour
        if od is not None and spot is not None and spot > od:
            raise ValueError(f"interruptible price {spot} is above on-demand {od}")
        return self

    @property
    def key(self) -> str:
        """Stable identity used for duplicate detection, tie-breaking and user overrides."""
        return f"{self.provider}/{self.tier}/{self.instance_type}/{self.region}"


class ModelArch(_Frozen):
    """Decoder-only transformer architecture, enough to count parameters, bytes and FLOPs."""

    name: str
    family: str
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    gated_mlp: bool = True
    num_experts: int = Field(default=1, ge=1)
    experts_per_token: int = Field(default=1, ge=1)
    published_params_b: float | None = Field(default=None, gt=0)
    source: str = ""

    @model_validator(mode="after")
    def _shape(self) -> ModelArch:
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token exceeds num_experts")
        return self

    @property
    def head_dim_eff(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim_eff

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim_eff

    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        bias = (self.q_dim + 2 * self.kv_dim) if self.attention_bias else 0
        return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + bias

    def expert_mlp_params(self) -> int:
        """Parameters of one expert's MLP (gate, up, down for gated MLPs)."""
        mats = 3 if self.gated_mlp else 2
        return mats * self.hidden_size * self.intermediate_size

    def mlp_params_per_layer(self, active: bool = False) -> int:
        experts = self.experts_per_token if active else self.num_experts
        router = self.hidden_size * self.num_experts if self.num_experts > 1 else 0
        return experts * self.expert_mlp_params() + router

    def embedding_params(self) -> int:
        """Input embedding plus the lm_head when it is not tied to it."""
        table = self.vocab_size * self.hidden_size
        return table if self.tie_word_embeddings else 2 * table

    def total_params(self) -> int:
        """All parameters: layers, norms, embedding and (untied) lm_head (physics.md §1)."""
        h = self.hidden_size
        per_layer = self.attention_params_per_layer() + self.mlp_params_per_layer() + 2 * h
        return self.num_layers * per_layer + self.embedding_params() + h

    def matmul_params(self, active: bool = True) -> int:
        """Parameters that take part in matmuls per token: N_f (physics.md §0), active for MoE."""
        per_layer = self.attention_params_per_layer() + self.mlp_params_per_layer(active=active)
        return self.num_layers * per_layer + self.vocab_size * self.hidden_size

    def linear_params_in_layers(self) -> int:
        """Parameters of the nn.Linear modules inside the decoder blocks (what NF4 quantizes)."""
        return self.num_layers * (self.attention_params_per_layer() + self.mlp_params_per_layer())

    def lora_params(self, rank: int, targets: str) -> int:
        """Trainable LoRA parameters r·(d_in + d_out) summed over targeted linears (physics.md §2.3)."""
        h, q, kv, i = self.hidden_size, self.q_dim, self.kv_dim, self.intermediate_size
        attn = (h + q) + 2 * (h + kv) + (q + h)
        mlp_one = (3 if self.gated_mlp else 2) * (h + i)
        mlp = mlp_one * self.num_experts
        per_layer = {"attention": attn, "mlp": mlp, "all-linear": attn + mlp, "qv": (h + q) + (h + kv)}[targets]
        return rank * per_layer * self.num_layers
