"""What a format schema may ask of its grammar (``server/grammar_limits.py``), without the model.

Each refused pattern and schema below is one of about 100 bytes that crashed llama.cpp, hung the
converter or stalled every token before the subset was narrowed (a security read found them).
"""

import pytest

from course_server.grammar_limits import (
    MAX_ALTERNATIVES,
    SchemaTooComplex,
    check_format,
    check_pattern,
    grammar_nesting,
)

ALLOWED = [r"^SKU-\d{5}$", r"^ORD-[0-9]{4}$", "^[a-z]{1,8}$", r"^\d{3}-\d{4}$", "^(tokyo|osaka)$",
           "^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$", "a{2,}", "^(a|b)?c$", "^[^@ ]+@[^@ ]+$"]
REFUSED = {
    "^]$": "a stray ] made the converter loop for ever",
    "^a}$": "a stray } likewise",
    "^a{,20000}$": "the converter reads any braces as a count: 20,000 nested groups, a segfault",
    "^a{0, 20000}$": "the same with a space",
    "^a{0,+20000}$": "with a sign",
    "^a{0,20_000}$": "with an underscore",
    "^a[]{0,20000}[]$": "a class that starts with ] ends there for the converter",
    "^a{100000000}$": "100 MB of grammar text",
    "^(a?){0,1000}$": "a counted group that can match nothing: hours per token",
    "^((a?){0,30}){0,30}$": "the same, nested",
    "^(a*){0,1000}$": "likewise",
    "^(a|b?){0,1000}$": "likewise",
    r"^[\UFFFFFFFF]$": "no such character: a dead end",
    r"^[^\s\S]$": "a class that matches nothing: a dead end",
    "(?=a)b": "look-arounds",
    "a|b": "alternatives outside a group",
    "x" * 300: "too long",
    "^é+$": "not ASCII",
    "^a{1001}$": "a count above 1,000",
}


@pytest.mark.parametrize("pattern", ALLOWED)
def test_the_patterns_tools_use_are_allowed(pattern):
    check_pattern(pattern)


@pytest.mark.parametrize("pattern", REFUSED, ids=list(REFUSED.values()))
def test_a_pattern_outside_the_subset_is_refused(pattern):
    with pytest.raises(SchemaTooComplex, match="pattern"):
        check_format({"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}})


@pytest.mark.parametrize("keyword, value", [
    ("enum", [f"v{i}" for i in range(MAX_ALTERNATIVES + 1)]),
    ("anyOf", [{"type": "string"}] * (MAX_ALTERNATIVES + 1)),
    ("properties", {f"p{i}": {"type": "string"} for i in range(MAX_ALTERNATIVES + 1)}),
])
def test_every_list_of_paths_is_capped(keyword, value):
    check_format({keyword: value[:MAX_ALTERNATIVES] if isinstance(value, list)
                  else dict(list(value.items())[:MAX_ALTERNATIVES])})
    with pytest.raises(SchemaTooComplex, match=keyword):
        check_format({keyword: value})


@pytest.mark.parametrize("schema, words", [
    ({"type": "string", "maxLength": 20000}, "maxLength"),
    ({"type": "array", "minItems": 10**9}, "minItems"),
    ({"type": "string", "maxLength": -1}, "maxLength"),
    ({"type": "string", "maxLength": "5"}, "maxLength"),
    ({"anyOf": [{"anyOf": [{"type": "string"}] * 40}] * 40}, "at most 1000"),
])
def test_counts_and_size_are_capped(schema, words):
    with pytest.raises(SchemaTooComplex, match=words):
        check_format(schema)


def test_grammar_nesting_counts_parentheses_outside_literals_and_classes():
    assert grammar_nesting('root ::= ("a" ("b")?)? [()] "(("') == 2
    assert grammar_nesting("root ::= " + "(x " * 2000 + ")" * 2000) == 2000
