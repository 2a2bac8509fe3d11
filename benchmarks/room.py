"""One server for a room: N simulated learners run lesson 3's round trip against it at once.

    python benchmarks/room.py [--learners 8 16] [--rounds 3]

The server is started as an instructor would start it for a room (``--host 0.0.0.0
--api-key KEY --max-queue 32``), and each learner, a thread with its own ``Client``, runs
lesson 3's round trip ``--rounds`` times: "What is 17 * 23?" with the ``now`` and ``calc``
tools, the call run, its result sent back, the answer read. Prints, per room size, the
latency of single requests (median and 95th percentile), the round trips' time, how many
requests failed (and how), and the generated tokens per second of the whole room.

Learners start at once, which is harder on the server than a real room, where people are
a few seconds apart.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from course_lib.arithmetic import calculate
from course_lib.client import Client, OllamaError
from course_lib.runtime import EmbeddedServer
from course_lib.tools import tool_schema

KEY = "benchmark-room-key"
MODEL = "qwen2.5-coder:0.5b"
OPTIONS = {"temperature": 0, "num_predict": 60}


def now() -> str:
    """Return the current UTC time in ISO-8601 format."""
    return "2026-12-03T09:42:00+00:00"


def calc(expression: str) -> float:
    """Evaluate a pure arithmetic expression. Only digits and +, -, *, /, ( ) allowed.

    Args:
        expression: Arithmetic expression, e.g. "(3 + 4) * 15".
    """
    return calculate(expression)


TOOLS = [tool_schema(now), tool_schema(calc)]


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.round_trips: list[float] = []
        self.errors: dict[str, int] = {}
        self.tokens = 0

    def request(self, client: Client, messages: list[dict]) -> dict | None:
        started = time.perf_counter()
        try:
            reply = client.chat(messages, tools=TOOLS, options=OPTIONS)
        except OllamaError as error:
            with self.lock:
                self.errors[str(error.status)] = self.errors.get(str(error.status), 0) + 1
            return None
        with self.lock:
            self.latencies.append(time.perf_counter() - started)
            self.tokens += reply.get("eval_count", 0)
        return reply


def round_trip(client: Client, tally: Tally) -> None:
    """Lesson 3: ask, run the call the model asked for, send its result, read the answer."""
    started = time.perf_counter()
    messages = [{"role": "user", "content": "What is 17 * 23?"}]
    reply = tally.request(client, messages)
    if reply is None:
        return
    calls = reply["message"].get("tool_calls") or []
    if calls:
        messages.append(reply["message"])
        for call in calls:
            function = call["function"]
            try:
                result = {"now": now, "calc": calc}[function["name"]](**function["arguments"])
            except Exception as error:  # the model's arguments can be wrong: that is the lesson
                result = f"error: {error}"
            messages.append({"role": "tool", "tool_name": function["name"], "content": str(result)})
        if tally.request(client, messages) is None:
            return
    with tally.lock:
        tally.round_trips.append(time.perf_counter() - started)


def room(url: str, learners: int, rounds: int) -> tuple[Tally, float]:
    tally = Tally()

    def learner() -> None:
        client = Client(url, MODEL, api_key=KEY)
        for _ in range(rounds):
            round_trip(client, tally)

    threads = [threading.Thread(target=learner) for _ in range(learners)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tally, time.perf_counter() - started


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--learners", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = EmbeddedServer("--host", "0.0.0.0", "--api-key", KEY, "--max-queue", "32")
    try:
        round_trip(Client(server.url, MODEL, api_key=KEY), Tally())  # warm-up
        print("| learners | requests | failed | request p50 | request p95 | round trip p50 | round trip p95 "
              "| generated tokens/s (room) | wall time |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for learners in args.learners:
            tally, wall = room(server.url, learners, args.rounds)
            failed = sum(tally.errors.values())
            kinds = ", ".join(f"{count}x {status}" for status, count in sorted(tally.errors.items()))
            print(f"| {learners} | {len(tally.latencies) + failed} | {failed}{f' ({kinds})' if kinds else ''} "
                  f"| {statistics.median(tally.latencies):.2f} s | {percentile(tally.latencies, 0.95):.2f} s "
                  f"| {statistics.median(tally.round_trips):.2f} s | {percentile(tally.round_trips, 0.95):.2f} s "
                  f"| {tally.tokens / wall:.1f} | {wall:.0f} s |", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
