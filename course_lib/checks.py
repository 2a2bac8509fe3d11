"""The checks an exercise's check cell calls, and the answers it sends to the grader.

A check that fails raises ``CheckFailed`` (an ``AssertionError``, so nbval marks the cell
as failed) with a message meant for a learner, not a stack-trace reader::

    check_equal(tokens_per_second(sample), 25.0, "eval_duration is in nanoseconds")

Notebooks import them from here (``from course_lib.checks import check, submit``): the learner's
library, so a check cell runs where only it is installed.

A grade is decided outside the learner's process. A check cell does two things: in the
learner's kernel it computes **answers**, plain data (the learner's functions' outputs on the
check's inputs), and it hands them to ``submit`` with its ``judge``, a function of the answers
alone that calls the checks::

    def judge(answers):
        check_close(answers["sample"], 25.0, "50 tokens in 2 s is 25 tokens/s")

    submit({"sample": tokens_per_second(sample)}, judge)

In a notebook, ``submit`` runs ``judge`` on the answers at once (the learner sees every ✔ and
the first ✘). When the grader runs the notebook (``COURSE_GRADING=1``), ``submit`` also sends
the answers out as a display output of type ``ANSWERS``, and the grader runs the *published*
cell's ``judge`` in its own process on that data (``course_grading.grading``): nothing in the
kernel (a patched ``json``, a rebound ``check``, a rewritten output) can turn a wrong answer
into a pass, since all the kernel sends is answers, and a pass needs the right ones.
``plain`` writes the answers as JSON (tuples, sets, bytes and dicts tagged, so they come
back as they were; any other object as its type's name and text) and ``unplain`` reads them.

Every check cell of the course has a ``judge``; the grader never counts a check the kernel
ran by itself (a published check cell without a judge cannot pass).

The checks speak the learner's language. The code of a check cell is the same in every
edition, so its English ``what`` and ``hint`` are translated when they are shown: ``said``
looks them up in ``MESSAGES``, the language's message catalogue
(``translations/ja/checks.md``, read by ``course_tools.translation.messages``). A message
made with an f-string is looked up by its template, ``f"declaring `now` costs {cost_now}
tokens"`` by ``declaring `now` costs {cost_now} tokens``, and its values go into the
translated template where it names them. A message the catalogue lacks is shown in
English. Imported normally, the language and the catalogue are read on first use
(``COURSE_LANG``); the grader judges in the notebook's language with ``judging``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from course_lib.check_messages import translate


class CheckFailed(AssertionError):
    """An exercise check did not pass; the message says what was expected and gives a hint."""


LANGUAGE: str | None = None  # the learner's language; None: not read yet
MESSAGES: dict[str, str] | None = None  # an English message or template: its translation
LABELS = {  # the checks' own words, each with the spaces that line the values up
    "en": {"hint": "  hint: ", "expected": "  expected: ", "got": "  got:      ",
           "expected about": "  expected about: ", "got about": "  got:          "},
    "ja": {"hint": "  ヒント: ", "expected": "  期待値: ", "got": "  実際:   ",
           "expected about": "  期待値 (約): ", "got about": "  実際:        "},
}


ANSWERS = "application/vnd.course-grading.answers+json"  # the display output that carries a check's answers
_SPEAKING: ContextVar[tuple[str, dict[str, str]] | None] = ContextVar("speaking", default=None)
_QUIET: ContextVar[bool] = ContextVar("quiet", default=False)


@contextmanager
def judging(language: str, messages: dict[str, str]) -> Iterator[None]:
    """While in this block (in this thread), the checks speak ``language`` with ``messages``
    and print nothing when they pass: how the grader runs a judge."""
    speaking, quiet = _SPEAKING.set((language, messages)), _QUIET.set(True)
    try:
        yield
    finally:
        _SPEAKING.reset(speaking)
        _QUIET.reset(quiet)


@contextmanager
def quietly() -> Iterator[None]:
    """While in this block, a check that passes prints nothing (one that fails still raises): a
    check cell judges what needs no model this way before it asks the model anything."""
    quiet = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(quiet)


def _table() -> tuple[str, dict[str, str]]:
    """The language and its messages: the grader's (``judging``), else read once from the course."""
    global LANGUAGE, MESSAGES
    speaking = _SPEAKING.get()
    if speaking is not None:
        return speaking
    if LANGUAGE is None or MESSAGES is None:
        from course_lib.check_messages import translations
        from course_lib.config import course_language

        LANGUAGE = course_language()
        MESSAGES = translations(LANGUAGE)
    return LANGUAGE, MESSAGES


def said(text: str) -> str:
    """``text``, a check's ``what`` or ``hint``, in the learner's language (as it is, if the
    catalogue has no translation of it)."""
    language, messages = _table()
    if language == "en" or type(text) is not str:
        return text
    return translate(text, messages)


def _failed(what: str, hint: str, *shown: tuple[str, str]) -> CheckFailed:
    """The error of a failed check: what was checked, the values shown, the hint."""
    labels = LABELS.get(_table()[0], LABELS["en"])
    lines = [f"✘ {said(what)}", *(labels[label] + value for label, value in shown)]
    return CheckFailed("\n".join(lines + ([labels["hint"] + said(hint)] if hint else [])))


def check(condition: bool, what: str, hint: str = "") -> None:
    """Pass when ``condition`` is true; ``what`` says what is being checked."""
    if not condition:
        raise _failed(what, hint)
    _passed(what)


def check_equal(actual: Any, expected: Any, what: str, hint: str = "") -> None:
    """Pass when ``actual == expected``; on failure show both.

    When ``expected`` is plain data (numbers, strings, bytes, ``None``, and lists, tuples,
    dicts and sets of them), the comparison is the plain types' own, so an answer object
    whose ``__eq__`` says yes to everything does not pass.
    """
    if not same(actual, expected):
        raise _failed(what, hint, ("expected", repr(expected)), ("got", _shown(actual)))
    _passed(what)


def check_close(actual: float, expected: float, what: str, hint: str = "", rel: float = 1e-6) -> None:
    """Pass when ``actual`` is within ``rel`` (relative) of ``expected``."""
    value = _as_float(actual)
    close = value is not None and abs(value - expected) <= rel * max(abs(expected), 1e-12)
    if not close:
        raise _failed(what, hint, ("expected about", repr(expected)), ("got about", _shown(actual)))
    _passed(what)


def _passed(what: str) -> None:
    if not _QUIET.get():
        print(f"✔ {said(what)}")


# --------------------------------------------------------------------------------------
# Answers: what a check cell sends to the grader, as plain data.
# --------------------------------------------------------------------------------------

ANSWERS_LIMIT = 1_000_000  # characters of JSON a check cell may send
DEPTH_LIMIT = 64  # nesting of lists and dicts in answers


def grading() -> bool:
    """Whether this kernel is run by the grader, which reads the answers (``COURSE_GRADING=1``,
    set by ``course_grading.grading`` for the kernels it starts)."""
    return os.environ.get("COURSE_GRADING") == "1"


def _send(record: dict[str, Any]) -> None:
    if grading():
        from IPython.display import publish_display_data

        publish_display_data({ANSWERS: record, "text/plain": ""})


def submit(answers: dict[str, Any], judge: Callable[[Any], None]) -> None:
    """Send ``answers`` to the grader (when grading) and run ``judge`` on them here, as the grader
    will: on the same plain data, so a check passes here exactly when it passes there."""
    record = plain(answers)
    _send({"answers": record})
    judge(unplain(record))


class Opaque:
    """An answer that was not plain data: its type's name and its text. Equal only to itself."""

    def __init__(self, kind: str, text: str) -> None:
        self.kind, self.text = kind, text

    def __repr__(self) -> str:
        return f"<{self.kind}: {self.text}>"


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON data, read with the plain types' own methods (a ``str`` subclass is its
    characters, whatever its ``__eq__``); tuples, sets, bytes and dicts tagged, anything else
    ``{"__object__": [type name, text]}``."""
    if depth > DEPTH_LIMIT:
        return {"__object__": ["too deep", ""]}
    if value is None or type(value) is bool:
        return value
    if isinstance(value, bool):
        return bool.__bool__(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        number = float.__float__(value)
        return number if number == number and abs(number) != float("inf") else {"__float__": repr(number)}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": bytes(value).hex()}
    if isinstance(value, list):
        return [plain(item, depth + 1) for item in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"__tuple__": [plain(item, depth + 1) for item in tuple.__iter__(value)]}
    if isinstance(value, (set, frozenset)):
        items = set.__iter__(value) if isinstance(value, set) else frozenset.__iter__(value)
        return {"__set__": [plain(item, depth + 1) for item in items]}
    if isinstance(value, dict):
        return {"__dict__": [[plain(key, depth + 1), plain(item, depth + 1)] for key, item in dict.items(value)]}
    return {"__object__": [type(value).__name__[:200], _shown(value)[:500]]}


def unplain(value: Any, depth: int = 0) -> Any:
    """The data ``plain`` wrote, read back from JSON as Python values (an object as an ``Opaque``).
    Raises ``ValueError`` for anything ``plain`` does not write."""
    if depth > DEPTH_LIMIT + 1:
        raise ValueError("answers nested too deep")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, list):
        return [unplain(item, depth + 1) for item in value]
    if isinstance(value, dict) and len(value) == 1:  # a dict of JSON (nbformat's NotebookNode is one too)
        (tag, inside), = value.items()
        pairs = isinstance(inside, list) and all(isinstance(pair, list) and len(pair) == 2 for pair in inside)
        if tag == "__tuple__" and isinstance(inside, list):
            return tuple(unplain(item, depth + 1) for item in inside)
        if tag == "__set__" and isinstance(inside, list):
            return frozenset(_hashable(unplain(item, depth + 1)) for item in inside)
        if tag == "__dict__" and pairs:
            return {_hashable(unplain(key, depth + 1)): unplain(item, depth + 1) for key, item in inside}
        if tag == "__bytes__" and isinstance(inside, str):
            return bytes.fromhex(inside)
        if tag == "__float__" and inside in ("nan", "inf", "-inf"):
            return float(inside)
        if tag == "__object__" and isinstance(inside, list) and len(inside) == 2:
            return Opaque(str(inside[0]), str(inside[1]))
    raise ValueError(f"not answers: {str(value)[:100]}")


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, dict):
        return tuple((key, _hashable(item)) for key, item in value.items())
    return value


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


PAIRWISE_LIMIT = 64  # a dict or set of answers larger than this is compared by exact keys (no O(n²) search)
_KEYS = (str, int, float, bool, type(None), bytes)


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
        if len(pairs) != len(expected):
            return False
        if len(pairs) > PAIRWISE_LIMIT:  # looked up by exact type and value: linear, not pair by pair
            index = {(type(key), key): value for key, value in pairs if type(key) in _KEYS}
            return all(type(wanted) in _KEYS and (type(wanted), wanted) in index
                       and same(index[(type(wanted), wanted)], wanted_value)
                       for wanted, wanted_value in expected.items())
        return all(any(same(key, wanted) and same(value, wanted_value) for key, value in pairs)
                   for wanted, wanted_value in expected.items())
    if kind in (set, frozenset):
        if not isinstance(actual, (set, frozenset)):
            return False
        items = list(set.__iter__(actual) if isinstance(actual, set) else frozenset.__iter__(actual))
        if len(items) != len(expected):
            return False
        if len(items) > PAIRWISE_LIMIT:
            found = {(type(item), item) for item in items if type(item) in _KEYS}
            return all(type(wanted) in _KEYS and (type(wanted), wanted) in found for wanted in expected)
        return all(any(same(item, wanted) for item in items) for wanted in expected)
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
