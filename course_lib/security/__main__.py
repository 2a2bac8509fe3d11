"""``python -m course_lib.security table --scenarios FILE --out DIR``: the defense table, outside a notebook.

Runs every benign and attacked case of the scenarios file (format: ``scenarios.py``) under
every standard defense (or those named with ``--defenses``), prints the table and the
claims it supports, and saves it with every judged run to ``DIR/defense_table.json``.

Two fresh server instances are started (one for the agent's turns, one for tool-free
calls), and before every case both forget their cached prompts (``--no-reset-cache`` keeps
them: faster, but then a case's output can depend on the case before it). ``--quick`` (or
``COURSE_QUICK=1``) runs one attacked case per defense, as CI does.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from ..client import Client
from ..config import quick_mode
from ..runtime import EmbeddedServer, chosen_model
from . import (
    TwoInstances,
    claims,
    load_scenarios,
    run_table,
    save_table,
    standard_defenses,
    summarise,
    table_cases,
    table_text,
)
from .bench import RememberedReplies


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_lib.security",
                                     description="Lesson 9: the defense table against prompt injection.")
    commands = parser.add_subparsers(dest="command", required=True)
    table = commands.add_parser("table", help="run the defense table")
    table.add_argument("--scenarios", type=Path, default=Path("data/security_scenarios.json"))
    table.add_argument("--out", type=Path, default=None, help="folder for the results (default data/results)")
    table.add_argument("--defenses", default=None,
                       help=f"comma-separated rows to run (default all: {', '.join(standard_defenses())})")
    table.add_argument("--reset-cache", action=argparse.BooleanOptionalAction, default=True,
                       help="start every case from an empty prompt cache (default: yes)")
    table.add_argument("--quick", action="store_true", help="a smoke test: one attacked case per defense")
    args = parser.parse_args(argv)
    if args.quick:
        os.environ["COURSE_QUICK"] = "1"
    defenses = standard_defenses()
    if args.defenses:
        names = [name.strip() for name in args.defenses.split(",") if name.strip()]
        unknown = [name for name in names if name not in defenses]
        if unknown:
            parser.error(f"unknown defenses {unknown}; the rows are: {', '.join(defenses)}")
        defenses = {name: defenses[name] for name in names}
    scenarios = load_scenarios(args.scenarios)
    benign, attacked = table_cases(scenarios)
    agent, helper = EmbeddedServer(), EmbeddedServer()  # fresh instances: no earlier request in their caches
    try:
        model_name = chosen_model()
        agent_turns: Client | RememberedReplies = Client(agent.url, model=model_name)
        if args.reset_cache:  # every case starts cold, so an agent turn already answered can be replayed
            agent_turns = RememberedReplies(agent_turns)
        model = TwoInstances(agent_turns, Client(helper.url, model=model_name))
        started = time.perf_counter()
        outcomes = run_table(model, scenarios, defenses, benign, attacked,
                             before_each=model.unload if args.reset_cache else None)
        minutes = (time.perf_counter() - started) / 60
    finally:
        agent.stop()
        helper.stop()
    rows = summarise(outcomes)
    print(table_text(rows), "", *claims(rows), sep="\n")
    print(f"\n{len(outcomes)} runs in {minutes:.1f} minutes")
    out = args.out or Path("data/results") / ("quick" if quick_mode() else "")
    print("saved", save_table(outcomes, model_name, "course_lib embedded server (two instances)", out,
                              minutes=round(minutes, 1), reset_cache=args.reset_cache,
                              scenarios=str(args.scenarios)))


if __name__ == "__main__":
    main()
