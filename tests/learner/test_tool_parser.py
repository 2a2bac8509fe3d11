"""The tool-call parser, on the shapes small models really write."""

import json
from pathlib import Path

import pytest

from course_lib.tool_parser import parse_tool_calls, possible_call_start

TOOLS = {"now", "calc"}
FIXTURES = json.loads((Path(__file__).parents[2] / "data" / "model_outputs.json").read_text())


def calls(text, tools=TOOLS):
    reply = parse_tool_calls(text, tools)
    return [(call.name, call.arguments, call.style) for call in reply.tool_calls], reply.content


@pytest.mark.parametrize("text, expected", [
    ('<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>', [("now", {}, "tagged")]),
    ('```json\n{"name": "calc", "arguments": {"expression": "2*3"}}\n```',
     [("calc", {"expression": "2*3"}, "fenced")]),
    ('{"name": "calc", "parameters": {"expression": "1+1"}}', [("calc", {"expression": "1+1"}, "bare")]),
    ('{{"name": "now", "arguments": {}}}', [("now", {}, "bare")]),
    ('[{"name": "now", "arguments": {}}, {"name": "calc", "arguments": {"expression": "1"}}]',
     [("now", {}, "bare"), ("calc", {"expression": "1"}, "bare")]),
    ('{"name": "now", "arguments": {}}\n{"name": "calc", "arguments": {"expression": "9"}}',
     [("now", {}, "bare"), ("calc", {"expression": "9"}, "bare")]),
    ('{"name": "calc", "arguments": "{\\"expression\\": \\"4/2\\"}"}', [("calc", {"expression": "4/2"}, "bare")]),
    ('{"type": "function", "function": {"name": "now", "arguments": {}}}', [("now", {}, "bare")]),
    ('<tool_call>\n{"name": "now", "arguments": {}}', [("now", {}, "tagged")]),  # cut off before the closing tag
])
def test_each_shape_becomes_a_call(text, expected):
    found, content = calls(text)
    assert found == expected
    assert content == ""


def test_text_around_a_call_is_kept():
    found, content = calls('Let me check.\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>\nDone.')
    assert found == [("now", {}, "tagged")]
    assert content == "Let me check.\n\nDone."


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "cat_joke", "arguments": {}}</tool_call>',  # an invented tool
    '{"name": "cat_joke", "arguments": {}}',
    'Use {"a": 1} as the config.',  # JSON that is not a call
    '{"name": "calc", "arguments": [1, 2]}',  # arguments that are not an object
    '{"name": "calc", "arguments": "not json"}',
    'It is 3 o\'clock.',
])
def test_what_is_not_a_declared_call_stays_as_content_unchanged(text):
    found, content = calls(text)
    assert found == []
    assert content == text


def test_a_list_with_one_undeclared_call_is_not_split():
    text = '[{"name": "now", "arguments": {}}, {"name": "cat_joke", "arguments": {}}]'
    assert calls(text) == ([], text)


def test_no_declared_tools_means_no_calls():
    text = '<tool_call>{"name": "now", "arguments": {}}</tool_call>'
    assert calls(text, set()) == ([], text)


@pytest.mark.parametrize("text, start", [
    ("It is noon.", None),
    ("a < b and c > d", None),
    ("Calling <tool_c", 8),  # may still become <tool_call>
    ("Calling <tool_call>{", 8),
    ("here: {", 6),
    ("list [", 5),
    ("code ``", 5),
])
def test_possible_call_start(text, start):
    assert possible_call_start(text) == start


@pytest.mark.parametrize("case", FIXTURES["cases"], ids=[c["id"] for c in FIXTURES["cases"]])
def test_real_outputs_of_the_model(case):
    reply = parse_tool_calls(case["output"], set(case["tools"]))
    assert [{"name": c.name, "arguments": c.arguments, "style": c.style} for c in reply.tool_calls] == case["calls"]
    assert reply.content == case["content"]


def test_model_output_nested_deeper_than_python_recurses_is_content_not_a_crash():
    for text in ("[" * 5000, "{{" * 3000, "<tool_call>" + "[" * 3000 + "</tool_call>", "```json\n" + "[" * 3000):
        parsed = parse_tool_calls(text, {"now"})
        assert parsed.tool_calls == [] and parsed.content == text.strip()
    after = parse_tool_calls("[" * 3000 + ' {"name": "now", "arguments": {}}', {"now"})
    assert [call.name for call in after.tool_calls] == ["now"]
