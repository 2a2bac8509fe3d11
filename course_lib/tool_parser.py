"""Read tool calls out of the text a model wrote.

A model does not return ``tool_calls``; it writes text. Qwen2.5's template asks it to
write each call as JSON between ``<tool_call>`` and ``</tool_call>``, and a server turns
that text into the structured ``tool_calls`` of the API response. Small models do not
always follow the format. Seen with Qwen2.5-Coder-0.5B at temperature 0:

- ``<tool_call>{"name": "now", "arguments": {}}</tool_call>``  (as asked: "tagged")
- a fenced block: ```` ```json {"name": "now", "arguments": {}} ``` ```` ("fenced")
- bare JSON, one object or a list, sometimes with ``parameters`` instead of
  ``arguments``, sometimes in doubled braces ``{{"name": ...}}`` ("bare")

``parse_tool_calls`` accepts all of these, but only for tools that were declared. Any
text that is not a call of a declared tool (prose, an invented tool such as
``cat_joke``, JSON that is not a call) stays in ``content``: nothing is dropped. Ollama
behaves differently: its parser looks only for the template's tag and drops a call whose
name is not a declared tool. Lesson 2 shows the difference.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

CallStyle = Literal["tagged", "fenced", "bare"]

CALL_TAG = "<tool_call>"  # what opens a tagged call; one token in Qwen's vocabulary
TAGGED = re.compile(re.escape(CALL_TAG) + r"(.*?)(?:</tool_call>|$)", re.DOTALL)
FENCED = re.compile(r"```[a-zA-Z]*[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)
BLOCKS: tuple[tuple[re.Pattern[str], CallStyle], ...] = ((TAGGED, "tagged"), (FENCED, "fenced"))
CALL_OPENERS = (CALL_TAG, "```", "{", "[")
SCAN_BUDGET = 8  # failed tries at reading a JSON value may read 8 times the text, in all
MAX_FAILED_TRIES = 1_000  # and there are at most this many (each failure costs Python time too)
MAX_VALUES = 1_000  # JSON values read from one text or block; more is degenerate, and stays content
VALUE_START = re.compile(r'\{\{?\s*["}]|\[\s*[-\[{"0-9tfn\]]')  # where a JSON value (or {{...}}) may start


@dataclass
class ParsedCall:
    """One call the model asked for: a declared tool's name and its arguments."""

    name: str
    arguments: dict[str, Any]
    style: CallStyle = "tagged"


@dataclass
class ParsedReply:
    """The model's text split into what it said (``content``) and what it asked to run."""

    content: str
    tool_calls: list[ParsedCall] = field(default_factory=list)


def parse_tool_calls(text: str, tool_names: set[str] | list[str]) -> ParsedReply:
    """Split ``text`` into plain content and calls of the tools named in ``tool_names``."""
    declared = set(tool_names)
    spans: list[tuple[int, int, list[ParsedCall]]] = []
    for pattern, style in BLOCKS:
        for match in pattern.finditer(text):
            if _overlaps(match.span(), spans):
                continue
            calls = _calls_in_block(match.group(1), declared, style)
            if calls:
                bisect.insort(spans, (match.start(), match.end(), calls), key=lambda span: span[0])
    for start, end, value in _json_values(text):
        if not _overlaps((start, end), spans) and (calls := _as_calls(value, declared, "bare")):
            bisect.insort(spans, (start, end, calls), key=lambda span: span[0])
    if not spans:
        return ParsedReply(text)
    content, cursor = [], 0
    for start, end, _ in spans:
        content.append(text[cursor:start])
        cursor = end
    content.append(text[cursor:])
    return ParsedReply("".join(content).strip(), [call for *_, calls in spans for call in calls])


def call_format(declared: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``format`` schema (a grammar) for exactly one call of one of the ``declared`` tools, in
    the shape :func:`parse_tool_calls` reads as bare JSON: ``{"name": ..., "arguments": {...}}``.

    The grammar fixes the shape: a declared name, arguments with the right keys and types.
    ``pattern`` s are left out (llama-cpp-python's converter mangles some of them) and so are
    ``description`` s, but a property that happens to be called so is kept; validation at the
    boundary still decides whether the values are right.
    """
    return {"anyOf": [{"type": "object", "required": ["name", "arguments"],
                       "properties": {"name": {"const": tool["function"]["name"]},
                                      "arguments": _grammar_safe(tool["function"]["parameters"])}}
                      for tool in declared]}


def _grammar_safe(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_grammar_safe(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {key: {name: _grammar_safe(sub) for name, sub in value.items()}
            if key == "properties" and isinstance(value, dict) else _grammar_safe(value)
            for key, value in schema.items() if key not in ("pattern", "description")}


def possible_call_start(text: str) -> int | None:
    """Where a tool call might begin in ``text`` (for streaming), or None.

    A streaming server sends text as it is generated but must hold back anything that
    may turn out to be a call, so that each call can be sent whole in one chunk.
    ``"<tool_c"`` at the end of the text still counts: the next token may complete it.
    """
    for index, char in enumerate(text):
        for opener in CALL_OPENERS:
            if char == opener[0] and opener.startswith(text[index:index + len(opener)]):
                return index
    return None


def _overlaps(span: tuple[int, int], spans: list[tuple[int, int, Any]]) -> bool:
    """Whether ``span`` overlaps one of ``spans`` (sorted by start, not overlapping each other):
    only the last of them that starts before ``span`` ends can."""
    before = bisect.bisect_left(spans, span[1], key=lambda other: other[0])
    return before > 0 and spans[before - 1][1] > span[0]


def _calls_in_block(block: str, declared: set[str], style: CallStyle) -> list[ParsedCall]:
    """The calls inside a tag or fence; empty unless the block holds calls and only calls."""
    values = _json_values(block)
    gaps = zip([0] + [end for _, end, _ in values], [start for start, _, _ in values] + [len(block)])
    if not values or any(block[start:end].strip() for start, end in gaps):
        return []
    calls = [_as_calls(value, declared, style) for *_, value in values]
    return [call for group in calls for call in group] if all(calls) else []


def _json_values(text: str) -> list[tuple[int, int, Any]]:
    """Every top-level JSON object or list in ``text``, as (start, end, value).

    A value wrapped in doubled braces, ``{{...}}``, is read as the inner object.

    Each ``[`` or ``{`` that may start a value is tried, and a failed try may read far ahead:
    a model that degenerates into ``[1, [1, [1, ...`` would cost time growing with the square
    of its length. So the failed tries share a budget of ``SCAN_BUDGET`` times the text's
    length and ``MAX_FAILED_TRIES``, and at most ``MAX_VALUES`` are read; once any is spent, no
    further bare value is looked for, and the rest stays content (nothing is dropped).
    """
    decoder = json.JSONDecoder()
    found: list[tuple[int, int, Any]] = []
    index = 0
    budget = SCAN_BUDGET * len(text)  # characters that failed tries may still read
    end: int | None  # where the value that starts at index ends; None: no value starts there
    tries = MAX_FAILED_TRIES
    while index < len(text) and budget > 0 and tries > 0 and len(found) < MAX_VALUES:
        if not VALUE_START.match(text, index):  # a "{" not followed by '"' cannot start a call, "{{" aside
            index += 1
            continue
        try:
            value, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError as error:
            value, end = _doubled_braces(text, index, decoder)
            if end is None:
                budget, tries = budget - (error.pos - index), tries - 1
        except RecursionError:  # brackets nested deeper than Python recurses: no call is that deep
            budget -= len(text) - index  # it may have read that far
            index = _after_opening_run(text, index)
            continue
        if end is None:
            index += 1
            continue
        found.append((index, end, value))
        index = end
    return found


def _after_opening_run(text: str, index: int) -> int:
    """The index after a run of opening brackets."""
    while index < len(text) and text[index] in "{[":
        index += 1
    return index


def _doubled_braces(text: str, index: int, decoder: json.JSONDecoder) -> tuple[Any, int | None]:
    if not text.startswith("{{", index):
        return None, None
    try:
        value, end = decoder.raw_decode(text, index + 1)
    except (json.JSONDecodeError, RecursionError):
        return None, None
    return (value, end + 1) if text.startswith("}", end) else (None, None)


def _as_calls(value: Any, declared: set[str], style: CallStyle) -> list[ParsedCall]:
    """``value`` as a list of calls of declared tools, or [] if any part is not one."""
    items = value if isinstance(value, list) else [value]
    calls = [_as_call(item, declared, style) for item in items]
    return calls if calls and all(calls) else []  # type: ignore[return-value]


def _as_call(item: Any, declared: set[str], style: CallStyle) -> ParsedCall | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):  # {"type": "function", "function": {...}}
        item = item["function"]
    name = item.get("name")
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI's style: the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than Python reads
            return None
    if name not in declared or not isinstance(arguments, dict):
        return None
    return ParsedCall(name=name, arguments=arguments, style=style)
