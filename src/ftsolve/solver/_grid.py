"""The candidate table: every (offer, node count, training configuration, market) with its
estimates and one feasibility mask per named constraint.

Physics (memory, throughput) depends only on the hardware and the training configuration, so it
is computed once per unique (GPU type, GPU count, node layout) × configuration and gathered to
offers; prices, start-up and preemption risk are then computed per offer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog._load import Catalog
from ftsolve.catalog._models import GpuSpec, ModelArch, Offer
from ftsolve.catalog._providers import FALLBACK_STORAGE_USD_PER_GB_MONTH, provider_defaults
from ftsolve.solver import _coefficients as k
from ftsolve.solver._cost import FALLBACK, OD, SPOT, RunInputs, price_runs
from ftsolve.solver._job import EEA_COUNTRIES, MARKETS, METHODS, JobSpec
from ftsolve.solver._memory import (
    DDP,
    FULL,
    LORA,
    NONE,
    Q4,
    Q8,
    Q16,
    QLORA,
    ZERO1,
    ZERO2,
    ZERO3,
    ModelSizes,
    base_weight_bytes,
    max_micro_batch,
    memory_terms,
)
from ftsolve.solver._throughput import flops_per_token, intra_node_bus_gb_per_s, step_time, utilization

F = NDArray[np.float64]
I = NDArray[np.int64]
B = NDArray[np.bool_]

# Training configurations: (method, base quantization, sharding, gradient checkpointing).
# int8 LoRA is not offered with ZeRO-3 (bitsandbytes int8 cannot be FSDP-sharded), and
# ZeRO-1/2 only shard optimizer state and gradients, which adapters barely have.
_CONFIGS: list[tuple[int, int, int, int]] = []
for _m, _q, _shards in (
    (FULL, Q16, (NONE, DDP, ZERO1, ZERO2, ZERO3)),
    (LORA, Q16, (NONE, DDP, ZERO3)),
    (LORA, Q8, (NONE, DDP)),
    (QLORA, Q4, (NONE, DDP, ZERO3)),
):
    for _s in _shards:
        for _c in (0, 1):
            _CONFIGS.append((_m, _q, _s, _c))
CONFIGS: NDArray[np.int64] = np.array(_CONFIGS, dtype=np.int64)
CONSTRAINTS = ("compatibility", "memory", "deadline", "budget")


def resolve_model(job: JobSpec, catalog: Catalog) -> ModelArch:
    return job.model if isinstance(job.model, ModelArch) else catalog.model(job.model)


@dataclass(frozen=True)
class ScopeReport:
    """How many offers the user's filters kept, for explanations."""

    offers_total: int
    offers_in_scope: int
    removed_by: dict[str, int]


@dataclass
class CandidateTable:
    """Flat arrays, one entry per candidate. Built by `build_candidates`; read-only after."""

    offers: list[Offer]
    gpu_specs: Mapping[str, GpuSpec]
    arch: ModelArch
    sizes: ModelSizes
    scope: ScopeReport
    offer_idx: I
    nodes: I
    n_gpus: I
    cfg: I
    market: I
    micro_batch: I
    grad_accum: I
    memory_static_gib: dict[str, F]
    memory_dynamic_gib: dict[str, F]
    peak_gib: F
    usable_gib: F
    tokens_per_s: F
    step_s: F
    exposed_comm_s: F
    train_hours: F
    eval_hours: F
    startup_hours: F
    checkpoint_hours: F
    rework_hours: F
    expected_hours: F
    quantile_hours: F
    tau_hours: F
    spot_fraction: F
    interruption_rate_per_hour: F
    price_usd_per_gpu_hour: F
    cost_items_cents: dict[str, I]
    total_cents: I
    masks: dict[str, B]
    tie_rank: I
    group: I
    assumptions: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.offer_idx.shape[0])

    @property
    def method(self) -> I:
        out: I = CONFIGS[self.cfg, 0]
        return out

    @property
    def quant(self) -> I:
        out: I = CONFIGS[self.cfg, 1]
        return out

    @property
    def shard(self) -> I:
        out: I = CONFIGS[self.cfg, 2]
        return out

    @property
    def ckpt(self) -> I:
        out: I = CONFIGS[self.cfg, 3]
        return out

    def feasible(self, ignore: tuple[str, ...] = ()) -> B:
        out = np.ones(len(self), dtype=bool)
        for name, mask in self.masks.items():
            if name not in ignore:
                out &= mask
        return out


def _in_scope(job: JobSpec, catalog: Catalog) -> tuple[list[Offer], ScopeReport]:
    removed: dict[str, int] = {}
    kept = list(catalog.offers)

    def keep(name: str, pred: object) -> None:
        nonlocal kept
        before = len(kept)
        kept = [o for o in kept if pred(o)]  # type: ignore[operator]
        if before != len(kept):
            removed[name] = before - len(kept)

    if job.providers is not None:
        allowed = {p.lower() for p in job.providers}
        keep("providers", lambda o: o.provider.lower() in allowed)
    if job.regions is not None:
        regions = {r.lower() for r in job.regions}
        keep("regions", lambda o: o.region.lower() in regions)
    if job.countries is not None:
        countries = set(job.countries)
        keep("countries", lambda o: (o.country or "") in countries)
    if job.eu_only:
        keep("eu_only", lambda o: (o.country or "") in EEA_COUNTRIES)
    if job.gpus is not None:
        gpus = set(job.gpus)
        keep("gpus", lambda o: o.gpu in gpus)
    markets = set(job.markets)
    keep(
        "markets",
        lambda o: (
            ("on-demand" in markets and o.on_demand_usd_per_gpu_hour is not None)
            or ("interruptible" in markets and o.interruptible_usd_per_gpu_hour is not None)
            or (
                "fallback" in markets
                and None not in (o.on_demand_usd_per_gpu_hour, o.interruptible_usd_per_gpu_hour)
            )
        ),
    )
    keep("max_gpus", lambda o: o.gpus_per_node <= job.max_gpus)
    return kept, ScopeReport(len(catalog.offers), len(kept), removed)


def build_candidates(job: JobSpec, catalog: Catalog) -> CandidateTable:
    """Score every candidate of the job against the catalog."""
    arch = resolve_model(job, catalog)
    sizes = ModelSizes.of(arch, job.lora_rank, job.lora_targets)
    offers, scope = _in_scope(job, catalog)
    assumptions: list[str] = []

    # --- offer rows: one per (offer, node count) ------------------------------------------
    row_offer, row_nodes = [], []
    for i, o in enumerate(offers):
        for nodes in range(1, job.max_nodes + 1):
            if nodes * o.gpus_per_node > job.max_gpus:
                break
            row_offer.append(i)
            row_nodes.append(nodes)
    r_offer = np.array(row_offer, dtype=np.int64)
    r_nodes = np.array(row_nodes, dtype=np.int64)
    gpn = np.array([o.gpus_per_node for o in offers], dtype=np.int64)[r_offer] if offers else r_offer
    r_n = gpn * r_nodes

    # --- hardware keys ---------------------------------------------------------------------
    gpu_names = sorted({o.gpu for o in offers})
    gpu_id = {g: j for j, g in enumerate(gpu_names)}
    net_gbit = np.array([_inter_node_gbit(o) for o in offers], dtype=np.float64)
    r_gpu = np.array([gpu_id[offers[i].gpu] for i in row_offer], dtype=np.int64)
    r_net = net_gbit[r_offer] if row_offer else np.zeros(0)
    hw_key = (
        np.stack([r_gpu, r_n, r_nodes, r_net.astype(np.int64)], axis=1)
        if row_offer
        else np.zeros((0, 4), np.int64)
    )
    hw, r_hw = np.unique(hw_key, axis=0, return_inverse=True)
    r_hw = r_hw.reshape(-1)
    h_gpu = [catalog.gpus[gpu_names[g]] for g in hw[:, 0]]
    h_n, h_nodes, h_net = hw[:, 1], hw[:, 2], hw[:, 3].astype(np.float64)

    # --- (hardware, config) pairs ----------------------------------------------------------
    allowed_methods = np.array([METHODS.index(m) for m in job.methods])
    cm, cq, cs, cc = CONFIGS.T
    H, T = len(hw), len(CONFIGS)
    hn = h_n[:, None]
    structural = np.isin(cm, allowed_methods)[None, :] & (
        ((hn == 1) & (cs == NONE)) | ((hn > 1) & (cs != NONE))
    )
    nvidia = np.array([g.vendor == "nvidia" for g in h_gpu], dtype=bool)[:, None]
    has_peak = np.array(
        [g.tensor_tflops is not None and g.memory_bandwidth_gb_per_s is not None for g in h_gpu], dtype=bool
    )[:, None]
    compat = has_peak & (nvidia | (cq == Q16)[None, :])
    hi, ti = np.nonzero(structural)
    p_method, p_quant, p_shard, p_ckpt = cm[ti], cq[ti], cs[ti], cc[ti]
    p_n = h_n[hi]
    card_gib = np.array([g.memory_gib for g in h_gpu], dtype=np.float64)[hi]
    usable = card_gib * k.USABLE_MEMORY_FRACTION.value * k.GIB

    terms = memory_terms(sizes, job.memory_options(), job.seq_len, p_method, p_quant, p_shard, p_ckpt, p_n)
    per_rank_batch = np.ceil(job.global_batch_size / p_n).astype(np.int64)
    b = max_micro_batch(terms, usable, np.minimum(per_rank_batch, 64))
    fits = b >= 1
    b_eval = np.maximum(b, 1)
    accum = np.ceil(job.global_batch_size / (b_eval * p_n)).astype(np.int64)
    peak = terms.peak_bytes(b_eval)

    peak_tflops = np.array([g.tensor_tflops or 1.0 for g in h_gpu], dtype=np.float64)[hi]
    util = np.array([utilization(g).value for g in h_gpu], dtype=np.float64)[hi]
    mem_bw = np.array([g.memory_bandwidth_gb_per_s or 1.0 for g in h_gpu], dtype=np.float64)[hi]
    intra = np.array([intra_node_bus_gb_per_s(g) for g in h_gpu], dtype=np.float64)
    inter = h_net * k.INTER_NODE_EFFICIENCY.value / 8.0
    bus = np.where(h_nodes > 1, np.minimum(intra, inter), intra)[hi]
    opt_bytes = terms.static["optimizer"] + terms.static["gradients"] + terms.static["weights"]
    st = step_time(
        sizes,
        job.seq_len,
        opt_bytes,
        p_method,
        p_quant,
        p_shard,
        p_ckpt,
        p_n,
        b_eval,
        accum,
        peak_tflops,
        util,
        mem_bw,
        bus,
    )
    processed_tokens = job.train_tokens / job.real_token_fraction
    train_h = processed_tokens / st.tokens_per_s / 3600.0
    # Evaluation passes run the forward alone over eval_fraction of the training tokens.
    total_flops = flops_per_token(sizes, job.seq_len, p_method, p_ckpt)
    fwd_flops = flops_per_token(sizes, job.seq_len, p_method, np.zeros_like(p_ckpt)) / np.where(
        p_method == FULL, 3.0, 2.0
    )
    eval_h = train_h * job.eval_fraction * fwd_flops / total_flops

    pair_index = np.full((H, T), -1, dtype=np.int64)
    pair_index[hi, ti] = np.arange(hi.shape[0])

    # --- candidates: offer rows × configs × markets ----------------------------------------
    rr, tt = np.nonzero(pair_index[r_hw] >= 0)
    pp = pair_index[r_hw[rr], tt]
    od = np.array([o.on_demand_usd_per_gpu_hour or np.nan for o in offers], dtype=np.float64)
    spot = np.array([o.interruptible_usd_per_gpu_hour or np.nan for o in offers], dtype=np.float64)
    cand_r, cand_p, cand_mk = [], [], []
    for mk in range(len(MARKETS)):
        if MARKETS[mk] not in job.markets:
            continue
        if mk == FALLBACK and job.deadline_hours is None:
            continue  # without a deadline, interruptible alone is the cheaper way to use slack
        need = [od] if mk == OD else [spot] if mk == SPOT else [od, spot]
        ok = np.logical_and.reduce([~np.isnan(t[r_offer[rr]]) for t in need])
        cand_r.append(rr[ok])
        cand_p.append(pp[ok])
        cand_mk.append(np.full(int(ok.sum()), mk, dtype=np.int64))
    c_r = np.concatenate(cand_r) if cand_r else np.zeros(0, np.int64)
    c_p = np.concatenate(cand_p) if cand_p else np.zeros(0, np.int64)
    c_mk = np.concatenate(cand_mk) if cand_mk else np.zeros(0, np.int64)
    c_offer = r_offer[c_r]
    c_nodes = r_nodes[c_r]
    c_n = r_n[c_r]
    c_cfg = ti[c_p]
    c_price = np.where(c_mk == SPOT, spot[c_offer], od[c_offer])

    # --- time and cost per candidate ------------------------------------------------------
    defaults = [provider_defaults(o.provider) for o in offers]

    def per_offer(values: list[float]) -> F:
        out: F = np.array(values, dtype=np.float64)[c_offer]
        return out

    prov_h = per_offer([d.provisioning_minutes / 60.0 for d in defaults])
    lam_offer = per_offer(
        [
            o.interruption_rate_per_hour
            if o.interruption_rate_per_hour is not None
            else d.interruption_rate_per_hour
            for o, d in zip(offers, defaults, strict=True)
        ]
    )
    storage_price = per_offer(
        [
            o.storage_usd_per_gb_month or d.storage_usd_per_gb_month or FALLBACK_STORAGE_USD_PER_GB_MONTH
            for o, d in zip(offers, defaults, strict=True)
        ]
    )
    egress_price = per_offer([d.egress_usd_per_gb for d in defaults])
    billing = np.array([o.billing for o in offers], dtype=object)[c_offer]
    method_c = cm[c_cfg]
    quant_c = cq[c_cfg]
    model_bytes_16 = sizes.total_params * 2.0
    download_h = model_bytes_16 / (job.download_mb_per_s * 1e6) / 3600.0
    load_h = base_weight_bytes(sizes, method_c, quant_c) / (k.LOAD_GB_PER_S.value * 1e9) / 3600.0
    env_h = k.ENVIRONMENT_SETUP_MINUTES.value / 60.0
    startup_h = prov_h + env_h + download_h + load_h
    ckpt_bytes = np.where(
        method_c == FULL,
        sizes.total_params * k.FULL_CHECKPOINT_BYTES_PER_PARAM.value,
        sizes.lora_params * k.LORA_CHECKPOINT_BYTES_PER_PARAM.value,
    )
    final_bytes = np.where(method_c == FULL, model_bytes_16, sizes.lora_params * 2.0)
    write_bps = k.CHECKPOINT_WRITE_GB_PER_S.value * 1e9
    work_h = train_h[c_p] + eval_h[c_p]
    runs = RunInputs(
        market=c_mk,
        work_h=work_h,
        startup_h=startup_h,
        restart_h=startup_h + ckpt_bytes / (k.LOAD_GB_PER_S.value * 1e9) / 3600.0,
        ckpt_write_h=ckpt_bytes / write_bps / 3600.0,
        final_save_h=final_bytes / write_bps / 3600.0,
        rate=lam_offer * c_nodes,  # losing any node restarts the whole job
        od_usd_per_h=od[c_offer] * c_n,
        spot_usd_per_h=spot[c_offer] * c_n,
        per_hour_billing=billing == "per-hour",
        per_minute_billing=billing == "per-minute",
        storage_usd_per_gb_month=storage_price,
        volume_gb=job.dataset_gb + model_bytes_16 / 1e9 + 2 * ckpt_bytes / 1e9,
        egress_usd_per_gb=egress_price,
        output_gb=final_bytes / 1e9,
    )
    costs = price_runs(
        runs,
        job.deadline_confidence,
        job.deadline_hours,
        job.trial_runs,
        job.trial_fraction,
        job.failure_probability,
        job.retention_days,
    )
    total = costs.total_cents
    expected_h, quantile_h = costs.expected_hours, costs.quantile_hours

    # --- constraint masks -----------------------------------------------------------------
    masks = {
        "compatibility": compat[hi[c_p], ti[c_p]],
        "memory": fits[c_p],
        "deadline": quantile_h <= job.deadline_hours
        if job.deadline_hours is not None
        else np.ones(len(c_r), bool),
        "budget": total <= math.floor(job.budget_usd * 100 + 1e-6)
        if job.budget_usd is not None
        else np.ones(len(c_r), bool),
    }
    tie = np.lexsort((c_cfg, c_offer, c_mk, c_n))
    tie_rank = np.empty_like(tie)
    tie_rank[tie] = np.arange(tie.shape[0])
    gpu_of_offer = np.array([gpu_id[o.gpu] for o in offers], dtype=np.int64)
    group_key = (gpu_of_offer[c_offer] * 3 + cm[c_cfg]) * len(MARKETS) + c_mk
    _, group = np.unique(group_key, return_inverse=True)

    def gib(d: dict[str, F]) -> dict[str, F]:
        return {name: v[c_p] / k.GIB for name, v in d.items()}

    dyn = {name: v * b_eval * (1.0 + k.DYNAMIC_MARGIN.value) for name, v in terms.per_sample.items()}
    return CandidateTable(
        offers=offers,
        gpu_specs=catalog.gpus,
        arch=arch,
        sizes=sizes,
        scope=scope,
        offer_idx=c_offer,
        nodes=c_nodes,
        n_gpus=c_n,
        cfg=c_cfg,
        market=c_mk,
        micro_batch=b[c_p],
        grad_accum=accum[c_p],
        memory_static_gib=gib(terms.static),
        memory_dynamic_gib=gib(dyn),
        peak_gib=peak[c_p] / k.GIB,
        usable_gib=usable[c_p] / k.GIB,
        tokens_per_s=st.tokens_per_s[c_p],
        step_s=st.step_s[c_p],
        exposed_comm_s=st.exposed_comm_s[c_p],
        train_hours=train_h[c_p],
        eval_hours=eval_h[c_p],
        startup_hours=startup_h,
        checkpoint_hours=costs.checkpoint_hours,
        rework_hours=costs.rework_hours,
        expected_hours=expected_h,
        quantile_hours=quantile_h,
        tau_hours=costs.checkpoint_interval_h,
        spot_fraction=costs.spot_fraction,
        interruption_rate_per_hour=np.where(c_mk != OD, runs.rate, 0.0),
        price_usd_per_gpu_hour=c_price,
        cost_items_cents=costs.items_cents,
        total_cents=total.astype(np.int64),
        masks=masks,
        tie_rank=tie_rank,
        group=group.reshape(-1).astype(np.int64),
        assumptions=assumptions,
    )


def _inter_node_gbit(o: Offer) -> float:
    net = provider_defaults(o.provider).inter_node_gbit_per_s
    return float(net if net is not None else k.DEFAULT_INTER_NODE_GBIT.value)
