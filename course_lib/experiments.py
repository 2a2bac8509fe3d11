"""Small, honest experiments on a real model: rates with confidence intervals.

An experiment runs one or more *conditions* (say, a vague and a specific tool
description) over a set of labelled prompts, several *trials* each (different seeds),
scores every response as a success or not, and reports each condition's success rate
with a Wilson 95% interval: the range of true rates that fit what was observed. Two
conditions whose intervals overlap a lot have not been shown to differ.

Every request and response is kept, so a surprising number can be traced back to the
exact text the model wrote. Results are saved as JSON under ``data/results/``.

Set ``COURSE_QUICK=1`` to shrink trial counts (CI does): the pipeline runs end to end in
a fraction of the time, and its numbers are then only a smoke test.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

Prompt = dict[str, Any]


def quick_mode() -> bool:
    """True when ``COURSE_QUICK=1``: run small, for CI."""
    return os.environ.get("COURSE_QUICK") == "1"


def trials(full: int, quick: int = 1) -> int:
    """The trial count to use: ``full`` normally, ``quick`` in quick mode."""
    return quick if quick_mode() else full


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval for a proportion (95% for z = 1.96).

    Unlike the textbook ``p ± z·sqrt(p(1-p)/n)``, it stays inside [0, 1] and is sensible
    for small n and for rates near 0 or 1, which is where small experiments live.
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Rate:
    successes: int
    n: int

    @property
    def value(self) -> float:
        return self.successes / self.n if self.n else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.n)

    def __str__(self) -> str:
        low, high = self.interval
        return f"{self.value:6.1%}  [{low:5.1%}, {high:5.1%}]  ({self.successes}/{self.n})"


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

    def rates(self) -> dict[str, Rate]:
        rates: dict[str, Rate] = {}
        for record in self.records:
            rate = rates.setdefault(record.condition, Rate(0, 0))
            rate.successes += record.success
            rate.n += 1
        return rates

    def table(self) -> str:
        lines = [f"{self.name} (model {self.model}; rate, Wilson 95% interval, successes/n)"]
        lines += [f"  {condition:32} {rate}" for condition, rate in self.rates().items()]
        return "\n".join(lines)


def run_condition(experiment: Experiment, condition: str, prompts: list[Prompt], send: Callable[[dict], dict],
                  build: Callable[[Prompt, int], dict], score: Callable[[Prompt, dict], bool],
                  n_trials: int) -> list[Record]:
    """Send ``build(prompt, trial)`` for every prompt and trial, score each response, keep everything."""
    new = []
    for trial in range(n_trials):
        for prompt in tqdm(prompts, desc=f"{condition} (trial {trial + 1}/{n_trials})", leave=False):
            request = build(prompt, trial)
            response = send(request)
            new.append(Record(condition, prompt["id"], trial, request, response, bool(score(prompt, response))))
    experiment.records += new
    return new


def save(experiment: Experiment, folder: Path, server: str, keep_records: bool = True) -> Path:
    """Write ``<folder>/<name>.json``: model, server, date, counts per condition, and the records."""
    folder.mkdir(parents=True, exist_ok=True)
    rates = experiment.rates()
    data = {"experiment": experiment.name, "model": experiment.model, "server": server,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "quick_mode": quick_mode(),
            "conditions": {c: {"successes": r.successes, "n": r.n} for c, r in rates.items()},
            "records": [asdict(record) for record in experiment.records] if keep_records else []}
    path = folder / f"{experiment.name}.json"
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return path


def load_rates(path: Path) -> dict[str, Rate]:
    """The per-condition counts of a saved experiment."""
    data = json.loads(Path(path).read_text())
    return {condition: Rate(**counts) for condition, counts in data["conditions"].items()}


def plot_rates(rates: dict[str, Rate], title: str, ylabel: str = "rate"):
    """Bars with their Wilson 95% intervals, n under each label."""
    import matplotlib.pyplot as plt

    names = list(rates)
    values = [rates[name].value for name in names]
    lows = [rates[name].value - rates[name].interval[0] for name in names]
    highs = [rates[name].interval[1] - rates[name].value for name in names]
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(names), 3.2))
    ax.bar(range(len(names)), values, yerr=[lows, highs], capsize=5, color="tab:blue", alpha=0.8)
    ax.set_xticks(range(len(names)), [f"{name}\n(n={rates[name].n})" for name in names], fontsize=8)
    ax.set(title=title, ylabel=f"{ylabel} (95% interval)", ylim=(0, 1.05))
    fig.tight_layout()
    return fig
