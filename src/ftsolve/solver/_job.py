"""The job a user wants planned, validated at the boundary."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

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
from ftsolve.catalog._currency import Currency
from ftsolve.catalog._models import ModelArch
from ftsolve.solver import _coefficients as k
from ftsolve.solver._memory import MemoryOptions
from ftsolve.solver._stacks import Loss, OptimizerStep, QuantKernel, StackName

Method = Literal["full", "lora", "qlora"]
Market = Literal["on-demand", "interruptible", "fallback", "adaptive"]
Optimizer = Literal[
    "adamw", "adamw-fp32", "adamw-bf16", "adamw-8bit", "paged-adamw", "paged-adamw-8bit", "sgd", "adafactor"
]
LoraTargets = Literal["all-linear", "attention", "mlp", "qv"]
# Human units a value may carry (ftsolve._units): 50M tokens, 24h, $300.
Unit = Literal["count", "hours", "usd"]

METHODS: tuple[Method, ...] = ("full", "lora", "qlora")
MARKETS: tuple[Market, ...] = ("on-demand", "interruptible", "fallback", "adaptive")  # codes in _cost.py

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


def _cli(
    group: Literal["job", "recipe", "constraints", "policy"], *aliases: str, unit: Unit | None = None
) -> dict[str, Any]:
    """A field's metadata for the command line (and the JSON Schema): its help section, the older
    flag spellings kept as aliases, and the human unit its value may be written in (job files too)."""
    extra: dict[str, Any] = {"group": group}
    if aliases:
        extra["cli_aliases"] = list(aliases)
    if unit is not None:
        extra["unit"] = unit
    return extra


class JobSpec(BaseModel):
    """A fine-tuning job: what to train, how much, and the limits a plan must respect."""

    # Non-finite numbers are refused; every bound below is far beyond any real job, so that the
    # cost arithmetic (integer cents) stays exact and a typo is caught rather than planned.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: str | ModelArch = Field(
        title="Model",
        description="preset name (see `ftsolve models list`) or an architecture; a job file may name a config.json",
        json_schema_extra=_cli("job"),
    )
    train_tokens: int = Field(
        gt=0,
        le=10**15,
        title="Tokens to train on, all epochs",
        description="tokens to train on, all epochs together",
        json_schema_extra=_cli("job", "--tokens", unit="count"),
    )
    seq_len: int = Field(
        gt=0,
        le=1_048_576,
        title="Sequence length in tokens",
        description="sequence length in tokens",
        json_schema_extra=_cli("job"),
    )
    global_batch_size: int = Field(
        default=16,
        gt=0,
        le=1_048_576,
        title="Sequences per optimizer step",
        description="sequences per optimizer step",
        json_schema_extra=_cli("job", "--global-batch"),
    )
    methods: tuple[Method, ...] = Field(
        default=METHODS,
        title="Allowed methods",
        description="fine-tuning methods the planner may choose from",
        json_schema_extra=_cli("job"),
    )
    optimizer: Optimizer | None = Field(
        default=None,
        title="Optimizer regime",
        description="optimizer and the precision of its state (adamw: fp32 master weights and moments; "
        "adamw-bf16: a bf16 model, moments in the parameters' dtype); default: the stack's",
        json_schema_extra=_cli("recipe"),
    )
    lora_rank: int = Field(
        default=16, gt=0, le=4096, title="LoRA rank", description="LoRA rank", json_schema_extra=_cli("recipe")
    )
    lora_targets: LoraTargets = Field(
        default="all-linear",
        title="Modules LoRA adapts",
        description="the linear layers LoRA adapts",
        json_schema_extra=_cli("recipe"),
    )
    lora_dropout: float = Field(
        default=0.0,
        ge=0,
        lt=1.0,
        title="LoRA dropout",
        description="LoRA dropout (above 0 keeps a dropped copy of each adapted input)",
        json_schema_extra=_cli("recipe"),
    )
    stack: StackName = Field(
        default="hf",
        title="Training stack",
        description="training stack; its defaults (loss, adapter dtype, offload, ...) apply to the switches left unset",
        json_schema_extra=_cli("recipe"),
    )
    adapter_dtype: Literal["fp32", "bf16"] | None = Field(
        default=None,
        title="Adapter weights' dtype",
        description="adapter weights' dtype (PEFT fp32, torchtune/LitGPT bf16)",
        json_schema_extra=_cli("recipe"),
    )
    train_embeddings: bool = Field(
        default=False,
        title="Also train embeddings and lm_head",
        description="also train embed_tokens and lm_head (LoRA)",
        json_schema_extra=_cli("recipe"),
    )
    flash_attention: bool = Field(
        default=True,
        title="FlashAttention/SDPA",
        description="FlashAttention/SDPA; off means eager attention",
        json_schema_extra=_cli("recipe", "--flash"),
    )
    loss: Loss | None = Field(
        default=None,
        title="How the loss holds logits",
        description="how the loss holds logits: fp32-upcast, bf16, chunked (torchtune), fused (Liger, Unsloth)",
        json_schema_extra=_cli("recipe"),
    )
    optimizer_in_backward: bool | None = Field(
        default=None,
        title="Optimizer step in backward",
        description="optimizer step fused into backward, gradients freed at once (torchtune)",
        json_schema_extra=_cli("recipe"),
    )
    activation_offload: bool | None = Field(
        default=None,
        title="Saved activations to CPU",
        description="activations saved for backward offloaded to CPU memory (torchtune, Unsloth)",
        json_schema_extra=_cli("recipe"),
    )
    compile: bool | None = Field(
        default=None,
        title="torch.compile",
        description="torch.compile: fuses torchao's NF4 dequantization (torchtune QLoRA); no other effect modelled",
        json_schema_extra=_cli("recipe"),
    )
    optimizer_step: OptimizerStep | None = Field(
        default=None,
        title="How the AdamW step runs",
        description="fused (states updated in place) or foreach (torch AdamW's default path, which holds a copy "
        "of the second moments through the step); default: the stack's",
        json_schema_extra=_cli("recipe"),
    )
    kbit_upcast: bool | None = Field(
        default=None,
        title="prepare_model_for_kbit_training",
        description="QLoRA/int8 on bitsandbytes: PEFT's prepare_model_for_kbit_training casts embeddings, lm_head and "
        "norms to fp32 (TRL's SFTTrainer runs it); default: the stack's",
        json_schema_extra=_cli("recipe"),
    )
    variable_length: bool = Field(
        default=False,
        title="Batches of varying length",
        description="batches padded to their longest sample (not packed): the allocator fragments",
        json_schema_extra=_cli("recipe"),
    )
    deepspeed_bucket_elements: int | None = Field(
        default=None,
        gt=0,
        title="DeepSpeed reduce_bucket_size",
        description='elements per DeepSpeed reduce bucket; default "auto" (hidden_size**2), as exports write it',
        json_schema_extra=_cli("recipe"),
    )
    offload_optimizer: bool = Field(
        default=False,
        title="Optimizer state in CPU memory",
        description="optimizer state in CPU memory (ZeRO-Offload)",
        json_schema_extra=_cli("recipe"),
    )
    offload_params: bool = Field(
        default=False,
        title="Parameters and gradients in CPU memory",
        description="FSDP CPU offload of parameters and gradients",
        json_schema_extra=_cli("recipe"),
    )
    fsdp_version: int | None = Field(
        default=None,
        ge=1,
        le=2,
        title="FSDP version",
        description="2: fully_shard, as exports configure it; 1: FullyShardedDataParallel, whose CPU offload "
        "keeps every gradient shard on the GPU until backward ends; default: the stack's (2; litgpt 1)",
        json_schema_extra=_cli("recipe"),
    )
    fsdp_fp32_params: bool | None = Field(
        default=None,
        title="FSDP flat parameters in fp32",
        description="FSDP holds the trainable parameters, and their gradients, in fp32 as accelerate's mixed "
        "precision does; off: in the model's dtype (a plain FSDP loop over a bf16 model); priced for the "
        "gradient shards FSDP1's CPU offload keeps (an fp32 master elsewhere is the stack's); default: the "
        "stack's (on; litgpt, torchtune off)",
        json_schema_extra=_cli("recipe"),
    )
    quant_kernel: QuantKernel | None = Field(
        default=None,
        title="Kernel of an int8/NF4 base",
        description="kernel of an int8/NF4 base: bitsandbytes, a GPTQ checkpoint, or torchao's NF4; "
        "default: the stack's (torchtune: torchao)",
        json_schema_extra=_cli("recipe"),
    )
    double_quant: bool = Field(
        default=True,
        title="NF4 double quantization",
        description="QLoRA double quantization of the NF4 constants",
        json_schema_extra=_cli("recipe"),
    )
    quantized_head: bool | None = Field(
        default=None,
        title="Quantize lm_head too",
        description="quantize lm_head with the layers (LitGPT does, others do not)",
        json_schema_extra=_cli("recipe", "--quantize-head"),
    )
    memory_margin: float | None = Field(
        default=None,
        ge=0,
        le=1.0,
        title="Memory headroom over the predicted peak",
        description="headroom kept above the predicted peak, as a share of it (default: the estimate's "
        "validated band for the method and stack, e.g. 0.27 for LoRA on hf)",
        json_schema_extra=_cli("policy"),
    )
    calibration: bool = Field(
        default=True,
        title="Use your calibrations",
        description="correct tokens/s and activation memory with your measured runs (`ftsolve calibrate`, "
        "$FTSOLVE_HOME/calibration.json); off plans on the model alone",
        json_schema_extra=_cli("policy"),
    )
    batch_tolerance: float = Field(
        default=0.0,
        ge=0,
        le=1.0,
        title="Allowed excess of the effective global batch",
        description="how far micro-batch x accumulation x GPUs may exceed the requested global batch "
        "(0: exactly the requested batch)",
        json_schema_extra=_cli("policy"),
    )
    tie_tolerance: float = Field(
        default=0.03,
        ge=0,
        le=0.5,
        title="Cost tolerance of the plan preferences",
        description="within this share of cost, prefer LoRA over QLoRA, one node over several and "
        "on-demand over interruptible capacity (each preference counts as this much extra cost)",
        json_schema_extra=_cli("policy"),
    )
    allow_floor_prices: bool = Field(
        default=False,
        title="Plan on 'from' (floor) prices",
        description="also plan on prices a provider states only as a floor ('from 0.99 USD/h')",
        json_schema_extra=_cli("policy"),
    )
    deadline_hours: float | None = Field(
        default=None,
        gt=0,
        le=87_600,
        title="Deadline",
        description="finish within this many hours (at most 10 years)",
        json_schema_extra=_cli("constraints", "--deadline", unit="hours"),
    )
    budget_usd: float | None = Field(
        default=None,
        gt=0,
        le=1e9,
        title="Budget in USD",
        description="most the job may cost in US dollars, all items together",
        json_schema_extra=_cli("constraints", "--budget", unit="usd"),
    )
    deadline_confidence: float = Field(
        default=0.9,
        ge=0.5,
        lt=1.0,
        title="Chance the deadline holds",
        description="probability with which the deadline must hold",
        json_schema_extra=_cli("constraints", "--confidence"),
    )
    budget_confidence: float | None = Field(
        default=None,
        ge=0.5,
        lt=1.0,
        title="Chance the budget holds",
        description="judge the budget at this quantile of the cost instead of its expected value",
        json_schema_extra=_cli("policy"),
    )
    currency: Currency = Field(
        default="USD",
        title="Currency costs are shown in",
        description="USD, EUR or GBP, converted at the newest bundled ECB rate (budgets you give stay in USD)",
        json_schema_extra=_cli("policy"),
    )
    objective: Literal["cost", "time", "weighted"] = Field(
        default="cost",
        title="What to minimise: cost, time, weighted",
        description="minimum expected cost, minimum time within the budget, or cost + value of time",
        json_schema_extra=_cli("constraints"),
    )
    time_value_usd_per_hour: float = Field(
        default=0.0,
        ge=0,
        le=1e6,
        title="USD per hour of earlier finish",
        description="for objective 'weighted': what an hour of earlier finish is worth",
        json_schema_extra=_cli("constraints", "--time-value"),
    )
    markets: tuple[Market, ...] = Field(
        default=MARKETS,
        title="Allowed markets",
        description="capacity markets the planner may use",
        json_schema_extra=_cli("constraints"),
    )
    providers: tuple[str, ...] | None = Field(
        default=None,
        title="Allowed providers",
        description="only offers from these providers (default: any)",
        json_schema_extra=_cli("constraints", "--provider"),
    )
    regions: tuple[str, ...] | None = Field(
        default=None,
        title="Allowed regions",
        description="only offers in these regions (default: any)",
        json_schema_extra=_cli("constraints", "--region"),
    )
    countries: tuple[str, ...] | None = Field(
        default=None,
        title="Allowed ISO country codes",
        description="only offers in these countries, ISO codes like DE or US (default: any)",
        json_schema_extra=_cli("constraints", "--country"),
    )
    eu_only: bool = Field(
        default=False,
        title="Only EU/EEA offers",
        description="only offers in EU/EEA countries (GDPR residency)",
        json_schema_extra=_cli("constraints"),
    )
    gpus: tuple[str, ...] | None = Field(
        default=None,
        title="Allowed GPU ids",
        description="allowed canonical GPU ids like h100-sxm or l40s (default: any)",
        json_schema_extra=_cli("constraints", "--gpu"),
    )
    max_gpus: int = Field(
        default=64,
        gt=0,
        le=4096,
        title="Most GPUs",
        description="most GPUs a run may use",
        json_schema_extra=_cli("constraints"),
    )
    max_nodes: int = Field(
        default=4,
        gt=0,
        le=512,
        title="Most nodes",
        description="most nodes a run may span",
        json_schema_extra=_cli("constraints"),
    )
    gpu_quota: dict[str, Annotated[int, Field(ge=0, le=1_000_000)]] | None = Field(
        default=None,
        title="GPU quotas by provider",
        description="most GPUs you may hold at once, by provider (e.g. {'aws': 8})",
        json_schema_extra=_cli("constraints", "--quota"),
    )
    real_token_fraction: float = Field(
        default=1.0,
        ge=0.01,
        le=1.0,
        title="Share of real tokens",
        description="share of real (non-padding) tokens; 1.0 when packed",
        json_schema_extra=_cli("policy"),
    )
    eval_fraction: float = Field(
        default=0.0,
        ge=0,
        le=10.0,
        title="Evaluation tokens per training token",
        description="evaluation tokens as a share of training tokens (forward only)",
        json_schema_extra=_cli("policy"),
    )
    early_stop_patience: int | None = Field(
        default=None,
        gt=0,
        le=10_000,
        title="Evaluations without improvement before stopping",
        description="stop when the evaluation loss has not improved for this many evaluations (exports only; "
        "the plan still prices the whole token budget)",
        json_schema_extra=_cli("policy"),
    )
    host_speed: float = Field(
        default=1.0,
        gt=k.HOST_SPEED_BOUNDS[0],
        le=k.HOST_SPEED_BOUNDS[1],
        title="Host CPU single-thread speed",
        description=f"single-thread speed of the training host's CPU relative to an {k.REFERENCE_HOST} (a "
        "datacenter A100 host); the per-layer launch overhead scales with its inverse (a Ryzen 9 7950X desktop: 2.25)",
        json_schema_extra=_cli("policy"),
    )
    download_mb_per_s: float = Field(
        default=200.0,
        ge=0.01,
        le=1e6,
        title="Model download MB/s",
        description="base-model download bandwidth (10 kB/s to 1 TB/s)",
        json_schema_extra=_cli("policy"),
    )
    dataset_gb: float = Field(
        default=1.0,
        ge=0,
        le=1e6,
        title="Dataset size in GB",
        description="dataset size in GB, kept on the run's volume",
        json_schema_extra=_cli("policy"),
    )
    retention_days: float = Field(
        default=7.0,
        ge=0,
        le=3650,
        title="Days volumes are kept",
        description="days volumes are kept after the run",
        json_schema_extra=_cli("policy"),
    )
    trial_runs: int = Field(
        default=0,
        ge=0,
        le=1000,
        title="Trial runs before the final run",
        description="short trial runs before the final run",
        json_schema_extra=_cli("policy", "--trials"),
    )
    trial_fraction: float = Field(
        default=0.05,
        gt=0,
        le=1.0,
        title="Data share per trial",
        description="share of the data each trial uses",
        json_schema_extra=_cli("policy"),
    )
    failure_probability: float = Field(
        default=0.0,
        ge=0,
        lt=1.0,
        title="Chance a run fails and restarts",
        description="probability a run fails (bug, divergence) and is restarted",
        json_schema_extra=_cli("policy", "--failure-prob"),
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
        self.memory_options()  # the recipe's own rules (a stack that cannot run an FSDP version)
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
            fsdp_version=self.fsdp_version,
            fsdp_fp32_params=self.fsdp_fp32_params,
            double_quant=self.double_quant,
            quantized_head=self.quantized_head,
            optimizer_in_backward=self.optimizer_in_backward,
            activation_offload=self.activation_offload,
            compile=self.compile,
            optimizer_step=self.optimizer_step,
            kbit_upcast=self.kbit_upcast,
            variable_length=self.variable_length,
            quant_kernel=self.quant_kernel,
            deepspeed_bucket_elements=self.deepspeed_bucket_elements,
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
