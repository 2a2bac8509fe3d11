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
        low, high = self.interval
        counts = f"{self.successes}/{self.n}"
        if self.units is not None and self.units != self.n:
            counts += f" trials, {self.units} prompts"
        return f"{self.value:6.1%}  [{low:5.1%}, {high:5.1%}]  ({counts})"
