"""OpenAI's Chat Completions (``/v1/chat/completions``), to and from Ollama's ``/api/chat``.

Both directions live here, as pure functions, because both sides of the course speak it:

- the **server** reads a request (:func:`openai_request`) and writes a response
  (:func:`openai_response`, :func:`openai_error`);
- the **clients** write a request (:func:`openai_messages`, :func:`openai_options`,
  :func:`openai_response_format`: ``openai_client``) and read a response
  (:func:`ollama_reply`, :func:`ollama_tool_calls`: ``openai_client`` and ``providers``).

OpenAI sends a call's arguments as a JSON *string*. :func:`parse_arguments` is the one
function that reads it, with one policy: no arguments is ``{}``, anything but JSON text of an
object is a :class:`~course_lib.dialects.ollama.DialectError` that says why. What happens next
depends on who wrote the string. A client's request is refused with a 400 (the server). A
model's reply is not refused: the call keeps the text as it came (:func:`arguments_or_text`),
and the agent's validation answers the model with an error result it can correct (lesson 5),
never an exception out of the loop.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any

from course_lib.dialects.json_text import read_json
from course_lib.dialects.ollama import (
    DialectError,
    ToolChoice,
    declared,
    needs_tools,
    no_call,
    ollama_request,
    one_call_of,
    optional,
    random_id,
    required,
    text_of,
    typed,
)
from course_lib.messages import Message

OPTION_FIELDS = {"temperature": "temperature", "top_p": "top_p", "seed": "seed", "num_predict": "max_tokens",
                 "stop": "stop", "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
                 "top_k": "top_k", "min_p": "min_p"}  # the last two are extensions vLLM and llama.cpp accept
FINISH_REASONS = {"stop": "stop", "tool_calls": "stop", "function_call": "stop", "length": "length"}


# --- a call's arguments: a JSON string ------------------------------------------------------

def parse_arguments(value: Any, where: str = "arguments") -> dict[str, Any]:
    """A call's arguments from OpenAI's JSON string: the one place the course reads that string.

    Null or blank text means no arguments, ``{}``. Otherwise the text is read with the server's
    rules for a body (``json_text.read_json``: finite numbers, bounded nesting, well-formed
    text) and must hold an object. Anything else raises :class:`DialectError` naming ``where``
    and the reason."""
    if value is None or isinstance(value, str) and not value.strip():
        return {}
    if not isinstance(value, str):
        raise DialectError(f"{where}: expected a string (JSON text of the arguments), but got {type(value).__name__}")
    try:
        parsed = read_json(value)
    except ValueError as problem:
        raise DialectError(f"{where} is not valid JSON: {problem}") from None
    return typed(parsed, dict, f"{where} (decoded)")


def arguments_or_text(value: Any) -> Any:
    """A call's arguments as a client reads a model's reply: the object :func:`parse_arguments`
    finds, else the value exactly as it came (text that is no JSON object, say). The call
    stays in the reply, so the loop answers it: validation (``tools.call_tool``) turns arguments
    that are no object into an ``INVALID_ARGUMENTS`` error result for the model to correct."""
    try:
        return parse_arguments(value)
    except DialectError:
        return value


def openai_tool_call(name: str, arguments: Any, call_id: str) -> dict[str, Any]:
    """One call in OpenAI's shape: arguments as a JSON string (text kept as it is)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def ollama_tool_calls(message: Message) -> list[Message]:
    """The calls of an OpenAI assistant message in Ollama's shape (arguments as an object)."""
    return [{"id": call.get("id", ""), "function": {"name": call["function"]["name"],
                                                    "arguments": arguments_or_text(call["function"].get("arguments"))}}
            for call in message.get("tool_calls") or []]


# --- the server: a request in, a response out -----------------------------------------------

def _all_answered(unanswered: dict[str, str], asked_at: str) -> None:
    """OpenAI's rule: an assistant message with ``tool_calls`` is followed by one ``tool``
    message per call, before any other message."""
    if unanswered:
        raise DialectError(f"{asked_at}: an assistant message with 'tool_calls' must be followed by tool messages "
                           f"responding to each 'tool_call_id'. The following tool_call_ids did not have response "
                           f"messages: {', '.join(unanswered)}")


def openai_request(body: dict[str, Any]) -> dict[str, Any]:
    """``/v1/chat/completions`` body -> ``{"model", "messages", "tools", "options", "format", "stream"}``."""
    model = required(body, "model", str)
    messages: list[Message] = []
    names_by_id: dict[str, str] = {}  # the calls of the assistant message the tool messages answer
    unanswered: dict[str, str] = {}  # those of them no tool message has answered yet
    asked_at = ""
    for i, message in enumerate(required(body, "messages", list)):
        where = f"messages[{i}]"
        typed(message, dict, where)
        role = message.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise DialectError(f"{where}.role: must be system, developer, user, assistant or tool")
        if role != "tool":
            _all_answered(unanswered, asked_at)
            names_by_id, asked_at = {}, where
        converted: Message = {"role": role, "content": text_of(message.get("content"), f"{where}.content")}
        if role == "assistant" and message.get("tool_calls"):
            converted["tool_calls"] = []
            for j, call in enumerate(typed(message["tool_calls"], list, f"{where}.tool_calls")):
                at = f"{where}.tool_calls[{j}]"
                function = required(call, "function", dict, f"{at}.")
                name = required(function, "name", str, f"{at}.function.")
                arguments = parse_arguments(function.get("arguments"), f"{at}.function.arguments")
                names_by_id[required(call, "id", str, f"{at}.")] = name
                converted["tool_calls"].append({"function": {"name": name, "arguments": arguments}})
            unanswered = dict(names_by_id)
        if role == "tool":
            call_id = optional(message, "tool_call_id", str, f"{where}.")
            if not call_id:
                raise DialectError(f"{where}.tool_call_id: field required for role 'tool'")
            if not names_by_id:
                raise DialectError(f"{where}: messages with role 'tool' must be a response to a preceding "
                                   "message with 'tool_calls'")
            if call_id not in names_by_id:
                raise DialectError(f"{where}.tool_call_id: {call_id!r} answers none of the tool_calls of the "
                                   "assistant message before it")
            unanswered.pop(call_id, None)
            converted["tool_name"] = names_by_id[call_id]
        messages.append(converted)
    _all_answered(unanswered, asked_at)
    choice = openai_tool_choice(body, optional(body, "tools", list) or None)
    response_format = ollama_format(optional(body, "response_format", dict))
    if choice.grammar and response_format:
        raise DialectError("tool_choice and response_format both need the output grammar: a forced call "
                           "already is JSON, so leave response_format out")
    options = {key: body[key] for key in ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty")
               if body.get(key) is not None}
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        options["num_predict"] = limit
    stop = optional(body, "stop", (str, list))
    if stop is not None:
        options["stop"] = [stop] if isinstance(stop, str) else stop
    return ollama_request(model, messages, choice.tools, options, choice.grammar or response_format,
                          optional(body, "stream", bool) or False, choice.calls)


def openai_tool_choice(body: dict[str, Any], tools: list[Any] | None) -> ToolChoice:
    """``tool_choice`` and ``parallel_tool_calls`` -> the tools to render, a grammar (or None),
    and whether a call may come back.

    ``"none"`` shows the tools and lets no call come back (``no_call``); ``"required"`` or a named
    function forces exactly one call with a grammar; ``"auto"`` (the default) leaves the choice
    to the model. Anything else is a 400 that says what this server accepts.
    """
    choice = body.get("tool_choice", "auto")
    parallel = optional(body, "parallel_tool_calls", bool)
    if choice == "none" or (choice is None and not tools):
        return no_call(tools)
    if choice in ("auto", None):
        if parallel is False and tools:
            raise DialectError("parallel_tool_calls: false with tool_choice 'auto' is not supported here (keeping "
                               "only the first call would drop the others); send tool_choice 'required' or a named "
                               "function, which make exactly one call, or run only the first call yourself")
        return ToolChoice(tools)
    if choice == "required":
        return ToolChoice(tools, one_call_of(needs_tools(tools, "tool_choice 'required'")))
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = required(required(choice, "function", dict, "tool_choice."), "name", str, "tool_choice.function.")
        return ToolChoice(tools, one_call_of([declared(tools, name, "tool_choice.function.name")]))
    raise DialectError("tool_choice: expected 'auto', 'none', 'required' or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}, got " + json.dumps(choice)[:80])


def ollama_format(response_format: dict[str, Any] | None) -> str | dict[str, Any] | None:
    """``response_format`` -> Ollama's ``format``: ``"json"``, a JSON schema, or None (free text)."""
    if not response_format or response_format.get("type") == "text":
        return None
    if response_format.get("type") == "json_object":
        return "json"
    if response_format.get("type") == "json_schema":
        schema = optional(response_format, "json_schema", dict, "response_format.") or {}
        return optional(schema, "schema", dict, "response_format.json_schema.") or "json"
    raise DialectError(f"response_format.type: unknown type {response_format.get('type')!r}")


def openai_tool_calls(calls: list[Message]) -> list[dict[str, Any]]:
    """Ollama's calls (arguments as an object) -> OpenAI's (arguments as a JSON string)."""
    return [openai_tool_call(call["function"]["name"], call["function"]["arguments"],
                             call.get("id") or random_id("call_")) for call in calls]


def openai_finish_reason(tool_calls: list[Message], done_reason: str) -> str:
    return "tool_calls" if tool_calls else ("length" if done_reason == "length" else "stop")


def openai_usage(prompt_tokens: int, output_tokens: int, cached_tokens: int = 0,
                 cache_write_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's ``usage``. ``prompt_tokens`` is the whole prompt, cached tokens included;
    ``prompt_tokens_details.cached_tokens`` says how many of them were served from the prompt
    cache instead of being evaluated again (0 when none were, as OpenAI reports it), and
    ``cache_write_tokens`` how many were evaluated and written to the cache for later requests."""
    if min(cached_tokens, cache_write_tokens) < 0 or cached_tokens + cache_write_tokens > prompt_tokens:
        raise ValueError(f"cached_tokens ({cached_tokens}) and cache_write_tokens ({cache_write_tokens}) must be at "
                         f"least 0 and together at most prompt_tokens ({prompt_tokens})")
    return {"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens,
            "total_tokens": prompt_tokens + output_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": cache_write_tokens}}


def openai_response(model: str, content: str, tool_calls: list[Message], done_reason: str,
                    prompt_tokens: int, output_tokens: int, cached_tokens: int = 0,
                    cache_write_tokens: int = 0) -> dict[str, Any]:
    message: Message = {"role": "assistant", "content": content or (None if tool_calls else "")}
    if tool_calls:
        message["tool_calls"] = openai_tool_calls(tool_calls)
    return {"id": random_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()), "model": model,
            "system_fingerprint": "fp_course_lib",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": openai_finish_reason(tool_calls, done_reason)}],
            "usage": openai_usage(prompt_tokens, output_tokens, cached_tokens, cache_write_tokens)}


def openai_error(message: str, status: int) -> dict[str, Any]:
    fallback = "invalid_request_error" if status < 500 else "server_error"
    kind = {401: "authentication_error", 404: "not_found_error", 503: "server_overloaded"}.get(status, fallback)
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# --- the clients: a request out, a response in ----------------------------------------------

def openai_options(options: dict[str, Any]) -> dict[str, Any]:
    """Ollama's ``options`` as OpenAI's request fields; an option with no such field is an error."""
    unknown = sorted(set(options) - set(OPTION_FIELDS))
    if unknown:
        raise ValueError(f"an OpenAI-compatible server has no field for the options {unknown}; "
                         f"it takes {sorted(OPTION_FIELDS)}")
    return {OPTION_FIELDS[name]: value for name, value in options.items()}


def openai_response_format(format: str | dict[str, Any]) -> dict[str, Any]:
    """Ollama's ``format`` (``"json"`` or a JSON schema) as OpenAI's ``response_format``."""
    if format == "json":
        return {"type": "json_object"}
    if isinstance(format, dict):
        return {"type": "json_schema", "json_schema": {"name": "reply", "schema": format, "strict": True}}
    raise ValueError(f"format must be 'json' or a JSON schema, not {format!r}")


def openai_messages(messages: list[Message]) -> list[Message]:
    """Ollama's messages in OpenAI's shape: calls with ids and JSON-string arguments, results
    with the id of the call they answer (Ollama names the tool instead; the n-th result of a
    name answers the n-th call of that name)."""
    converted: list[Message] = []
    waiting: dict[str, list[str]] = defaultdict(list)  # tool name -> ids of its calls not yet answered
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            calls = []
            for number, call in enumerate(message["tool_calls"]):
                function = call["function"]
                call_id = call.get("id") or f"call_{index}_{number}"
                waiting[function["name"]].append(call_id)
                calls.append(openai_tool_call(function["name"], function.get("arguments") or {}, call_id))
            converted.append({"role": "assistant", "content": message.get("content") or None, "tool_calls": calls})
        elif role == "tool":
            name = str(message.get("tool_name") or message.get("name"))
            if not waiting.get(name):
                raise ValueError(f"messages[{index}]: a tool result for {name!r}, but no call of it is waiting "
                                 "for one (a tool message needs tool_name, after the assistant turn that called it)")
            converted.append({"role": "tool", "tool_call_id": waiting[name].pop(0), "content": message["content"]})
        else:
            converted.append({key: value for key, value in message.items() if key in ("role", "content")})
    return converted


def ollama_reply(reply: dict[str, Any], model: str, nanoseconds: int) -> dict[str, Any]:
    """An OpenAI chat completion in the shape of Ollama's ``/api/chat`` answer."""
    message = reply["choices"][0]["message"]
    answer: Message = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        answer["tool_calls"] = ollama_tool_calls(message)
    return {"model": model, "message": answer, "done": True, **ollama_stats(reply, nanoseconds)}


def ollama_stats(reply: dict[str, Any], nanoseconds: int) -> dict[str, Any]:
    """How an OpenAI completion ended and what it read and wrote, in Ollama's fields (the cached
    part of the prompt only when the server said it)."""
    usage = reply.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return {"done_reason": FINISH_REASONS.get(reply["choices"][0].get("finish_reason") or "stop", "stop"),
            "prompt_eval_count": usage.get("prompt_tokens", 0), "eval_count": usage.get("completion_tokens", 0),
            **({} if cached is None else {"prompt_eval_cached_count": cached}), "total_duration": nanoseconds}
