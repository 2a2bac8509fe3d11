"""The Ollama side of every dialect: what a request becomes, and the checks on the way there.

Both the OpenAI and the Anthropic dialect translate a request into the same six things,
Ollama's ``/api/chat`` fields (:func:`ollama_request`): ``model``, ``messages`` (Ollama's
``Message`` s, ``course_lib/messages.py``), ``tools``, ``options``, ``format`` (a grammar) and
``stream``. Reading a request, they check its fields the same way (:func:`required`,
:func:`optional`, :func:`typed`), and a request the dialect's own API would refuse raises
:class:`DialectError` with the message the server answers with (in the dialect's error format).

``tool_choice`` becomes a :class:`ToolChoice` (the tools to render, a grammar, and whether a
call may come back), with the same helpers in both dialects: :func:`one_call_of` (a forced
call: lesson 5's grammar for exactly one call) and :func:`no_call` (``"none"``).
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from typing import Any

from course_lib.messages import Message
from course_lib.tool_parser import call_format

MAX_OUTPUT_TOKENS = 32_768  # the server's bound on options.num_predict (server/wire.py)



@dataclass(frozen=True)
class ToolChoice:
    """``tool_choice`` in Ollama's terms: the ``tools`` the prompt shows, the ``grammar`` (a
    ``format`` schema) the reply must follow, and whether a tool call may come back at all
    (``calls``: False for ``"none"``, where the tools are shown and the reply is only text)."""

    tools: list[Any] | None
    grammar: dict[str, Any] | None = None
    calls: bool = True


class DialectError(ValueError):
    """A request the dialect's API would refuse; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def ollama_request(model: str, messages: list[Message], tools: list[Any] | None, options: dict[str, Any],
                   format: str | dict[str, Any] | None, stream: bool, calls: bool = True) -> dict[str, Any]:
    """What a request in any dialect becomes: the fields of Ollama's ``/api/chat``, and
    ``calls_allowed`` (Ollama has no ``tool_choice``; the server reads this field from a
    translated request only: ``server/app.py``'s ``dialect_chat``)."""
    return {"model": model, "messages": messages, "tools": tools, "options": options, "format": format,
            "stream": stream, "calls_allowed": calls}


def random_id(prefix: str, length: int = 24) -> str:
    return prefix + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(length))


def text_of(content: Any, where: str) -> str:
    """A message's text: a string, or a list of text parts (both dialects allow that)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise DialectError(f"{where}[{i}]: only text parts are supported here")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise DialectError(f"{where} must be a string or a list of text parts")


def required(body: Any, key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    """``body[key]``, checked to be a ``kind``; a 400 if ``body`` is no object or has no ``key``."""
    if not isinstance(body, dict):
        raise DialectError(f"{where.rstrip('.') or 'body'}: must be an object")
    if key not in body:
        raise DialectError(f"{where}{key}: field required")
    return typed(body[key], kind, f"{where}{key}")


def optional(body: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    """``body[key]`` if it is there and not null, checked to be a ``kind``; else None."""
    return None if body.get(key) is None else typed(body[key], kind, f"{where}{key}")


def typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """``value`` if it is a ``kind`` (``True`` is no integer here), else a 400 that says so."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join({dict: "an object", list: "an array", str: "a string", int: "an integer",
                                float: "a number", bool: "a boolean"}.get(k, k.__name__) for k in kinds)
        raise DialectError(f"{where}: expected {expected}, got {type(value).__name__}")
    return value


# --- tool_choice, in Ollama's terms: the tools to render and a grammar ----------------------

def no_call(tools: list[Any] | None) -> ToolChoice:
    """``tool_choice`` "none" (OpenAI's ``"none"``, Anthropic's ``{"type": "none"}``): no call.

    As OpenAI defines it: the model still sees its tools (it can talk about them, or plan
    with them), and the reply is text. The server keeps the tools in the prompt, forbids the
    token that opens a call (``<tool_call>``) while sampling, and reads no call out of the
    reply, whatever it says."""
    return ToolChoice(tools, None, calls=False)


def one_call_of(tools: list[Any]) -> dict[str, Any]:
    """The grammar (a ``format`` schema) for exactly one call of one of ``tools``, checked first
    so that a malformed declaration is a 400: lesson 5's ``validation.required_call_format``."""
    declarations = []
    for i, tool in enumerate(tools):
        function = required(tool, "function", dict, f"tools[{i}].")
        declarations.append({"function": {"name": required(function, "name", str, f"tools[{i}].function."),
                                          "parameters": optional(function, "parameters", dict, f"tools[{i}].function.")
                                          or {"type": "object"}}})
    return call_format(declarations)


def needs_tools(tools: list[Any] | None, what: str) -> list[Any]:
    if not tools:
        raise DialectError(f"{what} needs tools: the request declares none")
    return tools


def declared(tools: list[Any] | None, name: str, where: str) -> Any:
    """The declaration of the tool called ``name`` (Ollama's shape), or a 400 naming the declared ones."""
    for tool in needs_tools(tools, where):
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict) and tool["function"].get("name") == name:
            return tool
    names = [tool["function"].get("name") for tool in tools or [] if isinstance(tool, dict)
             and isinstance(tool.get("function"), dict)]
    raise DialectError(f"{where}: {name!r} is not a declared tool (declared: {', '.join(map(str, names))})")
