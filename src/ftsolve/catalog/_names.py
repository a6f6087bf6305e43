"""Canonical GPU names and the mapping from each provider's spelling.

Providers spell GPUs many ways ('A100-80GB', 'A100-80G-PCIe', 'nvidia-tesla-a100 (A100 40GB)',
'1x-H100_NVL-…'). "H100" means SXM on one cloud and PCIe on another, so the instance type and
the memory size are read too. Rules are ordered; the first match wins. A result whose memory
is more than 15% off the canonical card's is rejected (a modified or mislabelled card).
"""

from __future__ import annotations

import re

# (pattern on the normalized GPU name, canonical id or a resolver key)
_SIMPLE: tuple[tuple[str, str], ...] = (
    (r"gb200", "gb200"),
    (r"b300", "b300"),
    (r"b200", "b200"),
    (r"mi325x", "mi325x"),
    (r"mi300x", "mi300x"),
    (r"mi250x", "mi250x"),
    (r"gaudi3", "gaudi3"),
    (r"gaudi2", "gaudi2"),
    (r"rtxpro6000|pro6000", "rtx-pro-6000-blackwell"),
    (r"6000ada|rtx6000ada", "rtx-6000-ada"),
    (r"4000sffada|rtx4000ada|4000ada", "rtx-4000-sff-ada"),
    (r"a6000", "rtx-a6000"),
    (r"rtx5090|5090", "rtx-5090"),
    (r"rtx4090|4090", "rtx-4090"),
    (r"rtx3090|3090", "rtx-3090"),
    (r"l40s", "l40s"),
    (r"l40", "l40"),
    (r"a10g", "a10g"),
    (r"a100", "@a100"),
    (r"a10(?!\d)", "a10"),
    (r"a40", "a40"),
    (r"l4(?!\d)", "l4"),
    (r"t4(?!\d)", "t4"),
    (r"gh200", "@gh200"),
    (r"h200", "@h200"),
    (r"h100", "@h100"),
    (r"v100", "@v100"),
)

_EXCLUDED = re.compile(
    r"a800|h800|rtxpro4000|pro4000|rtx6000(?!ada)|quadro|a16|a30|a2000|a4000|a4500|a5000|"
    r"5000ada|2000ada|3060|3070|3080|4060|4070|4080|5080"
)


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def resolve_gpu(
    name: str,
    memory_gib: float | None = None,
    hint: str = "",
    gpus_per_node: int = 1,
    known_memory_gib: dict[str, float] | None = None,
) -> str | None:
    """Map a provider's GPU spelling to a canonical id, or None when it is not a card we model.

    `hint` is extra text such as the instance type; it settles SXM versus PCIe.
    """
    # Drop memory sizes ("L4 24GB", "A100-80G") so that their digits don't glue onto the model
    # name, but keep the size as the memory hint when none was given.
    size_re = re.compile(r"(?<![a-z0-9])(\d+)\s*(?:gib|gb|g)\b", re.IGNORECASE)
    size = size_re.search(name)
    if size and memory_gib is None:
        memory_gib = float(size.group(1))
    n = _norm(size_re.sub(" ", name))
    text = n + " " + _norm(hint)
    if _EXCLUDED.search(n) and not re.search(r"rtx6000ada|6000ada|pro6000", n):
        return None
    for pattern, target in _SIMPLE:
        if re.search(pattern, n):
            gpu = _special(target, n, text, memory_gib, gpus_per_node) if target[0] == "@" else target
            break
    else:
        return None
    if gpu and memory_gib and known_memory_gib and gpu in known_memory_gib:
        nominal = known_memory_gib[gpu]
        if abs(memory_gib - nominal) / nominal > 0.15:
            return None
    return gpu


def _special(target: str, n: str, text: str, mem: float | None, count: int) -> str | None:
    if target == "@a100":
        big = (mem is not None and mem >= 60) or "80g" in n
        size = "80gb" if big else "40gb"
        if "pcie" in text:
            form = "pcie"
        elif "sxm" in text or "nvlink" in text:
            form = "sxm"
        else:
            # Unlabelled A100s: 8-GPU nodes are HGX boards (SXM); GCP a2 and AWS p4 are SXM too.
            form = "sxm" if count >= 8 or re.search(r"(^| )a2|p4d|nd96", text) else "pcie"
        return f"a100-{form}-{size}"
    if target == "@h100":
        if re.search(r"nvl(?!ink)", text) or (mem is not None and mem > 90):
            return "h100-nvl"
        if "pcie" in text:
            return "h100-pcie"
        return "h100-sxm"
    if target == "@h200":
        return "h200-nvl" if re.search(r"nvl(?!ink)", text) else "h200-sxm"
    if target == "@gh200":
        return "gh200-144gb" if mem is not None and mem > 120 else "gh200-96gb"
    if target == "@v100":
        if (mem is not None and mem > 24) or "32g" in n:
            return "v100-sxm2-32gb"
        return "v100-pcie-16gb" if "pcie" in text or "fhhl" in text else "v100-sxm2-16gb"
    return None
