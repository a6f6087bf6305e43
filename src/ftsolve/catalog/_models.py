"""Catalog records: GPU hardware, rentable offers and model architectures.

Every field carries its unit in its name. Prices are USD per GPU-hour (an instance price is
divided by its GPU count when the catalog is built; one quoted in euros or pounds is converted,
see _currency.py), memory is GiB (2**30 bytes).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ftsolve.catalog._currency import CURRENCIES, Currency, rate_on

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
    visible_memory_mib: int | None = Field(
        default=None,
        gt=0,
        description="the device total nvidia-smi (or torch, rocm-smi, hl-smi) reports: less than nominal "
        "where ECC takes its share (A10G, T4, L40) or the vendor exposes less (B300)",
    )
    visible_memory_source: str = ""
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

PriceKind = Literal["list", "observed", "floor", "estimate"]
#: What a price is, in the order of the codes OfferArrays stores (catalog/_arrays.py):
#: list      a published rate (price page, pricing API, provider catalog), whatever its date;
#: observed  a market price (spot market, marketplace or broker listing) seen on price_date;
#: floor     a "from" price: the least anyone pays, not what a given launch costs;
#: estimate  derived or uncertain: converted from a guessed currency, computed from other
#:           figures, or a market price whose date is unknown (marketplace prices move daily).
PRICE_KINDS: tuple[PriceKind, ...] = ("list", "observed", "floor", "estimate")
# An interruptible price this far under on-demand is more often a floor or a stale snapshot than a
# price one pays, so `catalog validate` flags it for review (issue 15). It is a flag, not a refusal:
# real spot discounts come close (AWS median spot/on-demand 0.26 for p5en and 0.19 for p6-b200 in the
# 2026 catalog snapshot, prices-and-spot.md 2(a)).
MAX_PLAUSIBLE_DISCOUNT = 0.8

# Bounds that catch typos (a price in cents, a missing decimal point), not market limits: the
# dearest bundled offer is ~35 USD/GPU-hour and block storage ~0.1-0.3 USD/GB-month.
MAX_USD_PER_GPU_HOUR = 1000.0
MAX_STORAGE_USD_PER_GB_MONTH = 100.0
MAX_INTERRUPTIONS_PER_HOUR = 60.0
# Identity fields appear in keys, tables and one-line errors; notes may span lines.
MAX_NAME_CHARS = 200
MAX_SOURCE_CHARS = 2_000
MAX_NOTES_CHARS = 10_000


def echo(value: object, limit: int = 40) -> str:
    """A value read from a user's file as an error message may quote it: one line, at most `limit`
    characters of it (a file's content is never echoed whole)."""
    try:
        text = value if isinstance(value, str) else str(value)
    except ValueError:  # an int too long for str()
        return f"<{type(value).__name__}>"
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def is_one_line(text: str) -> bool:
    """No line break or other control character (str.isprintable: every character printable)."""
    return text.isprintable()


# The text fields that must be one line; the column reader (catalog/_columns.py) checks the same.
ONE_LINE_FIELDS = (
    "provider",
    "tier",
    "instance_type",
    "gpu",
    "source_gpu_name",
    "region",
    "source",
    "not_launchable_reason",
)


def country_code(value: str) -> str | None:
    """An ISO 3166 alpha-2 code in upper case, None for an empty value; ValueError otherwise."""
    code = value.strip().upper()
    if not code:
        return None
    if len(code) != 2 or not (code.isascii() and code.isalpha()):
        raise ValueError("must be a 2-letter ISO 3166 country code such as DE or US")
    return code


def latest_price_date() -> dt.date:
    """The latest date a price may carry: tomorrow, for time zones ahead of this machine's; a
    later date (9999-12-31) would only silence the staleness warning."""
    return dt.date.today() + dt.timedelta(days=1)


def to_usd(value: float, usd_per_unit: float) -> float:
    """A price read in another currency, in US dollars at `usd_per_unit`."""
    return round(value * usd_per_unit, 6)


class Offer(_Frozen):
    """One rentable instance type in one region, priced per GPU-hour.

    Every rule on an offer's values lives here, for every way an offer is made (CSV, YAML,
    SkyPilot import, library): numbers are finite and within typo bounds, the GPU count is a whole
    number, the price date is not in the future, the country is an upper-case ISO 3166 alpha-2 code.
    Each price carries its kind (PRICE_KINDS); an offer a launcher cannot start as written says why.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    provider: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    tier: str = Field(
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="offering or tier, e.g. 'secure', 'community', 'on-demand/spot'",
    )
    instance_type: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    gpu: str = Field(max_length=MAX_NAME_CHARS, description="canonical GPU id (GpuSpec.name)")
    source_gpu_name: str = Field(max_length=MAX_NAME_CHARS, description="the provider's own spelling of the GPU")
    gpus_per_node: int = Field(ge=1, le=64)
    on_demand_usd_per_gpu_hour: float | None = Field(default=None, gt=0, le=MAX_USD_PER_GPU_HOUR)
    interruptible_usd_per_gpu_hour: float | None = Field(default=None, gt=0, le=MAX_USD_PER_GPU_HOUR)
    billing: Billing = "per-hour"
    region: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    country: str | None = Field(default=None, description="ISO 3166-1 alpha-2 code, upper case (DE, US)")
    storage_usd_per_gb_month: float | None = Field(default=None, gt=0, le=MAX_STORAGE_USD_PER_GB_MONTH)
    interruption_rate_per_hour: float | None = Field(default=None, ge=0, le=MAX_INTERRUPTIONS_PER_HOUR)
    price_date: dt.date
    price_date_estimated: bool = Field(
        default=False, description="True when the source gave no date and it was bounded from context"
    )
    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS)
    notes: str = Field(default="", max_length=MAX_NOTES_CHARS)
    price_kind: PriceKind = Field(
        default="list",
        description="kind of the on-demand price, and of the interruptible one unless interruptible_price_kind "
        "is given: list, observed, floor or estimate (PRICE_KINDS)",
    )
    interruptible_price_kind: PriceKind = Field(
        default="list", description="kind of the interruptible price (default: price_kind)"
    )
    launchable: bool = Field(
        default=True,
        description="SkyPilot (the release ftsolve exports for) accepts this cloud, region and instance type "
        "as written; false, with not_launchable_reason, where it does not",
    )
    not_launchable_reason: str = Field(default="", max_length=MAX_NAME_CHARS)
    currency: Currency = Field(
        default="USD",
        description="the currency the provider quotes; read in it, the prices are converted to US dollars",
    )
    usd_per_unit: float | None = Field(
        default=None, gt=0, description="the exchange rate the prices were converted at (None: quoted in USD)"
    )

    @model_validator(mode="before")
    @classmethod
    def _interruptible_kind_default(cls, data: object) -> object:
        # One kind for both prices unless the interruptible one differs (Nebius: list on-demand, floor spot).
        if isinstance(data, dict) and data.get("interruptible_price_kind") in (None, ""):
            data = {**data, "interruptible_price_kind": data.get("price_kind") or "list"}
        return data

    @model_validator(mode="before")
    @classmethod
    def _to_usd(cls, data: object) -> object:
        # Prices read in another currency (no rate yet): converted once, at the rate of the price
        # date; an offer already converted keeps its figures and its rate.
        if not isinstance(data, dict) or data.get("currency") in (None, "", "USD") or data.get("usd_per_unit"):
            return data
        currency, day = str(data["currency"]).strip().upper(), data.get("price_date")
        if currency not in CURRENCIES:
            return {**data, "currency": currency}  # refused by the field's own check
        try:
            date = day if isinstance(day, dt.date) else dt.date.fromisoformat(str(day))
        except ValueError:
            return data  # the price_date check says what is wrong
        rate = rate_on(currency, date)
        out = {**data, "currency": currency, "usd_per_unit": rate.usd_per_unit}
        for name in ("on_demand_usd_per_gpu_hour", "interruptible_usd_per_gpu_hour", "storage_usd_per_gb_month"):
            value = data.get(name)
            if value not in (None, "") and not isinstance(value, bool):
                # A value that is no number stays as it is: the field's own check names it.
                with contextlib.suppress(TypeError, ValueError):
                    out[name] = to_usd(float(value), rate.usd_per_unit)
        return out

    @field_validator(*ONE_LINE_FIELDS)
    @classmethod
    def _one_line(cls, value: str) -> str:
        if not is_one_line(value):
            raise ValueError("must be one line without control characters")
        return value

    @field_validator("country", mode="before")
    @classmethod
    def _country(cls, value: object) -> object:
        # Upper case here, once: a lower-case `de` used to be stored as is and never matched --eu-only.
        return country_code(value) if isinstance(value, str) else value

    @field_validator("price_date")
    @classmethod
    def _not_in_the_future(cls, value: dt.date) -> dt.date:
        if value > latest_price_date():
            raise ValueError("must not be in the future; give the date the price was read")
        return value

    @model_validator(mode="after")
    def _prices(self) -> Offer:
        if self.on_demand_usd_per_gpu_hour is None and self.interruptible_usd_per_gpu_hour is None:
            raise ValueError("offer has neither an on-demand nor an interruptible price")
        od, spot = self.on_demand_usd_per_gpu_hour, self.interruptible_usd_per_gpu_hour
        if od is not None and spot is not None and spot > od:
            raise ValueError(f"interruptible price {spot} is above on-demand {od}")
        if not self.launchable and not self.not_launchable_reason.strip():
            raise ValueError("an offer that is not launchable needs a not_launchable_reason")
        if self.launchable and self.not_launchable_reason:
            raise ValueError("not_launchable_reason is set on a launchable offer; set launchable to false")
        return self

    @property
    def interruptible_discount(self) -> float | None:
        """1 - interruptible / on-demand, when the offer has both prices."""
        od, spot = self.on_demand_usd_per_gpu_hour, self.interruptible_usd_per_gpu_hour
        return None if od is None or spot is None else 1.0 - spot / od

    @property
    def key(self) -> str:
        """Stable identity used for duplicate detection, tie-breaking and user overrides."""
        return f"{self.provider}/{self.tier}/{self.instance_type}/{self.region}"


MAX_ARCH_SIZE = 10_000_000


class ModelArch(_Frozen):
    """Decoder-only transformer architecture, enough to count parameters, bytes and FLOPs.

    Mixtures of experts (MoE) and multi-head latent attention (MLA, DeepSeek-V2/V3) are described
    by optional fields; their defaults describe a dense model, whose counts they leave unchanged.
    Each field's description names the config.json fields it is read from (catalog/_hf.py).
    """

    name: str
    family: str

    @field_validator("*")
    @classmethod
    def _real_size(cls, v: object) -> object:
        # No real model has a dimension, layer or expert count near this; a config that does is
        # corrupt, and its counts would overflow the float arithmetic of the estimates.
        if isinstance(v, int) and not isinstance(v, bool) and v > MAX_ARCH_SIZE:
            raise ValueError(f"must be at most {MAX_ARCH_SIZE:,}")
        return v

    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    intermediate_size: int = Field(gt=0, description="width of a dense MLP; also of each expert unless set below")
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    logit_softcap: bool = Field(
        default=False,
        description="final_logit_softcapping is set (Gemma-2): the logits pass through tanh before the loss",
    )
    gated_mlp: bool = True
    num_experts: int = Field(default=1, ge=1, description="routed experts per sparse layer (1: dense)")
    experts_per_token: int = Field(default=1, ge=1, description="routed experts a token uses (num_experts_per_tok)")
    expert_intermediate_size: int | None = Field(
        default=None, gt=0, description="width of one routed expert: moe_intermediate_size (None: intermediate_size)"
    )
    shared_expert_intermediate_size: int = Field(
        default=0,
        ge=0,
        description="width of the always-used shared expert MLP: Qwen2-MoE shared_expert_intermediate_size, "
        "DeepSeek n_shared_experts x moe_intermediate_size",
    )
    shared_expert_gate: bool = Field(default=False, description="Qwen2-MoE's Linear(hidden, 1) shared_expert_gate")
    dense_layers: int = Field(
        default=0,
        ge=0,
        description="layers of a MoE model with a dense intermediate_size MLP: DeepSeek first_k_dense_replace, "
        "Qwen mlp_only_layers and the layers decoder_sparse_step skips",
    )
    q_lora_rank: int | None = Field(default=None, gt=0, description="MLA query compression (None: a full q_proj)")
    kv_lora_rank: int | None = Field(default=None, gt=0, description="MLA key/value compression; set for MLA only")
    qk_nope_head_dim: int | None = Field(default=None, gt=0, description="MLA per-head query/key width without RoPE")
    qk_rope_head_dim: int | None = Field(default=None, gt=0, description="MLA per-head query/key width with RoPE")
    v_head_dim: int | None = Field(default=None, gt=0, description="MLA per-head value width")
    published_params_b: float | None = Field(default=None, gt=0)
    source: str = ""

    @model_validator(mode="after")
    def _shape(self) -> ModelArch:
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token exceeds num_experts")
        moe_only = (self.expert_intermediate_size, self.shared_expert_intermediate_size, self.dense_layers)
        if self.num_experts == 1 and any(moe_only):
            raise ValueError("expert sizes, shared experts and dense_layers need num_experts > 1")
        if self.num_experts > 1 and self.dense_layers >= self.num_layers:
            raise ValueError("dense_layers must leave at least one mixture-of-experts layer")
        if self.shared_expert_gate and not self.shared_expert_intermediate_size:
            raise ValueError("shared_expert_gate needs shared_expert_intermediate_size")
        heads = (self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        if self.kv_lora_rank is None and (self.q_lora_rank is not None or any(heads)):
            raise ValueError("MLA fields need kv_lora_rank")
        if self.kv_lora_rank is not None and not all(heads):
            raise ValueError("MLA needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim")
        return self

    @property
    def head_dim_eff(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    def _mla(self) -> tuple[int, int, int, int] | None:
        """(kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim) of an MLA model, else None."""
        kv, nope, rope, v = self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim
        if kv is None or nope is None or rope is None or v is None:
            return None
        return kv, nope, rope, v

    @property
    def kv_dim(self) -> int:
        """Key (= value) width per token; under MLA half the width of the keys and values together."""
        mla = self._mla()
        if mla is not None:
            _, nope, rope, v = mla
            return self.num_heads * (nope + rope + v) // 2
        return self.num_kv_heads * self.head_dim_eff

    @property
    def q_dim(self) -> int:
        """Query width per token: heads x head_dim, under MLA heads x (qk_nope + qk_rope head dims)."""
        mla = self._mla()
        if mla is not None:
            return self.num_heads * (mla[1] + mla[2])
        return self.num_heads * self.head_dim_eff

    def attention_linears(self) -> list[tuple[int, int]]:
        """(d_in, d_out) of each attention projection of one layer.

        q, k, v, o; under MLA (transformers' modeling_deepseek_v2.py) q_proj, or q_a_proj and
        q_b_proj when q_lora_rank is set, then kv_a_proj_with_mqa, kv_b_proj and o_proj.
        """
        h, n = self.hidden_size, self.num_heads
        mla = self._mla()
        if mla is None:
            return [(h, self.q_dim), (h, self.kv_dim), (h, self.kv_dim), (self.q_dim, h)]
        kv, nope, rope, v = mla
        r = self.q_lora_rank
        q = [(h, self.q_dim)] if r is None else [(h, r), (r, self.q_dim)]
        return [*q, (h, kv + rope), (kv, n * (nope + v)), (n * v, h)]

    def attention_params_per_layer(self) -> int:
        """Weights and biases of one layer's attention projections (physics.md §1)."""
        weights = sum(d_in * d_out for d_in, d_out in self.attention_linears())
        if not self.attention_bias:
            return weights
        mla = self._mla()
        if mla is None:
            return weights + self.q_dim + 2 * self.kv_dim  # q, k and v carry biases, o does not
        # MLA's attention_bias puts biases on q_a_proj, kv_a_proj_with_mqa and o_proj.
        return weights + (self.q_lora_rank or 0) + mla[0] + mla[2] + self.hidden_size

    def norm_params_per_layer(self) -> int:
        """The two hidden-size norms, plus MLA's q_a_layernorm and kv_a_layernorm."""
        return 2 * self.hidden_size + (self.q_lora_rank or 0) + (self.kv_lora_rank or 0)

    @property
    def expert_intermediate(self) -> int:
        """Width of one routed expert: moe_intermediate_size, else intermediate_size (Mixtral, OLMoE)."""
        return self.expert_intermediate_size or self.intermediate_size

    @property
    def sparse_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return self.num_layers - self.dense_layers if self.num_experts > 1 else 0

    @property
    def dense_mlp_layers(self) -> int:
        """Layers whose MLP is one dense intermediate_size MLP (all of a dense model's)."""
        return self.num_layers - self.sparse_layers

    def _mlp(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden_size * width

    def dense_mlp_params(self) -> int:
        """One dense MLP, intermediate_size wide (gate, up, down; or fc1, fc2)."""
        return self._mlp(self.intermediate_size)

    def expert_mlp_params(self) -> int:
        """Parameters of one routed expert's MLP (gate, up, down for gated MLPs)."""
        return self._mlp(self.expert_intermediate)

    def shared_expert_params(self) -> int:
        """A sparse layer's shared expert MLP and its Linear(hidden, 1) gate (Qwen2-MoE)."""
        return self._mlp(self.shared_expert_intermediate_size) + (self.hidden_size if self.shared_expert_gate else 0)

    def mlp_params_per_layer(self, active: bool = False) -> int:
        """MLP of one sparse layer (any layer of a dense model): routed experts (all, or the
        experts_per_token a token uses when active), router and shared expert."""
        if self.num_experts == 1:
            return self.dense_mlp_params()
        experts = self.experts_per_token if active else self.num_experts
        router = self.hidden_size * self.num_experts
        return experts * self.expert_mlp_params() + router + self.shared_expert_params()

    def mlp_params(self, active: bool = False) -> int:
        """MLPs of all layers: the sparse layers' and the dense layers'."""
        return self.sparse_layers * self.mlp_params_per_layer(active) + self.dense_mlp_layers * self.dense_mlp_params()

    def largest_layer_params(self) -> int:
        """Attention and MLP weights of the largest decoder layer (what ZeRO-3 gathers at once)."""
        dense = self.dense_mlp_params() if self.dense_mlp_layers else 0
        return self.attention_params_per_layer() + max(self.mlp_params_per_layer(), dense)

    def mlp_width_per_token(self) -> float:
        """Hidden MLP width a token passes through, averaged over layers: experts_per_token experts
        plus the shared expert in sparse layers, intermediate_size in dense ones."""
        sparse = self.experts_per_token * self.expert_intermediate + self.shared_expert_intermediate_size
        return (self.sparse_layers * sparse + self.dense_mlp_layers * self.intermediate_size) / self.num_layers

    def embedding_params(self) -> int:
        """Input embedding plus the lm_head when it is not tied to it."""
        table = self.vocab_size * self.hidden_size
        return table if self.tie_word_embeddings else 2 * table

    def total_params(self) -> int:
        """All parameters: layers, norms, embedding and (untied) lm_head (physics.md §1)."""
        per_layer = self.attention_params_per_layer() + self.norm_params_per_layer()
        return self.num_layers * per_layer + self.mlp_params() + self.embedding_params() + self.hidden_size

    def active_params(self) -> int:
        """Parameters one token uses, counted as model cards count them: all but the routed experts
        it is not sent to, embedding table included (matmul_params leaves the lookup out)."""
        idle = self.num_experts - self.experts_per_token
        return self.total_params() - self.sparse_layers * idle * self.expert_mlp_params()

    def matmul_params(self, active: bool = True) -> int:
        """Parameters that take part in matmuls per token: N_f (physics.md §0), active for MoE."""
        attention = self.num_layers * self.attention_params_per_layer()
        return attention + self.mlp_params(active=active) + self.vocab_size * self.hidden_size

    def linear_params_in_layers(self) -> int:
        """Parameters of the nn.Linear modules inside the decoder blocks (what NF4 quantizes)."""
        return self.num_layers * self.attention_params_per_layer() + self.mlp_params()

    def lora_params(self, rank: int, targets: str) -> int:
        """Trainable LoRA parameters r·(d_in + d_out) summed over targeted linears (physics.md §2.3).

        "mlp" adapts every expert and the shared and dense MLPs; the routers and the shared expert
        gate (r·(h + experts) per layer, under 1% of the experts' adapters) are left out. "qv" is
        the query projections and the projection that makes values: v_proj, or MLA's kv_b_proj.
        """
        linears = self.attention_linears()
        qv = [linears[0], linears[2]] if self._mla() is None else [*linears[:-3], linears[-2]]
        attn = self.num_layers * sum(d_in + d_out for d_in, d_out in linears)
        mats, h = (3 if self.gated_mlp else 2), self.hidden_size
        shared = h + self.shared_expert_intermediate_size if self.shared_expert_intermediate_size else 0
        sparse = self.num_experts * (h + self.expert_intermediate) + shared
        mlp = mats * (self.sparse_layers * sparse + self.dense_mlp_layers * (h + self.intermediate_size))
        per_model = {
            "attention": attn,
            "mlp": mlp,
            "all-linear": attn + mlp,
            "qv": self.num_layers * sum(d_in + d_out for d_in, d_out in qv),
        }[targets]
        return rank * per_model
