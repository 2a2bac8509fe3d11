"""The responses of the OpenAI and Anthropic dialects: whole (JSON) and streamed (SSE).

The routes in ``app.py`` produce one stream of events whatever the dialect: pieces of
text and whole tool calls (Ollama-shaped dicts), then a ``GenerationStats``. Ollama's
``/api/chat`` sends those as NDJSON lines; this module turns the same stream into
OpenAI's ``chat.completion.chunk`` events or Anthropic's ``message_start`` ...
``message_stop`` events, and a collected reply into either dialect's JSON body.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from course_lib import dialects
from course_server.generation import GenerationStats


def openai_json(model: str, content: str, calls: list[dict[str, Any]], stats: GenerationStats) -> dict[str, Any]:
    return dialects.openai_response(model, content, calls, stats.done_reason, stats.prompt_eval_count,
                                    stats.eval_count, stats.cache_read_tokens, stats.cache_write_tokens)


async def openai_sse(model: str, events: AsyncIterator[dict[str, Any] | GenerationStats]):
    """Chat Completions chunks: the role, content deltas, whole tool calls, the finish reason,
    a usage chunk, then ``[DONE]``."""
    chunk_id, created = dialects.random_id("chatcmpl-"), int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "system_fingerprint": "fp_course_lib",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}

    yield None, chunk({"role": "assistant", "content": ""})
    calls: list[dict[str, Any]] = []
    async for event in events:
        if isinstance(event, GenerationStats):
            yield None, chunk({}, dialects.openai_finish_reason(calls, event.done_reason))
            usage = dialects.openai_usage(event.prompt_eval_count, event.eval_count, event.cache_read_tokens,
                                          event.cache_write_tokens)
            yield None, {**chunk({}), "choices": [], "usage": usage}
            yield None, "[DONE]"
            return
        if event.get("tool_calls"):
            calls += event["tool_calls"]
            yield None, chunk({"tool_calls": [{"index": i, **call} for i, call in
                                              enumerate(dialects.openai_tool_calls(event["tool_calls"]))]})
        elif event.get("content"):
            yield None, chunk({"content": event["content"]})


def anthropic_json(model: str, content: str, calls: list[dict[str, Any]], stats: GenerationStats) -> dict[str, Any]:
    return dialects.anthropic_response(model, content, calls, stats.done_reason, stats.prompt_eval_count,
                                       stats.eval_count, stats.cache_read_tokens, stats.cache_write_tokens)


async def anthropic_sse(model: str, events: AsyncIterator[dict[str, Any] | GenerationStats]):
    """Messages stream events: message_start, a text block with its deltas, one tool_use block
    per call (its input as one JSON delta), message_delta with the stop reason and the usage,
    message_stop. (message_start's usage is all zeros: the stream starts before the counts are
    known, and message_delta's counts are totals that replace them, as Anthropic's are.)"""
    message: dict[str, Any] = {"id": dialects.random_id("msg_"), "type": "message", "role": "assistant",
                               "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
                               "usage": dialects.anthropic_usage(0, 0)}
    yield "message_start", {"type": "message_start", "message": message}
    index, text_open = 0, False
    calls: list[dict[str, Any]] = []
    async for event in events:
        if isinstance(event, GenerationStats):
            if text_open:
                yield "content_block_stop", {"type": "content_block_stop", "index": index}
            yield "message_delta", {"type": "message_delta",
                                    "delta": {"stop_reason": dialects.anthropic_stop_reason(calls, event.done_reason),
                                              "stop_sequence": None},
                                    "usage": dialects.anthropic_usage(event.prompt_eval_count, event.eval_count,
                                                                      event.cache_read_tokens,
                                                                      event.cache_write_tokens)}
            yield "message_stop", {"type": "message_stop"}
            return
        if event.get("content"):
            if not text_open:
                text_open = True
                yield "content_block_start", {"type": "content_block_start", "index": index,
                                              "content_block": {"type": "text", "text": ""}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "text_delta", "text": event["content"]}}
        for block in dialects.anthropic_blocks("", event.get("tool_calls") or []):
            if text_open:
                yield "content_block_stop", {"type": "content_block_stop", "index": index}
                text_open, index = False, index + 1
            calls.append(block)
            arguments = json.dumps(block["input"], ensure_ascii=False)
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "input_json_delta", "partial_json": arguments}}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
