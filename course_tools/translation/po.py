"""The catalogues as gettext PO files, for a translator's tools (Poedit, Weblate, OmegaT, Lokalize).

    python -m course_tools translation export ja --po DIR   # one PO file per English source
    python -m course_tools translation import ja --po DIR   # the translated entries back

The course's catalogues (``translations/<language>/``) stay the source of truth: a block's marker
carries the hash of the English it was translated from, which ``status``, ``adopt`` and ``build``
rely on, and a catalogue reads as Markdown in a diff. PO is the exchange format the gettext
world's tools open, written with ``polib``:

- one file per English source, at ``DIR/<the catalogue's path under translations/<language>/>``
  with ``.po`` instead of ``.md`` (``DIR/notebooks/03_tool_calls.po``);
- one entry per unit: ``msgctxt`` its id, ``msgid`` its English now, ``msgstr`` its translation
  (empty where there is none yet);
- a stale translation (its English changed since) is ``#, fuzzy``, with the English it was
  translated from as ``#| msgid`` where git history has it: what a PO editor shows as the change.

``import`` reads each file back: an entry with a translation and no fuzzy flag becomes its unit's
block, translated from the English the entry shows. An entry whose English is not the unit's
English now (the English changed after the export), or whose id is no unit, is refused and named,
and nothing of that file is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polib

from course_tools.translation import catalogue
from course_tools.translation.catalogue import Block
from course_tools.translation.history import english_then
from course_tools.translation.sources import TRANSLATIONS, Source
from course_tools.translation.status import SourceStatus, compare

MARKER_START = "<!-- cell "  # how a marker line begins (catalogue.marker): a translated line may not


def po_path(folder: Path, source: Source, language: str) -> Path:
    """Where ``source``'s PO file goes in ``folder``: its catalogue's path, ``.po`` for ``.md``."""
    return folder / source.catalogue.relative_to(Path(TRANSLATIONS, language)).with_suffix(".po")


def exported(root: Path, status: SourceStatus, language: str) -> polib.POFile:
    """The PO file of one source: an entry per unit, in the English file's order."""
    po = polib.POFile(wrapwidth=0)
    po.metadata = {"Project-Id-Version": status.source.english.as_posix(), "Language": language,
                   "MIME-Version": "1.0", "Content-Type": "text/plain; charset=UTF-8",
                   "Content-Transfer-Encoding": "8bit"}
    for unit in status.units:
        block = status.block(unit.id)
        entry = polib.POEntry(msgctxt=unit.id, msgid=unit.text, msgstr=block.text if block else "",
                              occurrences=[(status.source.english.as_posix(), "")])
        if block is not None and block.hash != unit.hash:
            entry.flags.append("fuzzy")
            entry.previous_msgid = english_then(root, status.source.english, unit.id, block.hash)
        po.append(entry)
    return po


def export(root: Path, statuses: list[SourceStatus], language: str, folder: Path) -> list[Path]:
    """Write the PO file of each readable source into ``folder``; return the files written."""
    written = []
    for status in statuses:
        if status.problem:
            continue
        path = po_path(folder, status.source, language)
        path.parent.mkdir(parents=True, exist_ok=True)
        exported(root, status, language).save(str(path))
        written.append(path)
    return written


@dataclass
class Imported:
    """What one PO file gave: the units it translated or changed, and the entries it refused."""

    source: Source
    changed: list[str]
    refused: list[str]


def imported(root: Path, source: Source, po: polib.POFile) -> Imported:
    """Read ``po`` against ``source``'s English now; write its catalogue if nothing was refused."""
    status = compare(root, source)
    if status.problem:
        return Imported(source, [], [status.problem])
    units = {unit.id: unit for unit in status.units}
    blocks = {block.id: block for block in status.blocks}
    changed, refused = [], []
    for entry in po:
        unit = units.get(entry.msgctxt or "")
        if unit is None:
            refused.append(f"{entry.msgctxt}: no unit of {source.english.as_posix()} has this id")
        elif entry.msgid != unit.text:
            refused.append(f"{entry.msgctxt}: its English is not {source.english.as_posix()}'s now (export again)")
        elif any(line.startswith(MARKER_START) for line in entry.msgstr.splitlines()):
            refused.append(f"{entry.msgctxt}: a line of its translation begins as a catalogue marker ({MARKER_START})")
        elif entry.msgstr.strip() and not entry.fuzzy:
            old, text = blocks.get(unit.id), entry.msgstr.strip("\n")
            if old is None or (old.hash, old.text) != (unit.hash, text):
                changed.append(unit.id)
            blocks[unit.id] = Block(unit.id, unit.hash, text)
    if not refused and changed:
        order = [unit.id for unit in status.units]
        ordered = [blocks[id_] for id_ in order if id_ in blocks]
        ordered += [block for block in status.blocks if block.id not in units]  # orphans stay, for status to name
        catalogue.write(root / source.catalogue, ordered)
    return Imported(source, changed if not refused else [], refused)
