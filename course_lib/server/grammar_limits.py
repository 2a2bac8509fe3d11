"""What a ``format`` schema may ask of the grammar it becomes, checked before anything compiles it.

A JSON schema in ``format`` (or a forced tool call, or OpenAI's ``response_format``) becomes a
llama.cpp grammar, and a grammar is a program that llama.cpp runs on every sampled token.
Some tiny schemas are huge programs: ``{"type": "string", "maxLength": 20000}`` becomes
20,000 nested optional groups, and llama.cpp's grammar parser recurses once per level until
the process runs out of stack; ``"minLength": 1000000`` writes megabytes of grammar text
before anything is compiled. And some grammars can reach a dead end, a state in which no
token is allowed (``"pattern": "[\\\\UFFFFFFFF]"``, a character that does not exist): llama.cpp
then throws a C++ exception through the sampler, which ends the process.

So every count a schema can ask for is capped, and so are the schema's size and the
grammar's. A ``pattern`` reaches the grammar only if it is in a small, safe subset of regular
expressions (printable ASCII, the usual escapes, bounded counts); any other pattern is
refused with a 400 that says so. A schema that needs such a pattern can still be used: leave
the pattern out of ``format`` and validate the output afterwards (lesson 5).
Each refusal names its limit (``wire.py`` lists them all). The supervisor (``supervisor.py``)
remains the last line: a grammar that still crashes llama.cpp costs a restart, not the server.
"""

from __future__ import annotations

import re
from typing import Any

MAX_SCHEMA_NODES = 1_000  # objects and arrays in one format schema
MAX_REPEAT = 1_000  # minLength, maxLength, minItems, ...; and a pattern's counts, multiplied when nested
MAX_PATTERN_LENGTH = 256
MAX_GRAMMAR_CHARS = 256 * 1024  # the grammar text llama-cpp-python writes, checked before llama.cpp compiles it
COUNTED_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
                    "minContains", "maxContains")
SHORTHANDS = "dDwWsS"  # \d \w \s and their complements
ESCAPABLE = SHORTHANDS + ".-\\/()[]{}*+?|^$ "
COUNT = re.compile(r"\{(\d{1,7})(?:(,)(\d{0,7}))?\}")


class SchemaTooComplex(ValueError):
    """A ``format`` schema beyond what the server compiles into a grammar."""


def check_format(schema: Any) -> None:
    """Raise ``SchemaTooComplex`` (the server answers 400) unless every part of ``schema`` is
    within the limits above. Walks the schema without recursion: it may be deep."""
    nodes, stack = 0, [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            nodes += 1
            stack += item
        elif isinstance(item, dict):
            nodes += 1
            for keyword in COUNTED_KEYWORDS:
                check_count(item.get(keyword), f"{keyword} in a format schema")
            if "pattern" in item:
                check_pattern(item["pattern"])
            stack += item.values()
        if nodes > MAX_SCHEMA_NODES:
            raise SchemaTooComplex(f"a format schema may have at most {MAX_SCHEMA_NODES} objects and arrays")


def check_count(value: Any, what: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SchemaTooComplex(f"{what} must be a whole number of 0 or more")
    if value > MAX_REPEAT:
        raise SchemaTooComplex(f"{what} may be at most {MAX_REPEAT} (got {value}): each unit becomes a "
                               "step of the grammar; validate longer values after generation instead")


def check_pattern(pattern: Any) -> None:
    """Allow a ``pattern`` only in the subset the grammar handles safely.

    Printable ASCII; escapes of punctuation and ``\\d \\w \\s`` (and complements), but no
    shorthand inside a negated class (``[^\\s\\S]`` matches nothing: a dead end); groups and
    ``(?:...)``, but no look-arounds or back-references; counts ``{n,m}`` whose product over
    nested groups stays within ``MAX_REPEAT``.
    """
    if not isinstance(pattern, str):
        raise SchemaTooComplex("pattern in a format schema must be a string")
    refuse = f"pattern {pattern[:40]!r} is outside what this server compiles into a grammar: "
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise SchemaTooComplex(refuse + f"it may be at most {MAX_PATTERN_LENGTH} characters")
    if any(not " " <= character <= "~" for character in pattern):
        raise SchemaTooComplex(refuse + "only printable ASCII characters are allowed")
    try:
        re.compile(pattern)
    except (re.error, ValueError, OverflowError, RecursionError) as error:  # \U0FFFFFFF overflows, say
        raise SchemaTooComplex(refuse + f"it is not a regular expression ({error})") from None
    _check_pattern_parts(pattern, refuse)


def _check_pattern_parts(pattern: str, refuse: str) -> None:
    """One pass over the pattern: escapes, classes, groups and the product of nested counts."""
    groups = [1]  # the largest count product inside each open group
    last = 1  # the count product of the last atom (what a following {n,m} multiplies)
    i = 0
    while i < len(pattern):
        character = pattern[i]
        if character == "\\":
            if pattern[i + 1] not in ESCAPABLE:
                raise SchemaTooComplex(refuse + f"the escape \\{pattern[i + 1]} is not allowed")
            i, last = i + 2, 1
        elif character == "[":
            i, last = _class_end(pattern, i, refuse), 1
        elif character == "(":
            if pattern.startswith("(?", i) and not pattern.startswith("(?:", i):
                raise SchemaTooComplex(refuse + "look-arounds, flags and named groups are not allowed")
            groups.append(1)
            i += 3 if pattern.startswith("(?:", i) else 1
            continue
        elif character == ")":
            last = groups.pop()
            groups[-1] = max(groups[-1], last)
            i += 1
            continue
        elif character == "{" and (count := COUNT.match(pattern, i)):
            largest = int(count.group(3) or count.group(1)) if count.group(2) else int(count.group(1))
            last *= max(largest, 1)
            if last > MAX_REPEAT:
                raise SchemaTooComplex(refuse + f"its counts, multiplied over nested groups, may be at most "
                                                f"{MAX_REPEAT}")
            i = count.end()
        else:
            i += 1
            if character not in "*+?|^$":
                last = 1
        groups[-1] = max(groups[-1], last)


def _class_end(pattern: str, start: int, refuse: str) -> int:
    """The index after the character class that starts at ``start``; refuse shorthands in a negated class."""
    negated = pattern.startswith("[^", start)
    i = start + (2 if negated else 1)
    if i < len(pattern) and pattern[i] == "]":  # a "]" first in a class is a literal
        i += 1
    while pattern[i] != "]":
        if pattern[i] == "\\":
            escaped = pattern[i + 1]
            if escaped not in ESCAPABLE:
                raise SchemaTooComplex(refuse + f"the escape \\{escaped} is not allowed")
            if negated and escaped in SHORTHANDS:
                raise SchemaTooComplex(refuse + f"\\{escaped} inside a negated class [^...] is not allowed")
            i += 2
        else:
            i += 1
    return i + 1
