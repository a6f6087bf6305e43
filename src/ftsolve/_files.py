"""Reading what users hand to ftsolve and writing what it hands back, safely.

Input files are read with a size limit and strict UTF-8, and YAML is loaded without letting
aliases expand beyond a small node budget (an "alias bomb" of a few hundred bytes otherwise takes
minutes and gigabytes). Errors are one line naming the file and the fix, never its content.

Outputs replace regular files only (never a symlink, FIFO or device at the path), atomically, and
keep an existing file's permissions. Read-merge-write of a shared file runs under an exclusive lock.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ftsolve._errors import FtsolveError, UnsafeOutput

KIB = 1024
MIB = 1024 * KIB
# A job file or a model config is a few KiB; 1 MiB is far above any real one.
JOB_FILE_MAX_BYTES = 1 * MIB
# SkyPilot catalogs are up to ~20 MiB per cloud; a million offers in ftsolve's CSV is ~200 MiB.
OFFERS_FILE_MAX_BYTES = 512 * MIB
# Expanded YAML nodes (aliases counted every time they are used): a job is < 200, 10k offers < 300k.
YAML_MAX_EXPANDED_NODES = 2_000_000
YAML_MAX_ALIASES = 1_000


def _describe_os_error(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def read_text_file(path: str | Path, what: str, error: type[FtsolveError], max_bytes: int = JOB_FILE_MAX_BYTES) -> str:
    """The UTF-8 text of a user's file, or `error` with one line that names the file, not its content."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"{p}: cannot read {what} ({_describe_os_error(exc)})") from None
    except MemoryError:
        raise error(f"{p}: {what} too large to read") from None
    if len(data) > max_bytes:
        raise error(f"{p}: {what} is larger than {max_bytes // MIB} MiB; is it the right file?")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{p}: {what} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _expanded_nodes(node: yaml.Node, memo: dict[int, int], depth: int = 0) -> int:
    """Nodes the document has once every alias is expanded (shared subtrees counted per use)."""
    if depth > 200:
        raise ValueError("nested deeper than 200 levels")
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = YAML_MAX_EXPANDED_NODES + 1  # a cycle (recursive alias) counts as too large
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_expanded_nodes(child, memo, depth + 1) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            total += _expanded_nodes(key, memo, depth + 1) + _expanded_nodes(value, memo, depth + 1)
    total = min(total, YAML_MAX_EXPANDED_NODES + 1)
    memo[id(node)] = total
    return total


class _CountingLoader(yaml.SafeLoader):
    """SafeLoader that stops composing after YAML_MAX_ALIASES alias uses."""

    aliases_seen = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases_seen += 1
            if self.aliases_seen > YAML_MAX_ALIASES:
                raise ValueError(f"more than {YAML_MAX_ALIASES} aliases")
        return super().compose_node(parent, index)


def load_yaml(text: str, origin: str, error: type[FtsolveError]) -> Any:
    """Parse YAML safely: no Python objects, no alias expansion beyond a node budget, one-line errors."""
    loader = _CountingLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node, {}) > YAML_MAX_EXPANDED_NODES:
            raise ValueError(f"expands to more than {YAML_MAX_EXPANDED_NODES:,} nodes through aliases")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise error(f"{origin}: not valid YAML{where} ({problem})") from None
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        raise error(f"{origin}: YAML refused ({reason}); write the values out plainly") from None
    finally:
        loader.dispose()


def _existing_mode(path: Path) -> int | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafeOutput(f"{path}: cannot inspect output path ({_describe_os_error(exc)})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "symbolic link" if stat.S_ISLNK(st.st_mode) else "folder" if stat.S_ISDIR(st.st_mode) else "special file"
        raise UnsafeOutput(f"{path}: is a {kind}, not a regular file; choose another output path")
    return stat.S_IMODE(st.st_mode)


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def cleanup_stale_temporaries(path: Path) -> None:
    """Remove temporary files an earlier, killed write of `path` left beside it."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write to a temporary file in the same folder and rename it over `path`: readers see the old
    file or the new one, never half of either; a failure leaves the old file and no temporary file.
    Refuses to replace anything but a regular file and keeps an existing file's permissions."""
    path = Path(path)
    mode = _existing_mode(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise UnsafeOutput(f"{path}: cannot write ({_describe_os_error(exc)})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _default_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise UnsafeOutput(f"{path}: cannot write ({_describe_os_error(exc)})") from None
        raise


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on `<folder>/.<name>.lock` while a read-merge-write runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.parent / f".{path.name}.lock"
    with open(lock_path, "a+b") as f:
        if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
            import msvcrt

            msvcrt.locking(f.fileno(), msvcrt.LK_LOCK, 1)
            try:
                yield
            finally:
                msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)
        else:
            import fcntl

            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
