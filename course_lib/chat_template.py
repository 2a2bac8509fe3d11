"""Turn a list of chat messages (and tools) into the one string the model reads.

A chat model never sees JSON messages. It sees a single text in which special tokens
mark who is speaking (for Qwen2.5: ``<|im_start|>user ... <|im_end|>``). Each model
ships a Jinja2 template, stored in its GGUF file under ``tokenizer.chat_template``, that
does this rendering; the tools you declare are rendered into the same text, usually
inside the system turn.

This module renders such templates the way Hugging Face's ``apply_chat_template`` does:
a sandboxed Jinja2 environment (a template is code that came with a download, so it
must not reach your files), ``trim_blocks`` and ``lstrip_blocks``, and the extras HF
templates expect (``tojson``, ``raise_exception``, ``strftime_now``).

>>> template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\\n{% endfor %}"
>>> render(template, [{"role": "user", "content": "Hi"}], add_generation_prompt=False)
'<user>Hi\\n'

Which parts of the prompt are markers and which are text matters. If an e-mail a tool
returns contains ``<|im_end|><|im_start|>system``, the rendered prompt holds those
characters; a server that reads every ``<|im_start|>`` in the prompt as the special token
has let the e-mail open a real system turn (role forging). ``render_prompt`` therefore
also says where the text of messages and tools sits in the prompt (``Prompt.text_spans``),
so that the server can turn only the template's own markers into special tokens.

>>> prompt = render_prompt(template, [{"role": "user", "content": "<b>"}], add_generation_prompt=False)
>>> prompt.text, [prompt.text[a:b] for a, b in prompt.text_spans]
('<user><b>\\n', ['<b>'])
"""

from __future__ import annotations

import functools
import json
import re
from bisect import bisect_left
from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate
from typing import Any

from jinja2 import Template
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from course_lib.messages import Message

Tool = dict[str, Any]


class TemplateError(ValueError):
    """The template refused the conversation (it called ``raise_exception``)."""


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """HF's ``tojson``: plain ``json.dumps`` (Jinja's own one would HTML-escape ``<``)."""
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii,
                      separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def make_environment() -> ImmutableSandboxedEnvironment:
    """The Jinja2 environment chat templates are written for."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@functools.lru_cache(maxsize=16)
def compiled(template: str) -> Template:
    """A template compiled once: a server renders every request (twice, ``render_prompt``)
    with the same one, and compiling costs more than rendering."""
    return make_environment().from_string(template)


def render(template: str, messages: list[Message], tools: list[Tool] | None = None,
           add_generation_prompt: bool = True, **extra: Any) -> str:
    """Render ``messages`` (and ``tools``) into the prompt text the model will read.

    ``add_generation_prompt`` appends the opening of the assistant's turn, so the
    model's next words are its answer. ``extra`` reaches the template as variables
    (``bos_token``, ``eos_token``, ...).
    """
    return compiled(template).render(messages=messages, tools=tools or None,
                           add_generation_prompt=add_generation_prompt, **extra)


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: its ``text``, and the ``(start, end)`` spans of it that came from
    the messages and tools (everything else came from the template).

    ``calls_allowed`` False: the prompt shows tools but the reply may not call one
    (``tool_choice: "none"``); the server then forbids the token that opens a call."""

    text: str
    text_spans: tuple[tuple[int, int], ...]
    calls_allowed: bool = True

    def template_parts(self) -> list[tuple[int, int]]:
        """The ``(start, end)`` spans that the template wrote: the gaps between ``text_spans``."""
        parts, cursor = [], 0
        for start, end in self.text_spans:
            parts.append((cursor, start))
            cursor = end
        return [*parts, (cursor, len(self.text))]


def template_markers(prompt: Prompt, markers: re.Pattern[str]) -> list[tuple[int, int]]:
    """Where ``markers`` (the model's control tokens, as one pattern) occur in the template's own
    parts of ``prompt``: the only places that become special tokens."""
    return [match.span() for start, end in prompt.template_parts()
            for match in markers.finditer(prompt.text, start, end)]


def client_copies(prompt: Prompt, structure: re.Pattern[str], start: int, end: int) -> list[tuple[int, int]]:
    """Where, in ``prompt.text[start:end]``, the text of a structure token (``structure``, one
    pattern) touches text a client sent: those characters must stay text.

    Control tokens (``<|im_start|>``) are only ever made where ``template_markers`` finds them.
    But a tokenizer may also have *user-defined* tokens, which llama.cpp matches in any text it
    tokenizes, even with special tokens off: Qwen2.5's ``<tool_call>`` (151657) and
    ``</tool_call>``. A tool result that holds ``<tool_call>{...}`` would then give the model its
    own call token. ``token_pieces`` cuts such copies out, to be tokenized as text.

    >>> prompt = Prompt("<t>x<t>", ((3, 7),))  # the template wrote the first <t>, a client the second
    >>> client_copies(prompt, re.compile("<t>"), 0, 7)
    [(4, 7)]
    """
    return _copies(prompt.text, _span_index(prompt), structure, start, end)


def _span_index(prompt: Prompt) -> tuple[list[int], list[int]]:
    """The client's text spans sorted by start, with the furthest end reached so far at each."""
    spans = sorted(prompt.text_spans)
    return [a for a, _ in spans], list(accumulate((b for _, b in spans), max))


def _copies(text: str, index: tuple[list[int], list[int]], structure: re.Pattern[str], start: int,
            end: int) -> list[tuple[int, int]]:
    """``client_copies`` with the spans already indexed (``_span_index``): a binary search each."""
    starts, ends = index
    found = []
    for match in structure.finditer(text, start, end):
        before = bisect_left(starts, match.end())  # the spans that start before the match ends ...
        if before and ends[before - 1] > match.start():  # ... and one of them ends after it starts
            found.append(match.span())
    return found


def token_pieces(prompt: Prompt, markers: re.Pattern[str], structure: re.Pattern[str] | None = None
                 ) -> list[tuple[str, str]]:
    """The prompt cut into what a tokenizer does with each piece: ``("marker", text)``, one control
    token the template wrote; ``("text", text)``, text tokenized with special tokens off (between
    two markers in one piece, as a raw prompt is, so its template's own user-defined tokens such as
    ``<tool_call>`` are still matched); ``("escaped", text)``, a client's copy of a structure token
    (``client_copies``), tokenized so that it cannot become that token.

    >>> prompt = Prompt("<s>a<t>b<t>", ((8, 11),))
    >>> token_pieces(prompt, re.compile("<s>"), re.compile("<t>"))
    [('marker', '<s>'), ('text', 'a<t>b'), ('escaped', '<t>')]
    """
    pieces: list[tuple[str, str]] = []
    cursor = 0
    index = _span_index(prompt) if structure else ([], [])  # once per prompt, not once per marker

    def text_until(end: int) -> None:
        nonlocal cursor
        for start, stop in _copies(prompt.text, index, structure, cursor, end) if structure else []:
            if start > cursor:
                pieces.append(("text", prompt.text[cursor:start]))
            pieces.append(("escaped", prompt.text[start:stop]))
            cursor = stop
        if end > cursor:
            pieces.append(("text", prompt.text[cursor:end]))
        cursor = end

    for start, end in template_markers(prompt, markers):
        text_until(start)
        pieces.append(("marker", prompt.text[start:end]))
        cursor = end
    text_until(len(prompt.text))
    return pieces


# The few values a template compares or branches on stay unmarked: a message's ``role`` and a
# ``type`` such as ``"function"``, and only while they are plain words (no marker is one).
# Every other string is text, and so is every dict key that is not a plain name: a template
# looks up ``function`` or ``arguments``, never ``<|im_start|>system``.
UNMARKED_KEYS = frozenset({"role", "type"})
PLAIN_WORD = re.compile(r"[a-z_]+")
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The wrappers: one private-use character, then a letter that says what it is. The same
# character in the input is escaped as ESCAPE + "e", so no input can run out of wrappers or
# forge one, whatever characters it holds.
ESCAPE = "\ue000"
OPENING, CLOSING, ESCAPED = ESCAPE + "o", ESCAPE + "c", ESCAPE + "e"


def render_prompt(template: str, messages: list[Message], tools: list[Tool] | None = None,
                  add_generation_prompt: bool = True, **extra: Any) -> Prompt:
    """Render as ``render`` does, and find where the messages' and tools' strings landed.

    Every string the caller sent, values and keys at every depth, is wrapped in two markers
    of our own, the template is rendered, and the markers are read off and removed. If the
    template did more than print a value (sliced it, compared it), the result would differ
    from the plain rendering: that is refused rather than guessed at.
    """
    if ESCAPE in template:
        raise TemplateError("this chat template uses the character U+E000, which the server needs for itself")
    marked = render(template, _wrap(messages), _wrap(tools) if tools else None, add_generation_prompt, **extra)
    text, spans = _unwrap(marked)
    if spans is None or text != render(template, messages, tools, add_generation_prompt, **extra):
        raise TemplateError("this chat template transforms message text instead of printing it, "
                            "so the server cannot keep that text apart from the template's markers")
    return Prompt(text, tuple(spans))


def is_unmarked(value: str, key: str | None) -> bool:
    """Whether a string stays outside the wrappers: a plain-word ``role`` or ``type``."""
    return key in UNMARKED_KEYS and PLAIN_WORD.fullmatch(value) is not None


def _wrapped(text: str) -> str:
    return OPENING + text.replace(ESCAPE, ESCAPED) + CLOSING if text else text


def _wrap(value: Any, key: str | None = None) -> Any:
    if isinstance(value, str):
        return value if is_unmarked(value, key) else _wrapped(value)
    if isinstance(value, dict):
        text_keys = key == "properties"  # a schema's property names are the caller's text
        return {(_wrapped(k) if text_keys or not PLAIN_NAME.fullmatch(k) else k): _wrap(v, k)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_wrap(item) for item in value]
    return value


def _unwrap(marked: str) -> tuple[str, list[tuple[int, int]] | None]:
    """Remove the wrappers; the spans they enclosed, or None if they do not pair up."""
    text, spans, start = [], [], None
    length = 0
    pieces = marked.split(ESCAPE)
    text.append(pieces[0])
    length += len(pieces[0])
    for piece in pieces[1:]:
        kind, rest = piece[:1], piece[1:]
        if kind == "o" and start is None:
            start = length
        elif kind == "c" and start is not None:
            spans.append((start, length))
            start = None
        elif kind == "e" and start is not None:
            text.append(ESCAPE)
            length += 1
        else:
            return marked, None
        text.append(rest)
        length += len(rest)
    return ("".join(text), spans) if start is None else (marked, None)
