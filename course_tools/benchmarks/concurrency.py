"""Experiments the old way and the new way, side by side in one run.

    python -m course_tools benchmark concurrency [--requests 4] [--tokens 128] [--cases 6] [--prompts 11] [--workers 4]

Three measurements, each on fresh embedded servers started here, each arm right after the
other (machines are noisy: read the ratios, not the seconds):

1. **Concurrent requests.** ``--requests`` chat requests of ``--tokens`` generated tokens
   each, one after another, then all at once: against the default server (its batches never
   change a row's arithmetic), against one with a slot for each request on weights that are
   not repacked (``--no-repack --parallel N``: every row computed alike, so its batches too
   leave each answer as it is alone), and against one that batches them all on the default
   weights (``--parallel N --batch-rows N``). Prints both times, their ratio, and how many
   answers are the same text both ways and the same as the default server's.
2. **A slice of the defense table** (lesson 9): the first ``--cases`` benign and attacked
   cases under three defenses, run three ways:
   - *before*: the runner as it was before the prompt cache: two servers with llama-cpp-
     python's one cached prefix (agent turns on one, tool-free calls on the other), both
     told to forget their cache before each case, replies remembered for agent turns only,
     one case at a time;
   - *prompt cache*: one server with the prompt cache, every temperature-0 reply remembered,
     one case at a time;
   - *prompt cache + workers*: the same, ``--workers`` cases at a time.
3. **A slice of lesson 8's first experiment**: ``--prompts`` labelled prompts, two trials,
   with the "what" descriptions; *before* is a server with the one cached prefix, one request
   at a time; then the prompt cache one at a time and with ``--workers``.

For 2 and 3 it also says whether the arms' results are the same (the two prompt-cache arms
must be: the server answers each request as it would alone).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from course_lib.client import Client
from course_lib.experiments import Experiment, raw_sender, raw_tool_request, right_call, run_condition
from course_lib.runtime import EmbeddedServer
from course_lib.security import RememberedReplies, load_scenarios, run_table, standard_defenses
from course_lib.security.bench import Outcome, run_case
from course_lib.security.defenses import Defense, Spotlighting, ToolFilter

ROOT = Path(__file__).resolve().parent.parent
SINGLE_PREFIX = ("--prompt-cache", "0")
TOPICS = ["a robot who learns to cook", "a lighthouse keeper", "a cat on a train", "the first snow in Tokyo",
          "a lost umbrella", "a night market", "an old map", "a quiet library"]


def timed(work: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = work()
    return time.perf_counter() - started, result


def concurrent_requests(n: int, tokens: int, *server_args: str) -> list[str]:
    """The answers to ``n`` requests sent at once, after timing them one after another."""
    server = EmbeddedServer(*server_args)
    client = Client(server.url)
    options = {"temperature": 0, "num_predict": tokens}

    def story(topic: str) -> str:
        messages = [{"role": "user", "content": f"Write a long story about {topic}, about 300 words."}]
        return client.chat(messages, options=options)["message"]["content"]

    try:
        topics = TOPICS[:n]
        story(topics[0])  # warm up: the first request pays for starting llama.cpp's threads
        alone_seconds, alone = timed(lambda: [story(topic) for topic in topics])
        together: list[str] = [""] * n

        def one(i: int) -> None:
            together[i] = story(topics[i])

        def all_at_once() -> None:
            threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        together_seconds, _ = timed(all_at_once)
    finally:
        server.stop()
    print(f"{n} chat requests of {tokens} tokens ({' '.join(server_args) or 'default server'}): one after "
          f"another {alone_seconds:.1f} s, all at once {together_seconds:.1f} s, ratio "
          f"{together_seconds / alone_seconds:.2f}; answers the same both ways: "
          f"{sum(a == b for a, b in zip(alone, together))} of {n}", flush=True)
    return together


class BeforeThePromptCache:
    """The defense table's model before the prompt cache: agent turns (with tools) on one server,
    tool-free calls on another, each with llama-cpp-python's one cached prefix; both forget it
    before each case, and only agent turns are remembered (a tool-free reply depended on the
    call before it on its server)."""

    def __init__(self, agent: Client, helper: Client) -> None:
        self.agent, self.helper = agent, helper
        self.remembered = RememberedReplies(agent)

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
             options: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        if tools:
            return self.remembered.chat(messages, tools=tools, options=options, **fields)
        return self.helper.chat(messages, tools=tools, options=options, **fields)

    def unload(self) -> None:
        self.agent.unload()
        self.helper.unload()


def defense_table_slice(cases: int, workers: int, full: bool = False) -> None:
    """The first ``cases`` benign and attacked cases under three defenses, three ways; or, with
    ``full``, the whole table (every case, every row) the old way and the new way only."""
    scenarios = load_scenarios(ROOT / "data" / "security_scenarios.json")
    benign, attacked = scenarios.benign_cases(), scenarios.attacked_cases()
    defenses: dict[str, list[Defense]] = standard_defenses()
    if not full:
        benign, attacked = benign[:cases], attacked[:cases]
        defenses = {"no defense": [], "spotlighting": [Spotlighting()], "tool filter": [ToolFilter()]}
    runs = len(defenses) * (len(benign) + len(attacked))

    def before() -> list[Outcome]:
        agent, helper = EmbeddedServer(*SINGLE_PREFIX), EmbeddedServer(*SINGLE_PREFIX)
        try:
            model = BeforeThePromptCache(Client(agent.url), Client(helper.url))
            outcomes = []
            for label, stack in defenses.items():
                for case in benign + attacked:
                    model.unload()
                    outcomes.append(run_case(model, scenarios, case, stack, label)[0])
            return outcomes
        finally:
            agent.stop()
            helper.stop()

    def cached(workers: int) -> Callable[[], list[Outcome]]:
        def run() -> list[Outcome]:
            server = EmbeddedServer()
            try:
                return run_table(RememberedReplies(Client(server.url)), scenarios, defenses, benign, attacked, workers)
            finally:
                server.stop()
        return run

    arms = {"before": before, "prompt cache": cached(1), f"prompt cache + {workers} workers": cached(workers)}
    if full:
        del arms["prompt cache"]
    report(f"defense table, {runs} runs ({len(defenses)} defenses x {len(benign) + len(attacked)} cases)",
           arms, lambda outcomes: [{**vars(o), "seconds": None} for o in outcomes])


def lesson_8_slice(prompts: int, workers: int) -> None:
    everything = json.loads((ROOT / "data" / "tool_prompts.json").read_text())["prompts"]
    labelled = everything[::max(1, len(everything) // prompts)][:prompts]  # every kind of prompt
    tools = lesson_8_tools()

    def arm(server_args: tuple[str, ...], workers: int) -> Callable[[], Experiment]:
        def run() -> Experiment:
            server = EmbeddedServer(*server_args)
            try:
                client = Client(server.url)
                build = raw_tool_request(client.show()["template"], tools)
                experiment = Experiment("descriptions", client.model)
                run_condition(experiment, "what", labelled, raw_sender(client), build, right_call, 2, workers)
                return experiment
            finally:
                server.stop()
        return run

    report(f"lesson 8, experiment 1, {2 * len(labelled)} requests ({len(labelled)} prompts x 2 trials)",
           {"before": arm(SINGLE_PREFIX, 1), "prompt cache": arm((), 1),
            f"prompt cache + {workers} workers": arm((), workers)},
           lambda experiment: [(r.prompt_id, r.trial, r.response["text"], r.success) for r in experiment.records])


def lesson_8_tools() -> list[dict[str, Any]]:
    """The six tools of lesson 8's experiment 1, with the "what" descriptions, from the notebook itself."""
    notebook = json.loads((ROOT / "notebooks" / "08_experiments.ipynb").read_text())
    source = next("".join(cell["source"]) for cell in notebook["cells"]
                  if cell["cell_type"] == "code" and "DESCRIPTIONS = {" in "".join(cell["source"]))
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # defines declare, ARGUMENTS, DESCRIPTIONS and toolset
    return namespace["toolset"]("what")


def report(title: str, arms: dict[str, Callable[[], Any]], comparable: Callable[[Any], Any]) -> None:
    print(f"\n{title}:", flush=True)
    seconds, results = {}, {}
    for name, run in arms.items():
        seconds[name], results[name] = timed(run)
        print(f"  {name:28} {seconds[name]:7.1f} s", flush=True)
    names = list(arms)
    for name in names[1:]:
        same = comparable(results[name]) == comparable(results[names[0]])
        print(f"  {name} / {names[0]}: {seconds[name] / seconds[names[0]]:.2f}; the same results: {same}")
    if len(names) == 3:
        same = comparable(results[names[1]]) == comparable(results[names[2]])
        print(f"  {names[2]} / {names[1]}: {seconds[names[2]] / seconds[names[1]]:.2f}; the same results: {same}")
    first, last = comparable(results[names[0]]), comparable(results[names[-1]])
    differ = sum(a != b for a, b in zip(first, last))
    print(f"  results that differ between {names[0]} and {names[-1]}: {differ} of {len(first)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4, help=f"at most {len(TOPICS)}")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--cases", type=int, default=6, help="benign and attacked cases each, per defense")
    parser.add_argument("--prompts", type=int, default=11, help="labelled prompts of lesson 8")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--only", choices=("requests", "table", "lesson8"), default=None)
    parser.add_argument("--full-table", action="store_true",
                        help="the whole defense table, before and with workers (about an hour on 2 cores)")
    args = parser.parse_args()
    if args.only in (None, "requests"):
        exact = concurrent_requests(args.requests, args.tokens)
        rows = str(args.requests)
        for arguments in (("--no-repack", "--parallel", rows), ("--parallel", rows, "--batch-rows", rows)):
            answers = concurrent_requests(args.requests, args.tokens, *arguments)
            print(f"  with {' '.join(arguments)}, {sum(a == b for a, b in zip(exact, answers))} of {args.requests} "
                  "answers equal the default server's", flush=True)
    if args.only in (None, "table"):
        defense_table_slice(args.cases, args.workers, args.full_table)
    if args.only in (None, "lesson8"):
        lesson_8_slice(args.prompts, args.workers)
