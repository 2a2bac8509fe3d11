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
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

Message = dict[str, Any]
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
