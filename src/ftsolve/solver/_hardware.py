"""What the physics reads of a GPU setup (GPU type, GPU count, nodes, network), as arrays.

The candidate table computes it once per distinct setup of its rows; a time estimate is the same
computation on one row, so both use one bus-bandwidth formula and one usable-memory share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog import GpuSpec
from ftsolve.solver import _coefficients as k
from ftsolve.solver._throughput import bus_gb_per_s, intra_node_bus_gb_per_s, utilization

F = NDArray[np.float64]
I = NDArray[np.int64]
B = NDArray[np.bool_]


@dataclass(frozen=True)
class Hardware:
    """One entry per GPU setup."""

    gpu: I  # index into the GPU specs the setups were built from
    n_gpus: I
    nodes: I
    usable_bytes: F  # per GPU
    peak_tflops: F  # dense 16-bit tensor peak; 1 where the catalog has none (masked by TIMING_RULES)
    utilization: F
    memory_bandwidth_gb_per_s: F
    bus_gb_per_s: F
    nvidia: B
    timed: B  # the catalog knows the tensor peak and the memory bandwidth
    bf16: B

    def __len__(self) -> int:
        return int(self.gpu.shape[0])


def usable_gib(spec: GpuSpec) -> float:
    """The memory a training process can allocate on one GPU: the total the device reports less
    what the driver keeps (the CUDA context is counted in the peak), or a share of the nominal size
    for a GPU without a reported total."""
    if spec.visible_memory_mib is not None:
        return (spec.visible_memory_mib - k.DRIVER_RESERVED_MIB.value) / 1024.0
    return spec.memory_gib * k.USABLE_MEMORY_FRACTION.value


def hardware(specs: Sequence[GpuSpec], gpu: I, n_gpus: I, nodes: I, inter_node_gbit: F) -> Hardware:
    """The setups (specs[gpu[i]] × n_gpus[i] over nodes[i] linked at inter_node_gbit[i])."""

    def per_gpu(values: list[float] | list[bool], dtype: type) -> NDArray[Any]:
        out: NDArray[Any] = np.array(values, dtype=dtype)[gpu]  # once per GPU type, then gathered
        return out

    intra = np.array([intra_node_bus_gb_per_s(g) for g in specs], dtype=np.float64)
    return Hardware(
        gpu=gpu,
        n_gpus=n_gpus,
        nodes=nodes,
        usable_bytes=per_gpu([usable_gib(g) for g in specs], np.float64) * k.GIB,
        peak_tflops=per_gpu([g.tensor_tflops or 1.0 for g in specs], np.float64),
        utilization=per_gpu([utilization(g).value for g in specs], np.float64),
        memory_bandwidth_gb_per_s=per_gpu([g.memory_bandwidth_gb_per_s or 1.0 for g in specs], np.float64),
        bus_gb_per_s=bus_gb_per_s(intra[gpu], nodes, inter_node_gbit),
        nvidia=per_gpu([g.vendor == "nvidia" for g in specs], bool),
        timed=per_gpu([g.tensor_tflops is not None and g.memory_bandwidth_gb_per_s is not None for g in specs], bool),
        bf16=per_gpu([g.supports_bf16 for g in specs], bool),
    )
