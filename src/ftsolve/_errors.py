"""The one exception tree of ftsolve.

    FtsolveError
    ├── InvalidJobSpec (ValueError)        a job input is out of range or inconsistent
    ├── UnknownCatalogEntry (LookupError)   a GPU, model or provider name is not in the catalog
    ├── CatalogError (ValueError)           a catalog or model-config file is malformed
    ├── UnsafeOutput (ValueError)           an output path is not a regular file, or cannot be written
    ├── ChoiceProblemError (ValueError)     a choice problem is malformed or given to the wrong engine
    └── NoFeasiblePlan                      every candidate breaks some constraint; carries the diagnosis

Each exception carries its exit code (`exit_code`, click's pattern): 2 for bad input, 1 for
NoFeasiblePlan. Messages are one line and say how to fix the input.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ftsolve.solver._plans import Infeasibility


class FtsolveError(Exception):
    """Base class of every error ftsolve raises on purpose."""

    exit_code = 2


class InvalidJobSpec(FtsolveError, ValueError):
    """Raised when a job input is out of range, malformed or inconsistent."""


class CatalogError(FtsolveError, ValueError):
    """Raised when a catalog, offers or model-config file cannot be used as it is."""


class UnsafeOutput(FtsolveError, ValueError):
    """Raised when an output path holds something other than a regular file (a link, FIFO, device)."""


class ChoiceProblemError(FtsolveError, ValueError):
    """Raised when a choice problem is malformed (shapes, dtypes, unknown columns, keys too large
    for exact integer arithmetic) or handed to an engine that cannot solve its kind."""


class UnknownCatalogEntry(FtsolveError, LookupError):
    """Raised when a name (GPU, model, provider) is not in the catalog; suggests close matches."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.suggestions = get_close_matches(name.lower(), [k.lower() for k in known], n=3)
        hint = f" Did you mean {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(
            f"unknown {kind} {name!r}.{hint} To fix: run `ftsolve {kind}s list`"
            if kind in ("model",)
            else f"unknown {kind} {name!r}.{hint}"
        )


class NoFeasiblePlan(FtsolveError):
    """Raised when no candidate satisfies every constraint; `.infeasibility` says why."""

    exit_code = 1

    def __init__(self, infeasibility: Infeasibility) -> None:
        self.infeasibility = infeasibility
        super().__init__(infeasibility.summary)
