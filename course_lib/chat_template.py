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

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .messages import Message

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


def render(template: str, messages: list[Message], tools: list[Tool] | None = None,
           add_generation_prompt: bool = True, **extra: Any) -> str:
    """Render ``messages`` (and ``tools``) into the prompt text the model will read.

    ``add_generation_prompt`` appends the opening of the assistant's turn, so the
    model's next words are its answer. ``extra`` reaches the template as variables
    (``bos_token``, ``eos_token``, ...).
    """
    compiled = make_environment().from_string(template)
    return compiled.render(messages=messages, tools=tools or None,
                           add_generation_prompt=add_generation_prompt, **extra)


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: its ``text``, and the ``(start, end)`` spans of it that came from
    the messages and tools (everything else came from the template)."""

    text: str
    text_spans: tuple[tuple[int, int], ...]


# Values the template compares or branches on stay unmarked; all other strings are text,
# and so are the property names of a tool's schema (the keys under "properties").
UNMARKED_KEYS = frozenset({"role", "type"})


def render_prompt(template: str, messages: list[Message], tools: list[Tool] | None = None,
                  add_generation_prompt: bool = True, **extra: Any) -> Prompt:
    """Render as ``render`` does, and find where the messages' and tools' strings landed.

    Every string value is wrapped in two private-use characters that occur nowhere in the
    input, the template is rendered, and the wrappers are read off and removed. If the
    template did more than print a value (sliced it, compared it), the result would differ
    from the plain rendering: that is refused rather than guessed at.
    """
    opening, closing = _unused_pair(json.dumps([messages, tools], ensure_ascii=False))
    marked = render(template, _wrap(messages, opening, closing), _wrap(tools, opening, closing) if tools else None,
                    add_generation_prompt, **extra)
    text, spans = _unwrap(marked, opening, closing)
    if spans is None or text != render(template, messages, tools, add_generation_prompt, **extra):
        raise TemplateError("this chat template transforms message text instead of printing it, "
                            "so the server cannot keep that text apart from the template's markers")
    return Prompt(text, tuple(spans))


def _unused_pair(seen: str) -> tuple[str, str]:
    for code in range(0xE000, 0xF8FF, 2):
        if chr(code) not in seen and chr(code + 1) not in seen:
            return chr(code), chr(code + 1)
    raise TemplateError("the messages use every private-use character")


def _wrap(value: Any, opening: str, closing: str, key: str | None = None) -> Any:
    if isinstance(value, str):
        return value if not value or key in UNMARKED_KEYS else opening + value + closing
    if isinstance(value, dict):
        rename = key == "properties"
        return {(_wrap(k, opening, closing) if rename else k): _wrap(v, opening, closing, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_wrap(item, opening, closing) for item in value]
    return value


def _unwrap(marked: str, opening: str, closing: str) -> tuple[str, list[tuple[int, int]] | None]:
    """Remove the wrappers; the spans they enclosed, or None if they do not pair up."""
    text, spans, start = [], [], None
    length = 0
    for piece in re.split(f"([{opening}{closing}])", marked):
        if piece == opening:
            if start is not None:
                return marked, None
            start = length
        elif piece == closing:
            if start is None:
                return marked, None
            spans.append((start, length))
            start = None
        else:
            text.append(piece)
            length += len(piece)
    return ("".join(text), spans) if start is None else (marked, None)
