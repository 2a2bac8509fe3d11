"""The capstone's measurements outside a notebook, on any model the course knows.

``python -m course_tools kiosk evaluate --model qwen2.5-coder:1.5b``: lesson 11's evaluation
(``VARIANTS`` on every case of ``data/kiosk_requests.json``, through ``run_variants``, as
the lesson runs it for the 0.5B), saved as ``data/results/capstone_qwen2_5-coder_1_5b.json``.

``python -m course_tools kiosk routing --small qwen2.5-coder:0.5b --large qwen2.5-coder:1.5b``:
the agent as built three ways on the same cases, the small model alone, the large model
alone, and routed (``routing.Router``: the small model first, the large one for each turn
that fails a check), saved as ``data/results/capstone_routing.json``. The three take turns
case by case, so that a moment when the machine is busy with something else slows all three.

``python -m course_tools kiosk languages``: the agent as built on every case in English
(``--cases``) and in Japanese (``--ja-cases``, ``data/kiosk_requests_ja.json``: the same cases
by id and the same checks), the two taking turns case by case on one model, then compared
paired by request (McNemar's exact test), saved as
``data/results/capstone_languages_<model>.json``.

Each model runs on the course's embedded server (``connect``: your Ollama if it has the
model), one case at a time. Before the measured runs every server answers one request
that is not counted (``warm_up``), so that no arm pays for a cold prompt cache.
With ``COURSE_QUICK=1`` (or ``--quick``) only the first three cases run, into
``data/results/quick/``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from pathlib import Path

from course_lib.config import quick_mode
from course_lib.kiosk.evaluation import (
    Result,
    compared_by_request,
    evaluate,
    evaluation_cases,
    load_cases,
    rows_text,
    run_variants,
    save_results,
    summary,
    warm_up,
)
from course_lib.kiosk.routing import Router
from course_lib.loop import ChatModel
from course_lib.runtime import chosen_model, connect


def results_name(prefix: str, model: str) -> str:
    """``capstone_qwen2_5-coder_1_5b`` for ``qwen2.5-coder:1.5b``: a file name that names the model."""
    return f"{prefix}_{model.replace(':', '_').replace('.', '_')}"


def show(variants: dict[str, list[Result]]) -> None:
    for name, results in variants.items():
        totals = summary(results)
        print(f"{name}: {totals['succeeded']} of {totals['requests']} succeeded, {totals['seconds_total']} s")
        print(rows_text(results))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_tools kiosk", description=__doc__.split("\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cases", type=Path, default=Path("data/kiosk_requests.json"))
    common.add_argument("--data", type=Path, default=Path("data/products.json"), help="the shop's products and orders")
    common.add_argument("--out", type=Path, default=None, help="folder for the results (default data/results)")
    common.add_argument("--quick", action="store_true", default=None,
                        help="a smoke test: the first three cases (default: COURSE_QUICK)")
    commands = parser.add_subparsers(dest="command", required=True)
    evaluate_command = commands.add_parser("evaluate", parents=[common], help="lesson 11's evaluation on one model")
    evaluate_command.add_argument("--model", default=None, help="default: the course's model (COURSE_MODEL)")
    routing_command = commands.add_parser("routing", parents=[common], help="small alone, large alone, routed")
    routing_command.add_argument("--small", default="qwen2.5-coder:0.5b")
    routing_command.add_argument("--large", default="qwen2.5-coder:1.5b")
    languages_command = commands.add_parser("languages", parents=[common],
                                            help="the agent as built on the same requests in English and Japanese")
    languages_command.add_argument("--model", default=None, help="default: the course's model (COURSE_MODEL)")
    languages_command.add_argument("--ja-cases", type=Path, default=Path("data/kiosk_requests_ja.json"))
    args = parser.parse_args(argv)
    quick = quick_mode(args.quick)  # passed down from here, never written into os.environ
    for path in (args.cases, args.data, *([args.ja_cases] if args.command == "languages" else [])):
        if not path.is_file():
            parser.error(f"{path} is not a file (run from the course's folder, or name it)")
    cases = evaluation_cases(load_cases(args.cases), quick)
    out = args.out or Path("data/results") / ("quick" if quick else "")
    started = time.perf_counter()
    if args.command == "evaluate":
        model_name = args.model or chosen_model()
        model = connect(model_name)
        warm_up(model, args.data)
        variants = run_variants(model, cases, args.data)
        name, server, described = results_name("capstone", model_name), model.host, model_name
    elif args.command == "languages":
        model_name = args.model or chosen_model()
        model = connect(model_name)
        warm_up(model, args.data)
        translated = {case.id: case for case in load_cases(args.ja_cases)}
        if missing := [case.id for case in cases if case.id not in translated]:
            parser.error(f"{args.ja_cases} has no Japanese for the cases {', '.join(missing)}")
        variants = {"English": [], "Japanese": []}
        for case in cases:  # the two languages take turns, case by case, as the routing arms do
            variants["English"] += evaluate(model, [case], args.data)
            variants["Japanese"] += evaluate(model, [translated[case.id]], args.data)
        name, server, described = results_name("capstone_languages", model_name), model.host, model_name
    else:
        small, large = connect(args.small), connect(args.large)
        for client in (small, large):
            warm_up(client, args.data)
        arms: dict[str, ChatModel] = {f"{args.small} alone": small, f"{args.large} alone": large,
                                      "routed": Router(small, large)}
        variants = {arm: [] for arm in arms}
        for case in cases:  # the arms take turns, case by case: a busy moment of the machine falls on all alike
            for arm, chat_model in arms.items():
                variants[arm] += evaluate(chat_model, [case], args.data)
        name, server, described = "capstone_routing", f"{small.host}, {large.host}", Router(small, large).model
    show(variants)
    if args.command == "languages":
        print(compared_by_request([asdict(result) for result in variants["English"]],
                                  [asdict(result) for result in variants["Japanese"]]))
    print(f"{sum(len(results) for results in variants.values())} requests in "
          f"{(time.perf_counter() - started) / 60:.1f} minutes (starting the servers and warming them up included)")
    print("saved", save_results(variants, described, server, out, name))
