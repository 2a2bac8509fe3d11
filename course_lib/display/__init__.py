"""What a lesson shows: the library's own code, plots of what was measured, and the widgets a
person clicks. The presentation layer: it sits above the logic it draws, and no module below
imports it (``tests/test_architecture.py``).

- ``source``: ``show_source``, the library's code as it is now (lessons 9, 9b, 11 and 12);
- ``plots``: ``plot_rates`` (lesson 8), ``plot_table`` (the defense table, lessons 9 and 12)
  and ``plot_timeline`` (an agent run, lessons 4 and 11), each a matplotlib figure;
- ``approval``: ``approval_panel``, a person's yes or no to each parked side effect (lessons 9
  and 11), and how it shows text an attacker may have written (``shown``, ``visible``).

Lessons import them from here (``from course_lib.display import plot_rates``): the modules whose
results these draw (``loop``, ``experiments``, ``security``) never import this layer, not
even inside a function (``tests/test_architecture.py``): logic does not depend on its pictures.
"""

from course_lib.display.approval import approval_panel, shown, visible
from course_lib.display.plots import interval_bars, plot_rates, plot_table, plot_timeline
from course_lib.display.source import show_source

__all__ = ["approval_panel", "interval_bars", "plot_rates", "plot_table", "plot_timeline", "show_source", "shown",
           "visible"]
