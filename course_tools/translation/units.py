"""The English units a translation is made of, and the hash that ties a translation to one.

A unit is the smallest piece translated as a whole:

- in a notebook, each **markdown cell**, named by the cell's ``id`` (code cells are never
  translated: the Japanese notebook has the same code and the same outputs), the first
  without a lesson's time line (``TIME_LINE``: counted, not written, so each edition gets its own);
- in ``README.md``, each **section**: the text is cut before every line that starts with
  ``#`` outside a ``` fence, and a section is named by its heading's slug
  (``## For maintainers`` is ``for-maintainers``; a repeated slug gets ``-2``, ``-3``, ...;
  the text before the first heading, if any, is ``top``).

A translation records the hash of the English text it was made from: the first 12 hex
digits of the SHA-256 of the unit's text (a cell's source exactly as stored; a section's
lines with their heading and trailing newlines). When the English changes, its hash
changes, and the translation is *stale* until someone translates the new text.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

HASH_LENGTH = 12
TIME_LINE = re.compile(r"\n*\*\*Time:\*\* about (\d+) minutes[^\n]*")
"""A lesson's time line, the last line of its first cell, written by ``course_tools.lesson_plan``:
generated, not translated, so not part of the unit (``build`` writes the translation's own)."""


def text_hash(text: str) -> str:
    """The first 12 hex digits of the SHA-256 of ``text`` (UTF-8): a unit's fingerprint."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_LENGTH]


@dataclass(frozen=True)
class Unit:
    """One translatable piece of an English file: its name (``id``) and its English text."""

    id: str
    text: str

    @property
    def hash(self) -> str:
        return text_hash(self.text)

    @property
    def first_line(self) -> str:
        """The first non-blank line, to name the unit to a reader."""
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "(empty)")


def slug(heading: str) -> str:
    """A heading's name as an id: lower case, punctuation removed, spaces and ``_`` to ``-``.

    >>> slug("## For maintainers: updating a translation")
    'for-maintainers-updating-a-translation'
    """
    kept = re.sub(r"[^\w\s-]", "", heading.lstrip("#").lower()).strip()
    return re.sub(r"[\s_]+", "-", kept) or "section"


def markdown_sections(text: str) -> list[Unit]:
    """A Markdown file cut before each heading line (one starting with ``#``, outside ```
    fences), each piece named by its heading's slug; the text before the first heading is
    ``top``. Joined again in order, the pieces are ``text`` exactly."""
    units: list[Unit] = []
    current: list[str] = []
    seen: dict[str, int] = {}  # each slug: how many headings have it so far
    name, fenced = "top", False
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("#"):
            if current:
                units.append(Unit(name, "".join(current)))
                current = []
            base = slug(line)
            seen[base] = seen.get(base, 0) + 1
            name = base if seen[base] == 1 else f"{base}-{seen[base]}"
        current.append(line)
    if current:
        units.append(Unit(name, "".join(current)))
    return _unique(units, "README")


def notebook_units(notebook: dict) -> list[Unit]:
    """The markdown cells of a notebook (its JSON, as ``json.load`` reads it), by cell id."""
    units: list[Unit] = []
    for number, cell in enumerate(notebook.get("cells", [])):
        if cell.get("cell_type") != "markdown":
            continue
        if not cell.get("id"):
            raise ValueError(f"markdown cell {number} has no id: a translation is tied to its cell by the id")
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        units.append(Unit(cell["id"], TIME_LINE.sub("", text) if not units else text))
    return _unique(units, "notebook")


def units_of(path: Path) -> list[Unit]:
    """The units of an English file: a notebook's markdown cells, or a Markdown file's sections."""
    if path.suffix == ".ipynb":
        try:
            return notebook_units(json.loads(path.read_text(encoding="utf-8")))
        except ValueError as problem:
            raise ValueError(f"{path}: {problem}") from None
    return markdown_sections(path.read_text(encoding="utf-8"))


def _unique(units: list[Unit], what: str) -> list[Unit]:
    """``units``, after checking that no two share an id (a translation could not tell them apart)."""
    seen: set[str] = set()
    for unit in units:
        if unit.id in seen:
            raise ValueError(f"two units of the {what} are named {unit.id!r}: rename one (a heading, or a cell id)")
        seen.add(unit.id)
    return units
