"""A column cache of large offers files: parse a CSV once, then read its columns back.

A user catalog of a million offers takes seconds to parse (most of it pandas' tokenizer), and a
user plans against the same file again and again. After a large file is read, its `OfferTable`
is written as numpy arrays (no pickle) to the cache folder, one entry per file path; a later load
of a file with the same bytes (SHA-256), read with the same GPU table by the same ftsolve version,
reads the arrays instead. Anything else (a changed file, a damaged or missing cache
entry, a folder that cannot be written) falls back to parsing the file: the cache can make a load
faster, never different.

The cache folder is $FTSOLVE_HOME/cache, else $XDG_CACHE_HOME/ftsolve (~/.cache/ftsolve); it keeps
the entries of the KEEP_ENTRIES files written last. An entry's key also covers the reader's own code
and bundled data, so a change to either parses the file again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import os
import tempfile
import typing
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ftsolve.catalog._columns import CODED_FIELDS, FLOAT_FIELDS, OfferTable
from ftsolve.catalog._models import GpuSpec

FORMAT = 1  # bumped whenever what is written changes
# Value types of a coded field's distinct values (an Offer field holds one of these).
_NONE, _STR, _BOOL, _DATE = 0, 1, 2, 3


KEEP_ENTRIES = 8  # the most recently written entries kept; older ones are removed after a write


def cache_dir() -> Path | None:
    """The cache folder; None where there is none to name (no home folder and no variable set)."""
    home = os.environ.get("FTSOLVE_HOME")
    if home:
        return Path(home) / "cache"
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:
            return None
    return Path(base) / "ftsolve"


@functools.cache
def _reader_digest() -> str:
    """What else a parse depends on: the reader's code and the bundled data it converts with
    (exchange rates, the GPU table's file), so that an entry written by other code is not read back
    (the package version does not change between commits)."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted([*here.glob("*.py"), *(here / "data").glob("*.csv")]):
        if path.name != "offers.csv":  # the bundled offers are not part of a user file's parse
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Identity:
    """A file as it was when a read began: its entry's name, its content key, its stat."""

    name: str
    key: str
    stat: tuple[int, int, int]


def file_stat(path: Path) -> tuple[int, int, int]:
    """The file's size, modification time and inode (OSError where it cannot be read)."""
    st = path.resolve().stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def identity(
    path: Path, gpus: Mapping[str, GpuSpec], content: str | None = None, stat: tuple[int, int, int] | None = None
) -> Identity | None:
    """The file's cache identity; None where it cannot be read. The key hashes every byte (about
    0.3 s for a million offers): a file rewritten within one tick of the clock, at the same size,
    must not read as the old one. `content`: the SHA-256 of the bytes a reader read (else the file
    is read here); `stat`: the file's stat before that read."""
    from ftsolve import __version__

    try:
        real = path.resolve()
        stat = stat or file_stat(real)
        if content is None:
            digest = hashlib.sha256()
            with open(real, "rb") as f:
                while block := f.read(1 << 22):
                    digest.update(block)
            content = digest.hexdigest()
    except OSError:
        return None
    gpu_table = json.dumps([g.model_dump(mode="json") for _, g in sorted(gpus.items())], sort_keys=True)
    parts = [FORMAT, __version__, _reader_digest(), content, gpu_table]
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
    return Identity(_name(real), key, stat)


def _name(real: Path) -> str:
    return hashlib.sha256(str(real).encode()).hexdigest()[:24]


def has_entry(path: Path) -> bool:
    """Whether the cache holds an entry for this file path (of whatever bytes): where it does not,
    a reader need not hash the file before parsing it."""
    folder = cache_dir()
    try:
        return folder is not None and _entry(folder, _name(path.resolve())).is_file()
    except OSError:
        return False


def _entry(folder: Path, name: str) -> Path:
    return folder / f"offers-{name}.npz"


def read_cached(ident: Identity | None) -> OfferTable | None:
    """The table cached for a file of identity `ident`, or None."""
    folder = cache_dir()
    if ident is None or folder is None:
        return None
    try:
        # Opened here, not by np.load, which leaves a damaged file open.
        with open(_entry(folder, ident.name), "rb") as f, np.load(f, allow_pickle=False) as npz:
            if str(npz["key"]) != ident.key:
                return None
            return _table(dict(npz.items()))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError):
        return None


def write_cached(path: Path, table: OfferTable, ident: Identity) -> None:
    """Cache `table`, read from `path` whose identity was `ident` when the read began; nothing
    when the file changed meanwhile (its stat differs) or the folder cannot be written. (A rewrite
    at the same size within one tick of the file clock, during the parse, goes unseen unless the
    key hashes the bytes the reader read, as the fast reader's does.) Then only the KEEP_ENTRIES
    most recent entries are kept."""
    folder = cache_dir()
    if folder is None:
        return
    with contextlib.suppress(OSError, ValueError):
        if file_stat(path) != ident.stat:
            return
        arrays = _arrays(table) | {"key": np.array(ident.key)}
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".offers-{ident.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)  # type: ignore[arg-type]
            os.replace(tmp, _entry(folder, ident.name))
        finally:
            Path(tmp).unlink(missing_ok=True)
        _prune(folder)


def _prune(folder: Path) -> None:
    """Remove all but the KEEP_ENTRIES most recently written entries (one per offers file)."""
    entries = sorted(folder.glob("offers-*.npz"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in entries[KEEP_ENTRIES:]:
        with contextlib.suppress(OSError):
            old.unlink()


def _arrays(table: OfferTable) -> dict[str, NDArray[Any]]:
    out: dict[str, NDArray[Any]] = {"gpus_per_node": table.gpus_per_node}
    for name in FLOAT_FIELDS:
        out[f"n.{name}"] = table.numbers[name]
    for name in CODED_FIELDS:
        out[f"c.{name}"] = table.codes[name]
        values = table.values[name]
        text: list[str]
        if set(map(type, values)) <= {str}:  # the common case, a million values at most: no loop
            kinds, text = np.full(len(values), _STR, dtype=np.uint8), typing.cast("list[str]", list(values))
        else:
            kinds = np.array([_kind(v) for v in values], dtype=np.uint8)
            text = [_text(v) for v in values]
        # One UTF-8 string and the end of each value in it: a million distinct instance types
        # stay one array, not a million objects to pickle.
        out[f"k.{name}"] = kinds
        out[f"e.{name}"] = np.cumsum(np.fromiter(map(len, text), np.int64, len(text)))
        out[f"t.{name}"] = np.frombuffer("".join(text).encode("utf-8"), dtype=np.uint8)
    return out


def _kind(value: object) -> int:
    if value is None:
        return _NONE
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, dt.date):
        return _DATE
    if isinstance(value, str):
        return _STR
    raise ValueError(f"no cache encoding for {type(value).__name__}")


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dt.date):
        return value.isoformat()
    return "" if value is None else str(value)


def _values(kinds: NDArray[np.uint8], ends: NDArray[np.int64], blob: NDArray[np.uint8]) -> tuple[object, ...]:
    text = blob.tobytes().decode("utf-8")
    starts = np.concatenate(([0], ends[:-1])).tolist()
    parts = [text[a:b] for a, b in zip(starts, ends.tolist(), strict=True)]
    if bool((kinds == _STR).all()):
        return tuple(parts)
    return tuple(_decode(k, s) for k, s in zip(kinds.tolist(), parts, strict=True))


def _decode(kind: int, text: str) -> object:
    if kind == _STR:
        return text
    if kind == _BOOL:
        return text == "1"
    if kind == _DATE:
        return dt.date.fromisoformat(text)
    if kind == _NONE:
        return None
    raise ValueError(f"cache entry: unknown value kind {kind}")


def _table(arrays: dict[str, NDArray[Any]]) -> OfferTable:
    n = arrays["gpus_per_node"].shape[0]
    codes = {name: arrays[f"c.{name}"] for name in CODED_FIELDS}
    values = {name: _values(arrays[f"k.{name}"], arrays[f"e.{name}"], arrays[f"t.{name}"]) for name in CODED_FIELDS}
    for name in CODED_FIELDS:
        c = codes[name]
        if c.shape != (n,) or (n and (int(c.min()) < 0 or int(c.max()) >= len(values[name]))):
            raise ValueError(f"cache entry: codes of {name} out of range")
    numbers = {name: arrays[f"n.{name}"].astype(np.float64, copy=False) for name in FLOAT_FIELDS}
    if any(x.shape != (n,) for x in numbers.values()):
        raise ValueError("cache entry: a number column has the wrong length")
    return OfferTable(codes, values, numbers, arrays["gpus_per_node"].astype(np.int64, copy=False))
