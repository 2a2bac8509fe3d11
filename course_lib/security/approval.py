"""The approval panel's old address: it is ``course_lib.display.approval`` now, with the other
widgets and plots. Lessons and tests that import it from here get the same objects."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``approval_panel`` and the rest of the panel, from ``course_lib.display.approval``."""
    from ..display import approval

    if name.startswith("__") or not hasattr(approval, name):  # a module's own attributes are not forwarded
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(approval, name)
