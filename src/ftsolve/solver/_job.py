"""The job a user wants planned, validated at the boundary."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ftsolve._errors import InvalidJobSpec
from ftsolve.catalog._models import ModelArch
from ftsolve.solver._memory import MemoryOptions
from ftsolve.solver._stacks import Loss, StackName

Method = Literal["full", "lora", "qlora"]
Market = Literal["on-demand", "interruptible", "fallback"]
Optimizer = Literal[
    "adamw", "adamw-fp32", "adamw-bf16", "adamw-8bit", "paged-adamw", "paged-adamw-8bit", "sgd", "adafactor"
]
LoraTargets = Literal["all-linear", "attention", "mlp", "qv"]

METHODS: tuple[Method, ...] = ("full", "lora", "qlora")
MARKETS: tuple[Market, ...] = ("on-demand", "interruptible", "fallback")

EU_COUNTRIES = frozenset(
    [
        "AT",
        "BE",
        "BG",
        "HR",
        "CY",
        "CZ",
        "DK",
        "EE",
        "FI",
        "FR",
        "DE",
        "GR",
        "HU",
        "IE",
        "IT",
        "LV",
        "LT",
        "LU",
        "MT",
        "NL",
        "PL",
        "PT",
        "RO",
        "SK",
        "SI",
        "ES",
        "SE",
    ]
)
# EEA members outside the EU: GDPR applies there too.
EEA_COUNTRIES = EU_COUNTRIES | {"IS", "NO", "LI"}


# Spellings people use for ISO 3166-1 alpha-2 codes (Greece is "EL" in EU documents).
_COUNTRY_ALIASES = {"UK": "GB", "EL": "GR"}


def iso_country(code: str) -> str:
    """An ISO 3166-1 alpha-2 code, upper case ('de' -> 'DE', 'UK' -> 'GB'); anything else is refused."""
    c = code.strip().upper()
    if len(c) != 2 or not c.isascii() or not c.isalpha():
        raise ValueError(f"country {code[:20]!r} is not a two-letter ISO code like DE or US")
    return _COUNTRY_ALIASES.get(c, c)


class JobSpec(BaseModel):
    """A fine-tuning job: what to train, how much, and the limits a plan must respect."""

    # Non-finite numbers are refused; every bound below is far beyond any real job, so that the
    # cost arithmetic (integer cents) stays exact and a typo is caught rather than planned.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: str | ModelArch = Field(
        description="preset name (see `ftsolve models list`) or an architecture; a job file may name a config.json"
    )
    train_tokens: int = Field(gt=0, le=10**15, description="tokens to train on, all epochs together")
    seq_len: int = Field(gt=0, le=1_048_576, description="sequence length in tokens")
    global_batch_size: int = Field(default=16, gt=0, le=1_048_576, description="sequences per optimizer step")
    methods: tuple[Method, ...] = METHODS
    optimizer: Optimizer = "adamw"
    lora_rank: int = Field(default=16, gt=0, le=4096)
    lora_targets: LoraTargets = "all-linear"
    lora_dropout: float = Field(default=0.0, ge=0, lt=1.0)
    stack: StackName = Field(
        default="hf",
        description="training stack; its defaults (loss, adapter dtype, offload, ...) apply to the switches left unset",
    )
    adapter_dtype: Literal["fp32", "bf16"] | None = Field(
        default=None, description="adapter weights' dtype (default: the stack's; PEFT fp32, torchtune/LitGPT bf16)"
    )
    train_embeddings: bool = Field(default=False, description="also train embed_tokens and lm_head (LoRA)")
    flash_attention: bool = Field(default=True, description="FlashAttention/SDPA; off means eager attention")
    loss: Loss | None = Field(
        default=None,
        description="how the loss holds logits: fp32-upcast, bf16, chunked (torchtune), fused (Liger, Unsloth); "
        "default: the stack's",
    )
    optimizer_in_backward: bool | None = Field(
        default=None, description="optimizer step fused into backward, gradients freed at once (torchtune)"
    )
    activation_offload: bool | None = Field(
        default=None, description="activations saved for backward offloaded to CPU memory (torchtune, Unsloth)"
    )
    compile: bool | None = Field(default=None, description="torch.compile (recorded; no effect modelled yet)")
    variable_length: bool = Field(
        default=False, description="batches padded to their longest sample (not packed): the allocator fragments"
    )
    offload_optimizer: bool = Field(default=False, description="optimizer state in CPU memory (ZeRO-Offload)")
    offload_params: bool = Field(default=False, description="FSDP CPU offload of parameters and gradients")
    quant_kernel: Literal["bitsandbytes", "gptq"] = Field(
        default="bitsandbytes", description="kernel of an int8/NF4 base: bitsandbytes, or a GPTQ checkpoint"
    )
    double_quant: bool = Field(default=True, description="QLoRA double quantization of the NF4 constants")
    quantized_head: bool | None = Field(
        default=None, description="quantize lm_head with the layers (default: LitGPT yes, others no)"
    )
    deadline_hours: float | None = Field(default=None, gt=0, le=87_600, description="at most 10 years")
    budget_usd: float | None = Field(default=None, gt=0, le=1e9)
    deadline_confidence: float = Field(default=0.9, ge=0.5, lt=1.0)
    objective: Literal["cost", "time", "weighted"] = Field(
        default="cost",
        description="minimum expected cost, minimum time within the budget, or cost + value of time",
    )
    time_value_usd_per_hour: float = Field(
        default=0.0, ge=0, le=1e6, description="for objective 'weighted': what an hour of earlier finish is worth"
    )
    markets: tuple[Market, ...] = MARKETS
    providers: tuple[str, ...] | None = None
    regions: tuple[str, ...] | None = None
    countries: tuple[str, ...] | None = None
    eu_only: bool = Field(default=False, description="only offers in EU/EEA countries (GDPR residency)")
    gpus: tuple[str, ...] | None = Field(default=None, description="allowed canonical GPU ids")
    max_gpus: int = Field(default=64, gt=0, le=4096)
    max_nodes: int = Field(default=4, gt=0, le=512)
    gpu_quota: dict[str, Annotated[int, Field(ge=0, le=1_000_000)]] | None = Field(
        default=None, description="most GPUs you may hold at once, by provider (e.g. {'aws': 8})"
    )
    real_token_fraction: float = Field(
        default=1.0, ge=0.01, le=1.0, description="share of real (non-padding) tokens; 1.0 when packed"
    )
    eval_fraction: float = Field(
        default=0.0,
        ge=0,
        le=10.0,
        description="evaluation tokens as a share of training tokens (forward only)",
    )
    download_mb_per_s: float = Field(
        default=200.0, ge=0.01, le=1e6, description="base-model download bandwidth (10 kB/s to 1 TB/s)"
    )
    dataset_gb: float = Field(default=1.0, ge=0, le=1e6)
    retention_days: float = Field(default=7.0, ge=0, le=3650, description="days volumes are kept after the run")
    trial_runs: int = Field(default=0, ge=0, le=1000, description="short trial runs before the final run")
    trial_fraction: float = Field(default=0.05, gt=0, le=1.0, description="share of the data each trial uses")
    failure_probability: float = Field(
        default=0.0, ge=0, lt=1.0, description="probability a run fails (bug, divergence) and is restarted"
    )

    @field_validator("methods", "markets")
    @classmethod
    def _non_empty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("must allow at least one value")
        return tuple(dict.fromkeys(v))

    @field_validator("countries")
    @classmethod
    def _iso_countries(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if v is None else tuple(iso_country(c) for c in v)

    @field_validator("gpu_quota")
    @classmethod
    def _quota_names(cls, v: dict[str, int] | None) -> dict[str, int] | None:
        if v is not None and any(not name.strip() for name in v):
            raise ValueError("quota names a provider: use provider=GPUs pairs like aws=8")
        return None if v is None else {name.strip().lower(): n for name, n in v.items()}

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, v: object, info: ValidationInfo) -> object:
        # pydantic reads `deadline_hours: true` as 1 hour; a flag where a number belongs is a mistake.
        if isinstance(v, bool) and info.field_name in _NUMBER_FIELDS:
            raise ValueError("expected a number, not true/false")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if self.max_gpus < 1 or self.max_nodes < 1:
            raise ValueError("max_gpus and max_nodes must be positive")
        return self

    def memory_options(self) -> MemoryOptions:
        return MemoryOptions.for_stack(
            self.stack,
            optimizer=self.optimizer,
            adapter_dtype=self.adapter_dtype,
            lora_targets=self.lora_targets,
            lora_dropout=self.lora_dropout,
            train_embeddings=self.train_embeddings,
            flash_attention=self.flash_attention,
            loss=self.loss,
            offload_optimizer=self.offload_optimizer,
            offload_params=self.offload_params,
            double_quant=self.double_quant,
            quantized_head=self.quantized_head,
            optimizer_in_backward=self.optimizer_in_backward,
            activation_offload=self.activation_offload,
            compile=self.compile,
            variable_length=self.variable_length,
            quant_kernel=self.quant_kernel,
        )

    @classmethod
    def build(cls, **fields: object) -> JobSpec:
        """Validate user input, turning pydantic's report into one InvalidJobSpec line."""
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            raise InvalidJobSpec(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "job"
    value = first.get("input")
    shown = ""
    if not isinstance(value, (dict, list, tuple)):
        text = repr(value)
        shown = f" (got {text[:40]}{'...' if len(text) > 40 else ''})"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"invalid {field}: {message}{shown}"


_NUMBER_FIELDS = frozenset(
    name for name, f in JobSpec.model_fields.items() if re.search(r"\b(int|float)\b", str(f.annotation))
)
