"""The user's calibrations: `$FTSOLVE_HOME/calibration.json`, one correction per
(GPU type, stack, method), each with the records it was fitted from.

The file is read-merge-written under an exclusive lock and replaced atomically, like the user's
offers; a damaged file is refused with one line that says how to start over.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ftsolve._calibration._records import Measurement, Method
from ftsolve._errors import CatalogError
from ftsolve._files import exclusive_lock, read_text_file, write_atomically
from ftsolve.catalog._import import user_catalog_path
from ftsolve.solver._job import describe_validation_error

SCHEMA_VERSION = 1
FILE_NAME = "calibration.json"
CALIBRATION_MAX_BYTES = 16 * 1024 * 1024


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class StoredRecord(_Frozen):
    """A measurement with the model's prediction for it (at the time of calibrating)."""

    id: str
    measurement: Measurement
    predicted_tokens_per_s: float | None = None
    predicted_memory_gib: float | None = Field(default=None, description="the model's value of the measured metric")
    memory_metric: Literal["reserved", "allocated"] | None = None
    throughput_factor: float | None = Field(default=None, gt=0, description="measured / predicted tokens/s")
    memory_scale: float | None = Field(default=None, gt=0, description="factor on the dynamic memory")
    notes: tuple[str, ...] = ()


class Correction(_Frozen):
    """What the model misses on one GPU type, stack and method, fitted from measured records."""

    gpu: str
    stack: str
    method: Method
    throughput_factor: float | None = Field(default=None, gt=0, description="x the model's tokens/s")
    throughput_band: float | None = Field(default=None, ge=0, description="relative band of the corrected tokens/s")
    memory_scale: float | None = Field(default=None, gt=0, description="x the model's dynamic (per-sequence) memory")
    memory_band: float | None = Field(default=None, ge=0, description="relative band of the corrected peak")
    date: dt.date = Field(description="the latest record's date")
    records: tuple[StoredRecord, ...]

    @property
    def key(self) -> tuple[str, str, str]:
        return self.gpu, self.stack, self.method

    def latest(self, what: Literal["throughput", "memory"]) -> StoredRecord:
        """The newest record that measured `what` (the one an assumption line names)."""
        usable = [
            r
            for r in self.records
            if (r.throughput_factor if what == "throughput" else r.memory_scale) is not None
        ]
        return max(usable or list(self.records), key=lambda r: r.measurement.date)


class Calibration(_Frozen):
    """Every stored correction; empty when the user has calibrated nothing."""

    schema_version: int = SCHEMA_VERSION
    corrections: tuple[Correction, ...] = ()

    def find(self, gpu: str, stack: str, method: str) -> Correction | None:
        return next((c for c in self.corrections if c.key == (gpu, stack, method)), None)

    def records(self) -> list[StoredRecord]:
        return [r for c in self.corrections for r in c.records]


def calibration_path() -> Path:
    """Where calibrations live: beside the user's offers ($FTSOLVE_HOME/calibration.json, else
    the XDG config folder's ftsolve/calibration.json)."""
    return user_catalog_path().parent / FILE_NAME


def load_calibration(path: Path | None = None) -> Calibration:
    """The stored calibrations (none when the file does not exist)."""
    p = path if path is not None else calibration_path()
    if not p.is_file():
        return Calibration()
    text = read_text_file(p, "calibration file", CatalogError, CALIBRATION_MAX_BYTES)
    fix = "fix it, or start over with `ftsolve calibrate --forget all`"
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise CatalogError(f"{p}: not valid JSON; {fix}") from None
    if isinstance(data, dict) and data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise CatalogError(f"{p}: schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}; {fix}")
    try:
        return _refitted(text)
    except ValidationError as exc:
        raise CatalogError(f"{p}: not a calibration file ({describe_validation_error(exc)}); {fix}") from None


@functools.lru_cache(maxsize=4)
def _refitted(text: str) -> Calibration:
    """The calibration of this text fitted against this ftsolve's model (_fit.refitted), once per
    process and text: a plan reads the file several times."""
    from ftsolve._calibration._fit import refitted  # _fit builds on this module's models

    return refitted(Calibration.model_validate_json(text))


def update_calibration(change: Callable[[Calibration], Calibration], path: Path | None = None) -> Calibration:
    """Read, change and write the calibration file under its lock; returns what was written."""
    p = path if path is not None else calibration_path()
    with exclusive_lock(p):
        new = change(load_calibration(p))
        write_atomically(p, new.model_dump_json(indent=2) + "\n")
    return new
