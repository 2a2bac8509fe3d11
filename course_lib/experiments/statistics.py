"""Rates and their Wilson 95% intervals: how sure a small experiment can be."""

from __future__ import annotations

import math
from dataclasses import dataclass


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval for a proportion (95% for z = 1.96).

    Unlike the textbook ``p ± z·sqrt(p(1-p)/n)``, it stays inside [0, 1] and is sensible
    for small n and for rates near 0 or 1, which is where small experiments live.
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Rate:
    successes: int
    n: int

    @property
    def value(self) -> float:
        return self.successes / self.n if self.n else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.n)

    def __str__(self) -> str:
        low, high = self.interval
        return f"{self.value:6.1%}  [{low:5.1%}, {high:5.1%}]  ({self.successes}/{self.n})"
