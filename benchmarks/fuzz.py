"""Robustness fuzz (issue 17): random CLI invocations and random library jobs, failures counted by kind.

    python benchmarks/fuzz.py [--cli 10000] [--jobs 10000] [--seed 0]

The CLI side builds argv from the real click commands and options (`plan`, `compare`, `pareto`,
`explain`, `export`, `estimate`, `catalog`, `models`, `schema`) with values from a sane pool and a
hostile one (1e400, 400- and 5000-digit integers, nan, inf, -1, 0, empty strings, unicode, rich
markup, newlines, spreadsheet formulas, unknown names, /dev/null, non-UTF-8 files, YAML alias
bombs) and runs each in-process through click's CliRunner. Invariants: no traceback, exit code
0, 1 or 2, exactly one line of error output on exit 2, JSON output that parses (no NaN), error
output not blown up far beyond the input.

The library side plans random jobs (`JobSpec.build`, sane and hostile fields) on random small
catalogs: either an FtsolveError, or plans that pass `check_plan` with every cost, price, hour and
memory figure finite and non-negative and the cost within the budget.

Deterministic under --seed (random.Random). Prints a table of counts, the distinct failures of
each kind with a reproducer, and as its last line the counts in one line. tests/test_fuzz.py
drives the same generators and checks with hypothesis.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import inspect
import json
import math
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import click
from click.testing import CliRunner
from pydantic import ValidationError

import ftsolve
from ftsolve import Catalog, FtsolveError, JobSpec, NoFeasiblePlan, Offer, load_catalog
from ftsolve.cli._main import cli

SLOW_S = 5.0  # a run longer than this is a failure ("slow")
HARD_TIMEOUT_S = 60.0  # a run is interrupted (where Python can be) after this
CONFIGS = Path(__file__).resolve().parents[1] / "tests" / "configs"

TRACEBACK = "tracebacks"
BAD_EXIT = "bad exit codes"
MULTILINE = "multi-line errors"
BAD_PLAN = "bad plans"
BAD_JSON = "invalid JSON output"
OVERSIZED = "oversized errors"
SLOW = "slow (>5 s)"
KINDS = (TRACEBACK, BAD_EXIT, MULTILINE, BAD_PLAN, BAD_JSON, OVERSIZED, SLOW)


# ---------------------------------------------------------------------------------------------
# Value pools
# ---------------------------------------------------------------------------------------------

HOSTILE_NUMBERS = (
    "0",
    "-1",
    "-0",
    "1e400",
    "-1e400",
    "1e-400",
    "9" * 400,
    "-" + "9" * 400,
    "9" * 5000,
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "",
    " ",
    "0x10",
    "1_000",
    "١٢",  # Arabic-Indic digits
    "²",  # str.isdigit() is True, int() refuses it
    "1e18",
    "9223372036854775808",
    "0.0000001",
    "3.5",
)
HOSTILE_TEXT = (
    "",
    " ",
    ",",
    ",,,",
    "acme[/]",
    "[bold red]x[/]",
    "[link=https://evil.example]x[/link]",
    '=HYPERLINK("https://evil.example","x")',
    "+cmd|' /C calc'!A0",
    "a\nb",
    "a\r\nb",
    "\x1b[2J\x1b[31mred",
    "ünïcödé",
    "模型",
    "😀",
    "\u202egnp.exe",
    "\udcff",  # a non-UTF-8 byte of argv, as Python decodes it on Linux
    "x" * 3000,
    "%s%n%x",
    "{0}{name}",
    "../../../../etc/passwd",
    "-",
    "--",
    "--help",
    "null",
    "llama-3.1-9b",
    "h100",
    "aws=8",
    "aws=²",
    "50M",
)

MODELS = ("llama-3.1-8b", "qwen2.5-0.5b", "llama-3.2-1b", "mistral-7b", "llama-3.1-70b", "mixtral-8x7b", "qwen3-8b")
GPU_IDS = ("h100-sxm", "a100-sxm-80gb", "rtx-4090", "l40s", "mi300x", "t4", "b200", "v100-sxm2-16gb", "gaudi2")

# Sane values by click parameter name (or "command:name" where two commands differ).
SANE: dict[str, tuple[str, ...]] = {
    "model": (*MODELS, "LLaMA-3.1-8B"),
    "tokens": ("50M", "1B", "20m", "1000000", "2e9", "1.5B", "100k"),
    "seq_len": ("512", "2048", "4096", "8192"),
    "global_batch": ("1", "16", "64", "128"),
    "methods": ("full,lora,qlora", "lora", "qlora", "full", "lora,qlora", " lora , full "),
    "lora_rank": ("8", "16", "64"),
    "real_token_fraction": ("1.0", "0.7"),
    "eval_fraction": ("0", "0.1"),
    "trials": ("0", "2"),
    "trial_fraction": ("0.05", "0.5"),
    "failure_prob": ("0", "0.2"),
    "deadline": ("24h", "90m", "2d", "1w", "8", "0.5h"),
    "budget": ("300", "$1.2k", "50", "5000usd", "$25"),
    "confidence": ("0.9", "0.5", "0.99"),
    "markets": ("on-demand", "interruptible", "fallback", "on-demand,interruptible,fallback", "interruptible,fallback"),
    "provider": ("aws", "runpod", "lambda", "gcp,aws", "vast", "RunPod"),
    "region": ("us-east-1", "eu-central-1", "us-east-1,us-west-2"),
    "country": ("US", "FI", "de", "US,CA"),
    "gpu": (*GPU_IDS, "rtx-4090,l40s", "h100-sxm,a100-sxm-80gb"),
    "estimate:gpu": GPU_IDS,
    "max_gpus": ("1", "8", "64"),
    "max_nodes": ("1", "2", "4"),
    "quota": ("aws=8", "aws=8,gcp=16", "runpod=1", "aws=0"),
    "time_value": ("0", "10", "100"),
    "max_age_days": ("180", "1", "100000"),
    "top": ("1", "5", "20"),
    "within": ("0.05", "0", "0.5"),
    "rank": ("1", "2", "5"),
    "points": ("2", "3", "6"),
    "params": ("7B", "70e9", "1.5b", "500M"),
    "micro_batch": ("1", "2", "8"),
    "grad_accum": ("1", "4", "16"),
    "gpus": ("1", "2", "8"),
    "nodes": ("1", "2"),
    "network_gbit": ("100", "400", "3200"),
    "lora_dropout": ("0", "0.1"),
    "min_memory": ("24", "80", "0"),
    "limit": ("5", "40", "0"),
    "family": ("llama", "qwen3", "qwen2", "mistral"),
    "catalog:name": ("h100-sxm", "H100", "A100-SXM4-80GB", "rtx-4090", "aws/on-demand/spot/g4dn.xlarge/eu-central-1"),
    "models:name": MODELS,
    "price_date": ("2026-01-01", "2025-06-30"),
}

# The largest (or smallest) values the validation lets through: hostile for time and memory.
BOUNDS: dict[str, tuple[str, ...]] = {
    "max_gpus": ("4096",),
    "max_nodes": ("512",),
    "seq_len": ("1048576",),
    "lora_rank": ("4096",),
    "trials": ("1000",),
    "points": ("200",),
    "top": ("1000", "1000000"),
    "rank": ("1000",),
    "global_batch": ("1000000000",),
    "micro_batch": ("1000000",),
    "grad_accum": ("1000000",),
    "gpus": ("4096", "100000"),
    "nodes": ("512", "100000"),
    "limit": ("1000000",),
    "tokens": ("1e15", "999T"),
    "deadline": ("0.000001h", "99999999999d"),
    "budget": ("0.01", "999999999999"),
    "within": ("10",),
    "confidence": ("0.999999",),
    "time_value": ("1e300",),
    "max_age_days": ("-100000", "99999999999"),
    "min_memory": ("1e308",),
    "network_gbit": ("1e-300", "1e308"),
    "lora_dropout": ("0.999999",),
    "failure_prob": ("0.999999",),
    "eval_fraction": ("10",),
    "trial_fraction": ("1e-300",),
    "real_token_fraction": ("1e-300",),
}

# ---------------------------------------------------------------------------------------------
# Files handed to the CLI
# ---------------------------------------------------------------------------------------------


def _alias_bomb(field_name: str, depth: int) -> str:
    """A "billion laughs" YAML: `field_name` is a list of 9**depth leaves through aliases (anchors in `regions`)."""
    levels = ['&l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    levels += [f"&l{d} [{','.join([f'*l{d - 1}'] * 9)}]" for d in range(1, depth)]
    return (
        f"model: llama-3.1-8b\ntrain_tokens: 50M\nseq_len: 2048\nregions: [{', '.join(levels)}]\n"
        f"{field_name}: *l{depth - 1}\n"
    )


_OFFER_HEADER = (
    "provider,tier,instance_type,gpu,source_gpu_name,gpus_per_node,on_demand_usd_per_gpu_hour,"
    "interruptible_usd_per_gpu_hour,billing,region,country,storage_usd_per_gb_month,interruption_rate_per_hour,"
    "price_date,price_date_estimated,source,notes"
)


def _offer_row(provider: str = "fuzzcloud", od: str = "2.0", spot: str = "0.8", **kw: str) -> str:
    row = {
        "provider": provider,
        "tier": "t",
        "instance_type": kw.get("instance", "inst-1"),
        "gpu": kw.get("gpu", "h100-sxm"),
        "source_gpu_name": "H100",
        "gpus_per_node": kw.get("per_node", "8"),
        "od": od,
        "spot": spot,
        "billing": kw.get("billing", "per-second"),
        "region": kw.get("region", "us-east-1"),
        "country": kw.get("country", "US"),
        "storage": kw.get("storage", ""),
        "rate": kw.get("rate", ""),
        "date": kw.get("date", "2026-10-01"),
        "estimated": "false",
        "source": "fuzz",
        "notes": "",
    }
    return ",".join(row.values())


@dataclass(frozen=True)
class Files:
    """Paths the CLI fuzz hands to --job, --config, --offers, --out and --plot (and PATH arguments)."""

    root: Path
    jobs_ok: tuple[str, ...]
    jobs_bad: tuple[str, ...]
    configs_ok: tuple[str, ...]
    configs_bad: tuple[str, ...]
    offers_ok: tuple[str, ...]
    offers_bad: tuple[str, ...]
    outputs: tuple[str, ...]
    plots: tuple[str, ...]


@functools.cache
def make_files(root: Path) -> Files:
    """Write the sane and hostile input files under `root` (output paths are under it too)."""
    root.mkdir(parents=True, exist_ok=True)

    def write(name: str, data: str | bytes) -> str:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)
        return str(p)

    base = "model: llama-3.1-8b\ntrain_tokens: 50M\nseq_len: 2048\n"
    jobs_ok = (
        write("job-ok.yaml", base + "deadline_hours: 24h\nbudget_usd: $300\n"),
        write("job-ok.toml", 'model = "qwen2.5-0.5b"\ntrain_tokens = "20M"\nseq_len = 1024\n'),
        write("job-bom.yaml", "\ufeff" + base),
        write("job-methods.yaml", base + "methods: [lora, qlora]\nmarkets: [on-demand]\nmax_gpus: 8\n"),
    )
    missing = str(root / "missing" / "nothing.yaml")
    folder = root / "a-folder"
    folder.mkdir(exist_ok=True)
    loop = root / "loop.yaml"
    with contextlib.suppress(OSError):
        if not loop.is_symlink():
            loop.symlink_to(loop)
    jobs_bad = (
        write("job-not-utf8.yaml", base.encode() + b"regions: [\xff\xfe]\n"),
        write(
            "job-latin1.yaml",
            "model: llama-3.1-8b\ntrain_tokens: 50M\nseq_len: 2048\nproviders: [caf\xe9]\n".encode("latin-1"),
        ),
        write("job-alias-bomb.yaml", _alias_bomb("train_tokens", 7)),
        write("job-alias-bomb-providers.yaml", _alias_bomb("providers", 7)),
        write("job-recursive-alias.yaml", "model: llama-3.1-8b\ntrain_tokens: &a [*a]\nseq_len: 2048\n"),
        write("job-recursive-map.yaml", "model: &m {name: *m}\ntrain_tokens: 50M\nseq_len: 2048\n"),
        write("job-deep.yaml", "model: " + "[" * 3000 + "]" * 3000 + "\n"),
        write("job-empty.yaml", ""),
        write("job-list.yaml", "- 1\n- 2\n"),
        write("job-scalar.yaml", "42\n"),
        write("job-huge-int.yaml", "model: llama-3.1-8b\ntrain_tokens: " + "9" * 5000 + "\nseq_len: 2048\n"),
        write("job-400-digits.yaml", "model: llama-3.1-8b\ntrain_tokens: 50M\nseq_len: " + "9" * 400 + "\n"),
        write("job-inf.yaml", base + "deadline_hours: .inf\nbudget_usd: .inf\n"),
        write("job-nan.yaml", base + "deadline_hours: .nan\nbudget_usd: .nan\ntime_value_usd_per_hour: .nan\n"),
        write("job-1e400.yaml", "model: llama-3.1-8b\ntrain_tokens: '1e400'\nseq_len: 2048\nbudget_usd: '1e400'\n"),
        write("job-9s.yaml", base + "deadline_hours: '" + "9" * 400 + "h'\nbudget_usd: '" + "9" * 400 + "'\n"),
        write("job-types.yaml", "model: 5\ntrain_tokens: [1]\nseq_len: {a: 1}\nmethods: lora\n"),
        write("job-unknown-field.yaml", base + "learning_rate: 0.1\n"),
        write("job-markup.yaml", "model: 'acme[/]'\ntrain_tokens: 50M\nseq_len: 2048\nproviders: ['[bold]x']\n"),
        write("job-markup-model.yaml", "model: '[red]x[/red]'\ntrain_tokens: 50M\nseq_len: 2048\n"),
        write("job-python-tag.yaml", "!!python/object/apply:os.getcwd []\n"),
        write("job-model-devnull.yaml", "model: /dev/null\ntrain_tokens: 50M\nseq_len: 2048\n"),
        write("job-model-folder.yaml", "model: ./a-folder\ntrain_tokens: 50M\nseq_len: 2048\n"),
        write("job-model-arch.yaml", "model: {name: x, hidden_size: 0}\ntrain_tokens: 50M\nseq_len: 2048\n"),
        write("job-quota.yaml", base + "gpu_quota: {aws: -1, '': " + "9" * 400 + "}\n"),
        write("job-tuple-str.yaml", base + "providers: aws\ngpus: h100-sxm\n"),
        write("job-bad.toml", "model = \n"),
        write("job-huge-int.toml", 'model = "llama-3.1-8b"\ntrain_tokens = ' + "9" * 5000 + "\nseq_len = 2048\n"),
        write("job-nan.toml", 'model = "llama-3.1-8b"\ntrain_tokens = "50M"\nseq_len = 2048\nbudget_usd = nan\n'),
        write("job\nnewline.yaml", b"\xff"),
        write("job[/]markup.yaml", b"\xff"),
        write("job-bad-yaml.yaml", "model: [unclosed\n"),
        write("job-tab.yaml", "model:\tllama\n\t- x\n"),
        "/dev/null",
        missing,
        str(folder),
        str(loop),
        "",
    )

    tiny = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
    }
    cfg_dir = root / "cfg-ok"
    cfg_dir.mkdir(exist_ok=True)
    (cfg_dir / "config.json").write_text(json.dumps(tiny))
    configs_ok = (
        str(cfg_dir),
        write("cfg-tiny.json", json.dumps(tiny)),
        *sorted(str(p) for p in CONFIGS.glob("*.json")),
    )

    def cfg(name: str, **changes: Any) -> str:
        return write(name, json.dumps({**tiny, **changes}))

    empty_dir = root / "cfg-empty-dir"
    empty_dir.mkdir(exist_ok=True)
    configs_bad = (
        write("cfg-not-utf8.json", b'{"hidden_size": "\xff"}'),
        write("cfg-nan.json", json.dumps(tiny).replace("256", "NaN", 1)),
        write("cfg-inf.json", json.dumps(tiny).replace("256", "1e400", 1)),
        write("cfg-huge-int.json", json.dumps(tiny).replace("256", "9" * 5000, 1)),
        write("cfg-400-digits.json", json.dumps(tiny).replace("1000", "9" * 400, 1)),
        cfg("cfg-negative.json", hidden_size=-256),
        cfg("cfg-zero-heads.json", num_attention_heads=0),
        cfg("cfg-zero-kv.json", num_key_value_heads=0),
        cfg("cfg-float.json", hidden_size=256.5),
        cfg("cfg-string.json", hidden_size="256"),
        cfg("cfg-bool.json", hidden_size=True),
        cfg("cfg-list.json", hidden_size=[256]),
        cfg("cfg-huge-model.json", hidden_size=2**40, num_hidden_layers=2**20, vocab_size=2**40),
        cfg("cfg-moe-bad.json", model_type="mixtral", num_local_experts=0, num_experts_per_tok=8),
        cfg("cfg-moe-huge.json", model_type="qwen2_moe", num_experts=10**9, num_experts_per_tok=10**9),
        cfg("cfg-markup.json", _name_or_path="acme[/]", model_type="[bold]x"),
        write("cfg-top-list.json", "[1, 2]"),
        write("cfg-empty.json", ""),
        write("cfg-empty-object.json", "{}"),
        write("cfg-deep.json", "[" * 100_000 + "]" * 100_000),
        str(empty_dir),
        "/dev/null",
        missing,
        "",
    )

    good_rows = [_offer_row(), _offer_row(instance="inst-2", gpu="rtx-4090", per_node="1", od="0.5", spot="0.3")]
    offers_ok = (
        write("offers-ok.csv", "\n".join([_OFFER_HEADER, *good_rows]) + "\n"),
        write(
            "offers-ok.yaml",
            "- {provider: fuzzcloud, tier: t, instance_type: y1, gpu: l40s, source_gpu_name: L40S, gpus_per_node: 4,"
            " on_demand_usd_per_gpu_hour: 1.1, region: eu-west, country: FI, price_date: 2026-10-01, source: fuzz}\n",
        ),
    )

    def offers_csv(name: str, *rows: str) -> str:
        return write(name, "\n".join([_OFFER_HEADER, *rows]) + "\n")

    offers_bad = (
        offers_csv("offers-nan.csv", _offer_row(od="nan", spot="")),
        offers_csv("offers-inf.csv", _offer_row(od="inf", spot="inf")),
        offers_csv("offers-1e400.csv", _offer_row(od="1e400", spot="")),
        offers_csv("offers-negative.csv", _offer_row(od="-1", spot="")),
        offers_csv("offers-zero.csv", _offer_row(od="0", spot="0")),
        offers_csv("offers-tiny.csv", _offer_row(od="1e-300", spot="")),
        offers_csv("offers-huge.csv", _offer_row(od="1e300", spot="")),
        offers_csv("offers-spot-above.csv", _offer_row(od="1", spot="2")),
        offers_csv("offers-per-node-0.csv", _offer_row(per_node="0")),
        offers_csv("offers-per-node-huge.csv", _offer_row(per_node="9" * 400)),
        offers_csv("offers-bad-date.csv", _offer_row(date="2026-13-45")),
        offers_csv("offers-unknown-gpu.csv", _offer_row(gpu="nonexistent-gpu")),
        offers_csv(
            "offers-markup.csv", _offer_row(provider="acme[/]"), _offer_row(provider="=HYPERLINK(x)", instance="i2")
        ),
        offers_csv("offers-rate.csv", _offer_row(rate="1e300", storage="1e300")),
        offers_csv("offers-billing.csv", _offer_row(billing="per-fortnight")),
        offers_csv("offers-short-row.csv", "fuzzcloud,t"),
        offers_csv("offers-duplicate.csv", _offer_row(), _offer_row()),
        write("offers-header-only.csv", _OFFER_HEADER + "\n"),
        write("offers-no-header.csv", _offer_row() + "\n"),
        write("offers-not-utf8.csv", (_OFFER_HEADER + "\n").encode() + b"\xff\xfe,x\n"),
        write("offers-alias-bomb.yaml", _alias_bomb("offers", 7)),
        write("offers-recursive.yaml", "offers: &a [*a]\n"),
        write("offers-scalar.yaml", "42\n"),
        write("offers-bad.yaml", "- {provider: [\n"),
        write("offers-empty.csv", ""),
        write(
            "offers-skypilot.csv",
            "InstanceType,AcceleratorName,AcceleratorCount,Price,SpotPrice,Region\nx,H100,8,nan,-1,r\n",
        ),
        write("offers\nnewline.csv", b"\xff"),
        "/dev/null",
        missing,
        str(folder),
        str(loop),
        "",
    )

    target = root / "out-target.yaml"
    target.write_text("old\n")
    link = root / "out-link.yaml"
    with contextlib.suppress(OSError):
        if not link.is_symlink():
            link.symlink_to(target)
    outputs = (
        str(root / "out" / "task.yaml"),
        str(root / "out-new.yaml"),
        str(root / "deep" / "er" / "out.yaml"),
        str(link),
        str(folder),
        str(root / "out\nnewline.yaml"),
        str(root / "out[/]markup.yaml"),
        str(root / "loop.yaml"),
        str(root / "job-ok.yaml" / "below-a-file.yaml"),
        "",
    )
    plots = (
        str(root / "plot.svg"),
        str(root / "plot.png"),
        str(root / "plot.txt"),
        str(root / "plot"),
        str(root / "plots" / "x.SVG"),
        str(link),
        str(folder),
        str(root / "job-ok.yaml" / "below-a-file.svg"),
        "",
    )
    return Files(root, jobs_ok, jobs_bad, configs_ok, configs_bad, offers_ok, offers_bad, outputs, plots)


# ---------------------------------------------------------------------------------------------
# CLI cases
# ---------------------------------------------------------------------------------------------

JOB_COMMANDS = ("plan", "compare", "pareto", "explain", "export")
# (argv prefix, weight)
COMMANDS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("plan",), 8),
    (("compare",), 3),
    (("pareto",), 2),
    (("explain",), 3),
    (("export", "skypilot"), 2),
    (("export", "accelerate"), 1),
    (("export", "axolotl"), 1),
    (("estimate", "memory"), 3),
    (("estimate", "time"), 3),
    (("catalog", "validate"), 2),
    (("catalog", "import"), 1),
    (("catalog", "show"), 2),
    (("catalog", "list"), 2),
    (("models", "list"), 1),
    (("models", "show"), 1),
    (("schema", "job"), 1),
    (("schema", "plan"), 1),
    (("schema", "infeasible"), 1),
)
# Commands whose --json prints JSON on stdout (export ignores it).
JSON_COMMANDS = {"plan", "compare", "pareto", "explain", "estimate", "catalog", "models"}


@dataclass(frozen=True)
class CliCase:
    argv: tuple[str, ...]
    json: bool = False  # --json was passed as a flag, so stdout must be JSON


def _command(path: Sequence[str]) -> click.Command:
    cmd: click.Command = cli
    for name in path:
        if not isinstance(cmd, click.Group) or name not in cmd.commands:
            break  # an argument (export's KIND, schema's WHAT)
        cmd = cmd.commands[name]
    return cmd


def _sane(path: Sequence[str], name: str) -> tuple[str, ...] | None:
    return SANE.get(f"{path[0]}:{name}") or SANE.get(name)


def _value(rng: random.Random, path: Sequence[str], param: click.Parameter, files: Files, hostile: bool) -> str:
    """One value for an option or argument taking a value."""
    name = param.name or ""
    if name in ("job",):
        return rng.choice(files.jobs_bad if hostile else files.jobs_ok)
    if name in ("config", "config_path"):
        return rng.choice(files.configs_bad if hostile else files.configs_ok)
    if name in ("offers", "offers_path", "path"):
        return rng.choice(files.offers_bad if hostile else files.offers_ok)
    if name == "out":
        return rng.choice(files.outputs)
    if name == "plot":
        return rng.choice(files.plots)
    ptype = param.type
    if isinstance(ptype, click.Choice):
        if hostile:
            return rng.choice((*HOSTILE_TEXT, str(rng.choice(ptype.choices)).upper()))
        return str(rng.choice(ptype.choices))
    numeric = isinstance(ptype, (click.types.IntParamType, click.types.FloatParamType))
    if hostile and name in BOUNDS and rng.random() < 0.3:
        return rng.choice(BOUNDS[name])
    if hostile:
        return rng.choice(HOSTILE_NUMBERS if numeric or rng.random() < 0.3 else HOSTILE_TEXT)
    sane = _sane(path, name)
    if sane:
        return rng.choice(sane)
    return rng.choice(("1", "2")) if numeric else rng.choice(HOSTILE_TEXT)


def cli_case(rng: random.Random, files: Files) -> CliCase:
    """A random argv built from the real commands and options, values from the sane and hostile pools.

    About a third of the cases are sane throughout; in the others each value is hostile with some chance.
    """
    hostile_share = rng.choice((0.0, 0.0, 0.2, 0.35, 0.6))
    path = rng.choices([c for c, _ in COMMANDS], weights=[w for _, w in COMMANDS])[0]
    cmd = _command(path)
    args: list[str] = list(path)
    json_flag = False
    options = [p for p in cmd.params if isinstance(p, click.Option) and "--help" not in p.opts]
    by_name = {p.name: p for p in options}

    def add(name: str, hostile: bool = False) -> None:
        p = by_name.get(name)
        if p is not None:
            args.extend((p.opts[0], _value(rng, path, p, files, hostile)))

    # Mostly a complete job, so that most runs get past the required inputs.
    if path[0] in JOB_COMMANDS:
        r = rng.random()
        if r < 0.1:
            add("job")
        elif r < 0.17:
            add("config")
            add("tokens")
            add("seq_len")
        elif r < 0.92:
            for name in ("model", "tokens", "seq_len"):
                if rng.random() < 0.95:
                    add(name)
    elif path[0] == "estimate":
        if rng.random() < 0.85:
            r = rng.random()
            add("model" if r < 0.8 else "config" if r < 0.9 else "params")
        if path[1] == "time" and rng.random() < 0.9:
            add("gpu")
    # Positional arguments (PATH, NAME) beyond the command path.
    for p in cmd.params:
        if isinstance(p, click.Argument) and p.name not in ("kind", "what") and (p.required or rng.random() < 0.7):
            args.append(_value(rng, path, p, files, rng.random() < hostile_share))
    for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 4, 6))):
        if not options:
            break
        p = rng.choice(options)
        if p.is_flag and not p.count:
            flag = rng.choice([*p.opts, *p.secondary_opts])
            args.append(flag)
            json_flag = json_flag or flag == "--json"
        else:
            args.extend((rng.choice(p.opts), _value(rng, path, p, files, rng.random() < hostile_share)))
    if rng.random() < 0.03:
        args.insert(rng.randrange(1, len(args) + 1), rng.choice(("--bogus", "stray", "-x", "--json=1")))
    if path == ("catalog", "import"):
        args.append("--dry-run")  # never write the user catalog
    return CliCase(tuple(args), json=json_flag and path[0] in JSON_COMMANDS)


SANE_JOB = ("--model", "llama-3.1-8b", "--tokens", "50M", "--seq-len", "2048")
TARGET_NUMBERS = ("1e400", "9" * 400, "9" * 5000, "nan", "inf", "-1", "0", "", "²")
TARGET_TEXT = ("", "aws=²", "acme[/]", "a\nb", "\udcff", "9" * 400, '=HYPERLINK("x")')


def targeted_cases(files: Files, values: bool = True) -> list[CliCase]:
    """Every hostile file once through the option that reads it; with `values`, also every option of
    `plan` and the `estimate`/`catalog`/`models` commands with a few hostile values each."""
    job = SANE_JOB
    cases: list[tuple[str, ...]] = []
    cases += [("plan", "--job", f) for f in files.jobs_bad]
    cases += [("plan", "--config", f, "--tokens", "50M", "--seq-len", "2048") for f in files.configs_bad]
    cases += [("estimate", "memory", "--config", f) for f in files.configs_bad]
    cases += [("models", "show", "--config", f) for f in files.configs_bad]
    cases += [("plan", *job, "--offers", f) for f in files.offers_bad]
    cases += [("catalog", "validate", f) for f in files.offers_bad]
    cases += [("catalog", "import", f, "--dry-run") for f in files.offers_bad]
    cases += [("export", "skypilot", *job, "--out", f) for f in files.outputs]
    cases += [("pareto", *job, "--points", "2", "--plot", f) for f in files.plots]
    if values:
        for path in (("plan",), ("estimate", "memory"), ("estimate", "time"), ("catalog", "list"), ("models", "show")):
            cmd = _command(path)
            base: tuple[str, ...] = {
                "plan": job,
                "estimate": ("--model", "llama-3.1-8b", "--gpu", "h100-sxm"),
                "models": ("llama-3.1-8b",),
            }.get(path[0], ())
            if path == ("estimate", "memory"):
                base = ("--model", "llama-3.1-8b")
            for p in cmd.params:
                if not isinstance(p, click.Option) or p.is_flag or p.name in ("job", "config", "offers", "offers_path"):
                    continue
                numeric = isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType))
                pool = (*TARGET_NUMBERS, *BOUNDS.get(p.name or "", ())) if numeric else TARGET_TEXT
                cases += [(*path, *base, p.opts[0], v) for v in pool if not isinstance(p.type, click.Choice)]
        for v in TARGET_TEXT:
            cases += [("catalog", "show", v), ("models", "show", v), ("models", "list", "--family", v)]
    return [CliCase(c, json="--json" in c) for c in cases]


# ---------------------------------------------------------------------------------------------
# Library cases
# ---------------------------------------------------------------------------------------------

_BASE = load_catalog(user=False)
TINY_ARCH = {
    "name": "tiny",
    "family": "llama",
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 1000,
}
INF, NAN = math.inf, math.nan
BIG = 10**400

# field: (sane values, hostile values)
JOB_FIELDS: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {
    "model": (
        ("qwen2.5-0.5b", "llama-3.2-1b", "llama-3.1-8b", "mistral-7b", "llama-3.1-70b", "mixtral-8x7b", TINY_ARCH),
        (
            "",
            "llama-3.1-9b",
            "acme[/]",
            "LLAMA-3.1-8B",
            5,
            None,
            {**TINY_ARCH, "hidden_size": 2**40, "num_layers": 2**20, "vocab_size": 2**40},
            {**TINY_ARCH, "num_layers": 10**6},
            {**TINY_ARCH, "num_kv_heads": 3},
            {**TINY_ARCH, "hidden_size": BIG},
            {**TINY_ARCH, "num_experts": 10**9, "experts_per_token": 10**9, "expert_intermediate_size": 10**9},
        ),
    ),
    "train_tokens": (
        (1_000_000, 50_000_000, 500_000_000, 2_000_000_000),
        (0, -1, 1, BIG, 10**18, 2**63, 10**30, INF, NAN, 1.5, "50M", True),
    ),
    "seq_len": ((512, 2048, 8192), (1, 1_048_576, 0, -5, BIG, NAN, 2.5)),
    "global_batch_size": ((1, 16, 64), (10**9, 10**18, 0, BIG)),
    "methods": ((("full", "lora", "qlora"), ("lora",), ("full",), ("qlora", "lora")), ((), ("fulll",), "lora")),
    "optimizer": (
        ("adamw", "adamw-fp32", "adamw-bf16", "adamw-8bit", "paged-adamw", "paged-adamw-8bit", "sgd", "adafactor"),
        ("adam", ""),
    ),
    "lora_rank": ((8, 16, 64), (4096, 1, 0, BIG)),
    "lora_targets": (("all-linear", "attention", "mlp", "qv"), ("none",)),
    "lora_dropout": ((0.0, 0.1), (0.999999, 1.0, NAN)),
    "stack": (("hf", "accelerate-fsdp", "deepspeed", "torchtune", "axolotl", "unsloth", "litgpt", "ms-swift"), ("tf",)),
    "adapter_dtype": ((None, "fp32", "bf16"), ("fp8",)),
    "train_embeddings": ((False, True), ()),
    "flash_attention": ((True, False), ()),
    "loss": ((None, "fp32-upcast", "bf16", "chunked", "fused"), ("fp64",)),
    "optimizer_in_backward": ((None, True, False), ()),
    "activation_offload": ((None, True, False), ()),
    "compile": ((None, True, False), ()),
    "variable_length": ((False, True), ()),
    "offload_optimizer": ((False, True), ()),
    "offload_params": ((False, True), ()),
    "quant_kernel": ((None, "bitsandbytes", "gptq", "torchao"), ("awq",)),
    "double_quant": ((True, False), ()),
    "quantized_head": ((None, True, False), ()),
    "deadline_hours": ((None, 1.0, 24.0, 200.0), (1e-300, 1e-9, 1e308, INF, NAN, 0, -1, BIG)),
    "budget_usd": ((None, 5.0, 300.0, 5000.0), (1e-300, 0.001, 1e308, INF, NAN, 0, -1, BIG)),
    "deadline_confidence": ((0.5, 0.9, 0.99), (0.999999999, 1.0, NAN, 0.0)),
    "objective": (("cost", "time", "weighted"), ("speed",)),
    "time_value_usd_per_hour": ((0.0, 10.0), (1e308, INF, NAN, 1e-300, -1)),
    "markets": (
        (("on-demand", "interruptible", "fallback"), ("on-demand",), ("interruptible",), ("fallback",)),
        ((), ("spot",)),
    ),
    "providers": ((None, ("alpha",), ("aws", "runpod")), ((), ("",), ("acme[/]",), ("模型",))),
    "regions": ((None, ("r1",)), ((), ("",))),
    "countries": ((None, ("US",), ("fi",)), (("",), ("ü",))),
    "eu_only": ((False, True), ()),
    "gpus": ((None, ("h100-sxm",), ("rtx-4090", "l40s")), ((), ("nonexistent",), ("",))),
    "max_gpus": ((1, 8, 64), (4096, 0, BIG)),
    "max_nodes": ((1, 2, 4), (512, 0)),
    "gpu_quota": (
        (None, {"alpha": 8}, {"aws": 0}),
        ({"alpha": -1}, {"alpha": BIG}, {"": 1}, {"alpha": 0, "beta": 0, "runpod": 0, "aws": 0}),
    ),
    "real_token_fraction": ((1.0, 0.7), (1e-300, 1e-9, NAN)),
    "eval_fraction": ((0.0, 0.1), (10.0, 1e-300)),
    "download_mb_per_s": ((200.0, 50.0), (1e-300, 1e-9, 1e308, INF)),
    "dataset_gb": ((1.0, 100.0), (0.0, 1e308, INF)),
    "retention_days": ((7.0, 0.0), (1e308, INF)),
    "trial_runs": ((0, 2), (1000,)),
    "trial_fraction": ((0.05, 0.5), (1e-300, 1.0)),
    "failure_probability": ((0.0, 0.2), (0.999999999, 1.0)),
}
OFFER_DEFAULTS: dict[str, Any] = {
    "provider": "alpha",
    "tier": "t",
    "gpu": "h100-sxm",
    "source_gpu_name": "x",
    "gpus_per_node": 8,
    "on_demand_usd_per_gpu_hour": 2.0,
    "interruptible_usd_per_gpu_hour": None,
    "billing": "per-second",
    "region": "r1",
    "country": "US",
    "price_date": dt.date(2026, 10, 1),
    "source": "fuzz",
}


def make_offer(index: int, **changes: Any) -> Offer:
    """An offer of the fuzz catalogs: OFFER_DEFAULTS with `changes` (a reproducer names only those)."""
    return Offer(**{**OFFER_DEFAULTS, "instance_type": f"inst-{index}", **changes})


def catalog_of(offers: Sequence[Offer]) -> Catalog:
    """A catalog with the bundled GPUs and models and only these offers."""
    return Catalog(gpus=_BASE.gpus, offers=tuple(offers), models=_BASE.models)


def _price(rng: random.Random) -> float:
    if rng.random() < 0.85:
        return round(rng.uniform(0.2, 8.0), 4)
    return rng.choice((1e-6, 0.001, 1000.0, 1e6, 1e12, INF))


def random_offer(rng: random.Random) -> dict[str, Any]:
    """make_offer's changes for one random offer (sane mostly, some extreme prices and rates)."""
    kw: dict[str, Any] = {
        "gpu": rng.choice((*GPU_IDS, rng.choice(list(_BASE.gpus)))),
        "gpus_per_node": rng.choice((1, 1, 2, 4, 8, 8, 16, 64)),
        "provider": rng.choice(("alpha", "beta", "runpod", "aws")),
        "billing": rng.choice(("per-second", "per-second", "per-minute", "per-hour", "monthly")),
        "region": rng.choice(("r1", "r2")),
        "country": rng.choice(("US", "FI", None)),
    }
    od: float | None = _price(rng)
    spot: float | None = _price(rng)
    r = rng.random()
    if r < 0.3:
        spot = None
    elif r < 0.45:
        od = None
    if od is not None and spot is not None and spot > od:
        spot = od * rng.choice((0.3, 1.0)) if math.isfinite(od) else spot
    kw["on_demand_usd_per_gpu_hour"] = od
    kw["interruptible_usd_per_gpu_hour"] = spot
    if rng.random() < 0.15:
        kw["interruption_rate_per_hour"] = rng.choice((0.0, 0.01, 0.5, 5.0, 100.0, 1e6))
    if rng.random() < 0.15:
        kw["storage_usd_per_gb_month"] = rng.choice((1e-6, 0.1, 1e3, 1e9))
    changes = {k: v for k, v in kw.items() if OFFER_DEFAULTS.get(k, object()) != v}
    # Values the Offer model refuses (its bounds may tighten) fall back to the defaults.
    for _ in range(len(changes) + 1):
        try:
            make_offer(0, **changes)
            break
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]} & set(changes)
            if not bad:
                changes = {}
            for name in bad:
                changes.pop(name)
            if "on_demand_usd_per_gpu_hour" in bad:
                changes["interruptible_usd_per_gpu_hour"] = None
    return changes


@dataclass(frozen=True)
class JobCase:
    fields: dict[str, Any]
    offers: tuple[dict[str, Any], ...]  # make_offer changes, one per offer
    engine: str = "scan"
    top: int = 5
    within: float | None = None


def job_case(rng: random.Random) -> JobCase:
    """A random job (JobSpec.build fields) on a random catalog of one to five offers.

    About half the jobs are sane throughout; the others carry one to three hostile values.
    """
    fields: dict[str, Any] = {}
    for name, (sane, _) in JOB_FIELDS.items():
        if name in ("model", "train_tokens", "seq_len") or rng.random() < 0.2:
            fields[name] = rng.choice(sane)
    if rng.random() < 0.02:
        del fields[rng.choice(("model", "train_tokens", "seq_len"))]  # a required field missing
    hostile = [name for name, (_, pool) in JOB_FIELDS.items() if pool]
    for name in rng.sample(hostile, rng.choice((0, 0, 0, 1, 1, 2, 3))):
        fields[name] = rng.choice(JOB_FIELDS[name][1])
    offers = tuple(random_offer(rng) for _ in range(rng.randint(1, 5)))
    engine = "cpsat" if rng.random() < 0.2 else "scan"
    top = rng.choice((1, 3, 5, 5, 5)) if rng.random() > 0.05 else rng.choice((0, -1, 1000))
    within = None if rng.random() < 0.85 else rng.choice((0.05, 0.0, 10.0, NAN, -0.1, INF))
    return JobCase(fields, offers, engine, top, within)


# ---------------------------------------------------------------------------------------------
# Running and checking
# ---------------------------------------------------------------------------------------------


class FuzzTimeout(BaseException):
    """Raised by the alarm when a run exceeds the hard timeout (a BaseException: not swallowed)."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def alarm(_sig: int, _frame: FrameType | None) -> None:
        raise FuzzTimeout(f"interrupted after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Outcome:
    seconds: float = 0.0
    exit_code: int | None = None
    result: str = ""  # jobs: "invalid job", "no feasible plan", "planned", "other FtsolveError", "exception"
    # (kind, signature for grouping, detail)
    problems: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, kind: str, signature: str, detail: str = "") -> None:
        self.problems.append((kind, signature, detail))


def _where(exc: BaseException) -> str:
    """The deepest frame of the traceback inside ftsolve (or the deepest at all)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/ftsolve/" in f.filename.replace("\\", "/")]
    if not (ours or frames):
        return "?"
    f = (ours or frames)[-1]
    path = f.filename.replace("\\", "/")
    short = path[path.rfind("/ftsolve/") + 1 :] if ours else Path(path).name
    return f"{short}:{f.lineno} {f.name}"


def _exception(exc: BaseException) -> tuple[str, str]:
    text = f"{type(exc).__name__}: {exc}"
    text = text if len(text) < 200 else text[:200] + "..."
    return f"{type(exc).__name__} at {_where(exc)}", text


def _normal(text: str, limit: int = 90) -> str:
    """A message with its values blanked, for grouping."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\d[\d.e+-]*", "N", text)
    return text[:limit]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def run_cli(case: CliCase, timeout_s: float = HARD_TIMEOUT_S) -> Outcome:
    """Invoke the CLI in-process and check the invariants."""
    out = Outcome()
    # click < 8.2 mixes stderr into stdout unless told not to; 8.2+ always keeps it apart.
    separate: dict[str, Any] = (
        {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters else {}
    )
    runner = CliRunner(**separate)
    start = time.perf_counter()
    try:
        with _time_limit(timeout_s), warnings.catch_warnings():
            warnings.simplefilter("error")  # as under pytest (filterwarnings = error)
            result = runner.invoke(cli, list(case.argv), prog_name="ftsolve")
    except FuzzTimeout:
        out.seconds = time.perf_counter() - start
        out.add(SLOW, "interrupted", f"interrupted after {out.seconds:.1f} s")
        return out
    out.seconds = time.perf_counter() - start
    out.exit_code = result.exit_code
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        out.add(TRACEBACK, *_exception(exc))
    stderr = result.stderr
    for stream in (result.stdout, stderr):
        if "Traceback (most recent call last)" in stream:
            out.add(TRACEBACK, "traceback printed", stream[stream.find("Traceback") :][:200])
    if result.exit_code not in (0, 1, 2):
        out.add(BAD_EXIT, f"exit {result.exit_code}", stderr.strip()[-200:])
    if result.exit_code == 2:
        lines = [line for line in stderr.splitlines() if line.strip()]
        if len(lines) != 1:
            if lines and lines[0].startswith("Usage:"):
                error = next((line for line in lines if line.startswith("Error:")), lines[-1])
                signature = "click usage error (Usage/Try/Error block): " + _normal(error, 60)
            else:
                signature = f"{len(lines)} lines: " + _normal(lines[0] if lines else "(no error output)", 60)
            out.add(MULTILINE, signature, " | ".join(lines)[:300])
    limit = 4096 + 2 * sum(len(a) for a in case.argv)
    if result.exit_code == 2 and len(stderr) > limit:
        out.add(OVERSIZED, f"stderr > {limit} chars", f"{len(stderr)} chars: {stderr[:120]!r}...")
    # --help (anywhere, as click reads it) prints the help text, whatever else was asked for.
    asked_help = any(a in ("--help", "-h", "--help-all") for a in case.argv)
    if case.json and not asked_help and result.exit_code in (0, 1) and result.stdout.strip():
        try:
            json.loads(result.stdout, parse_constant=_reject_constant)
        except ValueError as err:
            out.add(BAD_JSON, f"{' '.join(case.argv[:2])}: {_normal(str(err), 50)}", str(err)[:200])
    if out.seconds > SLOW_S:
        out.add(SLOW, case.argv[0], f"{out.seconds:.1f} s")
    return out


def _plan_figures(p: ftsolve.Plan) -> dict[str, Any]:
    figures: dict[str, Any] = {"total_cost_usd": p.total_cost_usd, "price_usd_per_gpu_hour": p.price_usd_per_gpu_hour}
    figures |= {f"cost_items.{c.name}": c.usd for c in p.cost_items}
    figures |= {f"time.{k}": v for k, v in p.time.model_dump().items() if v is not None}
    figures |= {f"memory.{k}": v for k, v in p.memory.model_dump().items() if k != "components_gib"}
    figures |= {f"memory.components_gib.{k}": v for k, v in p.memory.components_gib.items()}
    return figures


def run_job(case: JobCase, timeout_s: float = HARD_TIMEOUT_S) -> Outcome:
    """Plan the job on its catalog and check every plan."""
    out = Outcome()
    start = time.perf_counter()
    try:
        with _time_limit(timeout_s), warnings.catch_warnings():
            warnings.simplefilter("error")
            _check_job(case, out)
    except FuzzTimeout:
        out.add(SLOW, "interrupted", f"interrupted after {time.perf_counter() - start:.1f} s")
    out.seconds = time.perf_counter() - start
    if out.seconds > SLOW_S and not any(k == SLOW for k, _, _ in out.problems):
        out.add(SLOW, "plan", f"{out.seconds:.1f} s")
    return out


def _check_job(case: JobCase, out: Outcome) -> None:
    catalog = catalog_of([make_offer(i, **o) for i, o in enumerate(case.offers)])
    try:
        job = JobSpec.build(**case.fields)
    except FtsolveError:
        out.result = "invalid job"
        return
    except Exception as exc:
        out.result = "exception"
        out.add(TRACEBACK, *_exception(exc))
        return
    try:
        result = ftsolve.plan(job, catalog, engine=case.engine, top=case.top, within=case.within)
    except NoFeasiblePlan:
        out.result = "no feasible plan"
        return
    except FtsolveError:
        out.result = "other FtsolveError"
        return
    except Exception as exc:
        out.result = "exception"
        out.add(TRACEBACK, *_exception(exc))
        return
    out.result = "planned"
    for p in result.plans:
        try:
            issues = ftsolve.check_plan(job, catalog, p)
        except Exception as exc:
            signature, text = _exception(exc)
            out.add(BAD_PLAN, f"check_plan raised {signature}", text)
            continue
        for issue in issues:
            out.add(BAD_PLAN, "check_plan: " + _normal(issue, 60), f"plan {p.rank}: {issue}")
        for name, value in _plan_figures(p).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not math.isfinite(value) or value < 0:
                out.add(BAD_PLAN, f"{re.sub(r'[.].*', '', name)} figure not finite or negative", f"{name}={value!r}")
        if job.budget_usd is not None and p.total_cost_usd > job.budget_usd + 1e-9:
            out.add(BAD_PLAN, "over budget", f"plan {p.rank}: {p.total_cost_usd} > budget {job.budget_usd}")


# ---------------------------------------------------------------------------------------------
# Reproducers and the report
# ---------------------------------------------------------------------------------------------


def _short(value: Any) -> str:
    """repr, with long runs of one character written as 'c' * n."""
    if isinstance(value, str) and len(value) > 40 and len(set(value)) == 1:
        return f"{value[0]!r} * {len(value)}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**40:
        digits = int(abs(value).bit_length() * math.log10(2))
        power = next((k for k in (digits - 1, digits, digits + 1) if abs(value) == 10**k), None)
        sign = "-" if value < 0 else ""
        return f"{sign}10**{power}" if power is not None else f"{sign}<int of ~{digits + 1} digits>"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_short(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_short(k)}: {_short(v)}" for k, v in value.items()) + "}"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _printable(text: str) -> str:
    """Control characters, newlines and lone surrogates escaped, so a report line stays one line."""
    return "".join(c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else repr(c)[1:-1] for c in text)


def describe_cli(case: CliCase, root: Path | None = None) -> str:
    args = []
    for a in case.argv:
        shown = _short(a)
        if root is not None:
            shown = shown.replace(str(root), "$TMP")
        args.append(shown)
    return f"ftsolve [{', '.join(args)}]"


def describe_job(case: JobCase) -> str:
    fields = ", ".join(f"{k}={_short(v)}" for k, v in case.fields.items())
    offers = ", ".join(
        f"make_offer({i}{''.join(f', {k}={_short(v)}' for k, v in o.items())})" for i, o in enumerate(case.offers)
    )
    extra = f", engine={case.engine!r}" if case.engine != "scan" else ""
    extra += f", top={case.top}" if case.top != 5 else ""
    extra += f", within={_short(case.within)}" if case.within is not None else ""
    return f"plan(JobSpec.build({fields}), catalog_of([{offers}]){extra})"


def describe(case: CliCase | JobCase, outcome: Outcome, root: Path | None = None) -> str:
    """The failures of one run with its reproducer (the assertion message of tests/test_fuzz.py)."""
    what = describe_cli(case, root) if isinstance(case, CliCase) else describe_job(case)
    problems = "; ".join(f"{kind}: {sig} ({detail})" for kind, sig, detail in outcome.problems)
    return f"{what}\n  exit {outcome.exit_code}, {outcome.seconds:.2f} s: {_printable(problems)}"


@dataclass
class Tally:
    runs: int = 0
    seconds: list[float] = field(default_factory=list)
    results: dict[str, int] = field(default_factory=dict)  # exit code or job result -> runs
    cases: dict[str, int] = field(default_factory=dict)  # kind -> runs with that problem
    # (kind, signature) -> [count, shortest reproducer, detail]
    groups: dict[tuple[str, str], list[Any]] = field(default_factory=dict)

    def record(self, text: str, outcome: Outcome) -> None:
        self.runs += 1
        self.seconds.append(outcome.seconds)
        key = outcome.result or f"exit {outcome.exit_code}"
        self.results[key] = self.results.get(key, 0) + 1
        for kind in {k for k, _, _ in outcome.problems}:
            self.cases[kind] = self.cases.get(kind, 0) + 1
        for kind, sig, detail in outcome.problems:
            g = self.groups.setdefault((kind, sig), [0, text, detail])
            g[0] += 1
            if len(text) < len(g[1]):
                g[1], g[2] = text, detail


def _print_report(cli_t: Tally, job_t: Tally, per_kind: int) -> None:
    print(f"\n{'failure kind':24s} {'CLI':>8s} {'jobs':>8s}")
    for kind in KINDS:
        c = cli_t.cases.get(kind, 0) if kind != BAD_PLAN else None
        j = job_t.cases.get(kind, 0) if kind in (TRACEBACK, BAD_PLAN, SLOW) else None
        print(f"{kind:24s} {'-' if c is None else c:>8} {'-' if j is None else j:>8}")
    for name, t in (("CLI", cli_t), ("jobs", job_t)):
        print(f"{name} outcomes: " + ", ".join(f"{k}: {v}" for k, v in sorted(t.results.items())))
    for name, t in (("CLI", cli_t), ("jobs", job_t)):
        if t.seconds:
            s = sorted(t.seconds)
            print(
                f"{name} run time: median {statistics.median(s):.3f} s, p99 {s[int(0.99 * (len(s) - 1))]:.3f} s, "
                f"max {s[-1]:.2f} s"
            )
    for name, t in (("CLI", cli_t), ("jobs", job_t)):
        for kind in KINDS:
            groups = sorted(((g[0], sig, g[1], g[2]) for (k, sig), g in t.groups.items() if k == kind), reverse=True)
            if not groups:
                continue
            print(f"\n== {name} {kind}: {len(groups)} distinct")
            for count, sig, text, detail in groups[:per_kind]:
                print(f"-- [{count}x] {_printable(sig)}\n   {text}\n   -> {_printable(detail)}")
            if len(groups) > per_kind:
                print(f"-- ... {len(groups) - per_kind} more")


def summary_line(n_cli: int, n_jobs: int, cli_t: Tally, job_t: Tally, n_targeted: int = 0) -> str:
    def n(kind: str) -> int:
        return cli_t.cases.get(kind, 0) + job_t.cases.get(kind, 0)

    targeted = f" (+{n_targeted} targeted)" if n_targeted else ""
    return (
        f"fuzz: {n_cli} CLI{targeted}, {n_jobs} jobs: {n(TRACEBACK)} tracebacks, {n(BAD_EXIT)} bad exit codes, "
        f"{n(MULTILINE)} multi-line errors, {n(BAD_PLAN)} bad plans, {n(SLOW)} slow (>5 s), "
        f"{n(BAD_JSON)} invalid JSON, {n(OVERSIZED)} oversized errors"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--cli", type=int, default=10_000, help="random CLI invocations")
    ap.add_argument("--jobs", type=int, default=10_000, help="random library jobs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--no-targeted",
        dest="targeted",
        action="store_false",
        help="skip the fixed hostile cases run before the random ones",
    )
    ap.add_argument("--show", type=int, default=8, help="distinct failures shown per kind")
    ap.add_argument("--timeout", type=float, default=HARD_TIMEOUT_S, help="interrupt a run after this (s)")
    args = ap.parse_args(argv)
    # Keep the runs away from the user's own imported offers, as the tests do.
    os.environ["FTSOLVE_HOME"] = tempfile.mkdtemp(prefix="ftsolve-fuzz-home-")
    cli_t, job_t = Tally(), Tally()
    with tempfile.TemporaryDirectory(prefix="ftsolve-fuzz-") as tmp:
        root = Path(tmp)
        files = make_files(root)
        targeted = targeted_cases(files) if args.targeted else []
        for case in targeted:
            cli_t.record(describe_cli(case, root), run_cli(case, args.timeout))
        rng = random.Random(args.seed * 2)
        for i in range(args.cli):
            case = cli_case(rng, files)
            cli_t.record(describe_cli(case, root), run_cli(case, args.timeout))
            if (i + 1) % 500 == 0:
                print(f"cli {i + 1}/{args.cli}", file=sys.stderr, flush=True)
        rng = random.Random(args.seed * 2 + 1)
        for i in range(args.jobs):
            job = job_case(rng)
            job_t.record(describe_job(job), run_job(job, args.timeout))
            if (i + 1) % 500 == 0:
                print(f"jobs {i + 1}/{args.jobs}", file=sys.stderr, flush=True)
    _print_report(cli_t, job_t, args.show)
    print(summary_line(args.cli, args.jobs, cli_t, job_t, len(targeted)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
