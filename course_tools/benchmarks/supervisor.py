"""What running the model in a supervised child process costs, measured side by side.

    python -m course_tools benchmark supervisor [--rounds 5] [--tokens 128]

Two servers on the same model: one with the model in its own process (the default,
``course_server/supervisor.py``), one with ``--in-process`` (the model inside the HTTP
server, as before). Rounds alternate between them; the medians are compared:

1. generated tokens/s as a streaming client sees them (first to last token);
2. the second turn of a tool loop (its prefix cached): seconds from sending the request to
   its first streamed token, as a client sees them.

Every token crosses one more pipe in the supervised server. Machines are noisy: read the
ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import statistics

from server_overhead import LOOP_TURN_1, LOOP_TURN_2, NOW, STORY, streamed

from course_lib.runtime import EmbeddedServer

MODEL = "qwen2.5-coder:0.5b"


def turn_two(url: str) -> float:
    streamed(url, MODEL, LOOP_TURN_1, 24, [NOW])  # turn 1 puts the loop's prefix in the cache
    return streamed(url, MODEL, LOOP_TURN_2, 1, [NOW])[0]


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
            streamed(server.url, MODEL, STORY, 8)
        for _ in range(args.rounds):
            for name, server in servers.items():
                speeds[name].append(streamed(server.url, MODEL, STORY, args.tokens)[1])
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
