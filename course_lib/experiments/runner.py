"""Run conditions over labelled prompts, several trials each; keep every request and response; save the counts."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from tqdm.auto import tqdm

from course_lib.chat_template import render
from course_lib.config import quick_mode
from course_lib.experiments.statistics import Rate
from course_lib.tool_parser import parse_tool_calls

Prompt = dict[str, Any]
Item = TypeVar("Item")
Result = TypeVar("Result")


def trials(full: int, quick: int = 1) -> int:
    """The trial count to use: ``full`` normally, ``quick`` in quick mode."""
    return quick if quick_mode() else full


@dataclass
class Record:
    """One request, its response and its score."""

    condition: str
    prompt_id: str
    trial: int
    request: dict[str, Any]
    response: dict[str, Any]
    success: bool


@dataclass
class Experiment:
    """Records of one experiment, grouped by condition."""

    name: str
    model: str
    records: list[Record] = field(default_factory=list)

    def rates(self, keep: Callable[[Record], bool] | None = None) -> dict[str, Rate]:
        """Successes, trials and prompts per condition, over the records ``keep`` accepts (all by default).

        The prompts are the independent units: each rate's interval rests on them, not on the
        trials (see :class:`Rate`).
        """
        rates: dict[str, Rate] = {}
        prompts: dict[str, set[str]] = {}
        for record in self.records:
            if keep is not None and not keep(record):
                continue
            rate = rates.setdefault(record.condition, Rate(0, 0))
            rate.successes += record.success
            rate.n += 1
            prompts.setdefault(record.condition, set()).add(record.prompt_id)
        for condition, rate in rates.items():
            rate.units = len(prompts[condition])
        return rates

    def table(self) -> str:
        lines = [f"{self.name} (model {self.model}; rate, Wilson 95% interval, successes/n)"]
        lines += [f"  {condition:32} {rate}" for condition, rate in self.rates().items()]
        return "\n".join(lines)


def run_all(function: Callable[[Item], Result], items: Sequence[Item], workers: int = 1,
            desc: str = "") -> list[Result]:
    """``function`` of every item, ``workers`` at a time; the results in the order of ``items``.

    With more than one worker the items' requests reach the server together: the course's
    server decodes them in shared batches (``--parallel``), Ollama with ``OLLAMA_NUM_PARALLEL``,
    vLLM always. Each result keeps its item's place, so the records, the rates and the saved
    file are those of a run one item at a time, whichever finishes first. One progress bar
    counts the finished items.
    """
    with tqdm(total=len(items), desc=desc, leave=False) as bar:
        if workers <= 1:
            results = []
            for item in items:
                results.append(function(item))
                bar.update()
            return results
        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(function, item) for item in items]
            try:
                for future in as_completed(futures):
                    future.result()  # the first error stops the run
                    bar.update()
            except BaseException:  # an error, or an interrupt: send no more requests
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            return [future.result() for future in futures]


def run_condition(experiment: Experiment, condition: str, prompts: list[Prompt], send: Callable[[dict], dict],
                  build: Callable[[Prompt, int], dict], score: Callable[[Prompt, dict], bool],
                  n_trials: int, workers: int = 1) -> list[Record]:
    """Send ``build(prompt, trial)`` for every prompt and trial, score each response, keep everything.

    ``workers`` requests are in flight at once (see :func:`run_all`)."""
    def one(case: tuple[int, Prompt]) -> Record:
        trial, prompt = case
        request = build(prompt, trial)
        response = send(request)
        return Record(condition, prompt["id"], trial, request, response, bool(score(prompt, response)))

    cases = [(trial, prompt) for trial in range(n_trials) for prompt in prompts]
    new = run_all(one, cases, workers, desc=f"{condition} ({len(cases)} requests)")
    experiment.records += new
    return new


def raw_tool_request(template: str, tools: list[dict], temperature: float = 0.7,
                     num_predict: int = 80) -> Callable[[Prompt, int], dict]:
    """A ``build`` for :func:`run_condition`: the prompt rendered with ``tools``, seeded by the trial.

    The request is sent raw (lesson 2), so the record keeps the model's exact text.
    """
    def build(prompt: Prompt, trial: int) -> dict:
        return {"prompt": render(template, [{"role": "user", "content": prompt["text"]}], tools=tools),
                "tool_names": [tool["function"]["name"] for tool in tools],
                "options": {"temperature": temperature, "seed": trial, "num_predict": num_predict}}
    return build


def raw_sender(client: Any) -> Callable[[dict], dict]:
    """A ``send`` for :func:`run_condition`: posts a raw prompt, parses the calls out of the text."""
    def send(request: dict) -> dict:
        raw = client.generate(request["prompt"], raw=True, options=request["options"])
        reply = parse_tool_calls(raw["response"], request["tool_names"])
        return {"text": raw["response"],
                "calls": [{"name": c.name, "arguments": c.arguments, "style": c.style} for c in reply.tool_calls],
                "prompt_eval_count": raw["prompt_eval_count"], "seconds": raw["total_duration"] / 1e9}
    return send


def right_call(prompt: Prompt, response: dict) -> bool:
    """The score for a labelled prompt: the right first call with the expected values, or no call.

    ``call`` prompts need their ``tool`` called first, with every listed argument equal to the
    expected value (case-insensitive; ``None`` accepts any value; a list accepts any of its
    values, as "Tokyo" or "東京" for a request written in Japanese). Other prompts need no call.
    """
    if prompt["kind"] != "call":
        return not response["calls"]
    if not response["calls"]:
        return False
    call = response["calls"][0]
    return call["name"] == prompt["tool"] and all(
        argument_matches(call["arguments"].get(name, ""), expected) for name, expected in prompt["arguments"].items())


def argument_matches(value: Any, expected: Any) -> bool:
    """Whether a call's argument value is the expected one (see ``right_call``)."""
    if expected is None:
        return True
    accepted = expected if isinstance(expected, list) else [expected]
    return str(value).lower() in {str(option).lower() for option in accepted}


def save(experiment: Experiment, folder: Path, server: str) -> Path:
    """Write ``<folder>/<name>.json``: model, server, date, counts per condition, and every record."""
    return save_rates(experiment.name, experiment.model, experiment.rates(), folder, server,
                      records=[asdict(record) for record in experiment.records])


def save_rates(name: str, model: str, rates: dict[str, Rate], folder: Path, server: str, **details: Any) -> Path:
    """Write ``<folder>/<name>.json`` for rates computed some other way; ``details`` are saved as they are."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {"experiment": name, "model": model, "server": server,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "quick_mode": quick_mode(),
            "conditions": {c: {"successes": r.successes, "n": r.n, "units": r.units} for c, r in rates.items()},
            **details}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return path


def load_rates(path: Path) -> dict[str, Rate]:
    """The per-condition counts of a saved experiment."""
    data = json.loads(Path(path).read_text())
    return {condition: Rate(**counts) for condition, counts in data["conditions"].items()}
