"""Rates as bars with their intervals."""

from __future__ import annotations

from .statistics import Rate


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
