"""Amounts as a plan shows them: US dollars, or the job's display currency at the newest rate.

Costs are computed in US dollars; `JobSpec.currency` only changes how they read. Every amount a
plan or an explanation prints goes through `Money`, so the words and the table agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from ftsolve.catalog import Rate, rate_on
from ftsolve.solver._job import JobSpec


@dataclass(frozen=True)
class Money:
    rate: Rate

    @property
    def code(self) -> str:
        return self.rate.currency

    def value(self, usd: float) -> float:
        return usd / self.rate.usd_per_unit

    def __call__(self, usd: float, sign: bool = False) -> str:
        """`usd` in the display currency with its code, two decimals (a sign with `sign`)."""
        return f"{self.value(usd):{'+' if sign else ''}.2f} {self.code}"

    def note(self) -> str:
        """How amounts are converted, for the plan's header ('' in US dollars)."""
        if self.code == "USD":
            return ""
        r = self.rate
        return f"amounts in {r.currency} at {r.usd_per_unit:g} USD/{r.currency}, {r.source.split(',')[0]} of {r.date}"


def money(job: JobSpec) -> Money:
    return Money(rate_on(job.currency))
