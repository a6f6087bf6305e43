"""Measured runs, read from what users have: probe records, Trainer state, torchtune and axolotl
logs, or a plain table.

Every reader returns `Measurement`s: the configuration that ran (`RunConfig`, in JobSpec's
vocabulary), the GPU type it ran on, and what was measured (tokens/s over all GPUs, peak memory
per GPU as torch reports it). Logs that do not name their configuration take it from `Given`
(the `ftsolve calibrate` flags) and from the files a Hugging Face output folder holds beside them
(config.json, adapter_config.json).
"""

from __future__ import annotations

import ast
import csv
import datetime as dt
import io
import json
import math
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ftsolve._errors import CatalogError, FtsolveError
from ftsolve._files import read_text_file
from ftsolve.catalog import ModelArch, arch_from_config, load_gpus, resolve_gpu
from ftsolve.solver import _coefficients as k
from ftsolve.solver._job import JobSpec, describe_validation_error
from ftsolve.solver._memory import SHARD_NAMES, MemoryOptions

# A log of a long run is a few MiB; a probe record or a table a few KiB.
RECORD_MAX_BYTES = 64 * 1024 * 1024
PROBE_FORMAT = "ftsolve-probe"
Kind = Literal["probe", "trainer-state", "torchtune", "axolotl", "table"]
Method = Literal["full", "lora", "qlora"]


def recipe_fields() -> tuple[str, ...]:
    """JobSpec's training-recipe fields (stack and LoRA rank apart): what a RunConfig's recipe holds."""
    out = []
    for name, info in JobSpec.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if extra.get("group") == "recipe" and name not in ("stack", "lora_rank"):
            out.append(name)
    return tuple(out)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class RunConfig(_Frozen):
    """The configuration a measurement ran, per GPU and per step, in JobSpec's words."""

    model: str | ModelArch = Field(description="preset name or architecture")
    method: Method
    weight_precision: Literal["auto", "16-bit", "int8", "nf4"] = "auto"
    seq_len: int = Field(gt=0, le=1_048_576)
    micro_batch: int = Field(default=1, gt=0, le=65_536)
    grad_accum: int = Field(default=1, gt=0, le=65_536)
    n_gpus: int = Field(default=1, gt=0, le=65_536)
    nodes: int = Field(default=1, gt=0, le=8_192)
    sharding: str = "none"
    gradient_checkpointing: bool = True
    lora_rank: int = Field(default=16, gt=0, le=4096)
    stack: str = "hf"
    host_speed: float = Field(
        default=1.0,
        gt=k.HOST_SPEED_BOUNDS[0],
        le=k.HOST_SPEED_BOUNDS[1],
        description="the host CPU's single-thread speed (JobSpec.host_speed)",
    )
    recipe: dict[str, str | float | int | bool | None] = Field(
        default_factory=dict, description="other training-recipe fields of JobSpec (optimizer, loss, ...)"
    )

    def job(self) -> JobSpec:
        """A JobSpec of this configuration (its recipe validated by JobSpec's own rules)."""
        unknown = sorted(set(self.recipe) - set(recipe_fields()))
        if unknown:
            names = ", ".join(recipe_fields())
            raise CatalogError(f"unknown recipe field {unknown[0]!r}: recipe fields are JobSpec's ({names})")
        if self.sharding not in SHARD_NAMES:
            raise CatalogError(f"invalid sharding {self.sharding!r}: choose one of {', '.join(SHARD_NAMES)}")
        fields: dict[str, Any] = {"model": self.model, "train_tokens": 1, "seq_len": self.seq_len}
        fields |= {"stack": self.stack, "lora_rank": self.lora_rank, **self.recipe}
        return JobSpec.build(**fields)

    def options(self) -> MemoryOptions:
        return self.job().memory_options()

    @property
    def model_name(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.name


class Measurement(_Frozen):
    """One measured run: where it came from, its configuration, and what it measured."""

    source: str = Field(description="the file and where in it")
    kind: Kind
    date: dt.date
    gpu: str = Field(description="canonical GPU id (gpus.csv)")
    gpu_name: str | None = Field(default=None, description="the device's own name, as torch reported it")
    stack: str = Field(description="the stack the correction is filed under (what the user plans with)")
    config: RunConfig
    tokens_per_s: float | None = Field(default=None, gt=0, description="processed tokens per second, all GPUs")
    peak_allocated_gib: float | None = Field(default=None, gt=0, description="torch.cuda.max_memory_allocated per GPU")
    peak_reserved_gib: float | None = Field(default=None, gt=0, description="torch.cuda.max_memory_reserved per GPU")
    versions: dict[str, str] = Field(default_factory=dict)
    note: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        """(GPU type, stack, method): what one correction is fitted for."""
        return self.gpu, self.stack, self.config.method


@dataclass(frozen=True)
class Given:
    """What the command line says about the runs a log does not describe itself."""

    gpu: str | None = None
    date: dt.date | None = None
    config: dict[str, Any] = field(default_factory=dict)  # RunConfig fields (recipe fields go in `recipe`)


# --- helpers -------------------------------------------------------------------------------------


def _number(value: object) -> float | None:
    """A finite positive number from a log value: 12.5, '12.5' (axolotl logs strings), or
    'tensor(12.5, device='cuda:0')' (a tensor printed by torchtune's disk logger)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        x = float(value)
    elif isinstance(value, str):
        m = re.search(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", value)
        if m is None:
            return None
        x = float(m.group(0))
    else:
        return None
    return x if math.isfinite(x) and x > 0 else None


def _typical(values: list[float]) -> float | None:
    """The median of steady-state values: the first logged value (warm-up, compilation) is dropped
    when there are others."""
    steady = values[1:] if len(values) > 1 else values
    return statistics.median(steady) if steady else None


def canonical_gpu(name: str, memory_gib: float | None = None, origin: str = "") -> str:
    """A GPU id of gpus.csv from an id or a device name ('NVIDIA H100 80GB HBM3' -> h100-sxm)."""
    gpus = load_gpus()
    if name.lower() in gpus:
        return name.lower()
    found = resolve_gpu(name, memory_gib=memory_gib)
    if found is None or found not in gpus:
        where = f"{origin}: " if origin else ""
        raise CatalogError(
            f"{where}cannot tell which GPU {name[:60]!r} is; pass --gpu with an id such as h100-sxm "
            "(`ftsolve catalog show NAME`)"
        )
    return found


def _config(values: dict[str, Any], origin: str) -> RunConfig:
    """A RunConfig from flat values (table columns, flags): recipe fields are gathered in `recipe`."""
    recipe = dict(values.get("recipe") or {})
    own = set(RunConfig.model_fields)
    flat = {k: v for k, v in values.items() if k in own and k != "recipe" and v is not None}
    recipe |= {k: v for k, v in values.items() if k in recipe_fields() and v is not None}
    unknown = sorted(set(values) - own - set(recipe_fields()))
    if unknown:
        raise CatalogError(f"{origin}: unknown configuration field {unknown[0]!r}")
    try:
        out = RunConfig.model_validate({**flat, "recipe": recipe})
        out.job()  # the recipe's values, checked by JobSpec's rules
    except ValidationError as exc:
        raise CatalogError(f"{origin}: {describe_validation_error(exc)}") from None
    except FtsolveError as exc:
        raise CatalogError(f"{origin}: {exc}") from None
    return out


def _measurement(origin: str, kind: Kind, values: dict[str, Any]) -> Measurement:
    try:
        m = Measurement.model_validate(values)
    except ValidationError as exc:
        raise CatalogError(f"{origin}: {describe_validation_error(exc)}") from None
    if m.tokens_per_s is None and m.peak_allocated_gib is None and m.peak_reserved_gib is None:
        raise CatalogError(f"{origin}: no tokens/s and no peak memory: nothing measured to calibrate with")
    return m


def _date(given: Given, path: Path) -> dt.date:
    """The run's date: --date, else the file's modification date."""
    if given.date is not None:
        return given.date
    try:
        return dt.date.fromtimestamp(path.stat().st_mtime)
    except OSError:
        return dt.date.today()


# --- readers -------------------------------------------------------------------------------------


def read_measurements(path: str | Path, given: Given | None = None) -> list[Measurement]:
    """Every measurement in one file, its format told from its content: a probe record, a
    Trainer `trainer_state.json`, a torchtune or axolotl log, or a JSON/CSV table."""
    p = Path(path)
    given = given or Given()
    text = read_text_file(p, "measurement file", CatalogError, RECORD_MAX_BYTES)
    if p.suffix.lower() == ".csv":
        return _table(list(csv.DictReader(io.StringIO(text))), p, given)
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            data = None
        if isinstance(data, dict) and data.get("format") == PROBE_FORMAT:
            return [_probe(data, p, given)]
        if isinstance(data, dict) and isinstance(data.get("log_history"), list):
            return [_trainer_state(data, p, given)]
        if isinstance(data, list) or (isinstance(data, dict) and isinstance(data.get("runs"), list)):
            rows = data if isinstance(data, list) else data["runs"]
            return _table(rows, p, given)
    return [_log_lines(text, p, given)]


def _probe(data: dict[str, Any], p: Path, given: Given) -> Measurement:
    """A record written by the script of `ftsolve probe`."""
    gpu = data.get("gpu") or {}
    measured = data.get("measured") or {}
    if not isinstance(gpu, dict) or not isinstance(measured, dict) or not isinstance(data.get("config"), dict):
        raise CatalogError(f"{p}: a probe record needs 'config', 'gpu' and 'measured' mappings")
    if gpu.get("device") != "cuda":
        raise CatalogError(f"{p}: the probe ran on {str(gpu.get('device'))[:20]!r}, not a GPU: nothing to calibrate")
    name = str(gpu.get("name") or "")
    gpu_id = given.gpu or canonical_gpu(name, _number(gpu.get("memory_gib")), str(p))
    created = str(data.get("created") or "")
    try:
        day = dt.date.fromisoformat(created[:10])
    except ValueError:
        day = _date(given, p)
    config = _config(dict(data["config"]), str(p))
    # The probe runs transformers + PEFT whatever stack the plan names; its correction is filed
    # under the plan's stack, the one the user plans with.
    plan = data.get("plan")
    stack = str(plan.get("stack") or config.stack) if isinstance(plan, dict) else config.stack
    versions = data.get("versions") if isinstance(data.get("versions"), dict) else {}
    return _measurement(
        str(p),
        "probe",
        {
            "source": str(p),
            "kind": "probe",
            "date": day,
            "gpu": canonical_gpu(gpu_id, origin=str(p)),
            "gpu_name": name or None,
            "stack": stack,
            "config": config,
            "tokens_per_s": _number(measured.get("tokens_per_s")),
            "peak_allocated_gib": _number(measured.get("peak_allocated_gib")),
            "peak_reserved_gib": _number(measured.get("peak_reserved_gib")),
            "versions": {str(k): str(v) for k, v in (versions or {}).items()},
            "note": "probe: transformers + PEFT",
        },
    )


def _sidecars(folder: Path) -> dict[str, Any]:
    """What a Hugging Face output folder says about its run: the model's config.json and the
    adapter's adapter_config.json (rank, LoRA)."""
    out: dict[str, Any] = {}
    for where in (folder, folder.parent):
        cfg = where / "config.json"
        if "model" not in out and cfg.is_file():
            try:
                data = json.loads(read_text_file(cfg, "model config", CatalogError))
                out["model"] = arch_from_config(data, where.name or "model", str(cfg))
            except (CatalogError, json.JSONDecodeError, ValueError):
                pass
        adapter = where / "adapter_config.json"
        if "lora_rank" not in out and adapter.is_file():
            try:
                data = json.loads(read_text_file(adapter, "adapter config", CatalogError))
                if isinstance(data, dict) and isinstance(data.get("r"), int):
                    out["lora_rank"] = data["r"]
                    out["method"] = "lora"
            except (CatalogError, json.JSONDecodeError):
                pass
    return out


def _log_config(p: Path, given: Given, found: dict[str, Any]) -> RunConfig:
    """The configuration of a log's run: the flags, else what the log and its folder say."""
    values = _sidecars(p.parent) | found | {k: v for k, v in given.config.items() if v is not None}
    for required, flag in (("model", "--model or --config"), ("method", "--method"), ("seq_len", "--seq-len")):
        if values.get(required) is None:
            raise CatalogError(f"{p}: the log does not say its {required.replace('_', ' ')}; pass {flag}")
    return _config(values, str(p))


def _needs_gpu(p: Path, given: Given) -> str:
    if given.gpu is None:
        raise CatalogError(f"{p}: the log does not name its GPU; pass --gpu (an id such as h100-sxm)")
    return canonical_gpu(given.gpu, origin=str(p))


def _memory_keys(entry: dict[str, Any]) -> tuple[float | None, float | None]:
    """(allocated, reserved) GiB from a logged dict: axolotl's 'memory/max_allocated (GiB)' and
    'memory/device_reserved (GiB)' (older: 'memory/max_mem_allocated(gib)'), torchtune's
    'peak_memory_alloc' and 'peak_memory_reserved'."""
    alloc = reserved = None
    for key, value in entry.items():
        k = re.sub(r"[^a-z]", "", str(key).lower())
        if "memory" not in k or "active" in k:
            continue
        if "alloc" in k:
            alloc = _number(value)
        elif "reserved" in k:
            reserved = _number(value)
    return alloc, reserved


def _tokens_keys(entry: dict[str, Any]) -> float | None:
    """Tokens/s per GPU from a logged dict (axolotl 'tokens/train_per_sec_per_gpu' or
    'tokens_per_second_per_gpu', torchtune 'tokens_per_second_per_gpu')."""
    for key in ("tokens/train_per_sec_per_gpu", "tokens_per_second_per_gpu"):
        if key in entry:
            return _number(entry[key])
    return None


@dataclass
class _Seen:
    """What a log's steps show: tokens/s per GPU per step, and the highest memory figures."""

    tokens_per_gpu: list[float] = field(default_factory=list)
    allocated: float | None = None
    reserved: float | None = None
    samples_per_s: float | None = None  # the Trainer's summary: all GPUs
    micro_batch: int | None = None

    def add(self, entry: dict[str, Any]) -> None:
        tokens = _tokens_keys(entry)
        if tokens is not None:
            self.tokens_per_gpu.append(tokens)
        alloc, reserved = _memory_keys(entry)
        self.allocated = max(filter(None, (self.allocated, alloc)), default=None)
        self.reserved = max(filter(None, (self.reserved, reserved)), default=None)
        if "train_samples_per_second" in entry:
            self.samples_per_s = _number(entry["train_samples_per_second"])


def _seen_measurement(p: Path, kind: Kind, given: Given, seen: _Seen) -> Measurement:
    found: dict[str, Any] = {} if seen.micro_batch is None else {"micro_batch": seen.micro_batch}
    config = _log_config(p, given, found)
    per_gpu = _typical(seen.tokens_per_gpu)
    if per_gpu is not None:
        tokens = per_gpu * config.n_gpus
    elif seen.samples_per_s is not None:
        # train_samples_per_second counts every process's samples; each holds seq_len tokens when
        # the data is packed or padded to the sequence length.
        tokens = seen.samples_per_s * config.seq_len
    else:
        tokens = None
    return _measurement(
        str(p),
        kind,
        {
            "source": str(p),
            "kind": kind,
            "date": _date(given, p),
            "gpu": _needs_gpu(p, given),
            "stack": config.stack,
            "config": config,
            "tokens_per_s": tokens,
            "peak_allocated_gib": seen.allocated,
            "peak_reserved_gib": seen.reserved,
        },
    )


def _trainer_state(data: dict[str, Any], p: Path, given: Given) -> Measurement:
    """transformers' trainer_state.json: its log history (axolotl's memory and tokens/s entries
    land there too), the summary's train_samples_per_second, and train_batch_size per device."""
    seen = _Seen()
    for entry in data["log_history"]:
        if isinstance(entry, dict):
            seen.add(entry)
    if isinstance(data.get("train_batch_size"), int) and data["train_batch_size"] > 0:
        seen.micro_batch = data["train_batch_size"]
    return _seen_measurement(p, "trainer-state", given, seen)


_TORCHTUNE_LINE = re.compile(r"^\s*Step\s+\d+\s*\|\s*(.*)$")
_TORCHTUNE_PAIR = re.compile(r"([\w/.\-]+):(tensor\([^)]*\)|\S+)")


def _log_lines(text: str, p: Path, given: Given) -> Measurement:
    """A torchtune metric log ('Step 12 | loss:1.2 tokens_per_second_per_gpu:3456.7 ...', its
    DiskLogger and StdoutLogger format) or axolotl's printed log dicts ("{'loss': '0.71', ...}")."""
    torchtune, axolotl = _Seen(), _Seen()
    for line in text.splitlines():
        m = _TORCHTUNE_LINE.match(line)
        if m:
            torchtune.add(dict(_TORCHTUNE_PAIR.findall(m.group(1))))
            continue
        entry = _dict_in(line)
        if entry is not None:
            axolotl.add(entry)
    for kind, seen in (("torchtune", torchtune), ("axolotl", axolotl)):
        if seen.tokens_per_gpu or seen.allocated or seen.reserved or seen.samples_per_s:
            return _seen_measurement(p, kind, given, seen)  # type: ignore[arg-type]
    raise CatalogError(
        f"{p}: not a measurement this reads: a probe record, trainer_state.json, a torchtune or axolotl "
        "log, or a JSON/CSV table (see `ftsolve calibrate --help`)"
    )


def _dict_in(line: str) -> dict[str, Any] | None:
    start, end = line.find("{'"), line.rfind("}")
    if start < 0 or end <= start or end - start > 10_000:
        return None
    try:
        value = ast.literal_eval(line[start : end + 1])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


TABLE_MEASURED = ("gpu", "tokens_per_s", "peak_allocated_gib", "peak_reserved_gib", "date", "source")


def _table(rows: Iterable[object], p: Path, given: Given) -> list[Measurement]:
    """Rows of (configuration, tokens/s, peak memory): RunConfig's fields and JobSpec's recipe
    fields, `gpu`, `tokens_per_s`, `peak_reserved_gib` and/or `peak_allocated_gib`, and
    optionally `date` and `source`."""
    out = []
    for n, row in enumerate(rows, start=1):
        origin = f"{p} row {n}"
        if not isinstance(row, dict):
            raise CatalogError(f"{origin}: expected a mapping of column to value")
        values = {str(k).strip(): _cell(v) for k, v in row.items() if k is not None}
        values = {k: v for k, v in values.items() if v is not None}
        gpu = given.gpu or values.get("gpu")
        if not gpu:
            raise CatalogError(f"{origin}: no gpu column; add one or pass --gpu")
        config_values = {k: v for k, v in values.items() if k not in TABLE_MEASURED}
        config = _config({**given.config, **config_values}, origin)
        day = values.get("date")
        try:
            date = dt.date.fromisoformat(str(day)) if day else _date(given, p)
        except ValueError:
            raise CatalogError(f"{origin}: invalid date {str(day)[:20]!r}: use YYYY-MM-DD") from None
        out.append(
            _measurement(
                origin,
                "table",
                {
                    "source": str(values.get("source") or origin),
                    "kind": "table",
                    "date": date,
                    "gpu": canonical_gpu(str(gpu), origin=origin),
                    "stack": config.stack,
                    "config": config,
                    "tokens_per_s": _number(values.get("tokens_per_s")),
                    "peak_allocated_gib": _number(values.get("peak_allocated_gib")),
                    "peak_reserved_gib": _number(values.get("peak_reserved_gib")),
                },
            )
        )
    if not out:
        raise CatalogError(f"{p}: no rows")
    return out


def _cell(value: object) -> object:
    """A CSV cell as the value it spells: '' is missing, 'true'/'false' booleans, numbers numbers."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            continue
    return text


def iter_files(paths: Iterable[str | Path], given: Given) -> Iterator[Measurement]:
    for path in paths:
        yield from read_measurements(path, given)
