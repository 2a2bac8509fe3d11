"""Write the translated edition: each English file with its units replaced by their translation.

A built notebook is its English notebook with each markdown cell's source replaced by the
cell's current translation; its code cells, their outputs, the cell ids and the metadata
are the English notebook's (but for an exercise's stub, which says "replace this line" in
the edition's language: ``course_grading.exercises.stub``, and for a figure, which the English
run also drew in the edition's language: ``course_lib.display.figures``); a lesson's first cell ends with
its time line in the edition's words, its reading minutes counted in the translated text
(``time_line``); and the notebook's metadata gains ``course``::

    "course": {"language": "ja", "source": "notebooks/03_tool_calls.ipynb"}

So the Japanese lessons show the same committed outputs and need not be run again: that the
code is the English code is what ``build --check`` (and the test suite) proves. The built
README is the translated sections in order.

A unit without a current translation is never dropped and never shown in English without
notice: ``build`` refuses, naming each one, unless ``allow_english`` (for work in progress),
which keeps the English text under a visible notice (and lists those cells in the metadata:
``"english": [...]``), with its links rewritten to lead from the built file's folder.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

from course_grading.exercises import STUB, STUB_MESSAGES, stub
from course_lib.display.figures import METADATA as FIGURE_DRAWINGS
from course_tools.translation.links import moved
from course_tools.translation.sources import Source
from course_tools.translation.status import SourceStatus
from course_tools.translation.units import TIME_LINE, Unit

NOTICES = {  # the visible notice over a unit shown in English, by language and by why
    "ja": {"missing": "> ⚠️ **未翻訳 (untranslated)**: この部分はまだ翻訳されていないため、英語の原文を表示しています。",
           "stale": "> ⚠️ **翻訳が古くなっています (stale)**: 英語の原文が翻訳の後に変わったため、"
                    "原文を表示しています。"},
}
GENERATED = ("<!-- Generated from {english} and {catalogue} by `python -m course_tools translation build {language}`: "
             "edit those, not this file. -->")


class NotTranslated(ValueError):
    """A file cannot be built: some of its units have no current translation."""


@dataclass
class Built:
    """What ``built`` made of one source: the file's text, and the units it shows in English."""

    text: str
    english: list[str] = field(default_factory=list)


def notice(language: str, why: str) -> str:
    """The notice over a unit shown in English because it is ``why`` (``missing`` or ``stale``)."""
    notices = NOTICES.get(language, {"missing": "> ⚠️ **untranslated**: shown in English.",
                                     "stale": "> ⚠️ **stale translation**: the English changed; shown in English."})
    return notices[why]


def _text_of(status: SourceStatus, unit: Unit, allow_english: bool, language: str) -> tuple[str, bool]:
    """A unit's text in the built file, and whether it is the English one."""
    block = status.block(unit.id)
    if block is not None and block.hash == unit.hash:
        return block.text, False
    if not allow_english:
        raise NotTranslated(f"{status.source.english}: {unit.id} has no current translation")
    english = moved(unit.text, status.source.english.parent, status.source.built.parent)
    return f"{notice(language, 'stale' if block else 'missing')}\n\n{english.strip(chr(10))}", True


def refusal(status: SourceStatus) -> str | None:
    """Why ``status``'s file cannot be built even with English allowed, if it cannot."""
    if status.problem:
        return status.problem
    if status.orphans:
        return (f"{status.source.catalogue}: blocks for units that are no longer in {status.source.english} "
                f"(orphans): {', '.join(block.id for block in status.orphans)}")
    return None


def built(root: Path, status: SourceStatus, language: str, allow_english: bool = False) -> Built:
    """The text of ``status``'s built file (raises ``NotTranslated`` if a unit has no current
    translation and ``allow_english`` is false, ``ValueError`` if the file cannot be built)."""
    if reason := refusal(status):
        raise ValueError(reason)
    if status.source.is_notebook:
        return _built_notebook(root, status, language, allow_english)
    return _built_markdown(status, language, allow_english)


def _lines(text: str) -> list[str]:
    """A cell's source as a notebook stores it: a list of lines, each with its newline but the last."""
    return text.splitlines(keepends=True)


def _built_notebook(root: Path, status: SourceStatus, language: str, allow_english: bool) -> Built:
    source: Source = status.source
    notebook = json.loads((root / source.english).read_text(encoding="utf-8"))
    translated = copy.deepcopy(notebook)
    units = {unit.id: unit for unit in status.units}
    english = []
    exercise = source.english.parts[0] == "exercises" and language in STUB_MESSAGES
    for cell in translated["cells"]:
        if exercise and cell["cell_type"] == "code" and STUB in "".join(cell["source"]):
            cell["source"] = _lines("".join(cell["source"]).replace(STUB, stub(language)))
        for output in cell.get("outputs", []):
            _figure_in(output, language)
        if cell["cell_type"] == "markdown":
            text, is_english = _text_of(status, units[cell["id"]], allow_english, language)
            cell["source"] = _lines(text)
            if is_english:
                english.append(cell["id"])
    first = next((cell for cell in notebook["cells"] if cell["cell_type"] == "markdown"), None)
    if first is not None and TIME_LINE.search("".join(first["source"])):  # a lesson: its time line in this edition
        mine = next(cell for cell in translated["cells"] if cell["cell_type"] == "markdown")
        mine["source"] = _lines("".join(mine["source"]).rstrip("\n") + "\n\n" + time_line(root, source.english,
                                                                                         translated, language))
    marks: dict[str, object] = {"language": language, "source": source.english.as_posix()}
    if english:
        marks["english"] = english
    translated["metadata"]["course"] = marks
    return Built(json.dumps(translated, indent=1, sort_keys=True, ensure_ascii=False) + "\n", english)


def _figure_in(output: dict, language: str) -> None:
    """A figure's output with the drawing in ``language`` the English run made beside it, if it did."""
    drawings = output.get("metadata", {}).pop(FIGURE_DRAWINGS, None)
    if drawings and language in drawings:
        output["data"]["image/png"] = drawings[language]["image/png"]


def time_line(root: Path, english: Path, translated: dict, language: str) -> str:
    """A translated lesson's time line: the English lesson's run and exercises
    (``lesson_plan.measure``), its reading minutes from the translated text."""
    from course_tools import lesson_plan  # the lesson plan reads notebooks and solutions; only lessons need it

    lesson = lesson_plan.measure(root / english, lesson_plan.readme_run_times(
        (root / lesson_plan.RUN_TIMES_PAGE).read_text(encoding="utf-8")))
    prose = ["".join(cell["source"]) for cell in translated["cells"] if cell["cell_type"] == "markdown"]
    return lesson.time_line(language=language, reading_minutes=lesson.reading_in(language, prose))


def _built_markdown(status: SourceStatus, language: str, allow_english: bool) -> Built:
    parts, english = [], []
    for unit in status.units:
        text, is_english = _text_of(status, unit, allow_english, language)
        parts.append(text)
        if is_english:
            english.append(unit.id)
    header = GENERATED.format(english=status.source.english.as_posix(), catalogue=status.source.catalogue.as_posix(),
                              language=language)
    return Built("\n\n".join([header, *parts]) + "\n", english)
