"""Rate limits and spend caps: a guard at the tool-call position that counts calls and yen.

A model that loops (lesson 4), or one an attacker steers (this package), can call a tool far
more often than any request needs. A free lookup then costs time and load; a paid API (a
carrier's delivery quotes, an SMS gateway, a credit check) costs money on every call: OWASP
lists it as "unbounded consumption". The loop's limits bound one run's turns and tokens; a
budget bounds what the tools themselves may do:

- ``RateLimit(calls, seconds)`` for a tool: at most ``calls`` calls in any ``seconds``-long
  window (a sliding window: the last minute, not the current calendar minute);
- ``prices_jpy`` and ``cap_jpy``: what each paid tool costs per call, and the most that all
  of them may spend together.

``Budget`` is a :class:`~course_lib.security.defenses.Defense`, so it sits in the same stack
as the other guards and sees a call after validation (an invalid call never reaches it, and
costs nothing). Put it **last** in the stack: it charges a call when it lets it through, so a
call that an earlier guard refused costs nothing either. A refusal is not an exception: it
goes back to the model as a ``tool`` message ("refused: rate limit: ...") that says which
limit it hit and what to do now, and the run goes on.

One ``Budget`` kept across runs is a shop-wide limit; a fresh one per run limits that run.
The clock is a parameter (``time.monotonic`` by default), so a test moves time by hand
instead of sleeping::

    now = [0.0]
    budget = Budget({"delivery_quote": RateLimit(2, 60)}, clock=lambda: now[0])
    budget.allow("delivery_quote"), budget.allow("delivery_quote")  # (None, None): both run
    budget.allow("delivery_quote")  # 'rate limit: ... again in 60 s'
    now[0] = 60.0
    budget.allow("delivery_quote")  # None: the first call has left the window
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from course_lib.security.defenses import Defense, RunContext


@dataclass(frozen=True)
class RateLimit:
    """At most ``calls`` calls of one tool in any window of ``seconds``."""

    calls: int
    seconds: float

    def __post_init__(self) -> None:
        if self.calls < 1 or not self.seconds > 0:
            raise ValueError("a rate limit needs at least 1 call per a positive number of seconds")


class Budget(Defense):
    """Refuses a call that would break a tool's rate limit or the spend cap; counts the calls it lets through."""

    name = "budget"

    def __init__(self, limits: dict[str, RateLimit] | None = None, prices_jpy: dict[str, int] | None = None,
                 cap_jpy: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = dict(limits or {})
        self.prices_jpy = dict(prices_jpy or {})
        if any(price < 0 for price in self.prices_jpy.values()) or (cap_jpy is not None and cap_jpy < 0):
            raise ValueError("prices and the cap are amounts of yen: 0 or more")
        self.cap_jpy = cap_jpy
        self.clock = clock
        self.spent_jpy = 0
        self.let_through: dict[str, deque[float]] = {name: deque() for name in self.limits}  # when, per tool

    def check_call(self, run: RunContext, name: str, arguments: dict[str, Any]) -> str | None:
        """The guard's hook: a reason to refuse, or None (and then the call is counted)."""
        return self.allow(name)

    def allow(self, name: str) -> str | None:
        """Why a call of ``name`` may not run now; or None, and the call is counted and charged."""
        now = self.clock()
        reason = self.refusal(name, now)
        if reason is None:
            if name in self.let_through:
                self.let_through[name].append(now)
            self.spent_jpy += self.prices_jpy.get(name, 0)
        return reason

    def refusal(self, name: str, now: float) -> str | None:
        """Why a call of ``name`` at time ``now`` would break a limit, or None. Counts nothing."""
        limit = self.limits.get(name)
        if limit is not None:
            recent = self.recent_calls(name, now)
            if len(recent) >= limit.calls:
                wait = math.ceil(recent[0] + limit.seconds - now)
                return (f"rate limit: {name} may run {limit.calls} times per {limit.seconds:g} s; "
                        f"it can run again in {wait} s. Answer with what you have.")
        price = self.prices_jpy.get(name, 0)
        if self.cap_jpy is not None and self.spent_jpy + price > self.cap_jpy:
            return (f"spend cap: {name} costs {price} yen a call and {self.spent_jpy} of the {self.cap_jpy} yen "
                    f"budget is spent. Answer with what you have.")
        return None

    def recent_calls(self, name: str, now: float) -> deque[float]:
        """The times of the calls of ``name`` let through in the window that ends at ``now``
        (older ones are forgotten: a window is ``(now - seconds, now]``)."""
        calls = self.let_through[name]
        while calls and calls[0] <= now - self.limits[name].seconds:
            calls.popleft()
        return calls

    @property
    def remaining_jpy(self) -> int | None:
        """Yen left under the cap (None without a cap)."""
        return None if self.cap_jpy is None else self.cap_jpy - self.spent_jpy
