"""One agent, three API dialects: a provider-neutral core and thin adapters.

Ollama's ``/api/chat``, OpenAI's ``/v1/chat/completions`` and Anthropic's ``/v1/messages``
say the same five things (here are the tools; call this one with these arguments; here is
its result; that failed; I am done) in different places. Code that mixes those places into
its logic is hard to move between providers. So this module splits the agent in two:

- the **core** knows nothing of any API: tools are functions ``(tool_name, arguments) ->
  result``, a ``Reply`` is text plus ``ToolCall`` s (``messages``), and the loop is lesson
  4's own ``loop.run_loop`` (with its turn cap and repeat cap);
- an **adapter** per dialect only translates: it builds the request body, reads the
  response into a ``Reply``, and writes the tool results back in the dialect's shape.

What both the adapters and the course's server must agree on (a declaration in Anthropic's
shape, reading OpenAI's argument strings, a request in Ollama's terms) comes from the
dialects' codecs, ``course_lib/dialects/``. A model's arguments that are no JSON object
stay the text it sent: the loop's validation answers the call with an error result.

:func:`differences_table` writes the seed article's comparison table by looking at what the
adapters actually sent and received, so the table cannot drift from the code.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from course_lib.dialects import anthropic_messages, openai_chat
from course_lib.loop import Executor, Limits, LoopLimitReached, Transcript, run_loop
from course_lib.messages import ErrorKind, Message, Reply, ToolCall, ToolResult
from course_lib.tools import ToolFunction, tool_schema


def at(data: Any, path: tuple[str | int, ...]) -> Any:
    """The value at ``path`` (keys and list indices) inside parsed JSON."""
    for step in path:
        data = data[step]
    return data


class Adapter:
    """Translates between the core and one dialect. Subclasses fill in the five methods."""

    name = "?"
    path = "?"  # the endpoint, relative to the provider's base URL
    stop_path: tuple[str | int, ...] = ()  # where the response says why the model stopped
    usage_paths: tuple[tuple[str | int, ...], tuple[str | int, ...]] = ((), ())  # input, output tokens
    # Prompt tokens a dialect counts apart from usage_paths[0]: Anthropic's input_tokens leaves out
    # what the prompt cache read or wrote, so its prompt is the sum (``read`` adds them up).
    cache_paths: tuple[tuple[str | int, ...], ...] = ()

    def declare(self, tool: ToolFunction) -> dict[str, Any]:
        """The tool's declaration in this dialect."""
        raise NotImplementedError

    def request(self, model: str, system: str, messages: list[Message], tools: list[dict[str, Any]],
                max_tokens: int, temperature: float) -> dict[str, Any]:
        """The request body."""
        raise NotImplementedError

    def calls(self, body: dict[str, Any]) -> tuple[str, list[ToolCall], Message]:
        """The text, the tool calls and the assistant message of a response."""
        raise NotImplementedError

    def results(self, answered: list[tuple[ToolCall, ToolResult]]) -> list[Message]:
        """The messages that carry the results of ``answered`` calls back to the model."""
        raise NotImplementedError

    def headers(self, api_key: str | None) -> dict[str, str]:
        return {}

    def as_ollama(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request as the course's server sees it, in Ollama's terms (``course_lib/dialects``)."""
        raise NotImplementedError

    def read(self, body: dict[str, Any]) -> Reply:
        text, calls, message = self.calls(body)
        return Reply(text, calls, str(at(body, self.stop_path)), int(at(body, self.usage_paths[0])),
                     int(at(body, self.usage_paths[1])), message)


def _tools(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``tools`` field, left out when there are none (a tool-free turn)."""
    return {"tools": tools} if tools else {}


class OllamaChat(Adapter):
    name, path = "Ollama /api/chat", "/api/chat"
    stop_path, usage_paths = ("done_reason",), (("prompt_eval_count",), ("eval_count",))

    def declare(self, tool: ToolFunction) -> dict[str, Any]:
        return tool_schema(tool)

    def request(self, model: str, system: str, messages: list[Message], tools: list[dict[str, Any]],
                max_tokens: int, temperature: float) -> dict[str, Any]:
        return {"model": model, "messages": [{"role": "system", "content": system}, *messages], **_tools(tools),
                "stream": False, "options": {"temperature": temperature, "num_predict": max_tokens}}

    def calls(self, body: dict[str, Any]) -> tuple[str, list[ToolCall], Message]:
        message = body["message"]
        calls = [ToolCall(call["function"]["name"], call["function"]["arguments"], call.get("id", f"call_{i}"))
                 for i, call in enumerate(message.get("tool_calls") or [])]
        return message.get("content") or "", calls, message

    def results(self, answered: list[tuple[ToolCall, ToolResult]]) -> list[Message]:
        return [{"role": "tool", "tool_name": call.name, "content": result.text} for call, result in answered]

    def as_ollama(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "tools": body.get("tools")}


class OpenAIChat(Adapter):
    name, path = "OpenAI /v1/chat/completions", "/v1/chat/completions"
    stop_path = ("choices", 0, "finish_reason")
    usage_paths = (("usage", "prompt_tokens"), ("usage", "completion_tokens"))

    def declare(self, tool: ToolFunction) -> dict[str, Any]:
        return tool_schema(tool)  # the same shape as Ollama's: Ollama copied OpenAI's

    def request(self, model: str, system: str, messages: list[Message], tools: list[dict[str, Any]],
                max_tokens: int, temperature: float) -> dict[str, Any]:
        return {"model": model, "messages": [{"role": "system", "content": system}, *messages], **_tools(tools),
                "max_tokens": max_tokens, "temperature": temperature}

    def calls(self, body: dict[str, Any]) -> tuple[str, list[ToolCall], Message]:
        message = body["choices"][0]["message"]
        calls = [ToolCall(call["function"]["name"], openai_chat.arguments_or_text(call["function"]["arguments"]),
                          call["id"]) for call in message.get("tool_calls") or []]  # arguments: a JSON *string*
        return message.get("content") or "", calls, message

    def results(self, answered: list[tuple[ToolCall, ToolResult]]) -> list[Message]:
        return [{"role": "tool", "tool_call_id": call.id, "content": result.text} for call, result in answered]

    def headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def as_ollama(self, body: dict[str, Any]) -> dict[str, Any]:
        return openai_chat.openai_request(body)


class AnthropicMessages(Adapter):
    name, path = "Anthropic /v1/messages", "/v1/messages"
    stop_path = ("stop_reason",)
    usage_paths = (("usage", "input_tokens"), ("usage", "output_tokens"))
    cache_paths = (("usage", "cache_read_input_tokens"), ("usage", "cache_creation_input_tokens"))

    def declare(self, tool: ToolFunction) -> dict[str, Any]:
        return anthropic_messages.anthropic_tool(tool_schema(tool))

    def request(self, model: str, system: str, messages: list[Message], tools: list[dict[str, Any]],
                max_tokens: int, temperature: float) -> dict[str, Any]:
        return {"model": model, "system": system, "messages": messages, **_tools(tools),
                "max_tokens": max_tokens, "temperature": temperature}

    def calls(self, body: dict[str, Any]) -> tuple[str, list[ToolCall], Message]:
        text = "".join(block["text"] for block in body["content"] if block["type"] == "text")
        calls = [ToolCall(block["name"], block["input"], block["id"])
                 for block in body["content"] if block["type"] == "tool_use"]
        return text, calls, {"role": "assistant", "content": body["content"]}

    def results(self, answered: list[tuple[ToolCall, ToolResult]]) -> list[Message]:
        # All results of a turn go in ONE user message, as tool_result blocks; a failure is a flag.
        blocks = [{"type": "tool_result", "tool_use_id": call.id, "content": result.content,
                   **({} if result.ok else {"is_error": True})} for call, result in answered]
        return [{"role": "user", "content": blocks}]

    def headers(self, api_key: str | None) -> dict[str, str]:
        return {"x-api-key": api_key, "anthropic-version": "2023-06-01"} if api_key else {}

    def read(self, body: dict[str, Any]) -> Reply:
        # usage.input_tokens leaves out what the prompt cache served or stored: the prompt is all three
        return replace(super().read(body), input_tokens=anthropic_messages.prompt_tokens(body["usage"]))

    def as_ollama(self, body: dict[str, Any]) -> dict[str, Any]:
        return anthropic_messages.anthropic_request(body)


ADAPTERS: dict[str, Adapter] = {"ollama": OllamaChat(), "openai": OpenAIChat(), "anthropic": AnthropicMessages()}


class ProviderError(RuntimeError):
    """The provider refused the request; ``body`` is its error object, in its own format."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"{status}: {json.dumps(body, ensure_ascii=False)}")
        self.status, self.body = status, body


@dataclass
class Provider:
    """Where to send requests: an adapter, a base URL, a model and (for hosted APIs) a key."""

    adapter: Adapter
    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 120.0

    def send(self, body: dict[str, Any]) -> dict[str, Any]:
        response = httpx.post(self.base_url.rstrip("/") + self.adapter.path, json=body,
                              headers=self.adapter.headers(self.api_key), timeout=self.timeout)
        if response.status_code != 200:
            try:
                error = response.json()
            except ValueError:
                error = response.text
            raise ProviderError(response.status_code, error)
        return response.json()


@dataclass
class ProviderDialect:
    """The loop's ``Dialect`` for one provider: each model call is a request in the adapter's
    shape, sent over HTTP; every request and response is kept in ``exchanges``. A leading
    system message becomes the request's system prompt (Anthropic keeps it out of ``messages``)."""

    provider: Provider
    max_tokens: int = 120
    temperature: float = 0.0
    exchanges: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)

    def ask(self, messages: list[Message], tools: dict[str, ToolFunction] | None) -> Reply:
        adapter = self.provider.adapter
        system, rest = (messages[0]["content"], messages[1:]) if messages and messages[0]["role"] == "system" \
            else ("", messages)
        declared = [adapter.declare(tool) for tool in (tools or {}).values()]
        # A copy of the messages: each recorded request keeps the conversation it was sent with.
        body = adapter.request(self.provider.model, system, list(rest), declared, self.max_tokens, self.temperature)
        response = self.provider.send(body)
        reply = adapter.read(response)
        self.exchanges.append((body, response))
        self.replies.append(reply)
        return reply

    def tool_messages(self, answered: list[tuple[ToolCall, ToolResult]]) -> list[Message]:
        return self.provider.adapter.results(answered)


@dataclass
class Run:
    """A run in one dialect: the loop's transcript, and every request and response it sent."""

    adapter: Adapter
    transcript: Transcript
    exchanges: list[tuple[dict[str, Any], dict[str, Any]]]
    replies: list[Reply]

    @property
    def answer(self) -> str | None:
        return self.transcript.answer

    @property
    def answer_turn(self) -> bool:
        """The last reply was asked for without tools, after a repeated call (lesson 4)."""
        return bool(self.transcript.turns) and self.transcript.turns[-1].answer_turn

    @property
    def calls(self) -> list[ToolCall]:
        return [call for turn in self.transcript.turns for call in turn.tool_calls]


class LoopStopped(LoopLimitReached):
    """The turn cap or the repeat cap stopped the loop; ``run`` holds everything so far."""

    def __init__(self, stop: LoopLimitReached, run: Run) -> None:
        super().__init__(str(stop), stop.transcript)
        self.run = run


def run(provider: Provider, system: str, user: str, tools: dict[str, ToolFunction],
        execute: Executor | None = None, max_turns: int = 4, max_identical_calls: int = 1,
        max_tokens: int = 120, temperature: float = 0.0, answer_on_repeat: bool = True) -> Run:
    """Lesson 4's loop (``loop.run_loop``), in any dialect: ask, run the calls, answer every call, repeat.

    A call asked for more than ``max_identical_calls`` times ends the loop: with
    ``answer_on_repeat`` by one tool-free turn that asks for the answer from the results so
    far (``Run.answer_turn`` says so), else by raising :class:`LoopStopped`.
    """
    dialect = ProviderDialect(provider, max_tokens, temperature)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    try:
        transcript = run_loop(dialect, messages, tools, Limits(max_turns, max_identical_calls), execute,
                              answer_on_repeat)
    except LoopLimitReached as stop:
        raise LoopStopped(stop, Run(provider.adapter, stop.transcript, dialect.exchanges, dialect.replies)) from None
    return Run(provider.adapter, transcript, dialect.exchanges, dialect.replies)


# --- OpenAI's Responses API: items linked by call_id (the course's server does not serve it) ---

def responses_input(messages: list[Message]) -> list[dict[str, Any]]:
    """A Chat Completions conversation as Responses API ``input`` items.

    The Responses API (``/v1/responses``) has no ``tool_calls`` list and no ``tool`` role: a
    call is a ``function_call`` item of its own, and its result a ``function_call_output``
    item that names the call's ``call_id``, the role Chat Completions gives ``tool_call_id``.
    (A ``function_call`` item the API returns also has an ``id`` of its own, ``fc_...``:
    that one names the item, not the call; results point at ``call_id``.)
    """
    items: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                          "output": message["content"]})
            continue
        if message.get("content"):
            items.append({"role": message["role"], "content": message["content"]})
        items += [{"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
                   "arguments": call["function"]["arguments"]} for call in message.get("tool_calls") or []]
    return items


def responses_calls(output: list[dict[str, Any]]) -> list[ToolCall]:
    """The calls in a Responses API ``output``: its ``function_call`` items, keyed by ``call_id``;
    ``arguments`` is a JSON string, as in Chat Completions."""
    return [ToolCall(item["name"], openai_chat.arguments_or_text(item["arguments"]), item["call_id"])
            for item in output if item.get("type") == "function_call"]


# --- the differences table, read off real exchanges ----------------------------------------

def paths(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, value) in parsed JSON, depth first: ``messages[0].content``, ..."""
    yield prefix, data
    if isinstance(data, dict):
        for key, value in data.items():
            yield from paths(value, f"{prefix}.{key}" if prefix else key)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from paths(value, f"{prefix}[{index}]")


def dotted(path: tuple[str | int, ...]) -> str:
    """``("choices", 0, "finish_reason")`` -> ``choices[0].finish_reason``."""
    return "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path).lstrip(".")


def find(data: Any, wanted: Callable[[Any], bool]) -> str:
    """The first path whose value is ``wanted``, or ``-`` if there is none."""
    return next((path for path, value in paths(data) if wanted(value)), "-")


def _shape(message: Message) -> str:
    """A result message without its text, ids elided: ``role="tool", tool_call_id=…``."""
    def show(key: str, item: Any) -> str:
        if key.endswith("id"):
            return f"{key}=…"
        if isinstance(item, list):
            return f"{key}=[" + _shape(item[0]) + "]"
        return f"{key}={json.dumps(item)}"
    return ", ".join(show(key, item) for key, item in message.items() if key != "content" or isinstance(item, list))


def describe(run: Run, system: str) -> dict[str, str]:
    """Where one dialect put each thing: read from the run's first request and response, and
    from what its adapter writes for a result and for a failure."""
    adapter = run.adapter
    (request, response), reply = run.exchanges[0], run.replies[0]
    call = reply.calls[0]
    arguments = find(response, lambda v: v == call.arguments or
                     (isinstance(v, str) and v.startswith("{") and _loads(v) == call.arguments))
    failed = adapter.results([(call, ToolResult.failure(ErrorKind.TOOL_FAILED, "out of stock"))])[0]
    arguments_kind = "a JSON string" if isinstance(dict(paths(response)).get(arguments), str) else "an object"
    return {
        "system prompt": find(request, lambda v: v == system),
        "tool schema": find(request, lambda v: isinstance(v, dict) and "properties" in v),
        "tool name in a call": find(response, lambda v: v == call.name),
        "call arguments": f"{arguments} ({arguments_kind})",
        "stop signal": f"{dotted(adapter.stop_path)} = {reply.stop!r}",
        "a result goes back as": _shape(adapter.results([(call, ToolResult("42"))])[0]),
        "a failed call": _shape(failed) + ("" if "is_error" in json.dumps(failed) else " (only the text says so)"),
        "tokens used": " + ".join(dotted(path) for path in (adapter.usage_paths[0], *adapter.cache_paths))
                       + " / " + dotted(adapter.usage_paths[1]),
    }


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def differences_table(runs: list[Run], system: str) -> str:
    """A Markdown table: one row per thing, one column per dialect, from :func:`describe`."""
    described = [describe(run, system) for run in runs]
    lines = ["| | " + " | ".join(run.adapter.name for run in runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for row in described[0]:
        lines.append(f"| {row} | " + " | ".join(f"`{d[row]}`" for d in described) + " |")
    return "\n".join(lines)


def side_by_side(columns: dict[str, Any]) -> str:
    """HTML: one column per dialect, each a JSON document (for ``IPython.display.HTML``)."""
    cells = "".join(f"<td style='vertical-align:top;text-align:left'><b>{html.escape(title)}</b><pre "
                    f"style='font-size:11px'>{html.escape(json.dumps(value, indent=1, ensure_ascii=False))}</pre></td>"
                    for title, value in columns.items())
    return f"<table><tr>{cells}</tr></table>"
