"""``python -m course_lib.security table --scenarios FILE``: the defense table, outside a notebook.

Runs every benign and attacked case of the scenarios file under every standard defense,
prints the table and saves it (with every judged run) to ``--out``. ``--quick`` (or
``COURSE_QUICK=1``) runs one attacked case per defense, as CI does.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..client import Client
from ..experiments import quick_mode
from ..runtime import EmbeddedServer, connect
from . import TwoInstances, load_scenarios, run_table, save_table, standard_defenses, summarise, table_cases, table_text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_lib.security",
                                     description="Lesson 9: the defense table against prompt injection.")
    commands = parser.add_subparsers(dest="command", required=True)
    table = commands.add_parser("table", help="run the defense table")
    table.add_argument("--scenarios", type=Path, default=Path("data/security_scenarios.json"))
    table.add_argument("--out", type=Path, default=None, help="folder for the results (default data/results)")
    table.add_argument("--quick", action="store_true", help="a smoke test: one attacked case per defense")
    args = parser.parse_args(argv)
    if args.quick:
        os.environ["COURSE_QUICK"] = "1"
    scenarios = load_scenarios(args.scenarios)
    benign, attacked = table_cases(scenarios)
    client = connect()
    helper = EmbeddedServer()  # a second instance for tool-free calls keeps the agent's prompt cached
    try:
        model = TwoInstances(client, Client(helper.url, model=client.model))
        outcomes = run_table(model, scenarios, standard_defenses(), benign, attacked)
    finally:
        helper.stop()
    print(table_text(summarise(outcomes)))
    out = args.out or Path("data/results") / ("quick" if quick_mode() else "")
    print("saved", save_table(outcomes, client.model, client.host, out))


if __name__ == "__main__":
    main()
