"""A long table saves as it goes: every judged run is appended to a journal, and a run that
stops (a timeout, a crash, Ctrl-C) goes on where it stopped with ``--resume``.

The journal is a JSON-lines file beside the table (``<name>.runs.jsonl``). Its first line
holds the settings that make two runs comparable (the model, the scenarios file's SHA-256,
the rows, quick mode); a resume with other settings is refused, so a table never mixes two
models or two scenario sets. Each further line is one judged run (an ``Outcome`` of
``bench.py`` as a dict, with its row in ``defense`` and its case in ``case``). The finished table
is saved by ``table.save_table`` as before, and the journal is then deleted.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

Run = dict[str, Any]


class JournalMismatch(ValueError):
    """The journal on disk was written with other settings than this run's."""


def table_settings(model: str, scenarios: Path, rows: list[str], quick: bool) -> dict[str, Any]:
    """What must be equal for two runs' outcomes to belong to one table."""
    digest = hashlib.sha256(Path(scenarios).read_bytes()).hexdigest()
    return {"model": model, "scenarios_sha256": digest, "rows": rows, "quick": quick}


class RunJournal:
    """The runs finished so far, on disk, one JSON line each; safe to add to from several threads."""

    def __init__(self, path: Path, settings: dict[str, Any], resume: bool) -> None:
        """Start a new journal at ``path``, or with ``resume`` go on with the one there.

        Raises ``FileExistsError`` if a journal is there and ``resume`` is False (a stopped run
        is never overwritten by accident), and :class:`JournalMismatch` if the one there was
        written with other settings."""
        self.path = Path(path)
        self.kept: dict[tuple[str, str], Run] = {}
        self._lock = threading.Lock()
        text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        if text.strip() and not resume:
            raise FileExistsError(f"{self.path} holds the runs of a stopped table: --resume goes on with it; "
                                  "delete it to start again")
        if text.strip():
            self._read(text, settings)
        else:  # no journal, or an empty one (a run stopped before its header was written): start anew
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(settings) + "\n", encoding="utf-8")

    def _read(self, text: str, settings: dict[str, Any]) -> None:
        """Take the runs of an earlier journal, after checking its settings.

        Lines are split on ``\\n`` only: ``json.dumps(..., ensure_ascii=False)`` leaves U+2028,
        U+0085 and the other characters that ``str.splitlines`` also breaks at raw inside a
        run's text, so ``splitlines`` would cut such a run in two and silently drop it."""
        header, *lines = text.split("\n")
        try:
            written_with = json.loads(header)
        except ValueError:
            written_with = None
        if written_with != settings:
            raise JournalMismatch(f"{self.path} was written with {header[:300]}, not {json.dumps(settings)}: "
                                  "resume with the same model, scenarios and rows, or delete it")
        for line in lines:
            if not line.strip():
                continue
            try:
                run = json.loads(line)
                self.kept[run["defense"], run["case"]] = run
            except (ValueError, TypeError, KeyError):  # the last line of a killed run may be cut short
                continue
        if not text.endswith("\n"):  # end that half-written line, so the next run starts a line of its own
            with open(self.path, "a", encoding="utf-8") as file:
                file.write("\n")

    def finished(self, row: str, case: str) -> Run | None:
        """The judged run of ``case`` under ``row`` if an earlier run already made it."""
        return self.kept.get((row, case))

    def add(self, run: Run) -> None:
        """Append one judged run (flushed at once: a crash loses at most the runs in flight)."""
        line = json.dumps(run, ensure_ascii=False)
        with self._lock, open(self.path, "a", encoding="utf-8") as file:
            file.write(line + "\n")
            file.flush()
        self.kept[run["defense"], run["case"]] = run

    def close(self) -> None:
        """The table is saved: the journal is no longer needed."""
        self.path.unlink(missing_ok=True)
