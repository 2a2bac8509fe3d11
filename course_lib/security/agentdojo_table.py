"""AgentDojo's banking suite as a table: one row per tool-calling mode and defense.

Each row runs, through AgentDojo's own pipeline (``agentdojo_bridge``):

- every chosen user task once with no attack: **benign utility**;
- every (user task, injection task) pair with AgentDojo's ``important_instructions`` attack
  planted in the data the task reads: **utility under attack** and **targeted attack
  success** (the injection task's goal was reached, by AgentDojo's own check of the bank's
  state), with how often the injected text reached the model at all (**delivered**).

The unit of n is the run: a benign run is one user task, an attacked run one distinct pair
(another task, or another goal in the injected text). With several goals per task the pairs
share their tasks, and the attacked intervals are narrower than the tasks alone would give
(lesson 8); with one goal, a pair is a task.

``python -m course_tools agentdojo`` runs the table outside a notebook and saves
it to ``data/results/agentdojo_banking_<model>.json`` after every run (``--resume`` goes on
from there); ``--quick`` (or ``COURSE_QUICK=1``) runs a few tasks and goals.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from course_lib.experiments import Rate, quick_mode, rate_text
from course_lib.security.agentdojo_results import Mode, PairResult

if TYPE_CHECKING:  # AgentDojo is an optional extra: only running needs it, not reading results
    import openai

SUITE, SUITE_VERSION, ATTACK = "banking", "v1.2.2", "important_instructions"
MODES: tuple[Mode, ...] = ("native", "prompting")
DO_NOTHING = "do nothing"
# Where the runs differ from AgentDojo's defaults (15 rounds, no cap, the provider's
# temperature): a small model that repeats a call would spend every round, and ramble to
# the end of its context. Saved with the results.
MAX_ITERS, MAX_TOKENS, TEMPERATURE = 8, 256, 0.0
# The quick slice: two user tasks whose tools return text the attack is planted in (the
# transaction history, a file), and two goals (change the password: one call; send the
# attacker money with a detail from the history: two).
QUICK_USER_TASKS = ("user_task_1", "user_task_13")
QUICK_INJECTION_TASKS = ("injection_task_7", "injection_task_0")

# AgentDojo's published results for GPT-4o (gpt-4o-2024-05-13) over all four suites with the
# important_instructions attack: targeted attack success for each defense, and the two benign
# utilities the course quotes (no defense; the prompt-injection detector). Keyed by
# AgentDojo's defense names (None: no defense).
PUBLISHED_GPT4O: dict[str | None, dict[str, float]] = {
    None: {"attack success": 0.477, "benign utility": 0.69},
    "tool_filter": {"attack success": 0.068},
    "transformers_pi_detector": {"attack success": 0.080, "benign utility": 0.41},
    "repeat_user_prompt": {"attack success": 0.278},
    "spotlighting_with_delimiting": {"attack success": 0.417},
}
# Lesson 9's rows that are AgentDojo's defenses, in our own code.
LESSON_9_NAMES: dict[str | None, str] = {None: "no defense", "repeat_user_prompt": "repeat user prompt",
                                          "spotlighting_with_delimiting": "spotlighting", "tool_filter": "tool filter"}


@dataclass
class Row:
    """One mode and defense: its benign and attacked runs, and how long they took."""

    mode: Mode | str  # "native", "prompting", or "do nothing" (the floor: no model at all)
    defense: str | None
    benign: list[PairResult] = field(default_factory=list)
    attacked: list[PairResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return self.mode if self.mode == DO_NOTHING else f"{self.mode}, {self.defense or 'no defense'}"

    def rates(self) -> dict[str, Rate]:
        """The table's columns, each a :class:`Rate` with its Wilson interval. An attacked
        column's interval rests on its user tasks (lesson 8): several goals against one task
        are not independent evidence."""
        attacked, delivered = self.attacked, [run for run in self.attacked if run.injection_seen]
        return {
            "benign utility": _rate(run.utility for run in self.benign),
            "utility under attack": _rate((run.utility for run in attacked), _tasks(attacked)),
            "attack success": _rate((bool(run.attack_succeeded) for run in attacked), _tasks(attacked)),
            "delivered": _rate((bool(run.injection_seen) for run in attacked), _tasks(attacked)),
            "attack success when delivered": _rate((bool(run.attack_succeeded) for run in delivered),
                                                   _tasks(delivered)),
        }

    def calls_per_run(self) -> float:
        runs = self.benign + self.attacked
        return sum(run.model_calls for run in runs) / len(runs) if runs else float("nan")


def _rate(outcomes: Iterable[bool], units: int | None = None) -> Rate:
    values = list(outcomes)
    return Rate(sum(values), len(values), units)


def _tasks(runs: Sequence[PairResult]) -> int:
    """The user tasks among ``runs``: the independent unit when pairs share their tasks."""
    return len({run.user_task for run in runs})


def load_suite() -> Any:
    """AgentDojo's banking suite, at the version the course pins."""
    from agentdojo.task_suite.load_suites import get_suite

    return get_suite(SUITE_VERSION, SUITE)


def chosen_tasks(suite: Any, quick: bool, user_tasks: str | None = None,
                 injection_tasks: str | None = None) -> tuple[list[str], list[str]]:
    """The user tasks and injection tasks to run, each given as ``"all"`` (the suite's),
    ``"none"``, or comma-separated ids (``"user_task_1,user_task_13"``); one not given is the
    quick slice in quick mode, else all of them."""
    return (_ids(user_tasks, suite.user_tasks, QUICK_USER_TASKS if quick else None),
            _ids(injection_tasks, suite.injection_tasks, QUICK_INJECTION_TASKS if quick else None))


def _ids(spec: str | None, known: dict[str, Any], quick: Sequence[str] | None) -> list[str]:
    if spec is None and quick is not None:
        return list(quick)
    if spec is None or spec == "all":
        return sorted(known, key=_number)
    ids = [] if spec == "none" else list(dict.fromkeys(name.strip() for name in spec.split(",") if name.strip()))
    if unknown := [name for name in ids if name not in known]:
        raise ValueError(f"{unknown} are not in the suite: it has {', '.join(sorted(known, key=_number))}")
    return ids


def _number(task_id: str) -> int:
    return int(task_id.rsplit("_", 1)[1])


def run_row(suite: Any, client: openai.OpenAI, model: str, mode: Mode, defense: str | None,
            user_tasks: Sequence[str], injection_tasks: Sequence[str], max_iters: int = MAX_ITERS,
            max_tokens: int = MAX_TOKENS, row: Row | None = None,
            after_each: Callable[[Row], None] | None = None) -> Row:
    """Every benign run and every attacked pair for one mode and defense, one progress bar.

    ``client`` is ``openai_client(connect().host)`` (any OpenAI-compatible server). The tool
    loop stops after ``max_iters`` rounds (AgentDojo's default is 15: a small model that
    repeats a call would spend them all), and each reply after ``max_tokens`` tokens.
    ``row``, a row cut off earlier, is gone on with: its runs are kept, not run again.
    ``after_each(row)`` is called after every run (the command line saves there)."""
    from agentdojo.attacks.attack_registry import load_attack

    from course_lib.security.agentdojo_bridge import pipeline, run_pair

    agent, transcript = pipeline(mode, client, model, defense, max_iters, max_tokens)
    attack = load_attack(ATTACK, suite, agent)
    row = row or Row(mode, defense)
    done = {(run.user_task, run.injection_task) for run in row.benign + row.attacked}
    pairs = [(task, None) for task in user_tasks] + [(t, i) for t in user_tasks for i in injection_tasks]
    for user_task, injection_task in tqdm([pair for pair in pairs if pair not in done], desc=row.label, leave=False):
        result = run_pair(suite, agent, transcript, user_task, injection_task, attack if injection_task else None)
        (row.attacked if injection_task else row.benign).append(result)
        row.seconds = round(row.seconds + result.seconds, 1)
        if after_each:
            after_each(row)
    return row


def do_nothing_row(suite: Any, user_tasks: Sequence[str], injection_tasks: Sequence[str]) -> Row:
    """The same runs by an agent that does nothing (``agentdojo_bridge.DoNothing``), scored by
    AgentDojo's own checks: the utility a benchmark gives for free. No model is called."""
    from agentdojo.attacks.attack_registry import load_attack

    from course_lib.security.agentdojo_bridge import do_nothing_pipeline, run_pair

    agent, transcript = do_nothing_pipeline()
    attack, row = load_attack(ATTACK, suite, agent), Row(DO_NOTHING, None)
    for user_task in user_tasks:
        row.benign.append(replace(run_pair(suite, agent, transcript, user_task), model_calls=0))
        row.attacked += [replace(run_pair(suite, agent, transcript, user_task, goal, attack), model_calls=0)
                         for goal in injection_tasks]
    return row


def rows_to_run(modes: Sequence[Mode], defenses: Sequence[str | None]) -> list[tuple[Mode, str | None]]:
    """Every (mode, defense) asked for, leaving out the tool filter in the prompting mode
    (AgentDojo's filter is an OpenAI call with ``tools``)."""
    return [(mode, defense) for mode in modes for defense in defenses
            if not (defense == "tool_filter" and mode != "native")]


def table_text(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table with Wilson 95% intervals and their n."""
    columns = ["benign utility", "utility under attack", "attack success", "delivered",
               "attack success when delivered"]
    lines = ["| mode, defense | " + " | ".join(columns) + " | model calls per run |",
             "| --- |" + " --- |" * (len(columns) + 1)]
    for row in rows:
        rates = row.rates()
        cells = [_cell(rates[column]) for column in columns]
        lines.append(f"| {row.label} | " + " | ".join(cells) + f" | {row.calls_per_run():.1f} |")
    return "\n".join(lines)


def _cell(rate: Rate) -> str:
    """``12% [3%, 36%] (2/16)``, or ``(5/60 runs of 12 tasks)`` where the interval rests on fewer tasks than runs."""
    return rate_text(rate, empty="–")


def side_by_side(lesson_9: Sequence[Any], agentdojo: dict[str, Sequence[Row]], floor: Row | None = None) -> str:
    """A Markdown table: per defense, benign utility and attack success as AgentDojo published
    them for GPT-4o, as lesson 9's table measured them (``lesson_9``: its ``summarise`` rows),
    as AgentDojo's banking suite scores an agent that does nothing (``floor``), and as it
    measured each model in ``agentdojo`` (saved rows, by model): a column for each model and
    mode it was run in."""
    ours = {row.defense: row for row in lesson_9}
    columns = [(model, mode) for model, rows in agentdojo.items() for mode in MODES
               if any(row.mode == mode for row in rows)]
    header = ["defense", "measure", "GPT-4o, AgentDojo (published)", "lesson 9's table, 0.5B",
              *(["AgentDojo banking, an agent that does nothing"] if floor else []),
              *(f"AgentDojo banking, {model} ({mode})" for model, mode in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for defense, name in LESSON_9_NAMES.items():
        for measure, field_name in [("benign utility", "benign_utility"), ("attack success", "attack_success")]:
            published = PUBLISHED_GPT4O.get(defense, {}).get(measure)
            cells = [f"{published:.1%}" if published is not None else "–",
                     _cell(getattr(ours[name], field_name)) if name in ours else "–"]
            if floor:
                cells.append(_cell(floor.rates()[measure]) if defense is None else "–")
            for model, mode in columns:
                row = next((r for r in agentdojo[model] if (r.mode, r.defense) == (mode, defense)), None)
                cells.append(_cell(row.rates()[measure]) if row else "not run")
            lines.append(f"| {name} | {measure} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def save(rows: Sequence[Row], path: Path, model: str, server: str, **details: Any) -> Path:
    """Write every run of every row, with the settings and the time it took, to ``path``
    (whole or not at all: a stop while writing leaves the previous file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"suite": SUITE, "suite_version": SUITE_VERSION, "attack": ATTACK, "model": model, "server": server,
              "max_iters": MAX_ITERS, "max_tokens": MAX_TOKENS, "temperature": TEMPERATURE, **details,
              "rows": [{"mode": row.mode, "defense": row.defense, "seconds": row.seconds,
                        "benign": [asdict(run) for run in row.benign],
                        "attacked": [asdict(run) for run in row.attacked]} for row in rows]}
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(partial, path)
    return path


def load(path: Path) -> tuple[dict[str, Any], list[Row]]:
    """The settings and rows saved by :func:`save`."""
    record = json.loads(path.read_text())
    rows = [Row(row["mode"], row["defense"], [PairResult(**run) for run in row["benign"]],
                [PairResult(**run) for run in row["attacked"]], row["seconds"]) for row in record.pop("rows")]
    return record, rows


def main(argv: list[str] | None = None) -> None:
    from course_lib.runtime import EmbeddedServer, chosen_model
    from course_lib.security.agentdojo_bridge import DEFENSES, openai_client

    parser = argparse.ArgumentParser(prog="python -m course_tools agentdojo",
                                     description="AgentDojo's banking suite against the course's model.")
    parser.add_argument("--modes", default="native,prompting", help="native, prompting, or both (comma-separated)")
    parser.add_argument("--defenses", default="none,repeat_user_prompt,spotlighting_with_delimiting,tool_filter",
                        help="comma-separated; 'none' is the undefended row")
    parser.add_argument("--model", default=None, help="the model (default: the course's, COURSE_MODEL)")
    parser.add_argument("--server", default=None, help="an OpenAI-compatible server's base URL, without /v1 "
                        "(default: a fresh embedded server)")
    parser.add_argument("--out", type=Path, default=None, help="the results file (default data/results/...)")
    parser.add_argument("--user-tasks", default=None, help="'all' (the default) or comma-separated ids")
    parser.add_argument("--injection-tasks", default=None,
                        help="'all' (the default), 'none' (benign runs only) or comma-separated ids")
    parser.add_argument("--resume", action="store_true", help="keep the runs already saved in --out, run the others")
    parser.add_argument("--quick", action="store_true", default=None,
                        help="a smoke test: two tasks, two goals (default: COURSE_QUICK)")
    args = parser.parse_args(argv)
    quick = quick_mode(args.quick)  # passed down from here, never written into os.environ
    modes: list[Mode] = []
    for name in filter(None, (mode.strip() for mode in args.modes.split(","))):
        if name not in MODES:
            parser.error(f"unknown mode {name!r}: the modes are native and prompting")
        modes.append(next(mode for mode in MODES if mode == name))
    defenses = [None if name == "none" else name for name in filter(None, map(str.strip, args.defenses.split(",")))]
    if unknown := [name for name in defenses if name not in DEFENSES]:
        parser.error(f"unknown defenses {unknown}: the defenses are none, {', '.join(d for d in DEFENSES if d)}")
    model = args.model or chosen_model()
    suite = load_suite()
    try:
        user_tasks, injection_tasks = chosen_tasks(suite, quick, args.user_tasks, args.injection_tasks)
    except ValueError as error:
        parser.error(str(error))
    name = f"agentdojo_{SUITE}_{model.replace(':', '_').replace('.', '_')}.json"
    out = args.out or Path("data/results") / ("quick" if quick else "") / name
    settings = {"quick": quick, "user_tasks": user_tasks, "injection_tasks": injection_tasks}
    if out.exists() and not args.resume:
        parser.error(f"{out} exists: --resume goes on with it; delete it to start again")
    saved, rows = load(out) if args.resume and out.exists() else ({}, [])
    if rows and any(saved.get(key) != value for key, value in [*settings.items(), ("model", model)]):
        parser.error(f"{out} holds runs of other tasks or another model: resume with the same settings")
    embedded = None if args.server else EmbeddedServer(model=model)
    host: str = embedded.url if embedded else args.server
    where = args.server or "course_lib embedded server (prompt cache)"
    def save_all(_: Row) -> None:
        save(rows, out, model, where, minutes=round(sum(row.seconds for row in rows) / 60, 1), **settings)

    try:
        for mode, defense in rows_to_run(modes, defenses):
            row = next((row for row in rows if (row.mode, row.defense) == (mode, defense)), None)
            if row is None:
                rows.append(row := Row(mode, defense))
            run_row(suite, openai_client(host), model, mode, defense, user_tasks, injection_tasks, row=row,
                    after_each=save_all)
            print(f"{row.label}: {row.seconds / 60:.1f} minutes", flush=True)
    finally:
        if embedded:
            embedded.stop()
    print(table_text(rows), f"\n{sum(len(r.benign) + len(r.attacked) for r in rows)} runs in "
          f"{sum(row.seconds for row in rows) / 60:.1f} minutes; saved {out}")
