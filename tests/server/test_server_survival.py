"""The real server survives what hostile clients send (issue: "the server survives any request").

- A grammar fuzz: generated schemas with hostile counts, patterns, nesting and sizes, sent
  through every way a schema becomes a grammar (Ollama's ``format``, OpenAI's ``tool_choice``
  and ``response_format``, Anthropic's ``tool_choice``). Each is answered 200 or 400, never 500
  or 503, and the model's process never restarts.
- The model's process killed mid-generation: the request gets an error saying so, the server
  stays up, and the next request is answered by a new process.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from typing import Any

import httpx
import pytest

from course_lib.runtime import EmbeddedServer

pytestmark = pytest.mark.model

MODEL = "qwen2.5-coder:0.5b"
HI = [{"role": "user", "content": "Give me a value."}]
COUNTS = [0, 1, 7, 64, 999, 1000, 1001, 20_000, 10**6, 10**9, -1, 2.5, True, "5"]
PATTERNS = ["^[a-z]{1,8}$", r"^\d{3}-\d{4}$", r"^[\UFFFFFFFF]$", r"^[^\s\S]$", "(?=a)b", "^(a{40}){40}$",
            "^(a|b)*c$", "[", "\\", "^é+$", "^\\u0041$", r"^\p{L}$", "(?<x>a)", "a{2,}", "^((((a))))$", "x" * 300]
KEYWORDS = ["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"]


def hostile_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    kind = rng.choice(["string", "array", "object", "integer", "anyOf"])
    if kind == "string":
        schema: dict[str, Any] = {"type": "string"}
        if rng.random() < 0.5:
            schema["pattern"] = rng.choice(PATTERNS)
    elif kind == "array":
        schema = {"type": "array", "items": hostile_schema(rng, depth + 1) if depth < 3 else {"type": "integer"}}
    elif kind == "object":
        schema = {"type": "object", "properties": {f"p{i}": hostile_schema(rng, depth + 1) if depth < 3
                                                   else {"type": "string"} for i in range(rng.randint(1, 3))}}
    elif kind == "integer":
        schema = {"type": "integer", "minimum": rng.choice([-(10**300), 0, 5]), "maximum": rng.choice([10, 10**300])}
    else:
        schema = {"anyOf": [{"type": "string"}] * rng.choice([2, 50, 1200])}
    for keyword in rng.sample(KEYWORDS, rng.randint(0, 2)):
        schema[keyword] = rng.choice(COUNTS)
    return schema


def requests_for(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The four ways ``schema`` becomes a grammar, as (path, body)."""
    options = {"temperature": 0, "num_predict": 4}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                         "properties": {"value": schema}}}}
    return [
        ("/api/chat", {"model": MODEL, "messages": HI, "stream": False, "format": schema, "options": options}),
        ("/v1/chat/completions", {"model": MODEL, "messages": HI, "max_tokens": 4, "temperature": 0,
                                  "response_format": {"type": "json_schema",
                                                      "json_schema": {"name": "v", "schema": schema}}}),
        ("/v1/chat/completions", {"model": MODEL, "messages": HI, "max_tokens": 4, "temperature": 0,
                                  "tools": [tool], "tool_choice": "required"}),
        ("/v1/messages", {"model": MODEL, "messages": HI, "max_tokens": 4, "temperature": 0,
                          "tools": [{"name": "f", "input_schema": tool["function"]["parameters"]}],
                          "tool_choice": {"type": "tool", "name": "f"}}),
    ]


def test_a_grammar_fuzz_never_kills_or_stalls_the_server(url, server):
    rng = random.Random(35)
    statuses: dict[int, int] = {}
    slowest = 0.0
    with httpx.Client(base_url=url, timeout=120) as client:
        for _ in range(10):  # 40 requests
            for path, body in requests_for(hostile_schema(rng)):
                started = time.perf_counter()
                reply = client.post(path, json=body)
                slowest = max(slowest, time.perf_counter() - started)
                assert reply.status_code in (200, 400), (path, json.dumps(body)[:300], reply.text[:300])
                statuses[reply.status_code] = statuses.get(reply.status_code, 0) + 1
        assert client.get("/").text == "Ollama is running"
    assert "restarting" not in server.log(10_000), "a fuzzed schema crashed the model's process"
    assert statuses.get(200, 0) >= 8 and statuses.get(400, 0) >= 8, statuses  # both kinds were exercised
    assert slowest < 60


def test_a_killed_model_process_fails_its_request_and_the_server_recovers():
    embedded = EmbeddedServer("--prompt-cache", "0")  # one request at a time: the quickest to start
    try:
        child = int(re.search(r"in its own process \(pid (\d+)\)", embedded.log()).group(1))
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Count from 1 to 500."}],
                "options": {"temperature": 0, "num_predict": 400}}
        with httpx.Client(base_url=embedded.url, timeout=120) as client:
            with client.stream("POST", "/api/chat", json=body) as stream:
                lines = stream.iter_lines()
                assert "message" in json.loads(next(lines))  # it is generating
                os.kill(child, signal.SIGKILL)
                last = json.loads(list(lines)[-1])
            assert "restarted" in last["error"] and "SIGKILL" in last["error"]
            assert client.get("/").text == "Ollama is running"
            deadline = time.monotonic() + 120
            while (reply := client.post("/api/chat", json={**body, "stream": False,
                                                           "options": {"num_predict": 4}})).status_code == 503:
                assert time.monotonic() < deadline, "the model's process did not come back"
                time.sleep(0.5)
            assert reply.status_code == 200 and reply.json()["done"] is True
        assert "the model's process is back (restart 1)" in embedded.log(50)
    finally:
        embedded.stop()
    assert embedded.process.returncode == 0, embedded.log()
