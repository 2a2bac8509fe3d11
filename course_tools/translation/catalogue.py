"""A translation catalogue: the translated text of each unit of one English file.

A catalogue is a Markdown file made of blocks. Each block starts with a marker line::

    <!-- cell 03-01 en:1a2b3c4d5e6f -->
    # 第 3 回 · ツール呼び出し
    ...

``03-01`` is the unit's id (a cell id, or a README section's slug) and ``1a2b3c4d5e6f`` the
hash of the English text the translation was made from (``units.text_hash``). The block's
text runs up to the next marker; its leading and trailing blank lines are not part of it.

Reading is strict, because whatever a reader skipped would silently vanish from the
Japanese edition: a line that looks like a marker but is not exactly one, text before the
first marker, an id given twice and a block with no text are errors that name the file and
the line (``CatalogueError``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"<!-- cell (\S+) en:([0-9a-f]{12}) -->")
LOOKS_LIKE_A_MARKER = re.compile(r"\s*<!--\s*cell\b", re.IGNORECASE)


class CatalogueError(ValueError):
    """A catalogue that cannot be read as blocks; the message names the file and the line."""


@dataclass(frozen=True)
class Block:
    """One translated unit: the unit's ``id``, the ``hash`` of the English it was translated
    from, the translated ``text`` (without the blank lines around it) and the marker's line."""

    id: str
    hash: str
    text: str
    line: int = 0

    def written(self) -> str:
        """The block as a catalogue holds it: the marker line, the text, a blank line."""
        return f"{marker(self.id, self.hash)}\n{self.text}\n\n"


def marker(unit_id: str, english_hash: str) -> str:
    """The marker line that opens the block of unit ``unit_id``, translated from ``english_hash``."""
    return f"<!-- cell {unit_id} en:{english_hash} -->"


def without_blank_edges(lines: list[str]) -> str:
    """``lines`` joined, without the blank lines at their start and end."""
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return "\n".join(lines[start:end])


def parse(text: str, name: str = "catalogue") -> list[Block]:
    """The blocks of a catalogue's ``text``, in order; ``name`` is the file, for the errors."""
    blocks: list[Block] = []
    opened: tuple[str, str, int] | None = None
    body: list[str] = []

    def close() -> None:
        if opened is None:
            if without_blank_edges(body):
                raise CatalogueError(f"{name}, line 1: text before the first marker line "
                                     "(every translation starts with `<!-- cell ID en:HASH -->`)")
            return
        unit_id, english_hash, line = opened
        translated = without_blank_edges(body)
        if not translated:
            raise CatalogueError(f"{name}, line {line}: the block of {unit_id} has no text")
        blocks.append(Block(unit_id, english_hash, translated, line))

    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if LOOKS_LIKE_A_MARKER.match(line):
            found = MARKER.fullmatch(line)
            if not found:
                raise CatalogueError(f"{name}, line {number}: a malformed marker {line.strip()!r}; a marker is "
                                     "exactly `<!-- cell ID en:HASH -->`, HASH 12 lower-case hex digits")
            close()
            if any(block.id == found.group(1) for block in blocks):
                first = next(block.line for block in blocks if block.id == found.group(1))
                raise CatalogueError(f"{name}, line {number}: a second block for {found.group(1)} "
                                     f"(the first is on line {first})")
            opened, body = (found.group(1), found.group(2), number), []
        else:
            body.append(line)
    close()
    return blocks


def read(path: Path, name: str | None = None) -> list[Block]:
    """The blocks of the catalogue at ``path`` (called ``name`` in errors); none if there is no
    such file yet."""
    if not path.exists():
        return []
    return parse(path.read_text(encoding="utf-8"), name or str(path))


def write(path: Path, blocks: list[Block]) -> None:
    """Write ``blocks`` as the catalogue at ``path`` (its folders made if needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(block.written() for block in blocks).rstrip("\n") + "\n", encoding="utf-8")
