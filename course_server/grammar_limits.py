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
A pattern inside the subset can still be expensive. llama.cpp's grammar keeps one parse state
("stack") for every place in the pattern the text so far may have reached, and tests every
candidate token against every state, at every token. ``^.{999}$`` has one such place at a
time, but once a pattern can match the same text in several ways (a ``{0,999}``, a ``*``, an
alternative), every position after that point may be live at once: ``^`` + ``.{0,999}`` thirty
times + ``.{999}$`` (248 characters) keeps tens of thousands of states and made each token
cost seconds, then minutes, in the one decoder thread every request shares. So a pattern's
*ambiguity*, the parse positions after its first variable part (``pattern_ambiguity``), is
capped (``MAX_PATTERN_AMBIGUITY``), before any grammar is made. What still slips through is
stopped while generating: every token's sampling, and the request as a whole, has a time
budget (``engine.py``).

Each refusal names its limit (``wire.py`` lists them all). The supervisor (``supervisor.py``)
remains the last line: a grammar that still crashes llama.cpp costs a restart, not the server.
"""

from __future__ import annotations

import re
from typing import Any

MAX_SCHEMA_NODES = 1_000  # objects and arrays in one format schema
MAX_REPEAT = 1_000  # minLength, maxLength, minItems, ...; and a pattern's counts, multiplied when nested
MAX_PATTERN_LENGTH = 256
MAX_PATTERN_AMBIGUITY = 400  # parse-state work per character after a pattern's first variable part
MAX_FORMAT_AMBIGUITY = 800  # the same, added up over every pattern of one schema (anyOf branches are live at once)
MAX_ALTERNATIVES = 64  # enum values, anyOf/oneOf/allOf branches, properties of one object, prefixItems
MAX_GRAMMAR_NESTING = 1_500  # parentheses in the grammar text: llama.cpp's parser recurses once per level
LISTED_KEYWORDS = ("enum", "anyOf", "oneOf", "allOf", "prefixItems", "properties", "type")
MAX_GRAMMAR_CHARS = 256 * 1024  # the grammar text llama-cpp-python writes, checked before llama.cpp compiles it
COUNTED_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
                    "minContains", "maxContains")
SHORTHANDS = "dDwWsS"  # \d \w \s and their complements
ESCAPABLE = SHORTHANDS + ".-\\/()[]{}*+?|^$ "


class SchemaTooComplex(ValueError):
    """A ``format`` schema beyond what the server compiles into a grammar."""


def check_format(schema: Any) -> None:
    """Raise ``SchemaTooComplex`` (the server answers 400) unless every part of ``schema`` is
    within the limits above. Walks the schema without recursion: it may be deep."""
    nodes, ambiguity, stack = 0, 0, [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            nodes += 1
            stack += item
        elif isinstance(item, dict):
            nodes += 1
            for keyword in COUNTED_KEYWORDS:
                check_count(item.get(keyword), f"{keyword} in a format schema")
            for keyword in LISTED_KEYWORDS:
                if isinstance(item.get(keyword), (list, dict)) and len(item[keyword]) > MAX_ALTERNATIVES:
                    raise SchemaTooComplex(f"{keyword} in a format schema may list at most {MAX_ALTERNATIVES} "
                                           "entries: each is a path the grammar follows at every token")
            if "pattern" in item:
                ambiguity += check_pattern(item["pattern"])
                if ambiguity > MAX_FORMAT_AMBIGUITY:
                    raise SchemaTooComplex(f"the patterns of a format schema may add up to an ambiguity of at most "
                                           f"{MAX_FORMAT_AMBIGUITY} (here {ambiguity:,} so far): branches of anyOf "
                                           "are live at once, and each of their states is tried at every token")
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


def check_pattern(pattern: Any) -> int:
    """Allow a ``pattern`` only in a small subset that the converter and llama.cpp handle safely,
    and return its ambiguity (``pattern_ambiguity``).

    A sequence of atoms, each optionally quantified: a literal letter, digit or one of
    ``LITERALS``; ``.``; an escape of ``ESCAPABLE``; a class ``[...]`` (or ``[^...]``) of those
    characters and ranges such as ``A-Z``, with no shorthand in a negated class (``[^\\s\\S]``
    matches nothing: a dead end). Groups ``(...)`` and ``(?:...)`` may hold alternatives
    (``^(tokyo|osaka)$``), but only ``?`` may follow a group: a counted group whose body can
    match nothing, ``(a?){0,1000}``, makes llama.cpp keep a thousand parse states per token.
    Counts are exactly ``{n}``, ``{n,}`` or ``{n,m}`` with n and m at most ``MAX_REPEAT``;
    ``^`` may only start the pattern and ``$`` only end it. The converter reads anything
    between braces as a number (``{,20000}`` is 20,000 nested groups), so a pattern outside
    this subset is refused rather than guessed at.
    """
    if not isinstance(pattern, str):
        raise SchemaTooComplex("pattern in a format schema must be a string")
    refuse = f"pattern {pattern[:40]!r} is outside the subset this server compiles into a grammar: "
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise SchemaTooComplex(refuse + f"it may be at most {MAX_PATTERN_LENGTH} characters")
    try:
        re.compile(pattern)
    except (re.error, ValueError, OverflowError, RecursionError) as error:  # \\U0FFFFFFF overflows, say
        raise SchemaTooComplex(refuse + f"it is not a regular expression ({error})") from None
    body = pattern.removeprefix("^")
    body = body[:-1] if body.endswith("$") and not body.endswith("\\$") else body
    problem = _pattern_problem(body)
    if problem:
        raise SchemaTooComplex(refuse + problem)
    if (ambiguity := pattern_ambiguity(body)) > MAX_PATTERN_AMBIGUITY:
        raise SchemaTooComplex(refuse + f"its ambiguity is {ambiguity:,} (the parse positions after its first "
                               f"variable part, {{n,m}}, *, +, ? or an alternative), at most "
                               f"{MAX_PATTERN_AMBIGUITY} is allowed: each is a live state of the grammar at every "
                               "token; use smaller counts, or validate the value after generation")
    return ambiguity


LITERALS = " -_:@,/#=!%&~'"
SIMPLE = re.compile(r"[A-Za-z0-9]")
QUANTIFIER = re.compile(r"\?|\*|\+|\{(\d{1,4})(,(\d{1,4})?)?\}")


def _pattern_problem(body: str) -> str:
    """What is wrong with the pattern between its anchors, or "" if it is in the subset."""
    depth, i = 0, 0
    after_group = False  # the last atom was a group: only "?" may follow
    can_quantify = False
    while i < len(body):
        character = body[i]
        if character == "(":
            i += 3 if body.startswith("(?:", i) else 1
            if body.startswith("(?", i - 1) and not body.startswith("(?:", i - 1):
                return "look-arounds, flags and named groups are not allowed"
            depth, can_quantify = depth + 1, False
            if depth > 2:
                return "groups may nest at most 2 deep"
            continue
        if character == ")":
            depth, i, after_group, can_quantify = depth - 1, i + 1, True, True
            continue
        if character == "|":
            if depth == 0:
                return "alternatives must be inside a group, e.g. ^(tokyo|osaka)$"
            i, can_quantify = i + 1, False
            continue
        quantifier = QUANTIFIER.match(body, i)
        if quantifier:
            if not can_quantify:
                return f"the quantifier {quantifier.group()!r} follows nothing it can repeat"
            if after_group and quantifier.group() != "?":
                return "only ? may follow a group; repeat a character or a class instead"
            numbers = [int(n) for n in (quantifier.group(1), quantifier.group(3)) if n]
            if any(n > MAX_REPEAT for n in numbers):
                return f"counts may be at most {MAX_REPEAT}"
            i, can_quantify, after_group = quantifier.end(), False, False
            continue
        if character == "\\":
            escaped = body[i + 1:i + 2]
            if not escaped or escaped not in ESCAPABLE:
                return f"the escape \\{escaped} is not allowed"
            i += 2
        elif character == "[":
            end = _class_end(body, i)
            if isinstance(end, str):
                return end
            i = end
        elif SIMPLE.match(character) or character in LITERALS or character == ".":
            i += 1
        else:
            return f"the character {character!r} must be escaped or is not allowed"
        can_quantify, after_group = True, False
    return ""


def pattern_ambiguity(body: str) -> int:
    """How much parse-state work a pattern (in the subset) can make llama.cpp do for each character:
    0 for a pattern with one way to match. llama.cpp turns ``x{0,m}`` into ``m`` nested optional
    groups, so the text read so far may have ended a variable part at any of its positions: the
    first variable part (``{n,m}``, ``*``, ``+``, ``?``, a group with an alternative) is cheap, but
    every part after it adds its positions as live parse states, and a variable one adds each of
    its ``m`` positions with up to ``m`` nested frames (``m * m / 2``). A literal character that the
    variable part before it cannot match (the ``@`` in ``[a-z]{1,64}@``) ends the ambiguity: the
    parts after it are counted afresh. Measured on the 0.5B model's vocabulary: ``.{0,128}.{128}``
    (128) cost 67 ms a token against 46 for any string; ``.{0,40}`` three times (1,600) 0.3 to
    4.9 s a token.

    >>> pattern_ambiguity(r"\\d{4}-\\d{2}"), pattern_ambiguity(".{0,10}.{5}"), pattern_ambiguity(".{0,10}.{0,10}")
    (0, 5, 50)
    >>> pattern_ambiguity("[a-z]{1,64}@[a-z]{1,64}"), pattern_ambiguity("(a|b)c")
    (0, 2)
    """
    worst = cost = 0
    variable_seen, i = False, 0
    previous = ""  # the last atom's text, if it was variable (for the separator rule)
    open_groups: list[int] = []  # positions read inside each open group before anything was variable
    while i < len(body):
        character = body[i]
        if character == "(":
            open_groups.append(0)
            i += 3 if body.startswith("(?:", i) else 1
            previous = ""
            continue
        if character == ")":
            inside = open_groups.pop() if open_groups else 0
            i += 1
            if body.startswith("?", i):  # an optional group: the rest is ambiguous
                cost += inside if variable_seen else 0
                variable_seen, i = True, i + 1
            previous = ""
            continue
        if character == "|":  # an alternative: the rest is ambiguous
            cost += open_groups[0] if variable_seen and open_groups else 0
            variable_seen, i, previous = True, i + 1, ""
            continue
        end = _atom_end(body, i)
        atom, i = body[i:end], end
        quantifier = QUANTIFIER.match(body, i)
        positions, variable, nested = 1, False, False
        if quantifier:
            positions, variable, nested = _positions(quantifier)
            i = quantifier.end()
        elif previous and len(atom) == 1 + atom.startswith("\\") and not _matches(previous, atom) \
                and not open_groups:
            worst, cost, variable_seen = max(worst, cost), 0, False  # a separator the last part cannot match
            previous = ""
            continue
        if variable_seen:
            cost += positions * positions // 2 if nested else positions
        elif not open_groups:
            variable_seen = variable
        open_groups = [inside + positions for inside in open_groups]
        previous = atom if variable else ""
    return max(worst, cost)


def _matches(atom: str, literal: str) -> bool:
    """Whether the atom (``.``, a class, an escape, a character) can match the literal character."""
    character = literal[-1]
    if atom == ".":
        return character not in "\n\r"
    try:
        return re.fullmatch(atom, character) is not None
    except re.error:
        return True


def _atom_end(body: str, i: int) -> int:
    """The index after the atom (a character, an escape or a class) that starts at ``i``."""
    if body[i] == "\\":
        return i + 2
    if body[i] == "[":
        end = _class_end(body, i)
        return end if isinstance(end, int) else len(body)
    return i + 1


def _positions(quantifier: re.Match[str]) -> tuple[int, bool, bool]:
    """The positions a quantified atom has, whether it can match more than one length, and whether
    llama.cpp nests its optional positions (``{n,m}``) rather than looping (``*``, ``+``)."""
    text, low, high = quantifier.group(), quantifier.group(1), quantifier.group(3)
    if text in ("*", "?"):
        return 1, True, False
    if text == "+":
        return 2, True, False
    if quantifier.group(2) is None:  # {n}
        return int(low), False, False
    if high is None:  # {n,}
        return int(low) + 1, True, False
    return int(high), int(high) > int(low), int(high) > int(low)


def _class_end(body: str, start: int) -> int | str:
    """The index after the class that starts at ``start``, or what is wrong with it."""
    negated = body.startswith("[^", start)
    i = start + (2 if negated else 1)
    if body[i:i + 1] in ("]", ""):
        return "a class must not be empty or start with ]"
    while i < len(body) and body[i] != "]":
        if body[i] == "\\":
            escaped = body[i + 1:i + 2]
            if not escaped or escaped not in ESCAPABLE:
                return f"the escape \\{escaped} is not allowed"
            if negated and escaped in SHORTHANDS:
                return f"\\{escaped} inside a negated class [^...] is not allowed"
            i += 2
        elif SIMPLE.match(body[i]) or body[i] in LITERALS + ".":
            i += 1
        else:
            return f"the character {body[i]!r} is not allowed in a class"
    return i + 1 if i < len(body) else "a class is not closed"


def grammar_nesting(grammar: str) -> int:
    """The deepest nesting of parentheses in GBNF text, outside its literals and classes: what
    llama.cpp's parser recurses on (about 19,000 levels end the process)."""
    depth = deepest = 0
    i, quote = 0, ""
    while i < len(grammar):
        character = grammar[i]
        if quote:
            if character == "\\":
                i += 1
            elif character == quote:
                quote = ""
        elif character in "\"[":
            quote = "]" if character == "[" else character
        elif character == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif character == ")":
            depth -= 1
        i += 1
    return deepest
