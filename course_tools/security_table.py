"""``python -m course_tools security table --scenarios FILE --out DIR``: the defense table, outside a notebook;
``python -m course_tools security poisoning ...``: lesson 12's tool-poisoning table, the same way.

Runs every benign and attacked case of the scenarios file (format: ``scenarios.py``) under
every standard defense (or those named with ``--defenses``), prints the table and the
claims it supports, and saves it with every judged run to ``DIR/defense_table.json``.

One fresh embedded server runs every case, in order. Its prompt cache makes each output at
temperature 0 independent of the cases before it, so a request that an earlier row already
sent (the same conversation so far) is answered from memory (``RememberedReplies``).
``--quick`` (or ``COURSE_QUICK=1``) runs one attacked case per defense (two for poisoning:
one per server), as CI does.

A full table is long (the 1.5B model's takes most of an hour), so every judged run is saved
as it finishes in ``DIR/<name>.runs.jsonl`` (``journal.py``). If the run stops (a request
past its time limit, a crash, Ctrl-C), the same command with ``--resume`` runs only what is
missing; the journal is deleted once the table is saved.

``--server URL --model NAME`` runs the table on another server instead, a bigger model on
a GPU machine, say: an Ollama server (``--api ollama``, the default), or any
OpenAI-compatible one such as vLLM or llama.cpp's server (``--api openai``, URL ending in
``/v1``). Every request is then sent: another server's cache may change an output.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from course_lib import config
from course_lib.client import Client
from course_lib.config import quick_mode
from course_lib.loop import ChatModel
from course_lib.openai_client import OpenAICompatible
from course_lib.runtime import EmbeddedServer, chosen_model
from course_lib.security import (
    Outcome,
    claims,
    load_scenarios,
    run_table,
    save_table,
    standard_defenses,
    summarise,
    table_cases,
    table_text,
)
from course_lib.security.bench import RememberedReplies
from course_lib.security.journal import JournalMismatch, RunJournal, table_settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_tools security",
                                     description="Lesson 9's defense table and lesson 12's tool-poisoning table.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--scenarios", type=Path, default=Path("data/security_scenarios.json"))
    common.add_argument("--out", type=Path, default=None, help="folder for the results (default data/results)")
    common.add_argument("--defenses", default=None, help="comma-separated rows to run (default: all)")
    common.add_argument("--quick", action="store_true", default=None,
                        help="a smoke test: one or two attacked cases per row (default: COURSE_QUICK)")
    common.add_argument("--server", default=None, help="run on this server instead of a fresh embedded one")
    common.add_argument("--model", default=None, help="the model to run (default: the course's, COURSE_MODEL)")
    common.add_argument("--workers", type=int, default=None,
                        help="cases run at once (default COURSE_WORKERS, else 4; the embedded server has 3 slots "
                             "on 2 cores, and a case beyond them waits)")
    common.add_argument("--resume", action="store_true",
                        help="go on with a stopped run: keep the runs its journal holds, run the others")
    common.add_argument("--api", choices=("ollama", "openai"), default="ollama",
                        help="how to talk to --server: Ollama's /api/chat, or OpenAI's /v1/chat/completions")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("table", parents=[common], help="the defense table (lesson 9)")
    commands.add_parser("poisoning", parents=[common], help="the tool-poisoning table (lesson 12)")
    args = parser.parse_args(argv)
    if args.api != "ollama" and not args.server:
        parser.error("--api is how to talk to --server: name the server too")
    quick = quick_mode(args.quick)  # passed down from here, never written into os.environ
    scenarios = load_scenarios(args.scenarios)
    workers = args.workers or config.workers()
    out = args.out or Path("data/results") / ("quick" if quick else "")

    def chosen(rows: dict[str, Any]) -> dict[str, Any]:
        names = [name.strip() for name in (args.defenses or "").split(",") if name.strip()] or list(rows)
        unknown = [name for name in names if name not in rows]
        if unknown:
            parser.error(f"unknown defenses {unknown}; the rows are: {', '.join(rows)}")
        return {name: rows[name] for name in names}

    if args.command == "poisoning":
        from course_lib.security.poisoning import poisoning_cases, run_poisoning_table, standard_rows
        policies, (benign, attacked) = chosen(standard_rows(scenarios)), poisoning_cases(scenarios, quick)
        name = "tool_poisoning"

        def run(model: ChatModel, journal: RunJournal) -> list[Outcome]:
            return run_poisoning_table(model, scenarios, policies, benign, attacked, workers, journal)
    else:
        defenses, (benign, attacked) = chosen(standard_defenses()), table_cases(scenarios, quick)
        name = "defense_table"

        def run(model: ChatModel, journal: RunJournal) -> list[Outcome]:
            return run_table(model, scenarios, defenses, benign, attacked, workers, journal)

    model_name = args.model or chosen_model()
    rows = list(policies if args.command == "poisoning" else defenses)
    try:
        journal = RunJournal(out / f"{name}.runs.jsonl", table_settings(model_name, args.scenarios, rows, quick),
                             args.resume)
    except (FileExistsError, JournalMismatch) as problem:
        parser.error(str(problem))
    resumed = len(journal.kept)
    if resumed:
        print(f"resuming: {resumed} runs already judged in {journal.path}")
    embedded = None if args.server else EmbeddedServer(model=model_name)
    try:
        if embedded:
            # a long time limit: on a busy machine a request may wait for a slot, then share 2 cores
            model: ChatModel = RememberedReplies(Client(embedded.url, model=model_name, timeout=900))
            where = "course_lib embedded server (prompt cache)"
        else:
            model = (OpenAICompatible(args.server, model_name) if args.api == "openai"
                     else Client(args.server, model=model_name))
            where = f"{args.server} ({args.api})"
        started = time.perf_counter()
        outcomes = run(model, journal)
        minutes = (time.perf_counter() - started) / 60
    finally:
        if embedded:
            embedded.stop()
    summary = summarise(outcomes)
    print(table_text(summary), "", *claims(summary), sep="\n")
    print(f"\n{len(outcomes)} runs ({resumed} of them from the journal) in {minutes:.1f} minutes")
    remembered = model.hits if isinstance(model, RememberedReplies) else 0
    print(f"{remembered} requests answered from memory")
    print("saved", save_table(outcomes, model_name, where, out, name, minutes=round(minutes, 1),
                              remembered_replies=remembered, workers=workers, scenarios=str(args.scenarios),
                              resumed_runs=resumed))
    journal.close()
