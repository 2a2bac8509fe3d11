"""The OpenAI and Anthropic dialects of a chat request, translated to and from Ollama's.

Ollama serves ``/v1/chat/completions`` (OpenAI Chat Completions) and ``/v1/messages``
(Anthropic Messages) next to its own ``/api/chat``; so does the course's server. All three
say the same things in different places:

================  =======================  =================================  ========================================
                  Ollama ``/api/chat``     OpenAI ``/v1/chat/completions``    Anthropic ``/v1/messages``
================  =======================  =================================  ========================================
tool declaration  ``function.parameters``  ``function.parameters``            ``input_schema`` (no ``function``)
call arguments    a JSON object            a JSON **string**                  ``input``, a JSON object
result of a call  ``role: tool`` message   ``role: tool`` + ``tool_call_id``  ``tool_result`` block in a **user** turn
error result      text in the result       text in the result                 ``is_error: true``
stop signal       ``done_reason``          ``finish_reason: "tool_calls"``    ``stop_reason: "tool_use"``
================  =======================  =================================  ========================================

This module holds only the translation, as pure functions: a request in a dialect becomes
Ollama-style ``messages``, ``tools``, ``options`` and ``format``; the generated message
becomes a response in the dialect. A request the dialect's own API would reject (say, call
arguments given as an object where OpenAI wants a string) raises :class:`DialectError`
with the message the server returns, in the dialect's error format.

``tool_choice`` and the parallel-call settings follow the course's rule "honoured or
refused, never silently dropped" (:func:`openai_tool_choice`, :func:`anthropic_tool_choice`):

====================================  ======================================  ==================================
OpenAI                                Anthropic                               here
====================================  ======================================  ==================================
``"auto"`` (the default)              ``{"type": "auto"}``                    the model decides
``"none"``                            ``{"type": "none"}``                    no tools in the prompt
``"required"``                        ``{"type": "any"}``                     a grammar: exactly one call
``{"type": "function", "function":    ``{"type": "tool", "name": ...}``       a grammar: exactly one call of it
{"name": ...}}``
``parallel_tool_calls: false``        ``disable_parallel_tool_use: true``     kept with a forced call (one call);
                                                                              with ``auto``, a 400
====================================  ======================================  ==================================

``"none"`` is honoured by leaving the tools out, which also hides them from the model. The
hosted APIs document it only as "no tool call" and may still show the model the tools; a
client that asks the model about its tools under ``"none"`` (AgentDojo's tool filter, lesson
9b) gets answers from a model that never saw them.

A forced call is lesson 5's grammar (``tool_parser.call_format``, which
``validation.required_call_format`` is too): the model can write nothing but one JSON call of
a declared tool, which the server reads as a call.
Limiting an ``auto`` turn to one call would mean dropping the calls after the first from
the reply, and translating a request cannot do that, so that combination is refused with
the alternative named, rather than accepted and ignored.
"""

from __future__ import annotations

import json
import secrets
import string
import time
from typing import Any

from ..messages import Message
from ..tool_parser import call_format
from .guard import ApiError, parse_json

MAX_OUTPUT_TOKENS = 32_768  # the server's bound on options.num_predict (wire.py)


class DialectError(ValueError):
    """A request the dialect's API would refuse; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def random_id(prefix: str, length: int = 24) -> str:
    return prefix + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(length))


def _text(content: Any, where: str) -> str:
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


def _require(body: Any, key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    if not isinstance(body, dict):
        raise DialectError(f"{where.rstrip('.') or 'body'}: must be an object")
    if key not in body:
        raise DialectError(f"{where}{key}: field required")
    return _typed(body[key], kind, f"{where}{key}")


def _optional(body: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    """``body[key]`` if it is there and not null, checked to be a ``kind``; else None."""
    return None if body.get(key) is None else _typed(body[key], kind, f"{where}{key}")


def _typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """``value`` if it is a ``kind`` (``True`` is no integer here), else a 400 that says so."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join({dict: "an object", list: "an array", str: "a string", int: "an integer",
                                float: "a number", bool: "a boolean"}.get(k, k.__name__) for k in kinds)
        raise DialectError(f"{where}: expected {expected}, got {type(value).__name__}")
    return value


# --- OpenAI Chat Completions -----------------------------------------------------------

def decode_arguments(text: str, where: str) -> Any:
    """OpenAI's arguments, a JSON text inside the JSON body: decoded with the body's own rules
    (``guard.parse_json``: depth, finite numbers, well-formed text), since the body's
    depth check could not see inside the string."""
    try:
        return parse_json(text.encode("utf-8"))
    except ApiError as problem:
        reason = problem.message.removeprefix("invalid JSON body: ")
        raise DialectError(f"{where} is not valid JSON: {reason}") from None
    except UnicodeEncodeError:
        raise DialectError(f"{where}: not well-formed text") from None


def openai_request(body: dict[str, Any]) -> dict[str, Any]:
    """``/v1/chat/completions`` body -> ``{"model", "messages", "tools", "options", "format", "stream"}``."""
    model = _require(body, "model", str)
    messages, names_by_id = [], {}
    for i, message in enumerate(_require(body, "messages", list)):
        where = f"messages[{i}]"
        _typed(message, dict, where)
        role = message.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise DialectError(f"{where}.role: must be system, developer, user, assistant or tool")
        converted: Message = {"role": role, "content": _text(message.get("content"), f"{where}.content")}
        if role == "assistant" and message.get("tool_calls"):
            converted["tool_calls"] = []
            for j, call in enumerate(_typed(message["tool_calls"], list, f"{where}.tool_calls")):
                at = f"{where}.tool_calls[{j}]"
                function = _require(call, "function", dict, f"{at}.")
                name = _require(function, "name", str, f"{at}.function.")
                arguments = "{}" if function.get("arguments") in (None, "") else function["arguments"]
                if not isinstance(arguments, str):
                    raise DialectError(f"{at}.function.arguments: expected a string (JSON text of the arguments), "
                                       f"but got {type(arguments).__name__}")
                parsed = decode_arguments(arguments, f"{at}.function.arguments")
                names_by_id[_optional(call, "id", str, f"{at}.")] = name
                converted["tool_calls"].append({"function": {"name": name, "arguments": _typed(
                    parsed, dict, f"{at}.function.arguments (decoded)")}})
        if role == "tool":
            call_id = _optional(message, "tool_call_id", str, f"{where}.")
            if not call_id:
                raise DialectError(f"{where}.tool_call_id: field required for role 'tool'")
            if call_id not in names_by_id:
                raise DialectError(f"{where}.tool_call_id: {call_id!r} answers no earlier tool call")
            converted["tool_name"] = names_by_id[call_id]
        messages.append(converted)
    tools, forced = openai_tool_choice(body, _optional(body, "tools", list) or None)
    response_format = _openai_format(_optional(body, "response_format", dict))
    if forced and response_format:
        raise DialectError("tool_choice and response_format both need the output grammar: a forced call "
                           "already is JSON, so leave response_format out")
    options = {key: body[key] for key in ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty")
               if body.get(key) is not None}
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        options["num_predict"] = limit
    stop = _optional(body, "stop", (str, list))
    if stop is not None:
        options["stop"] = [stop] if isinstance(stop, str) else stop
    return {"model": model, "messages": messages, "tools": tools, "options": options,
            "format": forced or response_format, "stream": _optional(body, "stream", bool) or False}


def openai_tool_choice(body: dict[str, Any], tools: list[Any] | None) -> tuple[list[Any] | None, dict[str, Any] | None]:
    """``tool_choice`` and ``parallel_tool_calls`` -> the tools to render and a grammar (or None).

    ``"none"`` leaves the tools out; ``"required"`` or a named function forces exactly one call
    with a grammar; ``"auto"`` (the default) leaves the choice to the model. Anything else is a
    400 that says what this server accepts.
    """
    choice = body.get("tool_choice", "auto")
    parallel = _optional(body, "parallel_tool_calls", bool)
    if choice == "none" or (choice is None and not tools):
        return None, None
    if choice in ("auto", None):
        if parallel is False and tools:
            raise DialectError("parallel_tool_calls: false with tool_choice 'auto' is not supported here (keeping "
                               "only the first call would drop the others); send tool_choice 'required' or a named "
                               "function, which make exactly one call, or run only the first call yourself")
        return tools, None
    if choice == "required":
        return tools, _one_call_of(_needs_tools(tools, "tool_choice 'required'"))
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = _require(_require(choice, "function", dict, "tool_choice."), "name", str, "tool_choice.function.")
        return tools, _one_call_of([_declared(tools, name, "tool_choice.function.name")])
    raise DialectError("tool_choice: expected 'auto', 'none', 'required' or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}, got " + json.dumps(choice)[:80])


def _one_call_of(tools: list[Any]) -> dict[str, Any]:
    """The grammar (a ``format`` schema) for exactly one call of one of ``tools``, checked first
    so that a malformed declaration is a 400: lesson 5's ``validation.required_call_format``."""
    declared = []
    for i, tool in enumerate(tools):
        function = _require(tool, "function", dict, f"tools[{i}].")
        declared.append({"function": {"name": _require(function, "name", str, f"tools[{i}].function."),
                                      "parameters": _optional(function, "parameters", dict, f"tools[{i}].function.")
                                      or {"type": "object"}}})
    return call_format(declared)


def _needs_tools(tools: list[Any] | None, what: str) -> list[Any]:
    if not tools:
        raise DialectError(f"{what} needs tools: the request declares none")
    return tools


def _declared(tools: list[Any] | None, name: str, where: str) -> Any:
    """The declaration of the tool called ``name`` (Ollama's shape), or a 400 naming the declared ones."""
    for tool in _needs_tools(tools, where):
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict) and tool["function"].get("name") == name:
            return tool
    names = [tool["function"].get("name") for tool in tools or [] if isinstance(tool, dict)
             and isinstance(tool.get("function"), dict)]
    raise DialectError(f"{where}: {name!r} is not a declared tool (declared: {', '.join(map(str, names))})")


def _openai_format(response_format: dict[str, Any] | None) -> str | dict[str, Any] | None:
    if not response_format or response_format.get("type") == "text":
        return None
    if response_format.get("type") == "json_object":
        return "json"
    if response_format.get("type") == "json_schema":
        schema = _optional(response_format, "json_schema", dict, "response_format.") or {}
        return _optional(schema, "schema", dict, "response_format.json_schema.") or "json"
    raise DialectError(f"response_format.type: unknown type {response_format.get('type')!r}")


def openai_tool_calls(calls: list[Message]) -> list[dict[str, Any]]:
    """Ollama's calls (arguments as an object) -> OpenAI's (arguments as a JSON string)."""
    return [{"id": call.get("id") or random_id("call_"), "type": "function",
             "function": {"name": call["function"]["name"],
                          "arguments": json.dumps(call["function"]["arguments"], ensure_ascii=False)}}
            for call in calls]


def openai_finish_reason(tool_calls: list[Message], done_reason: str) -> str:
    return "tool_calls" if tool_calls else ("length" if done_reason == "length" else "stop")


def openai_response(model: str, content: str, tool_calls: list[Message], done_reason: str,
                    prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    message: Message = {"role": "assistant", "content": content or (None if tool_calls else "")}
    if tool_calls:
        message["tool_calls"] = openai_tool_calls(tool_calls)
    return {"id": random_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()), "model": model,
            "system_fingerprint": "fp_course_lib",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": openai_finish_reason(tool_calls, done_reason)}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens,
                      "total_tokens": prompt_tokens + output_tokens}}


def openai_error(message: str, status: int) -> dict[str, Any]:
    fallback = "invalid_request_error" if status < 500 else "server_error"
    kind = {401: "authentication_error", 404: "not_found_error", 503: "server_overloaded"}.get(status, fallback)
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# --- Anthropic Messages ----------------------------------------------------------------

def anthropic_request(body: dict[str, Any]) -> dict[str, Any]:
    """``/v1/messages`` body -> ``{"model", "messages", "tools", "options", "format", "stream"}``."""
    model = _require(body, "model", str)
    max_tokens = _require(body, "max_tokens", int)
    if not 1 <= max_tokens <= MAX_OUTPUT_TOKENS:
        raise DialectError(f"max_tokens: must be between 1 and {MAX_OUTPUT_TOKENS} on this server")
    messages: list[Message] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _text(system, "system")})
    names_by_id: dict[str, str] = {}
    for i, message in enumerate(_require(body, "messages", list)):
        where = f"messages.{i}"
        role = _typed(message, dict, where).get("role")
        if role not in ("user", "assistant"):
            raise DialectError(f"{where}.role: must be 'user' or 'assistant' (tool results go in a user turn "
                               "as tool_result blocks)")
        content = message.get("content", "")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise DialectError(f"{where}.content must be a string or a list of blocks")
        messages += (_anthropic_user(blocks, where, names_by_id) if role == "user"
                     else _anthropic_assistant(blocks, where, names_by_id))
    tools = [{"type": "function", "function": {"name": _require(tool, "name", str, f"tools.{i}."),
                                               "description": _optional(tool, "description", str, f"tools.{i}.") or "",
                                               "parameters": _optional(tool, "input_schema", dict, f"tools.{i}.")
                                               or {"type": "object"}}}
             for i, tool in enumerate(_optional(body, "tools", list) or [])] or None
    tools, forced = anthropic_tool_choice(_optional(body, "tool_choice", dict), tools)
    options = {"num_predict": max_tokens}
    options.update({key: body[key] for key in ("temperature", "top_p", "top_k") if body.get(key) is not None})
    if body.get("stop_sequences"):
        options["stop"] = body["stop_sequences"]
    return {"model": model, "messages": messages, "tools": tools, "options": options, "format": forced,
            "stream": _optional(body, "stream", bool) or False}


def anthropic_tool_choice(choice: dict[str, Any] | None, tools: list[Any] | None
                          ) -> tuple[list[Any] | None, dict[str, Any] | None]:
    """``tool_choice`` -> the tools to render and a grammar (or None), as :func:`openai_tool_choice`.

    ``{"type": "none"}`` leaves the tools out; ``"any"`` or ``"tool"`` (with ``name``) force
    exactly one call with a grammar, which is what ``disable_parallel_tool_use`` asks of them;
    ``"auto"`` leaves the choice to the model, and refuses ``disable_parallel_tool_use``.
    """
    choice = choice or {"type": "auto"}
    kind = choice.get("type")
    single = _optional(choice, "disable_parallel_tool_use", bool, "tool_choice.")
    if kind == "none":
        return None, None
    if kind == "auto":
        if single and tools:
            raise DialectError("tool_choice.disable_parallel_tool_use: true with type 'auto' is not supported here "
                               "(keeping only the first tool_use would drop the others); send type 'any' or 'tool', "
                               "which make exactly one tool_use, or run only the first one yourself")
        return tools, None
    if kind == "any":
        return tools, _one_call_of(_needs_tools(tools, "tool_choice.type 'any'"))
    if kind == "tool":
        name = _require(choice, "name", str, "tool_choice.")
        return tools, _one_call_of([_declared(tools, name, "tool_choice.name")])
    raise DialectError(f"tool_choice.type: expected 'auto', 'any', 'tool' or 'none', got {json.dumps(kind)[:40]}")


def _anthropic_user(blocks: list[Any], where: str, names_by_id: dict[str, str]) -> list[Message]:
    results, texts = [], []
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_result":
            if texts:
                raise DialectError(f"{where}.content.{j}: tool_result blocks must come before any text")
            call_id = _require(block, "tool_use_id", str, f"{where}.content.{j}.")
            if call_id not in names_by_id:
                raise DialectError(f"{where}.content.{j}: tool_use_id {call_id!r} answers no tool_use block "
                                   "of the previous assistant turn")
            text = _text(block.get("content", ""), f"{where}.content.{j}.content")
            results.append({"role": "tool", "tool_name": names_by_id[call_id],
                            "content": f"error: {text}" if block.get("is_error") else text})
        else:
            raise DialectError(f"{where}.content.{j}.type: a user turn holds text and tool_result blocks")
    return results + ([{"role": "user", "content": "".join(texts)}] if texts else [])


def _anthropic_assistant(blocks: list[Any], where: str, names_by_id: dict[str, str]) -> list[Message]:
    message: Message = {"role": "assistant", "content": ""}
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            message["content"] += str(block.get("text", ""))
        elif kind == "tool_use":
            at = f"{where}.content.{j}."
            arguments, name = _require(block, "input", dict, at), _require(block, "name", str, at)
            names_by_id[_require(block, "id", str, at)] = name
            message.setdefault("tool_calls", []).append({"function": {"name": name, "arguments": arguments}})
        elif kind == "tool_result":
            raise DialectError(f"{where}.content.{j}: tool_result blocks belong in a user turn, not an assistant turn")
        else:
            raise DialectError(f"{where}.content.{j}.type: an assistant turn holds text and tool_use blocks")
    return [message]


def anthropic_blocks(content: str, tool_calls: list[Message]) -> list[dict[str, Any]]:
    """The reply as content blocks: its text (if any), then one ``tool_use`` block per call."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    blocks += [{"type": "tool_use", "id": random_id("toolu_"), "name": call["function"]["name"],
                "input": call["function"]["arguments"]} for call in tool_calls]
    return blocks


def anthropic_stop_reason(tool_calls: list[Message], done_reason: str) -> str:
    return "tool_use" if tool_calls else ("max_tokens" if done_reason == "length" else "end_turn")


def anthropic_response(model: str, content: str, tool_calls: list[Message], done_reason: str,
                       prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {"id": random_id("msg_"), "type": "message", "role": "assistant", "model": model,
            "content": anthropic_blocks(content, tool_calls),
            "stop_reason": anthropic_stop_reason(tool_calls, done_reason), "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": output_tokens}}


def anthropic_error(message: str, status: int) -> dict[str, Any]:
    fallback = "invalid_request_error" if status < 500 else "api_error"
    kind = {401: "authentication_error", 404: "not_found_error", 503: "overloaded_error"}.get(status, fallback)
    return {"type": "error", "error": {"type": kind, "message": message}}
