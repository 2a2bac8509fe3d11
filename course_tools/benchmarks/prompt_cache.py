"""Several cached prompt prefixes (``--prompt-cache``) vs llama-cpp-python's one, side by side.

    python -m course_tools benchmark prompt_cache [--rounds 2] [--requests 4] [--chunks 16,32,64]

The workload is the shape of a defended agent run (lesson 9): for each request, the agent's
first turn (system prompt, tools, request), a tool-free call of a defense (another system
prompt and a web page), then the agent's answer turn, which starts like its first turn.
With one cached prefix the defense's call pushes the agent's prefix out, and the answer turn
evaluates the system prompt and the tools again; with several, it is restored.

Two engines on the same model run the same workload (the one-at-a-time decoder, as with
``--prompt-cache 0``, and the batched decoder with one slot and its prompt cache), alternating round by round (machines
are noisy: read the ratio). Prints the seconds of each, their ratio, the prompt tokens
each evaluated, and whether the cached engine's answers equal its own answers from an empty
cache (they must: only whole aligned chunks are reused), and what evaluating in chunks costs
when nothing is cached.

Then the case that costs: prompts that share a long prefix and differ near their end (one
question each after the same system prompt and tools, as in lesson 8's experiments). The
single prefix reuses every shared token; the prompt cache only the whole chunks before the
first difference. Printed for each chunk size in ``--chunks``, with the price of that size
on a cold prompt.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from course_server.engine import Engine, GenerationStats, batched_engine, one_at_a_time_engine
from course_server.models import resolve_model
from course_server.prompt_cache import PromptCache
from course_server.wire import Options

SYSTEM = {"role": "system", "content": "You are the kiosk assistant of a parts shop. Use the tools to answer; "
                                       "never invent stock, prices or orders. Answer in one or two sentences."}
TOOLS = [{"type": "function", "function": {"name": name, "description": description, "parameters": {
    "type": "object", "properties": {argument: {"type": "string", "description": about}}, "required": [argument]}}}
    for name, description, argument, about in [
        ("get_product_stock", "Units in stock of a product in each warehouse. Use it for any stock question.",
         "sku", "Product code: SKU- and five digits, e.g. SKU-01234."),
        ("get_product_price", "The price of a product in yen, with tax.", "sku", "Product code, e.g. SKU-01234."),
        ("read_web_page", "The text of a web page, for questions about a supplier's page.", "url", "The page's URL."),
        ("send_email", "Send an e-mail to a customer. Only when the customer asks for one.", "to", "Address."),
        ("refund_order", "Refund an order in full. Only when the customer asks for a refund.", "order_id",
         "Order number, e.g. ORD-000042.")]]
QUESTIONS = ["Is SKU-12345 in stock?", "How much is SKU-00042?", "What time is it?", "Refund ORD-000042, please.",
             "What is the weather in Paris?", "E-mail bob@example.com that his order shipped.", "What is 2 + 2?",
             "Do you sell pressure gauges?"]
REQUESTS = ["Is SKU-12345 in stock?", "How much is SKU-00042?", "What does the supplier page say about delivery?",
            "Please refund ORD-000042."]
PAGE = ("Supplier news: deliveries to Tokyo take two days, to Osaka three. Prices change on the first of the "
        "month. Contact the sales office for bulk orders of more than 500 units. ") * 3
QUARANTINE = {"role": "system", "content": "Extract only facts about delivery times from the page. Reply in JSON."}
GREEDY = Options(temperature=0, num_predict=24)


def reply(engine: Engine, messages: list[dict], tools: list[dict] | None) -> tuple[str, int]:
    """The greedy reply and the prompt's length in tokens."""
    pieces = list(engine.generate(engine.render_prompt(messages, tools), GREEDY))
    stats = pieces[-1]
    assert isinstance(stats, GenerationStats)
    return "".join(p for p in pieces if isinstance(p, str)), stats.prompt_eval_count


def calls(request: str) -> list[tuple[list[dict], list[dict] | None]]:
    """One request's three model calls: (messages, tools)."""
    user = {"role": "user", "content": request}
    fetched = {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "read_web_page", "arguments": {"url": "https://supplier.example"}}}]}
    return [([SYSTEM, user], TOOLS),                                           # the agent's first turn
            ([QUARANTINE, {"role": "user", "content": PAGE}], None),           # the defense's own call
            ([SYSTEM, user, fetched, {"role": "tool", "content": PAGE[:200]}], TOOLS)]  # the answer turn


def workload(engine: Engine, requests: list[str]) -> tuple[float, list[str], int]:
    """Seconds, the replies, and the prompt tokens the prompt cache skipped (0 without one)."""
    started, replies, skipped = time.perf_counter(), [], 0
    for request in requests:
        for messages, tools in calls(request):
            replies.append(reply(engine, messages, tools)[0])
            cache = getattr(engine.decoder, "cache", None)
            skipped += cache.reused if cache else 0
    return time.perf_counter() - started, replies, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=len(REQUESTS))
    parser.add_argument("--chunks", default="16,32,64", help="chunk sizes for the shared-prefix case")
    args = parser.parse_args()
    name, path = resolve_model()
    engines = {"one cached prefix": one_at_a_time_engine(name, path),
               "prompt cache, 8 slots": batched_engine(name, path, prompt_cache=8, parallel=1)}
    requests = REQUESTS[:args.requests]
    seconds: dict[str, list[float]] = {label: [] for label in engines}
    replies: dict[str, list[str]] = {}
    skipped: dict[str, int] = {}
    for round_ in range(args.rounds):
        for label in (list(engines) if round_ % 2 == 0 else list(engines)[::-1]):
            engines[label].forget_cache()
            took, replies[label], skipped[label] = workload(engines[label], requests)
            seconds[label].append(took)
    cached = engines["prompt cache, 8 slots"]
    cold, cold_seconds, total = [], {label: 0.0 for label in engines}, 0
    for request in requests:  # every call from an empty cache: what the 64-token chunks cost
        for messages, tools in calls(request):
            for label, engine in engines.items():
                engine.forget_cache()
                started = time.perf_counter()
                text, length = reply(engine, messages, tools)
                cold_seconds[label] += time.perf_counter() - started
                if engine is cached:
                    cold.append(text)
                    total += length
    old, new = (statistics.median(seconds[label]) for label in engines)
    print(f"{len(requests)} defended runs, 3 model calls each ({total} prompt tokens), {args.rounds} rounds, medians:")
    for label in engines:
        print(f"  {label:22} {statistics.median(seconds[label]):6.1f} s")
    print(f"  ratio: {old / new:.2f}x; the prompt cache skipped {skipped['prompt cache, 8 slots']} of the "
          f"{total} prompt tokens")
    print(f"  every call from an empty cache: {cold_seconds['one cached prefix']:.1f} s vs "
          f"{cold_seconds['prompt cache, 8 slots']:.1f} s (the price of evaluating in 64-token chunks)")
    print(f"  prompt cache's replies equal to the same call from an empty cache: "
          f"{sum(a == b for a, b in zip(replies['prompt cache, 8 slots'], cold))} of {len(cold)}")

    shared_prefix(name, path, [int(size) for size in args.chunks.split(",") if size])


def shared_prefix(name: str, path: Path, chunks: list[int]) -> None:
    """Questions after the same long prefix, one after another; and one cold prompt, per chunk size."""
    one_prefix, chunked = one_at_a_time_engine(name, path), batched_engine(name, path, parallel=1)
    engine = one_prefix
    prompts = [engine.render_prompt([SYSTEM, {"role": "user", "content": q}], TOOLS) for q in QUESTIONS]
    cold_prompt = engine.render_prompt(calls(REQUESTS[2])[2][0] + [{"role": "user", "content": PAGE * 2}], TOOLS)
    one_token = Options(temperature=0, num_predict=1)  # the prompt is the work here
    print(f"\n{len(prompts) - 1} questions after the same {len(engine.tokenize(prompts[0]))}-token prompt; "
          f"a cold prompt of {len(engine.tokenize(cold_prompt))} tokens:")
    timings = {}
    for chunk in [0, *chunks]:
        engine = chunked if chunk else one_prefix
        chunked.decoder.cache = PromptCache(8, chunk=chunk or 64)  # type: ignore[attr-defined]  # one at a time's
        engine.forget_cache()
        started = time.perf_counter()
        list(engine.generate(cold_prompt, one_token))
        cold = time.perf_counter() - started
        engine.forget_cache()
        list(engine.generate(prompts[0], one_token))
        started = time.perf_counter()
        for prompt in prompts[1:]:
            list(engine.generate(prompt, one_token))
        timings[chunk] = (time.perf_counter() - started, cold)
    single, single_cold = timings[0]
    print(f"  {'one cached prefix':22} {single:6.2f} s   cold {single_cold:6.2f} s")
    for chunk in chunks:
        shared, cold = timings[chunk]
        print(f"  {f'{chunk}-token chunks':22} {shared:6.2f} s   cold {cold:6.2f} s   "
              f"({shared / single:.2f}x and {cold / single_cold:.2f}x the single prefix)")
