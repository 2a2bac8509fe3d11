"""What a lesson shows of the library: its source, as it is now.

A lesson that teaches a guard prints the guard's code, so the page shows what ran. That
output must not be frozen: if it were compared on every run (``# NBVAL_CHECK_OUTPUT``),
reformatting the library would break the lesson. ``show_source`` prints the current source;
its cell is re-run, not compared.

>>> show_source(show_source)  # doctest: +ELLIPSIS
def show_source(*objects: object) -> None:
...
"""

from __future__ import annotations

import inspect


def show_source(*objects: object) -> None:
    """Print the source of each class or function, as ``inspect.getsource`` gives it."""
    for item in objects:
        print(inspect.getsource(item))  # type: ignore[arg-type]
