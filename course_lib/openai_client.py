"""The course's ``ChatModel`` over any OpenAI-compatible server: vLLM, llama.cpp's server,
Ollama's ``/v1``, a hosted API.

The course's runners (lesson 8's experiments, the defense table, the capstone evaluation)
speak Ollama's ``/api/chat`` shape through a ``Client``. To run them on a bigger model on
another machine, point them at that machine instead: a ``Client`` for an Ollama server,
this class for a server that only speaks OpenAI's ``/v1/chat/completions``. It translates
each request into OpenAI's shape and each reply back into Ollama's, so the runners cannot
tell the difference:

- an assistant turn's calls get ids, their arguments a JSON *string*; each ``tool`` result
  is matched to its call's id (Ollama names the tool instead; the n-th result of a name
  answers the n-th call of that name);
- ``options`` become OpenAI's fields (``num_predict`` is ``max_tokens``); an option OpenAI
  has no field for is an error, not a silent drop;
- the reply's ``finish_reason`` and ``usage`` become ``done_reason``, ``prompt_eval_count``
  and ``eval_count``; ``total_duration`` is the time the request took, measured here.

>>> model = OpenAICompatible("http://gpu-box:8000/v1", model="Qwen/Qwen2.5-Coder-7B-Instruct")  # doctest: +SKIP
>>> model.chat([{"role": "user", "content": "Hi"}])["message"]["content"]                       # doctest: +SKIP
'Hello! How can I help you today?'
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any

import httpx

from .client import OllamaError
from .messages import arguments_from_json

Message = dict[str, Any]

OPTION_FIELDS = {"temperature": "temperature", "top_p": "top_p", "seed": "seed", "num_predict": "max_tokens",
                 "stop": "stop", "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
                 "top_k": "top_k", "min_p": "min_p"}  # the last two are extensions vLLM and llama.cpp accept
FINISH_REASONS = {"stop": "stop", "tool_calls": "stop", "function_call": "stop", "length": "length"}


class OpenAICompatible:
    """Talks to one OpenAI-compatible server (``base_url`` ends in ``/v1``) as if it were Ollama."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 300.0) -> None:
        self.host = base_url.rstrip("/")
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.host, timeout=timeout, headers=headers)

    def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
             options: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        """``POST /chat/completions`` with the request translated; the reply in Ollama's shape.
        Of Ollama's other fields only ``format`` has an OpenAI twin; any other is an error."""
        format = fields.pop("format", None)
        if fields:
            raise ValueError(f"an OpenAI-compatible server has no field for {sorted(fields)}")
        body: dict[str, Any] = {"model": self.model, "messages": openai_messages(messages),
                                **openai_options(options or {})}
        if tools:
            body["tools"] = tools  # Ollama copied OpenAI's declaration shape
        if format is not None:
            body["response_format"] = openai_response_format(format)
        started = time.perf_counter_ns()
        reply = self._post("/chat/completions", body)
        return ollama_reply(reply, self.model, time.perf_counter_ns() - started)

    def generate(self, prompt: str, raw: bool = False, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """``POST /completions``: the prompt goes to the model as is (Ollama's ``raw``; lesson 8's
        experiments send rendered prompts this way)."""
        if not raw:
            raise ValueError("an OpenAI-compatible server has no template-applying generate; "
                             "send a rendered prompt with raw=True, or use chat()")
        started = time.perf_counter_ns()
        reply = self._post("/completions", {"model": self.model, "prompt": prompt, **openai_options(options or {})})
        return {"model": self.model, "response": reply["choices"][0].get("text") or "",
                **ollama_stats(reply, time.perf_counter_ns() - started)}

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self._http.post(path, json=body)
        if response.is_error:
            answer: Any = None
            try:
                answer = response.json()
            except ValueError:
                pass
            error = answer.get("error", response.text) if isinstance(answer, dict) else response.text
            message = error.get("message", json.dumps(error)) if isinstance(error, dict) else str(error)
            raise OllamaError(response.status_code, message)
        return response.json()

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:
        return f"OpenAICompatible(base_url={self.host!r}, model={self.model!r})"


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
    with the id of the call they answer."""
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
                arguments = function.get("arguments") or {}
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": function["name"], "arguments": arguments if isinstance(
                                  arguments, str) else json.dumps(arguments, ensure_ascii=False)}})
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
        answer["tool_calls"] = [{"id": call.get("id", ""), "function": {
            "name": call["function"]["name"], "arguments": arguments_from_json(call["function"].get("arguments"))}}
            for call in message["tool_calls"]]
    return {"model": model, "message": answer, "done": True, **ollama_stats(reply, nanoseconds)}


def ollama_stats(reply: dict[str, Any], nanoseconds: int) -> dict[str, Any]:
    """How an OpenAI completion ended and what it read and wrote, in Ollama's fields."""
    usage = reply.get("usage") or {}
    return {"done_reason": FINISH_REASONS.get(reply["choices"][0].get("finish_reason") or "stop", "stop"),
            "prompt_eval_count": usage.get("prompt_tokens", 0), "eval_count": usage.get("completion_tokens", 0),
            "total_duration": nanoseconds}
