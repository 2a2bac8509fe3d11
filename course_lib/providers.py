"""One agent, three API dialects: a provider-neutral core and thin adapters.

Ollama's ``/api/chat``, OpenAI's ``/v1/chat/completions`` and Anthropic's ``/v1/messages``
say the same five things (here are the tools; call this one with these arguments; here is
its result; that failed; I am done) in different places. Code that mixes those places into
its logic is hard to move between providers. So this module splits the agent in two:

- the **core** knows nothing of any API: tools are functions ``(tool_name, arguments) ->
  result``, a :class:`Reply` is text plus :class:`ToolCall` s, and :func:`run` is the loop
  (with a turn cap and a repeat cap that raise, as in lesson 4);
- an **adapter** per dialect only translates: it builds the request body, reads the
  response into a :class:`Reply`, and writes the tool results back in the dialect's shape.

:func:`differences_table` writes the seed article's comparison table by looking at what the
adapters actually sent and received, so the table cannot drift from the code.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from .server import dialects
from .loop import ANSWER_INSTRUCTION, call_key, question_and_results
from .tools import ToolFunction, is_error, run_tool_call, tool_schema

Message = dict[str, Any]
Execute = Callable[[str, dict[str, Any]], str]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Reply:
    """All the core needs from a response, whatever the dialect."""

    text: str
    calls: list[ToolCall]
    stop: str  # the dialect's own stop value: "stop", "tool_calls", "tool_use", ...
    input_tokens: int
    output_tokens: int
    message: Message  # the assistant turn to append to the conversation, in the dialect's shape


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

    def results(self, answered: list[tuple[ToolCall, str]]) -> list[Message]:
        """The messages that carry the results of ``answered`` calls back to the model."""
        raise NotImplementedError

    def headers(self, api_key: str | None) -> dict[str, str]:
        return {}

    def as_ollama(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request as the course's server sees it, in Ollama's terms (``dialects``)."""
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

    def declare(self, tool):
        return tool_schema(tool)

    def request(self, model, system, messages, tools, max_tokens, temperature):
        return {"model": model, "messages": [{"role": "system", "content": system}, *messages], **_tools(tools),
                "stream": False, "options": {"temperature": temperature, "num_predict": max_tokens}}

    def calls(self, body):
        message = body["message"]
        calls = [ToolCall(call.get("id", f"call_{i}"), call["function"]["name"], call["function"]["arguments"])
                 for i, call in enumerate(message.get("tool_calls") or [])]
        return message.get("content") or "", calls, message

    def results(self, answered):
        return [{"role": "tool", "tool_name": call.name, "content": result} for call, result in answered]

    def as_ollama(self, body):
        return {**body, "tools": body.get("tools")}


class OpenAIChat(Adapter):
    name, path = "OpenAI /v1/chat/completions", "/v1/chat/completions"
    stop_path = ("choices", 0, "finish_reason")
    usage_paths = (("usage", "prompt_tokens"), ("usage", "completion_tokens"))

    def declare(self, tool):
        return tool_schema(tool)  # the same shape as Ollama's: Ollama copied OpenAI's

    def request(self, model, system, messages, tools, max_tokens, temperature):
        return {"model": model, "messages": [{"role": "system", "content": system}, *messages], **_tools(tools),
                "max_tokens": max_tokens, "temperature": temperature}

    def calls(self, body):
        message = body["choices"][0]["message"]
        calls = [ToolCall(call["id"], call["function"]["name"], json.loads(call["function"]["arguments"]))
                 for call in message.get("tool_calls") or []]  # arguments arrive as a JSON *string*
        return message.get("content") or "", calls, message

    def results(self, answered):
        return [{"role": "tool", "tool_call_id": call.id, "content": result} for call, result in answered]

    def headers(self, api_key):
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def as_ollama(self, body):
        return dialects.openai_request(body)


class AnthropicMessages(Adapter):
    name, path = "Anthropic /v1/messages", "/v1/messages"
    stop_path = ("stop_reason",)
    usage_paths = (("usage", "input_tokens"), ("usage", "output_tokens"))

    def declare(self, tool):
        function = tool_schema(tool)["function"]
        return {"name": function["name"], "description": function["description"],
                "input_schema": function["parameters"]}

    def request(self, model, system, messages, tools, max_tokens, temperature):
        return {"model": model, "system": system, "messages": messages, **_tools(tools),
                "max_tokens": max_tokens, "temperature": temperature}

    def calls(self, body):
        text = "".join(block["text"] for block in body["content"] if block["type"] == "text")
        calls = [ToolCall(block["id"], block["name"], block["input"])
                 for block in body["content"] if block["type"] == "tool_use"]
        return text, calls, {"role": "assistant", "content": body["content"]}

    def results(self, answered):
        # All results of a turn go in ONE user message, as tool_result blocks; a failure is a flag.
        blocks = [{"type": "tool_result", "tool_use_id": call.id,
                   "content": result.removeprefix("error: ") if is_error(result) else result,
                   **({"is_error": True} if is_error(result) else {})} for call, result in answered]
        return [{"role": "user", "content": blocks}]

    def headers(self, api_key):
        return {"x-api-key": api_key, "anthropic-version": "2023-06-01"} if api_key else {}

    def as_ollama(self, body):
        return dialects.anthropic_request(body)


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
class Run:
    """A run in one dialect: its conversation, every request and response, and the replies read."""

    adapter: Adapter
    messages: list[Message]
    exchanges: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    answer_turn: bool = False  # the last reply was asked for without tools, after a repeated call

    @property
    def answer(self) -> str | None:
        return self.replies[-1].text if self.replies and not self.replies[-1].calls else None

    @property
    def calls(self) -> list[ToolCall]:
        return [call for reply in self.replies for call in reply.calls]


class LoopStopped(RuntimeError):
    """The turn cap or the repeat cap stopped the loop; ``run`` holds everything so far."""

    def __init__(self, message: str, run: Run) -> None:
        super().__init__(message)
        self.run = run


def run(provider: Provider, system: str, user: str, tools: dict[str, ToolFunction],
        execute: Execute | None = None, max_turns: int = 4, max_identical_calls: int = 1,
        max_tokens: int = 120, temperature: float = 0.0, answer_on_repeat: bool = True) -> Run:
    """The loop, once for every dialect: ask, run the calls, answer every call, repeat.

    A call asked for more than ``max_identical_calls`` times ends the loop: with
    ``answer_on_repeat`` (lesson 4) by one tool-free turn that asks for the answer from the
    results so far (``Run.answer_turn`` says so), else by raising :class:`LoopStopped`.
    """
    adapter = provider.adapter
    execute = execute or (lambda name, arguments: run_tool_call(name, arguments, tools))
    declared = [adapter.declare(tool) for tool in tools.values()]
    result = Run(adapter, [{"role": "user", "content": user}])
    seen: Counter[str] = Counter()
    answered: list[tuple[ToolCall, str]] = []
    for _ in range(max_turns):
        reply = _ask(provider, result, system, result.messages, declared, max_tokens, temperature)
        # New lists, never appends: each recorded request keeps the messages it was sent with.
        result.messages = [*result.messages, reply.message]
        if not reply.calls:
            return result
        for call in reply.calls:
            seen[call_key(call.name, call.arguments)] += 1
            if seen[call_key(call.name, call.arguments)] > max_identical_calls:
                if not answer_on_repeat:
                    raise LoopStopped(f"{call.name}{json.dumps(call.arguments)} was asked for again", result)
                result.answer_turn = True
                _ask(provider, result, ANSWER_INSTRUCTION, [answer_request(user, answered)], [], max_tokens,
                     temperature)
                return result
        results = [(call, execute(call.name, call.arguments)) for call in reply.calls]
        answered += results
        result.messages = [*result.messages, *adapter.results(results)]
    raise LoopStopped(f"no answer after {max_turns} turns", result)


def _ask(provider: Provider, result: Run, system: str, messages: list[Message], declared: list[dict[str, Any]],
         max_tokens: int, temperature: float) -> Reply:
    body = provider.adapter.request(provider.model, system, messages, declared, max_tokens, temperature)
    response = provider.send(body)
    reply = provider.adapter.read(response)
    result.exchanges.append((body, response))
    result.replies.append(reply)
    return reply


def answer_request(user: str, answered: list[tuple[ToolCall, str]]) -> Message:
    """The tool-free turn's one message: the question and every result so far (lesson 4's answer turn)."""
    return {"role": "user", "content": question_and_results(user, [(call.name, call.arguments, result)
                                                                  for call, result in answered])}


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
    failed = adapter.results([(call, "error: out of stock")])[0]
    arguments_kind = "a JSON string" if isinstance(dict(paths(response)).get(arguments), str) else "an object"
    return {
        "system prompt": find(request, lambda v: v == system),
        "tool schema": find(request, lambda v: isinstance(v, dict) and "properties" in v),
        "tool name in a call": find(response, lambda v: v == call.name),
        "call arguments": f"{arguments} ({arguments_kind})",
        "stop signal": f"{dotted(adapter.stop_path)} = {reply.stop!r}",
        "a result goes back as": _shape(adapter.results([(call, "42")])[0]),
        "a failed call": _shape(failed) + ("" if "is_error" in json.dumps(failed) else " (only the text says so)"),
        "tokens used": " / ".join(dotted(path) for path in adapter.usage_paths),
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
