"""Human units for the command line and job files: 50M tokens, 24h, $300."""

from __future__ import annotations

import math
import re

from ftsolve._errors import InvalidJobSpec

_COUNT_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_HOURS_SUFFIX = {
    "": 1.0,
    "h": 1.0,
    "hr": 1.0,
    "hrs": 1.0,
    "hours": 1.0,
    "m": 1 / 60,
    "min": 1 / 60,
    "mins": 1 / 60,
    "d": 24.0,
    "day": 24.0,
    "days": 24.0,
    "w": 168.0,
}


def _finite(value: float, text: str, what: str) -> None:
    if not math.isfinite(value):
        raise InvalidJobSpec(f"invalid {what} {str(text)[:24]!r}: too large a number")


def parse_count(text: str, what: str = "tokens") -> int:
    """'50M' -> 50_000_000; '1.5B' -> 1_500_000_000; '2e9' and '50_000' work too."""
    s = str(text).strip().lower().replace("_", "").replace(",", "")
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbgt]?)", s)
    if not m:
        raise InvalidJobSpec(f"invalid {what} {str(text)[:40]!r}: use a number with an optional K/M/B suffix, e.g. 50M")
    value = float(m.group(1)) * _COUNT_SUFFIX[m.group(2)]
    _finite(value, text, what)
    if value <= 0:
        raise InvalidJobSpec(f"invalid {what} {str(text)[:40]!r}: must be positive")
    return round(value)


def parse_hours(text: str, what: str = "deadline") -> float:
    """'24h' -> 24.0; '90m' -> 1.5; '2d' -> 48.0; a bare number is hours."""
    s = str(text).strip().lower().replace(" ", "")
    m = re.fullmatch(r"(-?[0-9]*\.?[0-9]+)([a-z]*)", s)
    if not m or m.group(2) not in _HOURS_SUFFIX:
        raise InvalidJobSpec(f"invalid {what} {str(text)[:40]!r}: use hours like 24h, 90m or 2d")
    value = float(m.group(1)) * _HOURS_SUFFIX[m.group(2)]
    _finite(value, text, what)
    if value <= 0:
        raise InvalidJobSpec(f"invalid {what} {str(text)[:40]!r}: must be positive")
    return value


def parse_usd(text: str, what: str = "budget") -> float:
    """'300', '$300', '300usd', '1.2k' -> USD."""
    s = str(text).strip().lower().replace(",", "").replace("_", "")
    m = re.fullmatch(r"\$?\s*(-?[0-9]*\.?[0-9]+)\s*(k?)\s*(usd|\$)?", s)
    if not m:
        raise InvalidJobSpec(f"invalid {what} {str(text)[:40]!r}: use US dollars like 300 or $1.2k")
    value = float(m.group(1)) * (1000 if m.group(2) else 1)
    _finite(value, text, what)
    if value <= 0:
        raise InvalidJobSpec(f"invalid {what} {str(text)[:40]!r}: must be positive")
    return value
