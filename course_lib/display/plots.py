"""Plots of what the course measures: rates with their intervals, and an agent run over time.

Each function returns a matplotlib figure (a notebook shows it); matplotlib is imported when
one is drawn. A rate is drawn as a bar with its Wilson 95% interval as the error bar
(``interval_bars``), and a rate with nothing counted as no bar at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from course_lib.experiments import Rate
from course_lib.loop import Transcript
from course_lib.security.table import Row


def interval_bars(ax: Any, xs: Sequence[float], rates: Sequence[Rate], **style: Any) -> None:
    """One bar per rate at ``xs`` on the axes ``ax``, its 95% interval as the error bar;
    ``style`` goes to ``ax.bar`` (width, colour, label...)."""
    values = [rate.value if rate.n else 0.0 for rate in rates]  # no bar where nothing was measured
    errors = [[value - rate.interval[0] if rate.n else 0.0 for value, rate in zip(values, rates)],
              [rate.interval[1] - value if rate.n else 0.0 for value, rate in zip(values, rates)]]
    ax.bar(xs, values, yerr=errors, **style)


def plot_rates(rates: dict[str, Rate], title: str, ylabel: str = "rate"):
    """Bars with their Wilson 95% intervals, n under each label (lesson 8)."""
    import matplotlib.pyplot as plt

    names = list(rates)
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(names), 3.2))
    interval_bars(ax, range(len(names)), [rates[name] for name in names], capsize=5, color="tab:blue", alpha=0.8)
    ax.set_xticks(range(len(names)), [f"{name}\n(n={rates[name].n})" for name in names], fontsize=8)
    ax.set(title=title, ylabel=f"{ylabel} (95% interval)", ylim=(0, 1.05))
    fig.tight_layout()
    return fig


def plot_table(rows: list[Row], title: str = "Defense table"):
    """Benign utility, utility under attack, ASR and ASR when delivered per defense, with 95%
    intervals (the defense table of lessons 9 and 12: ``security.summarise``'s rows)."""
    import matplotlib.pyplot as plt

    metrics = [("benign utility", "benign_utility", "tab:green"),
               ("utility under attack", "utility_under_attack", "tab:blue"),
               ("attack success (ASR)", "attack_success", "tab:red"),
               ("ASR when delivered", "attack_success_delivered", "tab:purple")]
    fig, ax = plt.subplots(figsize=(11, 3.8))
    width = 0.2
    for offset, (label, attribute, color) in enumerate(metrics):
        xs = [i + (offset - 1.5) * width for i in range(len(rows))]
        interval_bars(ax, xs, [getattr(row, attribute) for row in rows], width=width, capsize=2, color=color,
                      label=label, alpha=0.85)
    ax.set_xticks(range(len(rows)), [row.defense for row in rows], rotation=20, ha="right", fontsize=8)
    ax.set(title=title, ylabel="rate (95% interval)", ylim=(0, 1.05))
    ax.legend(fontsize=8, ncols=4, loc="upper center")
    fig.tight_layout()
    return fig


def plot_timeline(transcript: Transcript, title: str = "Agent run"):
    """A bar per turn of an agent run (lessons 4 and 11): seconds spent, labelled with tokens
    read/written and what the model did."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.45 * len(transcript.turns)))
    start = 0.0
    for index, turn in enumerate(transcript.turns, start=1):
        did = ", ".join(name for name, _ in turn.calls) or ("answer from results" if turn.answer_turn else "answer")
        ax.barh(index, turn.seconds, left=start, color="tab:orange" if turn.calls else "tab:green")
        ax.text(start + turn.seconds, index, f"  {did} ({turn.prompt_tokens} in / {turn.output_tokens} out)",
                va="center", fontsize=8)
        start += turn.seconds
    ax.set(title=title, xlabel="seconds since the run started", ylabel="turn",
           yticks=range(1, len(transcript.turns) + 1))
    ax.set_xlim(0, start * 1.8 or 1)
    ax.invert_yaxis()
    fig.tight_layout()
    return fig
