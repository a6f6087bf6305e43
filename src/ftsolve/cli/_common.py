"""Helpers the CLI modules share."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click
from rich.console import Console

from ftsolve._errors import FtsolveError, NoFeasiblePlan

Fn = TypeVar("Fn", bound=Callable[..., Any])


def console(stderr: bool = False) -> Console:
    # A wide virtual terminal when output is piped, so tables are not folded into slivers.
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, width=None if probe.is_terminal else 200, highlight=False)


def errors(fn: Fn) -> Fn:
    """Library errors become one line on stderr and exit code 2; never a traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NoFeasiblePlan:
            raise
        except FtsolveError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
