"""The `ftsolve` command line: parses, calls the library, renders. No domain logic here."""

from ftsolve.cli._main import cli, main

__all__ = ["cli", "main"]
