"""A cell that needs a model this machine may not have: it runs and keeps what it printed, or shows
what it printed when the course ran it.

Lessons 3 and 4 compare the 0.5B model with the 1.5B, a second download of about a gigabyte
that a laptop in a room may not have (and CI does not). Such a cell asks for the model with
``runtime.optional_client`` and puts the part that needs it under ``recorded_run``::

    bigger = optional_client("qwen2.5-coder:1.5b", quick=quick_mode())
    with recorded_run("04_agent_loop-weather", bigger) as running:
        if running:
            answer, turns = naive_loop(weather, tools, model=bigger)
            print("answer:", repr(answer), "after", turns, "turns")

With the model, the block runs, and what it prints is also written to
``data/results/recorded/NAME.txt`` (commit it with the notebook, as any measured result).
Without it, the block is skipped and that file is printed instead, under a line that says it
is a record, not this machine's run. So the lesson's text, which discusses the recorded
numbers, stays true on every machine, and nothing is hidden: a learner with the model runs it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any, TextIO

from course_lib.config import course_file

RECORDS = "data/results/recorded"  # from the course's top folder (``course_file``)


class Tee:
    """A text stream that writes to a cell's output and keeps a copy."""

    def __init__(self, shown: TextIO) -> None:
        self.shown = shown
        self.kept: list[str] = []

    def write(self, text: str) -> int:
        self.kept.append(text)
        return self.shown.write(text)

    def flush(self) -> None:
        self.shown.flush()


def record_path(name: str) -> Path:
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"a record's name is a plain file name, not {name!r}")
    return course_file(f"{RECORDS}/{name}.txt")


@contextmanager
def recorded_run(name: str, client: Any | None) -> Iterator[bool]:
    """Yield True when ``client`` is there (run the block; what it prints is kept in the record
    ``name``), else print the record and yield False (skip the block)."""
    path = record_path(name)
    if client is None:
        if not path.is_file():
            print(f"(no record {path.as_posix()} yet: run this cell once with the model to make it)")
        else:
            print(f"[recorded: what this cell printed when the course ran it with the model ({path.as_posix()})]")
            print(path.read_text(encoding="utf-8"), end="")
        yield False
        return
    tee = Tee(sys.stdout)
    with redirect_stdout(tee):
        yield True
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(tee.kept), encoding="utf-8")
