"""What the embedded server costs over calling llama.cpp directly, measured side by side.

    python -m course_tools benchmark server_overhead [--rounds 3] [--tokens 128]

Prints, from one run on this machine:

1. generated tokens/s through streaming ``/api/chat`` vs ``llama-cpp-python``'s own
   streaming completion on the same prompt (rounds alternate, medians compared);
2. prompt-evaluation time of a tool loop's second turn (its prefix is still in the
   KV cache) vs the same full prompt evaluated cold;
3. the server's peak resident memory.

Machines are noisy: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import httpx
from llama_cpp import Llama

from course_lib.runtime import EmbeddedServer
from course_server.model import LoadedModel, default_threads
from course_server.models import resolve_model

STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
NOW = {"type": "function", "function": {"name": "now", "description": "Return the current UTC time.",
                                         "parameters": {"type": "object", "properties": {}}}}
CALC = {"type": "function", "function": {"name": "calc", "description": "Evaluate an arithmetic expression.",
                                          "parameters": {"type": "object", "properties": {
                                              "expression": {"type": "string"}}, "required": ["expression"]}}}
LOOP_TURN_1: list[dict] = [{"role": "system", "content": "You are a helpful assistant. Use tools when they help."},
               {"role": "user", "content": "Look up the current time, then multiply its minutes by 15."}]
LOOP_TURN_2: list[dict] = [*LOOP_TURN_1,
               {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "now", "arguments": {}}}]},
               {"role": "tool", "content": "2026-11-30T09:42:00+00:00", "tool_name": "now"}]
EVICT: list[dict] = [{"role": "system", "content": "A different prefix, so nothing of the loop stays cached."},
         {"role": "user", "content": "Hi"}]


def streamed(url: str, model: str, messages: list, tokens: int, tools: list | None = None
             ) -> tuple[float, float, int]:
    """(seconds to the first token, tokens/s from the first to the last, tokens) of one streamed chat."""
    body = {"model": model, "messages": messages, "tools": tools or [],
            "options": {"temperature": 0, "num_predict": tokens}}
    sent = time.perf_counter()
    first = last = None
    with httpx.stream("POST", f"{url}/api/chat", json=body, timeout=300) as response:
        for text in response.iter_lines():
            line = json.loads(text)
            if line["done"]:
                count = line["eval_count"]
                break
            last = time.perf_counter()
            first = first or last
    assert first is not None and last is not None
    return first - sent, (count - 1) / max(last - first, 1e-9), count


def server_tokens_per_second(url: str, model: str, tokens: int) -> tuple[float, int]:
    _, speed, count = streamed(url, model, STORY, tokens)
    return speed, count


def direct_tokens_per_second(llm: Llama, prompt: str, tokens: int) -> tuple[float, int]:
    first = last = 0.0
    count = 0
    for _ in llm.create_completion(prompt, max_tokens=tokens, temperature=0, stream=True):
        last = time.perf_counter()
        first = first or last
        count += 1
    return (count - 1) / (last - first), count


def prompt_eval_ms(url: str, model: str, messages: list[dict]) -> float:
    body = {"model": model, "messages": messages, "tools": [NOW, CALC], "stream": False,
            "options": {"temperature": 0, "num_predict": 1}}
    return httpx.post(f"{url}/api/chat", json=body, timeout=300).json()["prompt_eval_duration"] / 1e6


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()

    name, path = resolve_model()
    server = EmbeddedServer()
    llm = Llama(str(path), n_ctx=4096, n_threads=default_threads(), verbose=False)
    prompt = LoadedModel(name, path).render(STORY)  # the exact text the server evaluates
    via_server, direct = [], []
    try:
        for _ in range(args.rounds):  # alternate so that drift in machine speed hits both alike
            via_server.append(server_tokens_per_second(server.url, name, args.tokens))
            direct.append(direct_tokens_per_second(llm, prompt, args.tokens))
        warm, cold = [], []
        for _ in range(args.rounds):
            prompt_eval_ms(server.url, name, LOOP_TURN_1)
            warm.append(prompt_eval_ms(server.url, name, LOOP_TURN_2))  # prefix of turn 1 is cached
            prompt_eval_ms(server.url, name, EVICT)
            cold.append(prompt_eval_ms(server.url, name, LOOP_TURN_2))  # same prompt, nothing cached
        rss = peak_rss_mb(server.process.pid)
    finally:
        server.stop()

    server_tps = statistics.median(tps for tps, _ in via_server)
    direct_tps = statistics.median(tps for tps, _ in direct)
    print(f"model {name}, {args.rounds} rounds, {args.tokens} tokens per generation")
    print(f"generated tokens/s   server {server_tps:6.1f}   llama-cpp-python {direct_tps:6.1f}   "
          f"ratio {server_tps / direct_tps:.3f}")
    print(f"  tokens generated per round: server {[n for _, n in via_server]}, direct {[n for _, n in direct]}")
    warm_ms, cold_ms = statistics.median(warm), statistics.median(cold)
    print(f"loop turn 2 prompt eval   cached prefix {warm_ms:7.1f} ms   cold {cold_ms:7.1f} ms   "
          f"ratio {warm_ms / cold_ms:.3f}")
    print(f"server peak resident memory {rss:.0f} MB")
