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
  and ``eval_count``; ``total_duration`` is the time the request took, measured here;
- a call's arguments that are no JSON object stay the text the server sent, so the agent's
  validation answers the model with an error result instead of the loop raising.

The translation itself is the OpenAI codec, ``dialects/openai_chat.py``, which the course's
server speaks too; this module is the HTTP around it.

>>> model = OpenAICompatible("http://gpu-box:8000/v1", model="Qwen/Qwen2.5-Coder-7B-Instruct")  # doctest: +SKIP
>>> model.chat([{"role": "user", "content": "Hi"}])["message"]["content"]                       # doctest: +SKIP
'Hello! How can I help you today?'
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from course_lib.client import OllamaError
from course_lib.dialects.openai_chat import (
    ollama_reply,
    ollama_stats,
    openai_messages,
    openai_options,
    openai_response_format,
)
from course_lib.messages import Message


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
