"""Friendly checks for the exercises: say what was expected, give a hint, print a pass line.

A check that fails raises ``AssertionError`` (so nbval marks the cell as failed) with a
message meant for a learner, not a stack-trace reader::

    check_equal(tokens_per_second(sample), 25.0, "eval_duration is in nanoseconds")
"""

from __future__ import annotations

from typing import Any


class CheckFailed(AssertionError):
    """An exercise check did not pass; the message says what was expected and gives a hint."""


def check(condition: bool, what: str, hint: str = "") -> None:
    """Pass when ``condition`` is true; ``what`` says what is being checked."""
    if not condition:
        raise CheckFailed(f"✘ {what}" + (f"\n  hint: {hint}" if hint else ""))
    print(f"✔ {what}")


def check_equal(actual: Any, expected: Any, what: str, hint: str = "") -> None:
    """Pass when ``actual == expected``; on failure show both."""
    if actual != expected:
        raise CheckFailed(f"✘ {what}\n  expected: {expected!r}\n  got:      {actual!r}"
                          + (f"\n  hint: {hint}" if hint else ""))
    print(f"✔ {what}")


def check_close(actual: float, expected: float, what: str, hint: str = "", rel: float = 1e-6) -> None:
    """Pass when ``actual`` is within ``rel`` (relative) of ``expected``."""
    close = isinstance(actual, (int, float)) and abs(actual - expected) <= rel * max(abs(expected), 1e-12)
    if not close:
        raise CheckFailed(f"✘ {what}\n  expected about: {expected!r}\n  got:          {actual!r}"
                          + (f"\n  hint: {hint}" if hint else ""))
    print(f"✔ {what}")
