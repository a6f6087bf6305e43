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
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog._arrays import BILLING_CODES, OfferArrays
from ftsolve.catalog._load import Catalog
from ftsolve.catalog._models import GpuSpec, ModelArch, Offer
from ftsolve.solver import _coefficients as k
from ftsolve.solver._cost import FALLBACK, OD, SPOT, RunCosts, RunInputs, bounded, price_runs
from ftsolve.solver._estimate import resolve_arch
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
    unsharded_gradient_bytes,
)
from ftsolve.solver._rows import dense_labels, order_by, unique_rows
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
CONSTRAINTS = ("compatibility", "quota", "memory", "bounded", "deadline", "budget")


def resolve_model(job: JobSpec, catalog: Catalog) -> ModelArch:
    """The job's architecture: given, a preset, or a config.json path (as estimates resolve it)."""
    return resolve_arch(job.model, catalog)[0]


@dataclass(frozen=True)
class ScopeReport:
    """How many offers the user's filters kept, for explanations."""

    offers_total: int
    offers_in_scope: int
    removed_by: dict[str, int]


@dataclass
class CandidateTable:
    """Flat arrays, one entry per candidate. Built by `build_candidates`; read-only after."""

    offers: tuple[Offer, ...]
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
    pair: I  # the candidate's (hardware, configuration) pair: memory depends on nothing else
    pair_memory_gib: dict[str, F]  # memory components per pair: static parts, then dynamic incl. margin
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

    def memory_gib(self, i: int) -> dict[str, float]:
        """Candidate i's memory per GPU by component (they sum to its peak)."""
        p = int(self.pair[i])
        return {name: float(v[p]) for name, v in self.pair_memory_gib.items()}

    @cached_property
    def method(self) -> I:
        out: I = CONFIGS[self.cfg, 0]
        return out

    @cached_property
    def quant(self) -> I:
        out: I = CONFIGS[self.cfg, 1]
        return out

    @cached_property
    def shard(self) -> I:
        out: I = CONFIGS[self.cfg, 2]
        return out

    @cached_property
    def ckpt(self) -> I:
        out: I = CONFIGS[self.cfg, 3]
        return out

    def feasible(self, ignore: tuple[str, ...] = ()) -> B:
        out = np.ones(len(self), dtype=bool)
        for name, mask in self.masks.items():
            if name not in ignore:
                out &= mask
        return out


def _scope(job: JobSpec, catalog: Catalog) -> tuple[NDArray[np.bool_], ScopeReport]:
    """Offers that pass the user's filters, and how many each filter removed."""
    arr = catalog.arrays
    keep = np.ones(len(catalog.offers), dtype=bool)
    removed: dict[str, int] = {}

    def apply(name: str, mask: NDArray[np.bool_]) -> None:
        nonlocal keep
        after = keep & mask
        if int(keep.sum()) != int(after.sum()):
            removed[name] = int(keep.sum() - after.sum())
        keep = after

    if job.providers is not None:
        apply("providers", np.isin(arr.provider, [p.lower() for p in job.providers]))
    if job.regions is not None:
        apply("regions", np.isin(arr.region, [r.lower() for r in job.regions]))
    if job.countries is not None:
        apply("countries", np.isin(arr.country, list(job.countries)))
    if job.eu_only:
        apply("eu_only", np.isin(arr.country, sorted(EEA_COUNTRIES)))
    if job.gpus is not None:
        apply("gpus", np.isin(arr.gpu, list(job.gpus)))
    has_od, has_spot = ~np.isnan(arr.on_demand), ~np.isnan(arr.interruptible)
    markets = set(job.markets)
    apply(
        "markets",
        (has_od & ("on-demand" in markets))
        | (has_spot & ("interruptible" in markets))
        | (has_od & has_spot & ("fallback" in markets)),
    )
    apply("max_gpus", arr.gpus_per_node <= job.max_gpus)
    return keep, ScopeReport(len(catalog.offers), int(keep.sum()), removed)


def _pareto_per_group(ids: I, group: I, od: F, spot: F) -> I:
    """Offers not dominated (both prices higher or equal) by another offer of their group."""
    order = np.lexsort((ids, spot, od, group))
    g, s_ = group[order], spot[order]
    # Earlier groups get larger offsets so that a running minimum never leaks into the next group.
    shifted = s_ - g * (float(np.nanmax(spot)) + 1.0) * 2.0
    running = np.minimum.accumulate(shifted)
    keep = np.ones(ids.size, dtype=bool)
    keep[1:] = (shifted[1:] < running[:-1]) | (g[1:] != g[:-1])
    out: I = np.sort(ids[order][keep])
    return out


def _market_rows(job: JobSpec, catalog: Catalog, scope: NDArray[np.bool_], gid: I, prune: bool) -> tuple[I, I]:
    """(offer index, market) pairs to score. With `prune`, offers that cannot beat a cheaper twin
    (same GPU, node size and provider facts; only the price differs) are dropped: expected cost
    never falls when the price rises, and the cheaper twin also wins ties on catalog order."""
    arr = catalog.arrays
    offer_ids, market_ids = [], []
    for mk, name in enumerate(MARKETS):
        if name not in job.markets:
            continue
        if mk == FALLBACK and job.deadline_hours is None and "interruptible" in job.markets:
            continue  # without a deadline, interruptible alone is the cheaper way to use slack
        od_ok, spot_ok = ~np.isnan(arr.on_demand), ~np.isnan(arr.interruptible)
        valid = scope & (od_ok if mk == OD else spot_ok if mk == SPOT else od_ok & spot_ok)
        ids = np.nonzero(valid)[0]
        if prune and ids.size:
            group = unique_rows(
                np.stack([gid[ids], arr.gpus_per_node[ids], arr.profile[ids]], axis=1).astype(np.float64)
            )[1]
            if mk == FALLBACK:
                ids = _pareto_per_group(ids, group, arr.on_demand[ids], arr.interruptible[ids])
            else:
                price = (arr.on_demand if mk == OD else arr.interruptible)[ids]
                order = np.lexsort((ids, price, group))
                first = np.ones(ids.size, dtype=bool)
                first[1:] = group[order][1:] != group[order][:-1]
                ids = np.sort(ids[order][first])
        offer_ids.append(ids)
        market_ids.append(np.full(ids.size, mk, dtype=np.int64))
    if not offer_ids:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(offer_ids), np.concatenate(market_ids)


def launchable_node_counts(max_nodes: int) -> I:
    """Node counts to consider: every count up to 8, then 2^k and 3·2^(k-1) (12, 16, 24, 32, ...).

    Clusters are booked and sharded in such sizes (data-parallel groups and global batches divide
    them); a plan on 11 or 13 nodes is never much better than one on 12, and scoring every count up
    to 512 nodes would make the table grow with the cap rather than with the choices that matter.
    """
    small = np.arange(1, min(max_nodes, 8) + 1)
    powers = 2 ** np.arange(3, 20)
    large = np.union1d(powers, 3 * powers // 2)
    out: I = np.union1d(small, large[large <= max_nodes]).astype(np.int64)
    return out


def build_candidates(job: JobSpec, catalog: Catalog, *, prune: bool = True) -> CandidateTable:
    """Score every candidate of the job against the catalog.

    With `prune` (the default), offers dominated by a cheaper identical twin are not scored; the
    ranked plans are the same either way (see _market_rows), the candidate counts smaller.
    """
    arch = resolve_model(job, catalog)
    opts = job.memory_options()
    sizes = ModelSizes.of(arch, job.lora_rank, job.lora_targets, opts.framework)
    arr = catalog.arrays
    scope_mask, scope = _scope(job, catalog)
    gpu_names = sorted(set(arr.gpu[scope_mask].tolist()))
    names_arr = np.array(gpu_names, dtype=str)
    gid = np.searchsorted(names_arr, arr.gpu) if gpu_names else np.zeros(len(catalog.offers), np.int64)
    gid = np.where(scope_mask, gid, -1).astype(np.int64)
    m_offer, m_market = _market_rows(job, catalog, scope_mask, gid, prune)
    assumptions: list[str] = []

    # --- rows: (offer, market, node count) ------------------------------------------------
    node_counts = launchable_node_counts(job.max_nodes)
    gpn_m = arr.gpus_per_node[m_offer]
    ok = node_counts[None, :] * gpn_m[:, None] <= job.max_gpus
    mi, ni = np.nonzero(ok)
    r_offer, r_market, r_nodes = m_offer[mi], m_market[mi], node_counts[ni]
    r_n = arr.gpus_per_node[r_offer] * r_nodes

    # --- hardware keys ---------------------------------------------------------------------
    r_gpu = gid[r_offer]
    r_net = arr.inter_node_gbit[r_offer]
    hw_key = (
        np.stack([r_gpu, r_n, r_nodes, r_net.astype(np.int64)], axis=1) if r_offer.size else np.zeros((0, 4), np.int64)
    )
    hw_first, r_hw = unique_rows(hw_key.astype(np.float64))
    hw = hw_key[hw_first]
    # Per-GPU facts once per GPU type, then spread to the hardware keys.
    specs = [catalog.gpus[name] for name in gpu_names]
    h_g = hw[:, 0]

    def per_gpu(values: list[Any], dtype: type) -> NDArray[Any]:
        out: NDArray[Any] = np.array(values, dtype=dtype)[h_g]
        return out

    h_n, h_nodes, h_net = hw[:, 1], hw[:, 2], hw[:, 3].astype(np.float64)

    # --- (hardware, config) pairs ----------------------------------------------------------
    allowed_methods = np.array([METHODS.index(m) for m in job.methods])
    cm, cq, cs, cc = CONFIGS.T
    H, T = len(hw), len(CONFIGS)
    hn = h_n[:, None]
    structural = np.isin(cm, allowed_methods)[None, :] & (((hn == 1) & (cs == NONE)) | ((hn > 1) & (cs != NONE)))
    nvidia = per_gpu([g.vendor == "nvidia" for g in specs], bool)[:, None]
    has_peak = per_gpu([g.tensor_tflops is not None and g.memory_bandwidth_gb_per_s is not None for g in specs], bool)[
        :, None
    ]
    compat = has_peak & (nvidia | (cq == Q16)[None, :])
    hi, ti = np.nonzero(structural)
    p_method, p_quant, p_shard, p_ckpt = cm[ti], cq[ti], cs[ti], cc[ti]
    p_n = h_n[hi]
    card_gib = per_gpu([g.memory_gib for g in specs], np.float64)[hi]
    usable = card_gib * k.USABLE_MEMORY_FRACTION.value * k.GIB

    synced = memory_terms(sizes, opts, job.seq_len, p_method, p_quant, p_shard, p_ckpt, p_n)
    whole = unsharded_gradient_bytes(sizes, opts, p_method, p_shard, p_n, True)
    per_rank_batch = np.ceil(job.global_batch_size / p_n).astype(np.int64)
    cap = np.minimum(per_rank_batch, 64)
    b_one = max_micro_batch(synced, usable, cap)
    # A step of one micro-batch per GPU accumulates nothing, and FSDP then keeps its gradients
    # sharded; otherwise the largest micro-batch that fits with accumulation's memory.
    single = b_one * p_n >= job.global_batch_size
    terms = synced.with_static("unsharded_gradients", np.where(single, synced.static["unsharded_gradients"], whole))
    b = np.where(single, b_one, max_micro_batch(terms, usable, cap))
    fits = b >= 1
    b_eval = np.maximum(b, 1)
    accum = np.ceil(job.global_batch_size / (b_eval * p_n)).astype(np.int64)
    peak = terms.peak_bytes(b_eval)

    peak_tflops = per_gpu([g.tensor_tflops or 1.0 for g in specs], np.float64)[hi]
    util = per_gpu([utilization(g).value for g in specs], np.float64)[hi]
    mem_bw = per_gpu([g.memory_bandwidth_gb_per_s or 1.0 for g in specs], np.float64)[hi]
    intra = per_gpu([intra_node_bus_gb_per_s(g) for g in specs], np.float64)
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
        opts.quant_kernel,
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

    # --- candidates: rows × configs ------------------------------------------------------
    rr, tt = np.nonzero(pair_index[r_hw] >= 0)
    c_p = pair_index[r_hw[rr], tt]
    c_offer = r_offer[rr]
    c_mk = r_market[rr]
    c_nodes = r_nodes[rr]
    c_n = r_n[rr]
    c_cfg = ti[c_p]
    od, spot = arr.on_demand, arr.interruptible
    c_price = np.where(c_mk == SPOT, spot[c_offer], od[c_offer])

    # --- time and cost per candidate ------------------------------------------------------
    prov_h = arr.provisioning_h[c_offer]
    lam_offer = arr.interruption_rate[c_offer]
    storage_price = arr.storage_usd_per_gb_month[c_offer]
    egress_price = arr.egress_usd_per_gb[c_offer]
    billing = arr.billing[c_offer]
    method_c = cm[c_cfg]
    quant_c = cq[c_cfg]
    model_bytes_16 = sizes.total_params * 2.0
    download_h = model_bytes_16 / (job.download_mb_per_s * 1e6) / 3600.0
    load_h = base_weight_bytes(sizes, method_c, quant_c, opts=opts) / (k.LOAD_GB_PER_S.value * 1e9) / 3600.0
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
        per_hour_billing=billing == BILLING_CODES["per-hour"],
        per_minute_billing=billing == BILLING_CODES["per-minute"],
        storage_usd_per_gb_month=storage_price,
        volume_gb=job.dataset_gb + model_bytes_16 / 1e9 + 2 * ckpt_bytes / 1e9,
        egress_usd_per_gb=egress_price,
        output_gb=final_bytes / 1e9,
    )
    # Time and cost matter only where the configuration runs at all: candidates that do not fit
    # or are not supported are not priced, and count as meeting the deadline and the budget
    # (they are ruled out by memory or compatibility, which the diagnosis reports).
    runnable = compat[hi[c_p], ti[c_p]] & fits[c_p]
    costs = _price_subset(runs, runnable, job, _same_time_as(arr, r_offer, r_market, r_hw, rr, tt))
    # The spot-then-on-demand fallback is offered only where interruptible capacity alone misses
    # the deadline (NOT_OFFERED) and some work can still go to it (a zero share is on-demand).
    useless = (c_mk == FALLBACK) & runnable & (costs.spot_fraction <= 0)
    rate = runs.rate
    if useless.any():
        keep = np.flatnonzero(~useless)  # integer indices: one scan of the mask, not one per array
        c_p, c_offer, c_mk, c_nodes, c_n, c_cfg = (x[keep] for x in (c_p, c_offer, c_mk, c_nodes, c_n, c_cfg))
        c_price, startup_h, runnable, rate = c_price[keep], startup_h[keep], runnable[keep], rate[keep]
        costs = RunCosts(
            items_cents={name: v[keep] for name, v in costs.items_cents.items()},
            **{name: getattr(costs, name)[keep] for name in costs.__dataclass_fields__ if name != "items_cents"},
        )
    total = costs.total_cents
    expected_h, quantile_h = costs.expected_hours, costs.quantile_hours

    # --- constraint masks -----------------------------------------------------------------
    masks = {
        "compatibility": compat[hi[c_p], ti[c_p]],
        "quota": _quota_mask(job, arr.provider[c_offer], c_n),
        "memory": fits[c_p],
        "bounded": ~runnable | bounded(total, expected_h, quantile_h),
        "deadline": ~runnable | (quantile_h <= job.deadline_hours)
        if job.deadline_hours is not None
        else np.ones(len(c_offer), bool),
        "budget": ~runnable | (total <= math.floor(job.budget_usd * 100 + 1e-6))
        if job.budget_usd is not None
        else np.ones(len(c_offer), bool),
    }
    # Ties go to fewer GPUs, then market, catalog order and configuration order.
    tie = order_by((c_n * len(MARKETS) + c_mk) * len(catalog.offers) + c_offer, c_cfg)
    tie_rank = np.empty_like(tie)
    tie_rank[tie] = np.arange(tie.shape[0])
    group = dense_labels((gid[c_offer] * 3 + cm[c_cfg]) * len(MARKETS) + c_mk)

    dyn = {name: v * b_eval * (1.0 + k.DYNAMIC_MARGIN.value) for name, v in terms.per_sample.items()}
    return CandidateTable(
        offers=catalog.offers,
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
        pair=c_p,
        pair_memory_gib={name: v / k.GIB for name, v in (terms.static | dyn).items()},
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
        interruption_rate_per_hour=np.where(c_mk != OD, rate, 0.0),
        price_usd_per_gpu_hour=c_price,
        cost_items_cents=costs.items_cents,
        total_cents=total.astype(np.int64),
        masks=masks,
        tie_rank=tie_rank,
        group=group,
        assumptions=assumptions,
    )


def _same_time_as(arr: OfferArrays, r_offer: I, r_market: I, r_hw: I, rr: I, tt: I) -> I:
    """For each candidate (row rr, configuration tt), the first candidate with the same time
    inputs: the same hardware (which includes the node count) and configuration, provisioning
    time, interruption rate and market make the same work, start-up, restart, writes and rate."""
    r_cols = np.stack([r_hw, arr.timing[r_offer], r_market], axis=1).astype(np.float64)
    rep_row, r_class = unique_rows(r_cols)
    cand = np.full((r_offer.shape[0], len(CONFIGS)), -1, dtype=np.int64)
    cand[rr, tt] = np.arange(rr.shape[0])
    # The first row of a class holds the first candidate of each configuration: rows come in order.
    same: I = cand[rep_row[r_class[rr]], tt]
    return same


def _price_subset(runs: RunInputs, mask: B, job: JobSpec, same_time_as: I | None = None) -> RunCosts:
    """price_runs on the masked candidates; the others get no cost and an infinite finish time."""
    idx = np.flatnonzero(mask)  # integer positions: one scan of the mask, not one per array
    sub_same = None
    if same_time_as is not None:
        # Runnability follows the hardware and configuration, so a representative shares it.
        position = np.cumsum(mask) - 1
        sub_same = position[same_time_as[idx]]
    sub = price_runs(
        _select(runs, idx),
        job.deadline_confidence,
        job.deadline_hours,
        job.trial_runs,
        job.trial_fraction,
        job.failure_probability,
        job.retention_days,
        standalone_fallback="interruptible" not in job.markets,
        same_time_as=sub_same,
    )
    n = mask.shape[0]

    def spread(values: NDArray[Any], fill: float) -> NDArray[Any]:
        out = np.full(n, fill, dtype=values.dtype)
        out[idx] = values
        return out

    return RunCosts(
        items_cents={name: spread(v, 0) for name, v in sub.items_cents.items()},
        total_cents=spread(sub.total_cents, 0),
        expected_hours=spread(sub.expected_hours, np.inf),
        quantile_hours=spread(sub.quantile_hours, np.inf),
        checkpoint_interval_h=spread(sub.checkpoint_interval_h, np.nan),
        checkpoint_hours=spread(sub.checkpoint_hours, 0.0),
        rework_hours=spread(sub.rework_hours, 0.0),
        spot_fraction=spread(sub.spot_fraction, 0.0),
    )


def _quota_mask(job: JobSpec, provider: NDArray[np.str_], n_gpus: I) -> B:
    """Candidates within the user's GPU quota at their provider (no quota: no limit)."""
    ok = np.ones(n_gpus.shape[0], dtype=bool)
    for name, limit in (job.gpu_quota or {}).items():
        ok &= (provider != name.lower()) | (n_gpus <= limit)
    return ok


def _select(runs: RunInputs, rows: B | I) -> RunInputs:
    return RunInputs(**{name: getattr(runs, name)[rows] for name in runs.__dataclass_fields__})
