"""What running the model in a supervised child process costs, measured side by side.

    python benchmarks/supervisor.py [--rounds 5] [--tokens 128]

Two servers on the same model: one with the model in its own process (the default,
``course_lib/server/supervisor.py``), one with ``--in-process`` (the model inside the HTTP
server, as before). Rounds alternate between them; the medians are compared:

1. generated tokens/s as a streaming client sees them (first to last token);
2. the second turn of a tool loop (its prefix cached): seconds from sending the request to
   its first streamed token, as a client sees them.

Every token crosses one more pipe in the supervised server. Machines are noisy: read the
ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx
from server_overhead import LOOP_TURN_1, LOOP_TURN_2, NOW, STORY

from course_lib.runtime import EmbeddedServer

MODEL = "qwen2.5-coder:0.5b"


def streamed(url: str, messages: list, tokens: int, tools: list | None = None) -> tuple[float, float, int]:
    """(seconds to the first token, tokens/s from the first to the last, tokens) of one streamed chat."""
    body = {"model": MODEL, "messages": messages, "tools": tools or [],
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


def turn_two(url: str) -> float:
    streamed(url, LOOP_TURN_1, 24, [NOW])  # turn 1 puts the loop's prefix in the cache
    return streamed(url, LOOP_TURN_2, 1, [NOW])[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    servers = {"in-process": EmbeddedServer("--in-process"), "supervised": EmbeddedServer()}
    speeds: dict[str, list[float]] = {name: [] for name in servers}
    turns: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for server in servers.values():  # warm-up
            streamed(server.url, STORY, 8)
        for _ in range(args.rounds):
            for name, server in servers.items():
                speeds[name].append(streamed(server.url, STORY, args.tokens)[1])
                turns[name].append(turn_two(server.url))
    finally:
        for server in servers.values():
            server.stop()
    speed = {name: statistics.median(values) for name, values in speeds.items()}
    turn = {name: statistics.median(values) for name, values in turns.items()}
    print(f"{args.rounds} rounds, {args.tokens} tokens each, medians")
    print(f"generated tokens/s: in-process {speed['in-process']:.1f}, supervised {speed['supervised']:.1f}, "
          f"ratio {speed['supervised'] / speed['in-process']:.3f}")
    print(f"turn 2, s to the first token: in-process {turn['in-process']:.3f}, supervised {turn['supervised']:.3f}, "
          f"speed ratio {turn['in-process'] / turn['supervised']:.3f}")


if __name__ == "__main__":
    main()
