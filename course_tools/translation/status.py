"""How far a translation is from its English: each unit current, stale or missing, and the
translations that can be found elsewhere.

For each English source, each unit is

- **current**: its catalogue has a block with the unit's id and the hash of its English text now;
- **stale**: the block's hash is another one: the English changed since it was translated;
- **missing**: no block has its id.

A block whose id is no unit of its English file any more is an **orphan** (the cell was
deleted, or moved to another notebook when a lesson was split); it is an error, never
skipped in silence. The *translation memory* looks for the text of a missing or stale unit
in every catalogue of the language: a block translated from the very same English text
(same hash), under another id or in another catalogue, is reported, and ``adopt`` copies it
to where it belongs (moving it, when it was an orphan where it stood).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from course_tools.translation import catalogue
from course_tools.translation.catalogue import Block, CatalogueError
from course_tools.translation.sources import Source, catalogues_on_disk, sources
from course_tools.translation.units import Unit, units_of


@dataclass(frozen=True)
class Elsewhere:
    """A block translated from the same English text as a unit, in ``catalogue``; ``orphan``:
    its id is no unit of that catalogue's own English file."""

    catalogue: Path
    block: Block
    orphan: bool


@dataclass
class SourceStatus:
    """One English file against its catalogue (``problem``: why they could not be compared)."""

    source: Source
    units: list[Unit] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    problem: str | None = None
    elsewhere: dict[str, list[Elsewhere]] = field(default_factory=dict)  # unit id: the same text found elsewhere

    def block(self, unit_id: str) -> Block | None:
        return next((block for block in self.blocks if block.id == unit_id), None)

    @property
    def current(self) -> list[Unit]:
        return [unit for unit in self.units if (block := self.block(unit.id)) and block.hash == unit.hash]

    @property
    def stale(self) -> list[tuple[Unit, Block]]:
        return [(unit, block) for unit in self.units if (block := self.block(unit.id)) and block.hash != unit.hash]

    @property
    def missing(self) -> list[Unit]:
        return [unit for unit in self.units if self.block(unit.id) is None]

    @property
    def orphans(self) -> list[Block]:
        ids = {unit.id for unit in self.units}
        return [block for block in self.blocks if block.id not in ids]

    @property
    def ok(self) -> bool:
        return self.problem is None and not self.stale and not self.missing and not self.orphans


@dataclass
class Survey:
    """Every source of a language; ``lonely``: catalogues whose English file is gone (each
    block in them is an orphan), with the problem of reading one, if any."""

    language: str
    statuses: list[SourceStatus]
    lonely: dict[Path, list[Block]] = field(default_factory=dict)
    lonely_problems: dict[Path, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(status.ok for status in self.statuses) and not self.lonely and not self.lonely_problems

    def status_of(self, english: Path) -> SourceStatus:
        return next(status for status in self.statuses if status.source.english == english)


def compare(root: Path, source: Source) -> SourceStatus:
    """One source against its catalogue, without the memory (``survey`` adds it)."""
    status = SourceStatus(source)
    try:
        status.units = units_of(root / source.english)
    except (OSError, ValueError) as problem:
        status.problem = f"the English file cannot be read: {problem}"
        return status
    try:
        status.blocks = catalogue.read(root / source.catalogue, source.catalogue.as_posix())
    except CatalogueError as problem:
        status.problem = str(problem)
    return status


def survey(root: Path, language: str) -> Survey:
    """Every English source of ``language`` compared with its catalogue, with the memory's finds."""
    result = Survey(language, [compare(root, source) for source in sources(root, language)])
    known = {status.source.catalogue for status in result.statuses}
    for path in catalogues_on_disk(root, language):
        if path not in known:
            try:
                result.lonely[path] = catalogue.read(root / path, path.as_posix())
            except CatalogueError as problem:
                result.lonely_problems[path] = str(problem)
    by_hash: dict[str, list[Elsewhere]] = {}
    for status in result.statuses:
        orphans = {block.id for block in status.orphans}
        for block in status.blocks:
            by_hash.setdefault(block.hash, []).append(Elsewhere(status.source.catalogue, block, block.id in orphans))
    for path, blocks in result.lonely.items():
        for block in blocks:
            by_hash.setdefault(block.hash, []).append(Elsewhere(path, block, True))
    for status in result.statuses:
        wanted = status.missing + [unit for unit, _ in status.stale]
        for unit in wanted:
            found = [hit for hit in by_hash.get(unit.hash, [])
                     if not (hit.catalogue == status.source.catalogue and hit.block.id == unit.id)]
            if found:
                status.elsewhere[unit.id] = sorted(found, key=lambda hit: not hit.orphan)  # orphans first
    return result


@dataclass(frozen=True)
class Adoption:
    """A block copied to ``target`` for ``unit`` from ``hit`` (moved, when the hit was an orphan)."""

    target: Path
    unit: Unit
    hit: Elsewhere


def adopt(root: Path, result: Survey) -> list[Adoption]:
    """Copy each translation the memory found into the catalogue it belongs to, under the
    unit's id, in the English order; an orphan that was copied leaves its old catalogue (a
    catalogue left empty, whose English file is gone, is deleted). Returns what was done."""
    done: list[Adoption] = []
    changed: dict[Path, list[Block]] = {}
    order: dict[Path, dict[str, int]] = {}
    for status in result.statuses:
        if status.problem or not status.elsewhere:
            continue
        target = status.source.catalogue
        order[target] = {unit.id: index for index, unit in enumerate(status.units)}
        blocks = changed.setdefault(target, list(status.blocks))
        for unit in status.units:
            hits = status.elsewhere.get(unit.id)
            if not hits:
                continue
            new = Block(unit.id, unit.hash, hits[0].block.text)
            blocks[:] = [block for block in blocks if block.id != unit.id]  # a stale block gives way
            _insert(blocks, new, order[target])
            done.append(Adoption(target, unit, hits[0]))
    for adoption in done:
        hit = adoption.hit
        if hit.orphan and not (hit.catalogue == adoption.target and hit.block.id == adoption.unit.id):
            if hit.catalogue not in changed:
                status_blocks = result.lonely.get(hit.catalogue)
                if status_blocks is None:
                    status_blocks = next(s.blocks for s in result.statuses if s.source.catalogue == hit.catalogue)
                changed[hit.catalogue] = list(status_blocks)
            changed[hit.catalogue] = [block for block in changed[hit.catalogue] if block != hit.block]
    for path, blocks in changed.items():
        if blocks:
            catalogue.write(root / path, blocks)
        elif path in result.lonely:
            (root / path).unlink()
    return done


def _insert(blocks: list[Block], new: Block, order: dict[str, int]) -> None:
    """Put ``new`` before the first block of a unit that comes after it in the English file."""
    place = order[new.id]
    index = next((i for i, block in enumerate(blocks) if order.get(block.id, -1) > place), len(blocks))
    blocks.insert(index, new)
