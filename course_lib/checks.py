"""The checks an exercise's check cell calls, and nothing else.

A check that fails raises ``CheckFailed`` (an ``AssertionError``, so nbval marks the cell
as failed) with a message meant for a learner, not a stack-trace reader::

    check_equal(tokens_per_second(sample), 25.0, "eval_duration is in nanoseconds")

Notebooks import them from ``course_lib.grading``. This module imports nothing at its
top and uses only builtins, so that the grader can compile a fresh copy of it inside a
learner's kernel, before the learner's cells run, and call that copy from the published
check cells (``course_lib.grading``): rebinding ``check`` or patching this module in
``sys.modules`` then changes nothing the grade reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


class CheckFailed(AssertionError):
    """An exercise check did not pass; the message says what was expected and gives a hint."""


def check(condition: bool, what: str, hint: str = "") -> None:
    """Pass when ``condition`` is true; ``what`` says what is being checked."""
    if not condition:
        raise CheckFailed(f"✘ {what}" + (f"\n  hint: {hint}" if hint else ""))
    print(f"✔ {what}")


def check_equal(actual: Any, expected: Any, what: str, hint: str = "") -> None:
    """Pass when ``actual == expected``; on failure show both.

    When ``expected`` is plain data (numbers, strings, bytes, ``None``, and lists, tuples,
    dicts and sets of them), the comparison is the plain types' own, so an answer object
    whose ``__eq__`` says yes to everything does not pass.
    """
    if not same(actual, expected):
        raise CheckFailed(f"✘ {what}\n  expected: {expected!r}\n  got:      {_shown(actual)}"
                          + (f"\n  hint: {hint}" if hint else ""))
    print(f"✔ {what}")


def check_close(actual: float, expected: float, what: str, hint: str = "", rel: float = 1e-6) -> None:
    """Pass when ``actual`` is within ``rel`` (relative) of ``expected``."""
    value = _as_float(actual)
    close = value is not None and abs(value - expected) <= rel * max(abs(expected), 1e-12)
    if not close:
        raise CheckFailed(f"✘ {what}\n  expected about: {expected!r}\n  got:          {_shown(actual)}"
                          + (f"\n  hint: {hint}" if hint else ""))
    print(f"✔ {what}")


def _as_float(value: Any) -> float | None:
    """The number ``value`` holds, read by ``int``'s or ``float``'s own code (not by a method
    an answer's class could override), or None for anything that is not an int or a float."""
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, int):
        return int.__float__(value)
    return None


_TEXT = (str, bytes)
_NUMBERS = (bool, int, float, complex)


def same(actual: Any, expected: Any) -> bool:
    """``actual == expected``, decided by ``expected``'s plain type when it has one.

    ``a == b`` lets ``a``'s class answer first, and an answer of a class of its own can say
    yes to anything. When ``expected`` is plain data, the comparison here reads ``actual``
    with the plain types' own methods: numbers as numbers (``1 == 1.0`` still holds),
    strings and bytes by their characters, lists, tuples, dicts and sets item by item. Any
    other ``expected`` (a dataclass, a model) is compared with ``==`` as Python does.
    """
    kind = type(expected)
    if kind in _NUMBERS:
        mine = _as_number(actual)
        if mine is None:
            return False
        if kind is complex or type(mine) is complex:
            return complex.__eq__(complex(mine), complex(expected)) is True
        return mine == expected  # both are int or float now: Python's exact comparison
    if expected is None:
        return actual is None
    if kind in _TEXT:
        return isinstance(actual, kind) and vars(kind)["__eq__"](expected, actual) is True
    if kind in (list, tuple):
        if not isinstance(actual, kind):
            return False
        items = [kind.__getitem__(actual, index) for index in range(kind.__len__(actual))]
        return len(items) == len(expected) and all(same(mine, theirs) for mine, theirs in zip(items, expected))
    if kind is dict:
        if not isinstance(actual, dict):
            return False
        pairs = list(dict.items(actual))
        return len(pairs) == len(expected) and all(
            any(same(key, wanted) and same(value, wanted_value) for key, value in pairs)
            for wanted, wanted_value in expected.items())
    if kind in (set, frozenset):
        if not isinstance(actual, (set, frozenset)):
            return False
        items = list(set.__iter__(actual) if isinstance(actual, set) else frozenset.__iter__(actual))
        return len(items) == len(expected) and all(any(same(item, wanted) for item in items) for wanted in expected)
    return bool(actual == expected)


def _as_number(value: Any) -> int | float | complex | None:
    """A plain copy of the number ``value`` holds, or None if it holds none.

    ``bool``, ``int``, ``float`` and ``complex`` (and their subclasses) are read with the
    base type's own method; other numbers (NumPy's) through ``__index__`` or ``__float__``,
    as ``int()`` and ``float()`` read them; strings are not numbers.
    """
    if isinstance(value, complex):
        return complex(complex.__getattribute__(value, "real"), complex.__getattribute__(value, "imag"))
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, (str, bytes, bytearray)):
        return None
    kind = type(value)
    try:
        if hasattr(kind, "__index__"):
            return int.__index__(kind.__index__(value))
        if hasattr(kind, "__float__"):
            return float.__float__(kind.__float__(value))
    except Exception:  # a number type's own conversion failed: not a number here
        return None
    return None


def _shown(value: Any) -> str:
    """``repr(value)``, or a plain description if the value's own ``__repr__`` fails."""
    try:
        return repr(value)[:2000]
    except Exception:  # an answer's own __repr__ may raise anything
        return f"<a {type(value).__name__} that cannot be shown>"


def uses_reference(call: Callable[[], Any], *references: Callable[..., Any],
                   namespaces: tuple[dict[str, Any], ...] = ()) -> list[str]:
    """Run ``call()`` and return the names of the course's ``references`` that it reached.

    An exercise that asks a learner to write what the course also ships (lesson 8's
    ``wilson_interval``, lesson 10's adapter methods) checks that the answer does not simply
    call the shipped one. While ``call()`` runs, every place that holds a reference (the
    ``course_lib`` modules, their classes, and the globals of ``call``: the notebook's) holds
    a recording stand-in that still does the real work, so nothing else changes::

        check(not uses_reference(lambda: wilson(5, 10), wilson_interval), "your own computation")

    ``namespaces`` are more globals to look in: the grader runs a check in a copy of the
    notebook's namespace and passes the notebook's own here, where the answer's names live.
    """
    import functools
    import sys

    reached: list[str] = []

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def recording(*args: Any, **kwargs: Any) -> Any:
            reached.append(original.__qualname__)
            return original(*args, **kwargs)
        return recording

    owners: list[Any] = [getattr(call, "__globals__", {}), *namespaces]  # dicts, or classes (set with setattr)
    for name, module in list(sys.modules.items()):
        if name == "course_lib" or name.startswith("course_lib."):
            owners.append(vars(module))
            owners += [value for value in vars(module).values() if isinstance(value, type) and value.__module__ == name]
    owners += [value for namespace in [owners[0], *namespaces] for value in namespace.values()
               if isinstance(value, type)]  # the notebook's own classes
    swapped: list[tuple[Any, str, Any]] = []  # (owner, key, original), to put back
    stand_ins = [(reference, stand_in(reference)) for reference in references]
    try:
        for owner in owners:
            items = owner.items() if isinstance(owner, dict) else vars(owner).items()
            for key, value in list(items):
                replacement = next((new for reference, new in stand_ins if value is reference), None)
                if replacement is not None:
                    swapped.append((owner, key, value))
                    _assign(owner, key, replacement)
        call()
    finally:
        for owner, key, value in reversed(swapped):
            _assign(owner, key, value)
    return sorted(set(reached))


def _assign(owner: Any, key: str, value: Any) -> None:
    if isinstance(owner, dict):
        owner[key] = value
    else:
        setattr(owner, key, value)
