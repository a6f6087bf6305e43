"""Helpers the CLI modules share: a console that never interprets data, text cleaning, the error wrapper.

Strings from catalogs, config files and flags reach the terminal, Markdown and SVG. The console
parses no rich markup or emoji codes (a provider named `acme[/]` or `[link=…]` is printed as it is),
and `plain` replaces control characters, so data cannot move the cursor, clear the screen or break
a table row. Styles are given as `style=` or `Text` spans, never as markup inside a string.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from functools import wraps
from typing import NoReturn, ParamSpec, TypeVar

import click
from rich.console import Console

from ftsolve._errors import FtsolveError, NoFeasiblePlan

P = ParamSpec("P")
R = TypeVar("R")

# Error messages are one line; a file's worth of detail belongs in the file, not the terminal.
MESSAGE_MAX_CHARS = 500
# C0 controls, DEL, C1 controls (ESC, CSI and friends) and the bidirectional overrides that can
# make a terminal show text in an order other than the bytes' ("trojan source").
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


# Width of a console whose output is piped and COLUMNS is unset: wide enough that tables are not
# folded into slivers.
PIPED_COLUMNS = 200


def _columns_env() -> int | None:
    value = os.environ.get("COLUMNS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def console(stderr: bool = False) -> Console:
    """A console that parses no markup: the terminal's width, else COLUMNS, else PIPED_COLUMNS."""
    probe = Console(stderr=stderr)
    # On a terminal rich reads COLUMNS itself, before the terminal's size; piped, so do we.
    width = None if probe.is_terminal else (_columns_env() or PIPED_COLUMNS)
    return Console(
        stderr=stderr,
        width=width,
        highlight=False,
        markup=False,
        emoji=False,
    )


def plain(value: object) -> str:
    """`value` as text on one line with every control character replaced by a space."""
    return _CONTROL.sub(" ", str(value))


def one_line(message: str, limit: int = MESSAGE_MAX_CHARS) -> str:
    """A message on one line, runs of whitespace collapsed, at most `limit` characters."""
    text = " ".join(plain(message).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail(message: str, exit_code: int) -> NoReturn:
    click.echo(f"Error: {one_line(message)}", err=True)
    sys.exit(exit_code)


def _too_large(exc: BaseException) -> str:
    detail = str(exc)
    return f"input too large ({type(exc).__name__}{': ' + detail if detail else ''}); use smaller values or files"


def errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Library errors become one line on stderr and their `exit_code`; never a traceback.

    Resource errors a user's input can cause (a huge number, a deeply nested file) become one line
    and exit 2 as well. Other exceptions are bugs and keep their traceback.
    """

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except NoFeasiblePlan as exc:
            _fail(f"no feasible plan: {exc}", exc.exit_code)
        except FtsolveError as exc:
            _fail(str(exc), exc.exit_code)
        except (MemoryError, RecursionError, OverflowError) as exc:
            _fail(_too_large(exc), 2)

    return wrapper


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands, some given as "module:attribute" and imported when first looked up
    (running or listing one). A command the CLI does not run costs no start-up time."""

    def __init__(self, loaded: Mapping[str, click.Command], lazy: Mapping[str, str]) -> None:
        self._loaded = dict(loaded)
        self._lazy = {name: where for name, where in lazy.items() if name not in self._loaded}

    def __getitem__(self, name: str) -> click.Command:
        if name in self._lazy:
            module, attribute = self._lazy.pop(name).split(":")
            self._loaded[name] = getattr(importlib.import_module(module), attribute)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._lazy.pop(name, None)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if self._lazy.pop(name, None) is None:
            del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*self._loaded, *self._lazy])

    def __len__(self) -> int:
        return len(self._loaded) + len(self._lazy)
