"""Paired comparisons: two conditions run on the same prompts (or cases), compared prompt by prompt.

Two Wilson intervals compare two conditions as if each had been measured on its own prompts.
When both ran on the *same* prompts, most of what makes a rate high or low is the prompt:
an easy prompt succeeds under both, a hard one fails under both, and neither says anything
about the difference. Only the **discordant** pairs do: one condition succeeded and the other
did not. Under "no difference" each discordant pair is a coin flip, which way it went, so
the number that went one way is Binomial(discordant, 1/2): that is **McNemar's exact test**.

Pairs are often not independent either: two trials of one prompt, or five attacks on one
user task, share their prompt or task. Then the independent thing is the **unit** (the
prompt, the task): count, per unit, the successes under each condition, and ask the same
coin-flip question of the units where they differ (**an exact sign test over units**).
With one pair per unit the two tests are the same.

``units_needed`` plans the other way round: how many units a sign test needs to see a
difference of a given size, with a given probability (its **power**), computed exactly.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

ALPHA = 0.05  # the course's level: a difference is "shown" when p <= 5%


def two_sided_binomial_p(k: int, n: int) -> float:
    """The exact two-sided p-value of ``k`` heads in ``n`` fair coin flips.

    The chance of a split at least as lopsided as ``k`` against ``n - k``, either way:
    twice the smaller tail, at most 1. With n = 0 (nothing to compare) it is 1.

    >>> two_sided_binomial_p(0, 5)   # 5 of 5 the same way: 2 * (1/2)**5
    0.0625
    >>> two_sided_binomial_p(2, 4)   # an even split is no evidence at all
    1.0
    """
    if not 0 <= k <= n:
        raise ValueError(f"k must be between 0 and n, got k={k}, n={n}")
    fewer = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(fewer + 1))  # ways to be as lopsided on one side
    return min(1.0, 2 * tail / 2 ** n)


@dataclass(frozen=True)
class PairedTest:
    """The result of a paired test between two conditions, ``first`` and ``second``.

    ``first_more``: units (or pairs) where ``first`` had more successes; ``second_more``: the
    other way; ``ties``: units where both had as many (they carry no evidence either way)."""

    test: str  # "McNemar's exact test" or "exact sign test"
    unit: str  # what was counted: "cases", "prompts", "user tasks"
    first: str
    second: str
    first_more: int
    second_more: int
    ties: int
    p_value: float
    counted: str = "successes"  # what a success is, in words: "attack successes", "task completions"

    def shown(self, alpha: float = ALPHA) -> bool:
        """Whether the test separates the two conditions at level ``alpha``."""
        return self.p_value <= alpha

    def counts_text(self) -> str:
        """``exact sign test over 24 prompts: 11 with more successes under A, 1 under B, 12 tied; p = 0.0063``."""
        total = self.first_more + self.second_more + self.ties
        return (f"{self.test} over {total} {self.unit}: {self.first_more} with more {self.counted} under {self.first}, "
                f"{self.second_more} under {self.second}, {self.ties} tied; p = {p_text(self.p_value)}")

    def sentence(self, alpha: float = ALPHA) -> str:
        """What the test says, in words: which condition did better where the test shows it, or that it does not."""
        if not self.shown(alpha):
            return f"not shown to differ ({self.counts_text()} > {alpha:g})"
        more = self.first if self.first_more > self.second_more else self.second
        return f"more {self.counted} under {more} ({self.counts_text()} <= {alpha:g})"


def p_text(p: float) -> str:
    """A p-value as people write it: two significant digits, ``< 0.0001`` below that."""
    return "< 0.0001" if p < 0.0001 else f"{p:.2g}"


def mcnemar_exact(pairs: Sequence[tuple[bool, bool]], first: str = "first", second: str = "second",
                  unit: str = "pairs", counted: str = "successes") -> PairedTest:
    """McNemar's exact test on ``(success under first, success under second)`` pairs.

    Only the discordant pairs count: under "no difference" each is equally likely to have
    gone either way. Use it when every pair is independent (one trial per prompt); when
    several pairs share a prompt or task, use ``clustered_sign_test``.
    """
    first_only = sum(bool(a) and not b for a, b in pairs)
    second_only = sum(bool(b) and not a for a, b in pairs)
    ties = len(pairs) - first_only - second_only
    return PairedTest("McNemar's exact test", unit, first, second, first_only, second_only, ties,
                      two_sided_binomial_p(first_only, first_only + second_only), counted)


def successes_by_unit(pairs: Sequence[tuple[Hashable, bool, bool]]) -> dict[Hashable, tuple[int, int]]:
    """Per unit (the first item of each ``(unit, success under first, success under second)``):
    the successes under each condition, in the order the units first appear."""
    counts: dict[Hashable, tuple[int, int]] = {}
    for unit, a, b in pairs:
        before = counts.get(unit, (0, 0))
        counts[unit] = (before[0] + bool(a), before[1] + bool(b))
    return counts


def clustered_sign_test(pairs: Sequence[tuple[Hashable, bool, bool]], first: str = "first", second: str = "second",
                        unit: str = "units", counted: str = "successes") -> PairedTest:
    """An exact sign test over units, for pairs that share a unit (a prompt, a user task).

    Each pair is ``(unit, success under first, success under second)``. Per unit, the
    successes under each condition are added up; a unit counts for the condition with more,
    or as a tie. Under "no difference" a unit that is not a tie favours either condition with
    equal chance, so the p-value is ``two_sided_binomial_p`` of the units favouring one.
    How much a unit favours a condition (1 success or 5) is not used: that is what makes it
    safe with any number of pairs per unit, and a little less sensitive than a test that uses it.
    """
    counts = successes_by_unit(pairs).values()
    first_more = sum(a > b for a, b in counts)
    second_more = sum(b > a for a, b in counts)
    return PairedTest("exact sign test", unit, first, second, first_more, second_more,
                      len(counts) - first_more - second_more,
                      two_sided_binomial_p(first_more, first_more + second_more), counted)


def binomial_pmf(k: int, n: int, p: float) -> float:
    """The chance of exactly ``k`` successes in ``n`` independent trials of chance ``p``
    (through logarithms, so that large n does not overflow)."""
    if p in (0.0, 1.0):
        return float(k == (n if p == 1.0 else 0))
    log_ways = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
    return math.exp(log_ways + k * math.log(p) + (n - k) * math.log1p(-p))


@functools.cache
def rejecting_below(discordant: int, alpha: float = ALPHA) -> int:
    """The largest k for which k of ``discordant`` units one way (or k the other way) gives
    p <= alpha; -1 if no split of so few units can (5 units or fewer at alpha = 0.05).
    The same sum as ``two_sided_binomial_p``, grown one k at a time."""
    k, tail = -1, 0
    while k + 1 <= discordant // 2:
        tail += math.comb(discordant, k + 1)
        if min(1.0, 2 * tail / 2 ** discordant) > alpha:
            break
        k += 1
    return k


@functools.cache
def rejection_chance(discordant: int, share: float, alpha: float = ALPHA) -> float:
    """The chance that the sign test rejects, given ``discordant`` units that are not ties,
    each favouring the first condition with probability ``share``: the chance of a split in
    the rejection region (k or fewer one way, or k or fewer the other way)."""
    k = rejecting_below(discordant, alpha)
    return sum(binomial_pmf(i, discordant, share) + binomial_pmf(discordant - i, discordant, share)
               for i in range(k + 1))


def sign_test_power(units: int, favour_first: float, favour_second: float, alpha: float = ALPHA) -> float:
    """The chance that an exact sign test over ``units`` units shows a difference (p <= alpha),
    when each unit independently favours ``first`` with probability ``favour_first``,
    ``second`` with ``favour_second``, and is a tie otherwise.

    Computed exactly, by enumeration, not by simulation: the number of units that are not
    ties, D, is Binomial(units, favour_first + favour_second); given D, the number favouring
    ``first`` is Binomial(D, favour_first / (favour_first + favour_second)), and the test
    rejects with ``rejection_chance``. The power is the sum over every D.
    """
    if not (0 <= favour_first and 0 <= favour_second and favour_first + favour_second <= 1):
        raise ValueError(f"favour_first and favour_second are probabilities that add up to at most 1, "
                         f"got {favour_first} and {favour_second}")
    discordant = favour_first + favour_second
    if discordant == 0:
        return 0.0
    share = favour_first / discordant
    return sum(binomial_pmf(d, units, discordant) * rejection_chance(d, share, alpha) for d in range(units + 1))


def units_needed(favour_first: float, favour_second: float, power: float = 0.8, alpha: float = ALPHA,
                 most: int = 1000) -> int | None:
    """The fewest units for which an exact sign test has at least ``power`` to show a
    difference at level ``alpha``, when each unit favours ``first`` with probability
    ``favour_first`` and ``second`` with ``favour_second`` (``sign_test_power``, exact).

    Estimate the two probabilities from a pilot: the share of units that favoured each
    condition. None if even ``most`` units are not enough (or the two are equal: a
    difference of zero is never shown). The power of an exact test does not rise smoothly
    with n (it jumps as the rejection region grows), so this is the first n that reaches it.
    """
    if favour_first == favour_second:
        return None
    for units in range(1, most + 1):
        if sign_test_power(units, favour_first, favour_second, alpha) >= power:
            return units
    return None
