"""The stages that build a candidate table, each a short function returning a small frozen record:

1. `offer_rows`: the offers in scope, the markets and node counts to score them on, and the
   distinct hardware setups (GPU type, GPU count, nodes, network) those rows make up;
2. `pair_physics`: memory and speed once per (hardware setup, configuration) pair that the
   setup rules allow (physics depends on nothing else);
3. `candidates`: rows × pairs, with the ones that run at all (compatible, fit in memory);
4. `run_inputs`: start-up and preemption rate per candidate, and the pricing inputs of the
   runnable ones.

`_grid.build_candidates` composes them, prices the runnable candidates and assembles the table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog import BILLING_CODES, Catalog, GpuSpec, OfferArrays
from ftsolve.solver import _coefficients as k
from ftsolve.solver._compat import CONFIGS, GPU_RULES, SETUP_RULES, TIMING_RULES, OnGpu, Setup, holds_all
from ftsolve.solver._cost import FALLBACK, OD, SPOT, RunInputs
from ftsolve.solver._hardware import Hardware, hardware
from ftsolve.solver._items import item_offer_facts
from ftsolve.solver._job import EEA_COUNTRIES, MARKETS, METHODS, JobSpec
from ftsolve.solver._memory import (
    FULL,
    MemoryOptions,
    MemoryTerms,
    ModelSizes,
    base_weight_bytes,
    max_micro_batch,
    memory_terms,
    unsharded_gradient_bytes,
)
from ftsolve.solver._rows import unique_rows
from ftsolve.solver._throughput import StepTime, flops_per_token, step_time

F = NDArray[np.float64]
I = NDArray[np.int64]
B = NDArray[np.bool_]

# What the time model reads of an offer besides its hardware: together with the cost items'
# offer_facts, the facts that make two offers of one hardware price differently.
TIME_FACTS = ("provisioning_h", "interruption_rate")


def pricing_facts() -> tuple[str, ...]:
    """Every per-offer fact (an OfferArrays column) that time and cost read, besides the prices."""
    return tuple(dict.fromkeys(TIME_FACTS + item_offer_facts()))


# --- stage 1: rows -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopeReport:
    """How many offers the user's filters kept, for explanations."""

    offers_total: int
    offers_in_scope: int
    removed_by: dict[str, int]


@dataclass(frozen=True)
class Rows:
    """One row per (offer, market, node count) to score, and the hardware setups they make up."""

    scope: ScopeReport
    gpu_id: I  # per catalog offer: its GPU type's index among the types in scope, -1 out of scope
    offer: I
    market: I
    nodes: I
    n_gpus: I
    hw: I  # the row's hardware setup
    hardware: Hardware


def offer_rows(job: JobSpec, catalog: Catalog, prune: bool) -> Rows:
    """The offers in scope on each market the job allows and each launchable node count within
    its GPU cap (markets in order, offers in catalog order within a market)."""
    arr = catalog.arrays
    scope_mask, scope = scope_offers(job, catalog)
    gpu_names = sorted(set(arr.gpu[scope_mask].tolist()))
    gid = np.searchsorted(np.array(gpu_names, dtype=str), arr.gpu) if gpu_names else np.zeros(len(arr.gpu), np.int64)
    gid = np.where(scope_mask, gid, -1).astype(np.int64)
    m_offer, m_market = _market_rows(job, arr, scope_mask, gid, prune)
    node_counts = launchable_node_counts(job.max_nodes)
    mi, ni = np.nonzero(node_counts[None, :] * arr.gpus_per_node[m_offer][:, None] <= job.max_gpus)
    offer, market, nodes = m_offer[mi], m_market[mi], node_counts[ni]
    n_gpus = arr.gpus_per_node[offer] * nodes
    specs = [catalog.gpus[name] for name in gpu_names]
    hw, machines = _hardware_setups(specs, gid[offer], n_gpus, nodes, arr.inter_node_gbit[offer])
    return Rows(scope, gid, offer, market, nodes, n_gpus, hw, machines)


def _hardware_setups(specs: list[GpuSpec], gpu: I, n_gpus: I, nodes: I, net_gbit: F) -> tuple[I, Hardware]:
    """(each row's setup, the distinct setups): physics is computed once per setup."""
    key = np.stack([gpu, n_gpus, nodes, net_gbit.astype(np.int64)], axis=1) if gpu.size else np.zeros((0, 4), np.int64)
    first, hw = unique_rows(key.astype(np.float64))
    setups = key[first]
    return hw, hardware(specs, setups[:, 0], setups[:, 1], setups[:, 2], setups[:, 3].astype(np.float64))


def scope_offers(job: JobSpec, catalog: Catalog) -> tuple[B, ScopeReport]:
    """Offers that pass the user's filters, and how many each filter removed."""
    arr = catalog.arrays
    has_od, has_spot = ~np.isnan(arr.on_demand), ~np.isnan(arr.interruptible)
    markets = set(job.markets)
    filters: list[tuple[str, B | None]] = [
        ("providers", None if job.providers is None else np.isin(arr.provider, [p.lower() for p in job.providers])),
        ("regions", None if job.regions is None else np.isin(arr.region, [r.lower() for r in job.regions])),
        ("countries", None if job.countries is None else np.isin(arr.country, list(job.countries))),
        ("eu_only", np.isin(arr.country, sorted(EEA_COUNTRIES)) if job.eu_only else None),
        ("gpus", None if job.gpus is None else np.isin(arr.gpu, list(job.gpus))),
        (
            "markets",
            (has_od & ("on-demand" in markets))
            | (has_spot & ("interruptible" in markets))
            | (has_od & has_spot & ("fallback" in markets)),
        ),
        ("max_gpus", arr.gpus_per_node <= job.max_gpus),
    ]
    keep = np.ones(len(catalog.offers), dtype=bool)
    removed: dict[str, int] = {}
    for name, mask in filters:
        if mask is None:
            continue
        after = keep & mask
        if int(keep.sum()) != int(after.sum()):
            removed[name] = int(keep.sum() - after.sum())
        keep = after
    return keep, ScopeReport(len(catalog.offers), int(keep.sum()), removed)


def twin_groups(arr: OfferArrays, scope: B, gid: I) -> I:
    """A label per offer (-1 out of scope): offers with one label differ in their prices only (the
    same GPU, node size and network, and the same value of every fact in `pricing_facts`)."""
    ids = np.flatnonzero(scope)
    cols = [gid[ids], arr.gpus_per_node[ids], arr.inter_node_gbit[ids]]
    for name in pricing_facts():
        col = getattr(arr, name)[ids]
        if np.issubdtype(col.dtype, np.number):
            cols.append(np.nan_to_num(col.astype(np.float64), nan=-1.0))
        else:
            cols.append(np.unique(col, return_inverse=True)[1].reshape(-1))
    labels = np.full(scope.shape[0], -1, dtype=np.int64)
    labels[ids] = unique_rows(np.stack(cols, axis=1).astype(np.float64))[1]
    return labels


def _market_rows(job: JobSpec, arr: OfferArrays, scope: B, gid: I, prune: bool) -> tuple[I, I]:
    """(offer index, market) pairs to score. With `prune`, offers that cannot beat a cheaper twin
    are dropped: expected cost never falls when the price rises, and the cheaper twin also wins
    ties on catalog order."""
    offer_ids, market_ids = [], []
    od_ok, spot_ok = ~np.isnan(arr.on_demand), ~np.isnan(arr.interruptible)
    twins = twin_groups(arr, scope, gid) if prune else None
    for mk, name in enumerate(MARKETS):
        if name not in job.markets:
            continue
        if mk == FALLBACK and job.deadline_hours is None and "interruptible" in job.markets:
            continue  # without a deadline, interruptible alone is the cheaper way to use slack
        ids = np.nonzero(scope & (od_ok if mk == OD else spot_ok if mk == SPOT else od_ok & spot_ok))[0]
        if twins is not None and ids.size:
            group = twins[ids]
            if mk == FALLBACK:
                ids = _pareto_per_group(ids, group, arr.on_demand[ids], arr.interruptible[ids])
            else:
                ids = _cheapest_per_group(ids, group, (arr.on_demand if mk == OD else arr.interruptible)[ids])
        offer_ids.append(ids)
        market_ids.append(np.full(ids.size, mk, dtype=np.int64))
    if not offer_ids:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(offer_ids), np.concatenate(market_ids)


def _cheapest_per_group(ids: I, group: I, price: F) -> I:
    order = np.lexsort((ids, price, group))
    first = np.ones(ids.size, dtype=bool)
    first[1:] = group[order][1:] != group[order][:-1]
    out: I = np.sort(ids[order][first])
    return out


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


# --- stage 2: physics per (hardware setup, configuration) ----------------------------------------


@dataclass(frozen=True)
class Memory:
    """Memory of each pair at the largest micro-batch that fits."""

    terms: MemoryTerms
    micro_batch: I  # 0 where not even one sequence fits
    grad_accum: I  # at max(micro_batch, 1)
    peak_bytes: F  # at max(micro_batch, 1)
    usable_bytes: F


@dataclass(frozen=True)
class Physics:
    """Memory and speed of each (hardware setup, configuration) pair that the setup rules allow."""

    hw: I  # the pair's hardware setup
    cfg: I  # the pair's configuration (a CONFIGS row)
    index: I  # (hardware setup, configuration) -> pair, -1 where not allowed
    compatible: B  # the GPU can run the configuration (GPU_RULES and TIMING_RULES)
    memory: Memory
    step: StepTime
    train_h: F
    eval_h: F


def pair_physics(job: JobSpec, opts: MemoryOptions, sizes: ModelSizes, hw: Hardware) -> Physics:
    cm, cq, cs, _ = CONFIGS.T
    wanted = np.isin(cm, [METHODS.index(m) for m in job.methods])[None, :]
    setup = Setup(cm[None, :], cq[None, :], cs[None, :], hw.n_gpus[:, None], opts.framework)
    hi, ti = np.nonzero(wanted & holds_all(SETUP_RULES, setup))
    index = np.full((len(hw), len(CONFIGS)), -1, dtype=np.int64)
    index[hi, ti] = np.arange(hi.shape[0])
    compatible = holds_all(GPU_RULES + TIMING_RULES, OnGpu(cq[ti], hw.nvidia[hi], hw.timed[hi]))
    memory = _fit_memory(job, opts, sizes, hw.usable_bytes[hi], CONFIGS[ti], hw.n_gpus[hi])
    step, train_h, eval_h = _speed(job, opts, sizes, hw, hi, CONFIGS[ti], memory)
    return Physics(hi, ti, index, compatible, memory, step, train_h, eval_h)


def _fit_memory(job: JobSpec, opts: MemoryOptions, sizes: ModelSizes, usable: F, cfg: I, n_gpus: I) -> Memory:
    """The largest power-of-two micro-batch that fits, with its accumulation and peak."""
    method, quant, shard, ckpt = cfg.T
    synced = memory_terms(sizes, opts, job.seq_len, method, quant, shard, ckpt, n_gpus)
    whole = unsharded_gradient_bytes(sizes, opts, method, shard, n_gpus, True)
    cap = np.minimum(np.ceil(job.global_batch_size / n_gpus).astype(np.int64), 64)
    b_one = max_micro_batch(synced, usable, cap)
    # A step of one micro-batch per GPU accumulates nothing, and FSDP then keeps its gradients
    # sharded; otherwise the largest micro-batch that fits with accumulation's memory.
    single = b_one * n_gpus >= job.global_batch_size
    terms = synced.with_static("unsharded_gradients", np.where(single, synced.static["unsharded_gradients"], whole))
    b = np.where(single, b_one, max_micro_batch(terms, usable, cap))
    b_eval = np.maximum(b, 1)
    accum = np.ceil(job.global_batch_size / (b_eval * n_gpus)).astype(np.int64)
    return Memory(terms, b, accum, terms.peak_bytes(b_eval), usable)


def _speed(
    job: JobSpec, opts: MemoryOptions, sizes: ModelSizes, hw: Hardware, hi: I, cfg: I, memory: Memory
) -> tuple[StepTime, F, F]:
    """(step time, training hours, evaluation hours) of each pair at its micro-batch."""
    method, quant, shard, ckpt = cfg.T
    states = memory.terms.static
    st = step_time(
        sizes,
        job.seq_len,
        states["optimizer"] + states["gradients"] + states["weights"],
        method,
        quant,
        shard,
        ckpt,
        hw.n_gpus[hi],
        np.maximum(memory.micro_batch, 1),
        memory.grad_accum,
        hw.peak_tflops[hi],
        hw.utilization[hi],
        hw.memory_bandwidth_gb_per_s[hi],
        hw.bus_gb_per_s[hi],
        opts.quant_kernel,
    )
    train_h = job.train_tokens / job.real_token_fraction / st.tokens_per_s / 3600.0
    # Evaluation passes run the forward alone over eval_fraction of the training tokens.
    total_flops = flops_per_token(sizes, job.seq_len, method, ckpt)
    fwd_flops = flops_per_token(sizes, job.seq_len, method, np.zeros_like(ckpt)) / np.where(method == FULL, 3.0, 2.0)
    return st, train_h, train_h * job.eval_fraction * fwd_flops / total_flops


# --- stage 3: candidates -------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidates:
    """Rows × the pairs of their hardware setup."""

    row: I
    pair: I
    cfg: I
    offer: I
    market: I
    nodes: I
    n_gpus: I
    runnable: B  # compatible and fits in memory: only these are priced

    def __len__(self) -> int:
        return int(self.offer.shape[0])

    def take(self, idx: I) -> Candidates:
        return Candidates(*(getattr(self, name)[idx] for name in self.__dataclass_fields__))


def candidates(rows: Rows, physics: Physics) -> Candidates:
    row, cfg = np.nonzero(physics.index[rows.hw] >= 0)
    pair = physics.index[rows.hw[row], cfg]
    runnable = physics.compatible[pair] & (physics.memory.micro_batch[pair] >= 1)
    return Candidates(row, pair, cfg, rows.offer[row], rows.market[row], rows.nodes[row], rows.n_gpus[row], runnable)


# --- stage 4: run inputs -------------------------------------------------------------------------


@dataclass(frozen=True)
class Runs:
    """Start-up and preemption rate of every candidate (explanations read them), and the pricing
    inputs of the runnable ones."""

    startup_h: F
    rate: F  # interruptions per hour of the whole job: losing any node restarts it
    priced: I  # the runnable candidates
    inputs: RunInputs  # of `priced`


@dataclass(frozen=True)
class _Sizes:
    """What a run moves, per configuration: checkpoint, final save, and hours to load the base."""

    checkpoint_bytes: F
    final_bytes: F
    load_h: F


def _config_sizes(sizes: ModelSizes, opts: MemoryOptions) -> _Sizes:
    method, quant = CONFIGS[:, 0], CONFIGS[:, 1]
    full = method == FULL
    return _Sizes(
        checkpoint_bytes=np.where(
            full,
            sizes.total_params * k.FULL_CHECKPOINT_BYTES_PER_PARAM.value,
            sizes.lora_params * k.LORA_CHECKPOINT_BYTES_PER_PARAM.value,
        ),
        final_bytes=np.where(full, sizes.total_params * 2.0, sizes.lora_params * 2.0),
        load_h=base_weight_bytes(sizes, method, quant, opts=opts) / (k.LOAD_GB_PER_S.value * 1e9) / 3600.0,
    )


def run_inputs(
    job: JobSpec, opts: MemoryOptions, sizes: ModelSizes, arr: OfferArrays, c: Candidates, physics: Physics
) -> Runs:
    per_cfg = _config_sizes(sizes, opts)
    download_h = sizes.total_params * 2.0 / (job.download_mb_per_s * 1e6) / 3600.0
    env_h = k.ENVIRONMENT_SETUP_MINUTES.value / 60.0
    startup_h = arr.provisioning_h[c.offer] + env_h + download_h + per_cfg.load_h[c.cfg]
    rate = arr.interruption_rate[c.offer] * c.nodes
    idx = np.flatnonzero(c.runnable)
    offer, cfg, n = c.offer[idx], c.cfg[idx], c.n_gpus[idx]
    ckpt_bytes, final_bytes = per_cfg.checkpoint_bytes[cfg], per_cfg.final_bytes[cfg]
    write_bps = k.CHECKPOINT_WRITE_GB_PER_S.value * 1e9
    billing = arr.billing[offer]
    inputs = RunInputs(
        market=c.market[idx],
        work_h=physics.train_h[c.pair[idx]] + physics.eval_h[c.pair[idx]],
        startup_h=startup_h[idx],
        restart_h=startup_h[idx] + ckpt_bytes / (k.LOAD_GB_PER_S.value * 1e9) / 3600.0,
        ckpt_write_h=ckpt_bytes / write_bps / 3600.0,
        final_save_h=final_bytes / write_bps / 3600.0,
        rate=rate[idx],
        od_usd_per_h=arr.on_demand[offer] * n,
        spot_usd_per_h=arr.interruptible[offer] * n,
        per_hour_billing=billing == BILLING_CODES["per-hour"],
        per_minute_billing=billing == BILLING_CODES["per-minute"],
        storage_usd_per_gb_month=arr.storage_usd_per_gb_month[offer],
        volume_gb=job.dataset_gb + sizes.total_params * 2.0 / 1e9 + 2 * ckpt_bytes / 1e9,
        egress_usd_per_gb=arr.egress_usd_per_gb[offer],
        output_gb=final_bytes / 1e9,
        offer_facts={name: getattr(arr, name)[offer] for name in item_offer_facts()},
    )
    return Runs(startup_h, rate, idx, inputs)


def same_time_rows(arr: OfferArrays, rows: Rows) -> tuple[I, I]:
    """(first row of each class, class of each row): rows of one class have the same hardware
    setup (which includes the node count), market and time facts, hence the same time inputs."""
    facts = [np.nan_to_num(getattr(arr, name)[rows.offer].astype(np.float64), nan=-1.0) for name in TIME_FACTS]
    cols = np.stack([rows.hw.astype(np.float64), *facts, rows.market.astype(np.float64)], axis=1)
    return unique_rows(cols)
