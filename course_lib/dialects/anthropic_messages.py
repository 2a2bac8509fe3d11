"""Anthropic's Messages API (``/v1/messages``), to and from Ollama's ``/api/chat``.

The server reads a request (:func:`anthropic_request`) and writes a response
(:func:`anthropic_response`, :func:`anthropic_error`); ``providers`` declares its tools with
:func:`anthropic_tool`, the inverse of :func:`ollama_tool`. A call's arguments are an object
here (``input``), so there is no string to parse; a tool's result goes back in a **user**
turn, as a ``tool_result`` block, flagged ``is_error`` when the call failed.
"""

from __future__ import annotations

import json
from typing import Any

from course_lib.dialects.ollama import (
    MAX_OUTPUT_TOKENS,
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


def anthropic_tool(declaration: dict[str, Any]) -> dict[str, Any]:
    """An Ollama (and OpenAI) tool declaration in Anthropic's shape: no ``function`` wrapper,
    ``input_schema`` for ``parameters``."""
    function = declaration["function"]
    return {"name": function["name"], "description": function["description"],
            "input_schema": function["parameters"]}


def ollama_tool(tool: Any, where: str) -> dict[str, Any]:
    """An Anthropic tool declaration in Ollama's shape (a 400 if it is malformed)."""
    return {"type": "function", "function": {"name": required(tool, "name", str, where),
                                             "description": optional(tool, "description", str, where) or "",
                                             "parameters": optional(tool, "input_schema", dict, where)
                                             or {"type": "object"}}}


# --- the server: a request in, a response out -----------------------------------------------

def anthropic_request(body: dict[str, Any]) -> dict[str, Any]:
    """``/v1/messages`` body -> ``{"model", "messages", "tools", "options", "format", "stream"}``."""
    model = required(body, "model", str)
    max_tokens = required(body, "max_tokens", int)
    if not 1 <= max_tokens <= MAX_OUTPUT_TOKENS:
        raise DialectError(f"max_tokens: must be between 1 and {MAX_OUTPUT_TOKENS} on this server")
    messages: list[Message] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": text_of(system, "system")})
    calls: dict[str, str] = {}  # the previous assistant turn's tool_use ids -> tool names
    asked_at = ""  # where that turn is, for the error when its calls go unanswered
    for i, message in enumerate(required(body, "messages", list)):
        where = f"messages.{i}"
        role = typed(message, dict, where).get("role")
        if role not in ("user", "assistant"):
            raise DialectError(f"{where}.role: must be 'user' or 'assistant' (tool results go in a user turn "
                               "as tool_result blocks)")
        content = message.get("content", "")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise DialectError(f"{where}.content must be a string or a list of blocks")
        if role == "user":
            turn = _user_turn(blocks, where, calls, asked_at)
            calls = {}
        else:
            _all_answered(calls, set(), asked_at)
            calls, asked_at = {}, where
            turn = _assistant_turn(blocks, where, calls)
        messages += turn
    _all_answered(calls, set(), asked_at)
    tools = [ollama_tool(tool, f"tools.{i}.") for i, tool in enumerate(optional(body, "tools", list) or [])] or None
    choice = anthropic_tool_choice(optional(body, "tool_choice", dict), tools)
    options = {"num_predict": max_tokens}
    options.update({key: body[key] for key in ("temperature", "top_p", "top_k") if body.get(key) is not None})
    if body.get("stop_sequences"):
        options["stop"] = body["stop_sequences"]
    return ollama_request(model, messages, choice.tools, options, choice.grammar,
                          optional(body, "stream", bool) or False, choice.calls)


def anthropic_tool_choice(choice: dict[str, Any] | None, tools: list[Any] | None) -> ToolChoice:
    """``tool_choice`` -> the tools to render, a grammar (or None) and whether a call may come
    back, as ``openai_tool_choice``.

    ``{"type": "none"}`` shows the tools and lets no call come back (``no_call``); ``"any"`` or
    ``"tool"`` (with ``name``) force exactly one call with a grammar, which is what
    ``disable_parallel_tool_use`` asks of them; ``"auto"`` leaves the choice to the model, and
    refuses ``disable_parallel_tool_use``.
    """
    choice = choice or {"type": "auto"}
    kind = choice.get("type")
    single = optional(choice, "disable_parallel_tool_use", bool, "tool_choice.")
    if kind == "none":
        return no_call(tools)
    if kind == "auto":
        if single and tools:
            raise DialectError("tool_choice.disable_parallel_tool_use: true with type 'auto' is not supported here "
                               "(keeping only the first tool_use would drop the others); send type 'any' or 'tool', "
                               "which make exactly one tool_use, or run only the first one yourself")
        return ToolChoice(tools)
    if kind == "any":
        return ToolChoice(tools, one_call_of(needs_tools(tools, "tool_choice.type 'any'")))
    if kind == "tool":
        name = required(choice, "name", str, "tool_choice.")
        return ToolChoice(tools, one_call_of([declared(tools, name, "tool_choice.name")]))
    raise DialectError(f"tool_choice.type: expected 'auto', 'any', 'tool' or 'none', got {json.dumps(kind)[:40]}")


def _all_answered(calls: dict[str, str], answered: set[str], asked_at: str) -> None:
    """Anthropic's rule: every ``tool_use`` of an assistant turn is answered by a ``tool_result``
    in the very next message, a user turn (all of them in that one turn)."""
    missing = [call_id for call_id in calls if call_id not in answered]
    if missing:
        raise DialectError(f"{asked_at}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                           f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` "
                           "block in the next message.")


def _user_turn(blocks: list[Any], where: str, names_by_id: dict[str, str], asked_at: str) -> list[Message]:
    """A user turn's blocks -> one ``tool`` message per ``tool_result``, then the user's text.
    The results answer the ``tool_use`` blocks of the previous message (``names_by_id``, asked
    at ``asked_at``): each of them, and nothing else."""
    results, texts, answered = [], [], set()
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_result":
            if texts:
                raise DialectError(f"{where}.content.{j}: tool_result blocks must come before any text")
            call_id = required(block, "tool_use_id", str, f"{where}.content.{j}.")
            if call_id not in names_by_id:
                raise DialectError(f"{where}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                                   f"{call_id}. Each `tool_result` block must have a corresponding `tool_use` block "
                                   "in the previous message.")
            text = text_of(block.get("content", ""), f"{where}.content.{j}.content")
            answered.add(call_id)
            results.append({"role": "tool", "tool_name": names_by_id[call_id],
                            "content": f"error: {text}" if block.get("is_error") else text})
        else:
            raise DialectError(f"{where}.content.{j}.type: a user turn holds text and tool_result blocks")
    _all_answered(names_by_id, answered, asked_at)
    return results + ([{"role": "user", "content": "".join(texts)}] if texts else [])


def _assistant_turn(blocks: list[Any], where: str, names_by_id: dict[str, str]) -> list[Message]:
    """An assistant turn's blocks -> one assistant message: its text, and a call per ``tool_use``."""
    message: Message = {"role": "assistant", "content": ""}
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            message["content"] += str(block.get("text", ""))
        elif kind == "tool_use":
            at = f"{where}.content.{j}."
            arguments, name = required(block, "input", dict, at), required(block, "name", str, at)
            names_by_id[required(block, "id", str, at)] = name
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


def anthropic_usage(prompt_tokens: int, output_tokens: int, cache_read: int = 0, cache_written: int = 0
                    ) -> dict[str, int]:
    """Anthropic's ``usage``, which splits the prompt in three parts that add up to it:
    ``cache_read_input_tokens`` (served from the prompt cache), ``cache_creation_input_tokens``
    (evaluated and written to the cache for later requests) and ``input_tokens`` (the rest). Unlike
    OpenAI's ``prompt_tokens``, ``input_tokens`` alone is not the prompt's length once a cache is used.

    Anthropic's API reads and writes its cache only where a request asks (``cache_control``); the
    course's server caches without being asked, and reports what it did in the same fields."""
    if min(cache_read, cache_written) < 0 or cache_read + cache_written > prompt_tokens:
        raise ValueError(f"the cached tokens ({cache_read} read, {cache_written} written) must be at least 0 "
                         f"and together at most the prompt's {prompt_tokens}")
    return {"input_tokens": prompt_tokens - cache_read - cache_written, "cache_creation_input_tokens": cache_written,
            "cache_read_input_tokens": cache_read, "output_tokens": output_tokens}


def prompt_tokens(usage: dict[str, Any]) -> int:
    """The prompt's length from Anthropic's ``usage`` (as a client reads it): ``input_tokens`` plus
    the tokens read from and written to the cache (missing or null counts as 0)."""
    return (int(usage["input_tokens"]) + int(usage.get("cache_read_input_tokens") or 0)
            + int(usage.get("cache_creation_input_tokens") or 0))


def anthropic_response(model: str, content: str, tool_calls: list[Message], done_reason: str,
                       prompt_tokens: int, output_tokens: int, cache_read: int = 0, cache_written: int = 0
                       ) -> dict[str, Any]:
    return {"id": random_id("msg_"), "type": "message", "role": "assistant", "model": model,
            "content": anthropic_blocks(content, tool_calls),
            "stop_reason": anthropic_stop_reason(tool_calls, done_reason), "stop_sequence": None,
            "usage": anthropic_usage(prompt_tokens, output_tokens, cache_read, cache_written)}


def anthropic_error(message: str, status: int) -> dict[str, Any]:
    fallback = "invalid_request_error" if status < 500 else "api_error"
    kind = {401: "authentication_error", 404: "not_found_error", 503: "overloaded_error"}.get(status, fallback)
    return {"type": "error", "error": {"type": kind, "message": message}}
