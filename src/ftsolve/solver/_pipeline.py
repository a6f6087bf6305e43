"""The stages that build a candidate table, each a short function returning a small frozen record:

1. `offer_rows`: the offers in scope, the markets and node counts to score them on, and the
   distinct hardware setups (GPU type, GPU count, nodes, network) those rows make up;
2. `pair_physics`: memory and speed once per (hardware setup, configuration) pair that the
   setup rules allow (physics depends on nothing else);
3. `candidates`: rows × pairs, with the ones that run at all (compatible, fit in memory);
4. `run_inputs`: start-up and preemption rate per candidate, and the pricing inputs of the
   runnable ones.

`_grid.build_candidates` composes them, prices the runnable candidates and assembles the table.
Before pricing, `unpriced` and `least_hours_and_usd` give each candidate's lower bounds (start-up
and work, at the cheaper price its market may pay): re-planning (_replan.py) prices only the
offers whose candidates may keep a job's limits.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ftsolve._calibration import PairCorrections, pair_corrections
from ftsolve._errors import UnknownCatalogEntry
from ftsolve.catalog import BILLING_CODES, Catalog, GpuSpec, ModelArch, OfferArrays, planning_prices, resolve_gpu
from ftsolve.solver import _coefficients as k
from ftsolve.solver._compat import CONFIGS, GPU_RULES, SETUP_RULES, TIMING_RULES, OnGpu, Setup, holds_all
from ftsolve.solver._cost import ADAPTIVE, FALLBACK, OD, SPOT, RunInputs
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
from ftsolve.solver._rows import equal_rows, unique_rows
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

    def take(self, idx: I) -> Rows:
        """The rows `idx`, with only the hardware setups they use (physics is per setup)."""
        used, hw = np.unique(self.hw[idx], return_inverse=True)
        setups = Hardware(*(getattr(self.hardware, f.name)[used] for f in dataclasses.fields(Hardware)))
        take = (self.offer[idx], self.market[idx], self.nodes[idx], self.n_gpus[idx])
        return Rows(self.scope, self.gpu_id, *take, hw.reshape(-1).astype(np.int64), setups)


def planning_arrays(job: JobSpec, catalog: Catalog) -> OfferArrays:
    """The catalog's offer columns with the prices the job may plan on: floor ("from") prices
    count as not offered unless the job allows them."""
    on_demand, interruptible = planning_prices(catalog.arrays, allow_floor=job.allow_floor_prices)
    return dataclasses.replace(catalog.arrays, on_demand=on_demand, interruptible=interruptible)


def gpu_filter(names: tuple[str, ...], catalog: Catalog) -> list[str]:
    """The GPU ids a --gpus filter means: each name as an id, as any spelling `catalog show`
    resolves (A6000, H100 SXM), or as a family (h100: every H100 variant); unknown names are
    refused with suggestions, not silently matched to nothing."""
    ids = sorted(catalog.gpus)
    out: list[str] = []
    for name in names:
        key = re.sub(r"[^a-z0-9]", "", name.lower())
        family = [g for g in ids if re.sub(r"[^a-z0-9]", "", g).startswith(key)] if key else []
        resolved = resolve_gpu(name)
        # The resolver reads model numbers loosely ("h1000" would be an H100): keep its answer
        # only where every number in the name is one of the id's.
        digits = re.findall(r"\d+", key)
        if resolved and not all(d in re.findall(r"\d+", resolved) for d in digits):
            resolved = None
        found = [name.lower()] if name.lower() in catalog.gpus else family or ([resolved] if resolved else [])
        if not found:
            raise UnknownCatalogEntry("GPU", name, ids)
        out += found
    return sorted(set(out))


def _known(kind: str, names: tuple[str, ...] | None, known: NDArray[np.str_]) -> list[str] | None:
    """Lower-cased filter values, each one that some offer has (`known`: the offers' distinct
    values; else refused with suggestions)."""
    if names is None:
        return None
    values = sorted(set(known.tolist()))
    for name in names:
        if name.lower() not in values:
            raise UnknownCatalogEntry(kind, name, values)
    return [n.lower() for n in names]


def offer_rows(job: JobSpec, catalog: Catalog, arr: OfferArrays, prune: bool) -> Rows:
    """The offers in scope on each market the job allows and each launchable node count within
    its GPU cap (markets in order, offers in catalog order within a market)."""
    filters = job.model_copy(
        update={
            "gpus": None if job.gpus is None else tuple(gpu_filter(job.gpus, catalog)),
            "providers": _known("provider", job.providers, arr.providers),
            "regions": _known("region", job.regions, arr.regions),
        }
    )
    scope_mask, scope = scope_offers(filters, arr)
    # The GPU types in scope, sorted (arr.gpus is): an offer's gid is its type's index among them.
    in_scope = np.zeros(arr.gpus.shape[0], dtype=bool)
    in_scope[arr.gpu_id[scope_mask]] = True
    gpu_names = arr.gpus[in_scope].tolist()
    gid = np.where(scope_mask, (np.cumsum(in_scope) - 1)[arr.gpu_id] if in_scope.size else -1, -1).astype(np.int64)
    m_offer, m_market = _market_rows(job, arr, scope_mask, gid, prune)
    node_counts = launchable_node_counts(job.max_nodes)
    # Several nodes only where the provider sells them as a cluster with a stated network; two
    # marketplace hosts are not a cluster, whatever bandwidth a default would assume.
    within = node_counts[None, :] * arr.gpus_per_node[m_offer][:, None] <= job.max_gpus
    clustered = (node_counts[None, :] == 1) | arr.cluster_network[m_offer][:, None]
    mi, ni = np.nonzero(within & clustered)
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


def scope_offers(job: JobSpec, arr: OfferArrays) -> tuple[B, ScopeReport]:
    """Offers that pass the user's filters, and how many each filter removed."""
    has_od, has_spot = ~np.isnan(arr.on_demand), ~np.isnan(arr.interruptible)
    markets = set(job.markets)

    def among(names: NDArray[np.str_], ids: I, wanted: list[str]) -> B:
        # Each distinct name is tested once; the offers take their name's answer.
        out: B = np.isin(names, wanted)[ids] if names.size else np.zeros(ids.shape, dtype=bool)
        return out

    filters: list[tuple[str, B | None]] = [
        (
            "providers",
            None
            if job.providers is None
            else among(arr.providers, arr.provider_id, [p.lower() for p in job.providers]),
        ),
        (
            "regions",
            None if job.regions is None else among(arr.regions, arr.region_id, [r.lower() for r in job.regions]),
        ),
        ("countries", None if job.countries is None else among(arr.countries, arr.country_id, list(job.countries))),
        ("eu_only", among(arr.countries, arr.country_id, sorted(EEA_COUNTRIES)) if job.eu_only else None),
        ("gpus", None if job.gpus is None else among(arr.gpus, arr.gpu_id, list(job.gpus))),
        (
            "markets",
            (has_od & ("on-demand" in markets))
            | (has_spot & ("interruptible" in markets))
            | (has_od & has_spot & bool(markets & {"fallback", "adaptive"})),
        ),
        ("max_gpus", arr.gpus_per_node <= job.max_gpus),
    ]
    keep = np.ones(arr.gpu_id.shape[0], dtype=bool)
    removed: dict[str, int] = {}
    for name, mask in filters:
        if mask is None:
            continue
        after = keep & mask
        if int(keep.sum()) != int(after.sum()):
            removed[name] = int(keep.sum() - after.sum())
        keep = after
    return keep, ScopeReport(arr.gpu_id.shape[0], int(keep.sum()), removed)


def twin_groups(arr: OfferArrays, scope: B, gid: I) -> I:
    """A label per offer (-1 out of scope): offers with one label differ in their prices only (the
    same GPU, node size and network, and the same value of every fact in `pricing_facts`)."""
    cols = [gid, arr.gpus_per_node, arr.inter_node_gbit]
    for name in pricing_facts():
        col = getattr(arr, f"{name}_id", None)  # a text column's codes: equal codes, equal text
        col = getattr(arr, name) if col is None else col
        cols.append(col if np.issubdtype(col.dtype, np.number) else np.unique(col, return_inverse=True)[1].reshape(-1))
    ids = np.flatnonzero(scope)
    labels = np.full(scope.shape[0], -1, dtype=np.int64)
    labels[ids] = equal_rows(cols, ids)
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
        both = mk in (FALLBACK, ADAPTIVE)  # both prices needed
        if both and job.deadline_hours is None and "interruptible" in job.markets:
            continue  # without a deadline, interruptible alone is the cheaper way to use slack
        ids = np.nonzero(scope & (od_ok if mk == OD else spot_ok if mk == SPOT else od_ok & spot_ok))[0]
        if twins is not None and ids.size:
            group = twins[ids]
            if both:
                ids = _pareto_per_group(ids, group, arr.on_demand[ids], arr.interruptible[ids])
            else:
                ids = _cheapest_per_group(ids, group, (arr.on_demand if mk == OD else arr.interruptible)[ids])
        offer_ids.append(ids)
        market_ids.append(np.full(ids.size, mk, dtype=np.int64))
    if not offer_ids:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(offer_ids), np.concatenate(market_ids)


def _cheapest_per_group(ids: I, group: I, price: F) -> I:
    """The first offer (in catalog order) at its group's lowest price, per group, in catalog order:
    the first of np.lexsort((ids, price, group)) per group, without sorting a million offers."""
    at = _first_per_group(ids, group, price, np.zeros_like(price))
    out: I = np.sort(ids[at[at >= 0]])
    return out


def _pareto_per_group(ids: I, group: I, od: F, spot: F) -> I:
    """Offers not dominated (both prices higher or equal) by another offer of their group."""
    ids, group, od, spot = _drop_dominated_by_corners(ids, group, od, spot)
    order = np.lexsort((ids, spot, od, group))
    g, s_ = group[order], spot[order]
    # Earlier groups get larger offsets so that a running minimum never leaks into the next group.
    shifted = s_ - g * (float(np.nanmax(spot)) + 1.0) * 2.0
    running = np.minimum.accumulate(shifted)
    keep = np.ones(ids.size, dtype=bool)
    keep[1:] = (shifted[1:] < running[:-1]) | (g[1:] != g[:-1])
    out: I = np.sort(ids[order][keep])
    return out


def _drop_dominated_by_corners(ids: I, group: I, od: F, spot: F) -> tuple[I, I, F, F]:
    """The offers less those that each group's first offer by (on-demand, spot, catalog order), and
    its first by (spot, on-demand, catalog order), match or beat on both prices. Each such corner
    comes before them in _pareto_per_group's order with a spot price no higher, so dropping them
    changes no other offer's verdict; what remains is sorted (often a small part of a million)."""
    if ids.size == 0:
        return ids, group, od, spot
    dominated = np.zeros(ids.size, dtype=bool)
    for first, second in ((od, spot), (spot, od)):
        corner = _first_per_group(ids, group, first, second)
        c_first, c_second = first[corner][group], second[corner][group]
        dominated |= (first >= c_first) & (second >= c_second) & (np.arange(ids.size) != corner[group])
    keep = ~dominated
    return ids[keep], group[keep], od[keep], spot[keep]


def _first_per_group(ids: I, group: I, first: F, second: F) -> I:
    """Per group label (0..max), the position of its offer that is first by (first, second, ids);
    -1 where a label has no offer."""
    groups = int(group.max()) + 1
    big = np.iinfo(np.int64).max
    lowest = np.full(groups, np.inf)
    np.minimum.at(lowest, group, first)
    tied = np.flatnonzero(first == lowest[group])
    lowest2 = np.full(groups, np.inf)
    np.minimum.at(lowest2, group[tied], second[tied])
    tied = tied[second[tied] == lowest2[group[tied]]]
    least_id = np.full(groups, big)
    np.minimum.at(least_id, group[tied], ids[tied])
    tied = tied[ids[tied] == least_id[group[tied]]]
    out = np.full(groups, -1, dtype=np.int64)
    out[group[tied]] = tied
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
    """Memory of each pair at its chosen micro-batch."""

    terms: MemoryTerms
    micro_batch: I  # 0 where not even one sequence fits with the headroom
    grad_accum: I  # at max(micro_batch, 1)
    peak_bytes: F  # at max(micro_batch, 1)
    usable_bytes: F
    band: F  # headroom kept above the peak, as a share of it (the estimate's band or the user's margin)
    global_batch: I  # micro-batch x accumulation x GPUs: the batch the run really trains with


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
    largest_micro_batch: I  # the largest that fits with headroom and holds the global batch
    largest_speedup: F  # its tokens/s over the chosen micro-batch's (>= 1): what the smaller one gives up


# A practitioner takes the smallest micro-batch that is about as fast as the largest that fits:
# it leaves memory for the unexpected and changes nothing the run learns.
MICRO_BATCH_SPEED_TOLERANCE = 0.03


def pair_physics(job: JobSpec, opts: MemoryOptions, sizes: ModelSizes, hw: Hardware) -> Physics:
    cm, cq, cs, _ = CONFIGS.T
    wanted = np.isin(cm, [METHODS.index(m) for m in job.methods])[None, :]
    setup = Setup(cm[None, :], cq[None, :], cs[None, :], hw.n_gpus[:, None], opts.framework, opts.quant_kernel)
    hi, ti = np.nonzero(wanted & holds_all(SETUP_RULES, setup))
    index = np.full((len(hw), len(CONFIGS)), -1, dtype=np.int64)
    index[hi, ti] = np.arange(hi.shape[0])
    compatible = holds_all(GPU_RULES + TIMING_RULES, OnGpu.of(cq[ti], hw, hi, job.stack))
    fix = pair_corrections(job, opts, hw, hi, CONFIGS[ti])  # the user's measured runs (ftsolve calibrate)
    memory = _fit_memory(job, opts, sizes, hw.usable_bytes[hi], CONFIGS[ti], hw.n_gpus[hi], fix)
    largest = memory.micro_batch
    memory, step, speedup = _smallest_fast_micro_batch(job, sizes, hw, hi, CONFIGS[ti], memory)
    step = fix.step(step)
    train_h, eval_h = _hours(job, sizes, CONFIGS[ti], step)
    return Physics(hi, ti, index, compatible, memory, step, train_h, eval_h, largest, speedup)


def headroom_band(job: JobSpec, opts: MemoryOptions, method: I) -> F:
    """The headroom kept above each predicted peak: the user's margin, else the validated band of
    the estimate for the method on the job's stack (_coefficients.MEMORY_BANDS)."""
    if job.memory_margin is not None:
        return np.full(method.shape, job.memory_margin)
    bands = np.array([k.memory_band(m, opts.stack) for m in METHODS], dtype=np.float64)
    out: F = bands[method]
    return out


def _whole_batches(b: I, n_gpus: I, global_batch: int) -> I:
    """The largest power of two <= b that divides the per-GPU share of the global batch, so that
    micro-batch x accumulation x GPUs is exactly the requested batch; b where no split is exact."""
    exact = global_batch % n_gpus == 0
    share = np.where(exact, global_batch // np.maximum(n_gpus, 1), 1)
    out: I = np.where(exact, np.minimum(b, share & -share), b)
    return out


def _fit_memory(
    job: JobSpec, opts: MemoryOptions, sizes: ModelSizes, usable: F, cfg: I, n_gpus: I, fix: PairCorrections
) -> Memory:
    """The largest power-of-two micro-batch whose peak plus headroom fits and which holds the
    global batch, with its accumulation and peak."""
    method, quant, shard, ckpt = cfg.T
    band = fix.band(headroom_band(job, opts, method))
    room = usable / (1.0 + band)
    g = job.global_batch_size
    synced = fix.terms(memory_terms(sizes, opts, job.seq_len, method, quant, shard, ckpt, n_gpus))
    whole = unsharded_gradient_bytes(sizes, opts, method, shard, n_gpus, True)
    cap = np.minimum(np.ceil(g / n_gpus).astype(np.int64), 64)
    b_one = _whole_batches(max_micro_batch(synced, room, cap), n_gpus, g)
    # A step of one micro-batch per GPU accumulates nothing, and FSDP then keeps its gradients
    # sharded; otherwise the largest micro-batch that fits with accumulation's memory.
    single = b_one * n_gpus >= g
    terms = synced.with_static("unsharded_gradients", np.where(single, synced.static["unsharded_gradients"], whole))
    b = np.where(single, b_one, _whole_batches(max_micro_batch(terms, room, cap), n_gpus, g))
    return _at_micro_batch(job, terms, b, usable, band, n_gpus)


def _at_micro_batch(job: JobSpec, terms: MemoryTerms, b: I, usable: F, band: F, n_gpus: I) -> Memory:
    b_eval = np.maximum(b, 1)
    accum = np.ceil(job.global_batch_size / (b_eval * n_gpus)).astype(np.int64)
    return Memory(terms, b, accum, terms.peak_bytes(b_eval), usable, band, b_eval * accum * n_gpus)


def _smallest_fast_micro_batch(
    job: JobSpec, sizes: ModelSizes, hw: Hardware, hi: I, cfg: I, memory: Memory
) -> tuple[Memory, StepTime, F]:
    """Halve each pair's micro-batch while the step stays within MICRO_BATCH_SPEED_TOLERANCE of
    the largest one's speed. Only pairs that accumulate already are halved: their memory terms
    (unsharded gradients under FSDP) stay as they are, and the global batch stays exact. Returns
    the chosen memory and step, and the largest micro-batch's speed over the chosen one's."""
    b = memory.micro_batch.copy()
    best = _step(job, sizes, hw, hi, cfg, memory, b)
    floor = best.tokens_per_s * (1.0 - MICRO_BATCH_SPEED_TOLERANCE)
    # The step at each pair's chosen micro-batch: the static memory a step reads stays as it is.
    parts = {f.name: getattr(best, f.name).copy() for f in dataclasses.fields(best)}
    trying = np.flatnonzero((b > 1) & (memory.grad_accum > 1))
    while trying.size:
        half = b[trying] // 2
        sub = _take_memory(memory, trying)
        step = _step(job, sizes, hw, hi[trying], cfg[trying], sub, half)
        ok = step.tokens_per_s >= floor[trying]
        b[trying[ok]] = half[ok]
        for name, values in parts.items():
            values[trying[ok]] = getattr(step, name)[ok]
        trying = trying[ok & (half > 1)]
    chosen = _at_micro_batch(job, memory.terms, b, memory.usable_bytes, memory.band, hw.n_gpus[hi])
    speedup = best.tokens_per_s / np.maximum(parts["tokens_per_s"], 1e-12)
    return chosen, StepTime(**parts), speedup


def _take_memory(memory: Memory, idx: I) -> Memory:
    terms = memory.terms.take(idx)
    return Memory(
        terms,
        memory.micro_batch[idx],
        memory.grad_accum[idx],
        memory.peak_bytes[idx],
        memory.usable_bytes[idx],
        memory.band[idx],
        memory.global_batch[idx],
    )


def _step(job: JobSpec, sizes: ModelSizes, hw: Hardware, hi: I, cfg: I, memory: Memory, b: I) -> StepTime:
    """Step time of each pair at micro-batch b (the global batch held by the accumulation)."""
    method, quant, shard, ckpt = cfg.T
    b_eval = np.maximum(b, 1)
    return step_time(
        sizes,
        job.seq_len,
        memory.terms.stepped,
        method,
        quant,
        shard,
        ckpt,
        hw.n_gpus[hi],
        b_eval,
        np.ceil(job.global_batch_size / (b_eval * hw.n_gpus[hi])).astype(np.int64),
        hw.peak_tflops[hi],
        hw.utilization[hi],
        hw.memory_bandwidth_gb_per_s[hi],
        hw.bus_gb_per_s[hi],
        job.memory_options().dequant_kernel,
        job.host_speed,
    )


def _hours(job: JobSpec, sizes: ModelSizes, cfg: I, st: StepTime) -> tuple[F, F]:
    """(training hours, evaluation hours) of each pair at its step time."""
    method, _, _, ckpt = cfg.T
    train_h = job.train_tokens / job.real_token_fraction / st.tokens_per_s / 3600.0
    # Evaluation passes run the forward alone over eval_fraction of the training tokens.
    total_flops = flops_per_token(sizes, job.seq_len, method, ckpt)
    fwd_flops = flops_per_token(sizes, job.seq_len, method, np.zeros_like(ckpt)) / np.where(method == FULL, 3.0, 2.0)
    return train_h, train_h * job.eval_fraction * fwd_flops / total_flops


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


def _final_save_hours(final_bytes: F) -> F:
    out: F = final_bytes / (k.CHECKPOINT_WRITE_GB_PER_S.value * 1e9) / 3600.0
    return out


def _startup_hours(job: JobSpec, sizes: ModelSizes, arr: OfferArrays, offer: I, load_h: F | float) -> F:
    """Provisioning, environment, base-model download and loading (`load_h`), per offer."""
    download_h = sizes.total_params * 2.0 / (job.download_mb_per_s * 1e6) / 3600.0
    env_h = k.ENVIRONMENT_SETUP_MINUTES.value / 60.0
    out: F = arr.provisioning_h[offer] + env_h + download_h + load_h
    return out


def run_inputs(
    job: JobSpec, opts: MemoryOptions, sizes: ModelSizes, arr: OfferArrays, c: Candidates, physics: Physics
) -> Runs:
    per_cfg = _config_sizes(sizes, opts)
    startup_h = _startup_hours(job, sizes, arr, c.offer, per_cfg.load_h[c.cfg])
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
        final_save_h=_final_save_hours(final_bytes),
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
        step_h=physics.step.step_s[c.pair[idx]] / 3600.0,
    )
    return Runs(startup_h, rate, idx, inputs)


def same_time_rows(arr: OfferArrays, rows: Rows) -> tuple[I, I]:
    """(first row of each class, class of each row): rows of one class have the same hardware
    setup (which includes the node count), market and time facts, hence the same time inputs."""
    facts = [np.nan_to_num(getattr(arr, name)[rows.offer].astype(np.float64), nan=-1.0) for name in TIME_FACTS]
    cols = np.stack([rows.hw.astype(np.float64), *facts, rows.market.astype(np.float64)], axis=1)
    return unique_rows(cols)


# --- before pricing: what a candidate takes at least ---------------------------------------------


@dataclass(frozen=True)
class Unpriced:
    """Stages 1-3 of a job and each candidate's start-up: all that the lower bounds read."""

    rows: Rows
    physics: Physics
    candidates: Candidates
    startup_h: F  # of every candidate
    finish_h: F  # training, evaluation and the final save of every candidate


def unpriced(job: JobSpec, catalog: Catalog, arr: OfferArrays, arch: ModelArch, rows: Rows | None = None) -> Unpriced:
    """The job's candidates before pricing (twins pruned as `plan` prunes them). `arr` are the
    job's planning arrays of the catalog's offers, `arch` its resolved architecture; `rows` its
    offer rows where the caller has them."""
    opts = job.memory_options()
    sizes = ModelSizes.of(arch, job.lora_rank, job.lora_targets, opts.framework)
    rows = offer_rows(job, catalog, arr, prune=True) if rows is None else rows
    physics = pair_physics(job, opts, sizes, rows.hardware)
    c = candidates(rows, physics)
    per_cfg = _config_sizes(sizes, opts)
    finish_h = physics.train_h[c.pair] + physics.eval_h[c.pair] + _final_save_hours(per_cfg.final_bytes[c.cfg])
    return Unpriced(rows, physics, c, _startup_hours(job, sizes, arr, c.offer, per_cfg.load_h[c.cfg]), finish_h)


def least_row_hours_and_usd(job: JobSpec, arch: ModelArch, arr: OfferArrays, rows: Rows) -> tuple[F, F]:
    """`least_hours_and_usd` of each row before its configurations are known: its start-up with
    the quickest-loading configuration and no work. No candidate of a row has lower bounds."""
    opts = job.memory_options()
    sizes = ModelSizes.of(arch, job.lora_rank, job.lora_targets, opts.framework)
    startup_h = _startup_hours(job, sizes, arr, rows.offer, float(_config_sizes(sizes, opts).load_h.min()))
    od, spot = arr.on_demand[rows.offer], arr.interruptible[rows.offer]
    return least_hours_and_usd(startup_h, np.zeros_like(startup_h), rows.n_gpus, rows.market, od, spot)


def least_hours_and_usd(
    startup_h: F, work_h: F, n_gpus: I, market: I, od_usd_per_gpu_h: F, spot_usd_per_gpu_h: F
) -> tuple[F, F]:
    """Per candidate, what every run of it takes at least, however its market goes: hours of
    start-up and work (training, and evaluation and the final save where known), and those hours
    on all its GPUs at the cheaper price its market may pay (a fallback pays either). Finish
    quantiles and cost quantiles are never below them: a run does all of its work once, each hour
    billed at one of its prices, and the other cost items (rework, storage, trials, ...) only add."""
    price = np.where(
        market == OD,
        od_usd_per_gpu_h,
        np.where(market == SPOT, spot_usd_per_gpu_h, np.fmin(od_usd_per_gpu_h, spot_usd_per_gpu_h)),
    )
    hours = startup_h + work_h
    usd: F = hours * n_gpus * price
    return hours, usd


def unpriced_bounds(u: Unpriced, arr: OfferArrays) -> tuple[F, F]:
    """`least_hours_and_usd` of every candidate of `u`."""
    c = u.candidates
    return least_hours_and_usd(
        u.startup_h, u.finish_h, c.n_gpus, c.market, arr.on_demand[c.offer], arr.interruptible[c.offer]
    )
