"""Rates and their Wilson 95% intervals: how sure a small experiment can be."""

from __future__ import annotations

import math
from dataclasses import dataclass


def wilson_interval(successes: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval for a proportion (95% for z = 1.96).

    Unlike the textbook ``p ± z·sqrt(p(1-p)/n)``, it stays inside [0, 1] and is sensible
    for small n and for rates near 0 or 1, which is where small experiments live.
    ``successes`` may be fractional: see :attr:`Rate.interval` for why.
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Rate:
    """``successes`` of ``n`` trials, drawn from ``units`` independent things (prompts, tasks).

    Trials of the same prompt are not independent: a prompt the model always gets wrong
    fails on every trial, and repeating it adds no new evidence. So the interval rests on
    the units, not on the trials: the observed rate with ``units`` as the sample size, as if
    each prompt had been tried once. That is the cautious choice (it assumes the repeats
    add nothing); with one trial per prompt, ``units == n`` and nothing changes.
    """

    successes: int
    n: int
    units: int | None = None  # None: every trial is its own unit

    @property
    def value(self) -> float:
        return self.successes / self.n if self.n else float("nan")

    @property
    def sample_size(self) -> int:
        """The n the interval rests on: the independent units."""
        return self.n if self.units is None else self.units

    @property
    def interval(self) -> tuple[float, float]:
        if not self.n:
            return 0.0, 1.0
        return wilson_interval(self.value * self.sample_size, self.sample_size)

    def __str__(self) -> str:
        """``61.4%  [40.8%, 78.5%]  (27/44 trials, 22 prompts)``, or ``(16/22)`` when each trial is its own unit."""
        return rate_text(self, "{value:6.1%}  [{low:5.1%}, {high:5.1%}]  ({counts})",
                         fewer_units="{successes}/{n} trials, {units} prompts")


def rate_text(rate: Rate, line: str = "{value:.0%} [{low:.0%}, {high:.0%}] ({counts})",
              counts: str = "{successes}/{n}", fewer_units: str = "{successes}/{n} runs of {units} tasks",
              empty: str | None = None) -> str:
    """A rate as text: its value, its 95% interval and what it was counted from, spelled by
    ``line`` (a ``str.format`` template). Every table of the course writes its rates with this
    one function, each in its own spelling (``Rate.__str__``, ``security.table.cell``,
    ``agentdojo_table``'s cells).

    The fields are ``value``, ``low``, ``high`` (fractions: format them with ``%``),
    ``successes``, ``n``, ``units`` (the sample size the interval rests on) and ``counts``:
    ``counts`` filled in when every trial is its own unit, ``fewer_units`` when the interval
    rests on fewer units than trials (several trials of one prompt, several attacks on one
    task). ``empty``, if given, is the whole text of a rate with nothing counted.

    >>> rate_text(Rate(3, 12))
    '25% [9%, 53%] (3/12)'
    >>> rate_text(Rate(10, 60, units=12))
    '17% [5%, 45%] (10/60 runs of 12 tasks)'
    """
    if not rate.n and empty is not None:
        return empty
    low, high = rate.interval
    fields = {"value": rate.value, "low": low, "high": high, "successes": rate.successes, "n": rate.n,
              "units": rate.sample_size}
    spelled = (counts if rate.sample_size == rate.n else fewer_units).format(**fields)
    return line.format(counts=spelled, **fields)
