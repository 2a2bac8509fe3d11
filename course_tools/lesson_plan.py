"""How long each lesson takes in a room, from what can be counted and what was measured.

    python -m course_tools lesson_plan                 # one line per lesson
    python -m course_tools lesson_plan --sections      # and one per ``##`` section
    python -m course_tools lesson_plan --wpm 150 --exercise-minutes 12
    python -m course_tools lesson_plan --write-times   # each lesson's "**Time:**" line, from these numbers
    python -m course_tools lesson_plan --lang ja       # the Japanese edition's minutes (its agendas')

An agenda (docs/instructors/) needs minutes per lesson, and a guess is easy to write and hard
to check. Here every number has a source:

- **reading**: the words of the lesson's Markdown cells, and of its code cells, counted here;
  minutes are words / ``--wpm`` (200 words a minute by default, a usual rate for technical
  text; code is counted word for word at the same rate);
- **running**: the seconds each code cell took in the committed run, read from the
  notebook's own ``execution`` timestamps (kernel start not included), and docs/teaching.md's
  measured run time for the whole lesson, kernel and server start included
  (``README_RUN_TIMES``: its exact words, which must still be in that page);
- **exercises**: how many the lesson has (``solutions/``) and how many lines their solutions
  take (between the ``### BEGIN SOLUTION`` markers); the minutes per exercise are an
  allowance you choose (``--exercise-minutes``, 10 by default), not a measurement.

A lesson's minutes are reading + the larger of the two run times + exercises. Discussion and
breaks are not in them. They are an estimate built from those counts, not a learner timed.

**The core path** (``CORE``) is the lessons every learner walks, each with its first exercises;
every concept of the two seed articles is first taught in one of them (docs/concepts.md), and
the core takes at most ``CORE_LIMIT`` minutes. The other lessons are deep dives, each linked
from the core lesson it extends, and the other exercises are more practice.

Each lesson says its own minutes at the end of its first cell, in a line this module writes
(``time_line``) and a test keeps current: a change to a lesson's words or its committed run
changes the line, and ``--write-times`` rewrites it.

An appendix (``notebooks/appendix_NAME.ipynb``, for the curious) is no lesson: it has no
minutes and no place in an agenda, and the command lists it below the table with its words.
A notebook in ``notebooks/`` named neither like a lesson nor like an appendix is an error,
not left out.
"""

from __future__ import annotations

import argparse
import datetime
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from course_grading.exercises import BEGIN, END
from course_grading.grading import sections as exercise_sections
from course_tools.slides import HEADING, at_headings
from course_tools.translation.units import TIME_LINE

ROOT = Path(__file__).resolve().parent.parent
WORDS_PER_MINUTE = 200
MINUTES_PER_EXERCISE = 10

# The measured run time of each lesson top to bottom on 2 cores, as the instructors' page
# (RUN_TIMES_PAGE) says it: lesson -> (seconds in full, seconds with COURSE_QUICK=1 or None, its
# words). Where the page gives a range ("2 to 3 minutes"), the upper end is used.
RUN_TIMES_PAGE = "docs/teaching.md"
README_RUN_TIMES: dict[str, tuple[float, float | None, str]] = {
    "1": (29, None, "lesson 1 29 s, 2 37 s, 3 193 s, 4 213 s, 5 227 s, 6 109 s, 7 130 s"),
    "2": (37, None, "lesson 1 29 s, 2 37 s, 3 193 s, 4 213 s, 5 227 s, 6 109 s, 7 130 s"),
    "3": (193, None, "lesson 1 29 s, 2 37 s, 3 193 s, 4 213 s, 5 227 s, 6 109 s, 7 130 s"),
    "4": (213, None, "lesson 1 29 s, 2 37 s, 3 193 s, 4 213 s, 5 227 s, 6 109 s, 7 130 s"),
    "5": (227, None, "lesson 1 29 s, 2 37 s, 3 193 s, 4 213 s, 5 227 s, 6 109 s, 7 130 s"),
    "6": (109, None, "lesson 1 29 s, 2 37 s, 3 193 s, 4 213 s, 5 227 s, 6 109 s, 7 130 s"),
    "7": (130, None, "lesson 1 29 s, 2 37 s, 3 193 s, 4 213 s, 5 227 s, 6 109 s, 7 130 s"),
    "8": (1060, 180, "18 minutes (lesson 8: its cells took 1,060 s with 4 requests at a time"),
    "9": (240, 180, "one attacked case per defense itself, about 4 minutes in full"),
    "10": (150, None, "Lesson 10 takes about 2.5 minutes"),
    "11": (210, 90, "lesson 11 about 3.5 minutes in full"),
    "12": (180, None, "lesson 12 about 3 minutes"),
    "13": (240, None, "lesson 13 about 4 minutes"),
}
QUICK_WORDS = {"8": "with `COURSE_QUICK=1` (about 2 to 3 minutes each",
               "9": "with `COURSE_QUICK=1` (about 2 to 3 minutes each",
               "11": "about 1.5 minutes with `COURSE_QUICK=1`"}
# The core path: lesson -> how many of its exercises (its first ones) the core includes.
CORE: dict[str, int] = {"1": 2, "2": 1, "3": 1, "4": 1, "5": 1, "6": 1, "7": 1, "9": 1, "10": 1, "11": 1, "13": 1}
CORE_LIMIT = 360  # minutes: a day of self-study
ESTIMATED = (f"estimated by `python -m course_tools lesson_plan`: {WORDS_PER_MINUTE} words a minute, the measured "
             f"run, {MINUTES_PER_EXERCISE} minutes an exercise")
LESSON_FILE = re.compile(r"^(\d+[ab]?)_\w+\.ipynb$")  # 9a and 9b sit between 9 and 10
APPENDIX_FILE = re.compile(r"^appendix_\w+\.ipynb$")
WORD = re.compile(r"\S*\w\S*")  # a run of non-space characters with a letter or digit in it
CHARACTERS_PER_MINUTE = {"ja": 500}  # a translated edition's prose: characters (not spaces) a minute
TIME_LINE_IN = {"ja": re.compile(r"\n*\*\*所要時間:\*\*[^\n]*")}  # its lessons' time lines (``japanese_time_line``)
ESTIMATED_IN = {"ja": f"`python -m course_tools lesson_plan` による見積もり: 日本語の文は毎分 "
                      f"{CHARACTERS_PER_MINUTE['ja']} 字、コードは毎分 {WORDS_PER_MINUTE} 語、計測した実行時間、"
                      f"演習 1 問 {MINUTES_PER_EXERCISE} 分"}


@dataclass
class Section:
    """One part of a lesson: from a ``##`` heading (or the lesson's start) to the next."""

    title: str
    prose_words: int = 0
    code_words: int = 0
    code_cells: int = 0
    seconds: float = 0.0  # the code cells' run time in the committed run

    @property
    def words(self) -> int:
        return self.prose_words + self.code_words


@dataclass
class Lesson:
    number: str  # "1" ... "13", "9a", "9b"
    path: Path
    title: str
    stated: str | None  # the lesson's own "About N minutes", if it says so
    sections: list[Section] = field(default_factory=list)
    exercises: int = 0
    solution_lines: int = 0
    readme_seconds: float | None = None  # in full, kernel and server start included
    readme_quick_seconds: float | None = None  # with COURSE_QUICK=1

    @property
    def words(self) -> int:
        return sum(section.words for section in self.sections)

    @property
    def code_words(self) -> int:
        return sum(section.code_words for section in self.sections)

    @property
    def code_cells(self) -> int:
        return sum(section.code_cells for section in self.sections)

    def reading_in(self, language: str, prose: list[str]) -> float:
        """Reading minutes in a translated edition whose Markdown cells are ``prose`` (without the
        time line): ``translated_reading_minutes`` of that text and this lesson's code."""
        return translated_reading_minutes(prose, self.code_words, language)

    @property
    def seconds(self) -> float:
        return sum(section.seconds for section in self.sections)

    def run_seconds(self, quick: bool = False) -> float:
        """The longer of the committed run's cells and the README's measured run; with ``quick``,
        the README's run with ``COURSE_QUICK=1`` where it gives one (the committed run is a full one)."""
        if quick and self.readme_quick_seconds is not None:
            return self.readme_quick_seconds
        return max(self.seconds, self.readme_seconds or 0.0)

    @property
    def core_exercises(self) -> int | None:
        """How many of its exercises the core path includes; ``None`` for a deep dive."""
        return CORE.get(self.number)

    def time_line(self, wpm: float = WORDS_PER_MINUTE, per_exercise: float = MINUTES_PER_EXERCISE,
                  language: str = "en", reading_minutes: float | None = None) -> str:
        """The line a lesson ends its first cell with: its minutes, where they come from, and its
        place on the core path. A translated edition (``language``) gives its own ``reading_minutes``
        (``translated_reading_minutes``); the rest is the lesson's, measured once."""
        total = self.minutes(wpm, per_exercise, reading=reading_minutes)
        running = max(1, math.ceil(self.run_seconds() / 60))
        reading = max(1, total - running - round(self.exercises * per_exercise))  # so that the parts add up
        core = self.core_exercises
        if core is not None:
            core = min(core, self.exercises)
        core_total = None if core is None else self.minutes(wpm, per_exercise, exercises=core, reading=reading_minutes)
        if language == "ja":
            return japanese_time_line(total, reading, running, self.exercises, per_exercise, core, core_total)
        if not self.exercises:
            parts = f"{reading} of reading and {running} of running the cells (no exercises)"
        else:
            exercises = f"{self.exercises} exercise" + ("s" if self.exercises > 1 else "")
            parts = (f"{reading} of reading, {running} of running the cells and "
                     f"{self.exercises * per_exercise:g} for the {exercises}")
        if core is None:
            place = "a deep dive, not on the core path"
        elif core == self.exercises:
            place = "all of it on the core path"
        else:
            chosen = "exercise 1" if core == 1 else f"exercises 1 to {core}" if core > 2 else "exercises 1 and 2"
            place = f"on the core path, with {chosen} only, about {core_total}"
        return f"**Time:** about {total} minutes: {parts}; {place} ({ESTIMATED})."

    def minutes(self, wpm: float = WORDS_PER_MINUTE, per_exercise: float = MINUTES_PER_EXERCISE,
                quick: bool = False, exercises: int | None = None, reading: float | None = None) -> int:
        """Reading + running + exercises (all of them, or the first ``exercises``), rounded up to whole
        minutes; ``reading``: the reading minutes of a translated edition, instead of words / ``wpm``."""
        if exercises is not None and not 0 <= exercises <= self.exercises:
            raise ValueError(f"lesson {self.number} has {self.exercises} exercises, not {exercises}")
        done = self.exercises if exercises is None else exercises
        read = self.words / wpm if reading is None else reading
        return math.ceil(read + self.run_seconds(quick) / 60 + done * per_exercise)


def japanese_time_line(total: int, reading: int, running: int, exercises: int, per_exercise: float,
                       core: int | None, core_total: int | None) -> str:
    """``time_line``'s numbers in the Japanese edition's words."""
    parts = f"読むのに {reading} 分、セルの実行に {running} 分、" + (
        f"演習 {exercises} 問に {exercises * per_exercise:g} 分" if exercises else "演習はありません")
    if core is None:
        place = "コアパスには含まれない発展編です"
    elif core == exercises:
        place = "すべてがコアパスに含まれます"
    else:
        chosen = "演習 1" if core == 1 else "演習 1 と 2" if core == 2 else f"演習 1〜{core}"
        place = f"コアパスでは{chosen} だけで約 {core_total} 分です"
    return f"**所要時間:** 約 {total} 分 ({parts})。{place} ({ESTIMATED_IN['ja']})。"


def translated_reading_minutes(prose: list[str], code_words: int, language: str) -> float:
    """Reading minutes of a lesson in a translated edition: its translated Markdown at that
    language's pace in characters (``CHARACTERS_PER_MINUTE``: Japanese has no spaces to count
    words by), its code, the same in every edition, word by word at ``WORDS_PER_MINUTE``."""
    characters = sum(len("".join(text.split())) for text in prose)
    return characters / CHARACTERS_PER_MINUTE[language] + code_words / WORDS_PER_MINUTE


def words_in(text: str) -> int:
    return len(WORD.findall(text))


def cell_seconds(cell: Any) -> float:
    """How long a code cell ran in the committed run, from its ``execution`` timestamps (0 if none)."""
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = datetime.datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()


def sections_of(notebook: Any) -> list[Section]:
    """The notebook's ``#``/``##`` sections with their words, code cells and run time."""
    found = [Section("(before the first heading)")]
    for cell in notebook.cells:
        if cell.cell_type == "code":
            found[-1].code_cells += 1
            found[-1].code_words += words_in(cell.source)
            found[-1].seconds += cell_seconds(cell)
        elif cell.cell_type == "markdown":
            for part in at_headings(cell.source):
                heading = HEADING.match(part.splitlines()[0]) if part else None
                if heading and len(heading.group(1)) <= 2:
                    found.append(Section(part.splitlines()[0].lstrip("#").strip()))
                found[-1].prose_words += words_in(part)
    return [section for section in found if section.words or section.code_cells]


def readme_run_times(readme: str) -> dict[str, tuple[float, float | None]]:
    """``README_RUN_TIMES`` after checking that the instructors' page (``RUN_TIMES_PAGE``, given
    as its text) still says each of them."""
    text = " ".join(readme.split())
    for number, (_, _, words) in README_RUN_TIMES.items():
        for said in (words, QUICK_WORDS.get(number)):
            if said and said not in text:
                raise ValueError(f"{RUN_TIMES_PAGE} no longer says {said!r} (lesson {number}'s run time): "
                                 "measure again and update README_RUN_TIMES in course_tools/lesson_plan.py")
    return {number: (full, quick) for number, (full, quick, _) in README_RUN_TIMES.items()}


def solution_lines(notebook: Any) -> int:
    """Lines of code between the solution markers (what a learner writes, in the worked solution)."""
    count, inside = 0, False
    for cell in notebook.cells:
        for line in cell.source.splitlines() if cell.cell_type == "code" else []:
            if line.strip() in (BEGIN, END):
                inside = line.strip() == BEGIN
            elif inside and line.strip() and not line.strip().startswith("#"):
                count += 1
    return count


def measure(path: Path, readme: dict[str, tuple[float, float | None]]) -> Lesson:
    """Everything this module knows about the lesson at ``path`` (``notebooks/NN_name.ipynb``)."""
    match = LESSON_FILE.match(path.name)
    if not match:
        raise ValueError(f"{path.name} is not named like a lesson (NN_name.ipynb)")
    notebook = nbformat.read(path, as_version=4)
    number = match.group(1).lstrip("0")
    sections = sections_of(notebook)
    title = next((s.title for s in sections if s.title.startswith("Lesson")), path.stem).replace("`", "")
    stated = TIME_LINE.search(notebook.cells[0].source) if notebook.cells else None
    lesson = Lesson(number, path, title, stated.group(1) if stated else None, sections)
    solution = path.parent.parent / "solutions" / path.name
    if solution.is_file():
        solved = nbformat.read(solution, as_version=4)
        lesson.exercises = sum(1 for part in exercise_sections(solved) if part.number > 0)
        lesson.solution_lines = solution_lines(solved)
    lesson.readme_seconds, lesson.readme_quick_seconds = readme.get(number, (None, None))
    return lesson


def notebooks_in(root: Path) -> list[Path]:
    """The notebooks in ``root/notebooks`` (not its folders), after checking each is a lesson or an appendix."""
    paths = sorted((root / "notebooks").glob("*.ipynb"))
    for path in paths:
        if not (LESSON_FILE.match(path.name) or APPENDIX_FILE.match(path.name)):
            raise ValueError(f"notebooks/{path.name} is named neither like a lesson (NN_name.ipynb, NNa_name.ipynb, "
                             "NNb_name.ipynb) nor like an appendix (appendix_name.ipynb)")
    return paths


def appendices(root: Path = ROOT) -> list[Path]:
    """The appendices in ``notebooks/``: read by the curious, timed by no agenda."""
    return [path for path in notebooks_in(root) if APPENDIX_FILE.match(path.name)]


def lessons(root: Path = ROOT) -> list[Lesson]:
    """Every lesson in ``notebooks/``, in the course's order (9a and 9b after 9)."""
    readme = readme_run_times((root / RUN_TIMES_PAGE).read_text(encoding="utf-8"))
    paths = [path for path in notebooks_in(root) if LESSON_FILE.match(path.name)]
    if not paths:
        raise ValueError(f"no lessons (NN_name.ipynb) in {root / 'notebooks'}")
    return sorted((measure(path, readme) for path in paths), key=lambda lesson: lesson.path.name)


def appendix_line(path: Path, wpm: float) -> str:
    """One line for an appendix: its words and the committed run's seconds, and no minutes for an agenda."""
    found = sections_of(nbformat.read(path, as_version=4))
    words, seconds = sum(section.words for section in found), sum(section.seconds for section in found)
    return (f"appendix, not timed for an agenda: {path.name}, {words:,} words ({words / wpm:.1f} min of reading), "
            f"{seconds / 60:.1f} min of running in the committed run")


def minutes_text(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds / 60:.1f}"


def table(found: list[Lesson], wpm: float, per_exercise: float, with_sections: bool = False) -> str:
    """A Markdown table: one row per lesson (and per section), the numbers and the minutes."""
    rows = ["| lesson | prose words | code words | code cells | reading min | committed run min "
            "| README run min (quick) | exercises (solution lines) | lesson says | minutes (quick) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for lesson in found:
        quick = lesson.readme_quick_seconds is not None
        rows.append(" | ".join([
            f"| {lesson.number} · {lesson.title.split('·', 1)[-1].strip()}",
            f"{sum(s.prose_words for s in lesson.sections):,}", f"{lesson.code_words:,}",
            str(lesson.code_cells), f"{lesson.words / wpm:.1f}", minutes_text(lesson.seconds),
            minutes_text(lesson.readme_seconds) + (f" ({minutes_text(lesson.readme_quick_seconds)})" if quick else ""),
            f"{lesson.exercises} ({lesson.solution_lines})", f"about {lesson.stated} min" if lesson.stated else "–",
            f"{lesson.minutes(wpm, per_exercise)}" + (f" ({lesson.minutes(wpm, per_exercise, quick=True)})"
                                                      if quick else "") + " |"]))
        for section in lesson.sections if with_sections else []:
            rows.append(" | ".join([f"| ↳ {section.title}", f"{section.prose_words:,}", f"{section.code_words:,}",
                                    str(section.code_cells), f"{section.words / wpm:.1f}",
                                    minutes_text(section.seconds), "", "", "", " |"]))
    return "\n".join(rows)


def core_minutes(found: list[Lesson], wpm: float = WORDS_PER_MINUTE,
                 per_exercise: float = MINUTES_PER_EXERCISE) -> int:
    """The core path's minutes: each core lesson with its core exercises."""
    return sum(lesson.minutes(wpm, per_exercise, exercises=lesson.core_exercises)
               for lesson in found if lesson.core_exercises is not None)


def translated_reading(lesson: Lesson, language: str, root: Path = ROOT) -> float:
    """A lesson's reading minutes in a translated edition (``notebooks/<language>/``): its text at
    that language's pace (``translated_reading_minutes``), without its own time line."""
    translated = nbformat.read(root / "notebooks" / language / lesson.path.name, as_version=4)
    prose = [cell.source for cell in translated.cells if cell.cell_type == "markdown"]
    prose[0] = TIME_LINE_IN[language].sub("", prose[0])  # not its own time line
    return lesson.reading_in(language, prose)


def translated_core_minutes(found: list[Lesson], language: str, root: Path = ROOT) -> int:
    """The core path's minutes in a translated edition: its reading (``translated_reading``), the
    run and the exercises the same as in English."""
    return sum(lesson.minutes(exercises=lesson.core_exercises, reading=translated_reading(lesson, language, root))
               for lesson in found if lesson.core_exercises is not None)


def _full_and_quick(lesson: Lesson, reading: float, per_exercise: float, exercises: int | None = None) -> str:
    """A lesson's minutes with a translated edition's ``reading``, and in quick mode where it has one."""
    full = lesson.minutes(per_exercise=per_exercise, reading=reading, exercises=exercises)
    if lesson.readme_quick_seconds is None:
        return f"{full}"
    return f"{full} ({lesson.minutes(per_exercise=per_exercise, reading=reading, exercises=exercises, quick=True)})"


def translated_table(found: list[Lesson], language: str, per_exercise: float) -> str:
    """A Markdown table of a translated edition's minutes, one row per lesson: what its agendas
    (``docs/instructors/agenda-*.<language>.md``) are built from."""
    rows = [f"| lesson | reading min ({language}) | run min (quick) | exercises | minutes (quick) "
            "| core exercises | core minutes (quick) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for lesson in found:
        reading = translated_reading(lesson, language)
        quick = lesson.readme_quick_seconds is not None
        core = lesson.core_exercises
        rows.append(" | ".join([
            f"| {lesson.number}", f"{reading:.1f}",
            minutes_text(lesson.run_seconds()) + (f" ({minutes_text(lesson.run_seconds(True))})" if quick else ""),
            str(lesson.exercises), _full_and_quick(lesson, reading, per_exercise), "–" if core is None else str(core),
            ("–" if core is None else _full_and_quick(lesson, reading, per_exercise, min(core, lesson.exercises)))
            + " |"]))
    return "\n".join(rows)


def core_line(found: list[Lesson], wpm: float, per_exercise: float) -> str:
    """One line: the core path's lessons, exercises and minutes, and the whole course's."""
    core = [lesson for lesson in found if lesson.core_exercises is not None]
    deep = [lesson.number for lesson in found if lesson.core_exercises is None]
    return (f"core path: lessons {', '.join(lesson.number for lesson in core)} with "
            f"{sum(lesson.core_exercises or 0 for lesson in core)} exercises, "
            f"{core_minutes(found, wpm, per_exercise)} minutes (at most {CORE_LIMIT}); deep dives: "
            f"lessons {', '.join(deep)}; every lesson and exercise: "
            f"{sum(lesson.minutes(wpm, per_exercise) for lesson in found)} minutes; the Japanese edition's core, "
            f"its text at {CHARACTERS_PER_MINUTE['ja']} characters a minute: "
            f"{translated_core_minutes(found, 'ja')} minutes")


def write_time_lines(found: list[Lesson]) -> list[Path]:
    """End each lesson's first cell with its current ``time_line``; return the notebooks changed."""
    changed = []
    for lesson in found:
        notebook = nbformat.read(lesson.path, as_version=4)
        first = notebook.cells[0]
        text = TIME_LINE.sub("", first.source).rstrip("\n") + "\n\n" + lesson.time_line()
        if text != first.source:
            first.source = text
            nbformat.write(notebook, lesson.path)
            changed.append(lesson.path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_tools lesson_plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--wpm", type=float, default=WORDS_PER_MINUTE, help="reading speed, words a minute")
    parser.add_argument("--exercise-minutes", type=float, default=MINUTES_PER_EXERCISE,
                        help="the allowance for one exercise, in minutes")
    parser.add_argument("--sections", action="store_true", help="one row per ## section too")
    parser.add_argument("--lang", choices=sorted(CHARACTERS_PER_MINUTE),
                        help="the minutes of a translated edition: its text read at that language's pace")
    parser.add_argument("--write-times", action="store_true",
                        help="end each lesson's first cell with its time line (at the default rates)")
    args = parser.parse_args(argv)
    if args.wpm <= 0 or args.exercise_minutes < 0:
        parser.error("--wpm must be above 0 and --exercise-minutes at least 0")
    try:
        found, extra = lessons(), appendices()
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.write_times:
        for path in write_time_lines(found):
            print(f"wrote the time line of {path.name}")
        return 0
    if args.lang:
        print(translated_table(found, args.lang, args.exercise_minutes))
        print(f"\nreading: the {args.lang} text at {CHARACTERS_PER_MINUTE[args.lang]} characters a minute, code at "
              f"{WORDS_PER_MINUTE} words a minute; core path: {translated_core_minutes(found, args.lang)} minutes")
        return 0
    print(table(found, args.wpm, args.exercise_minutes, args.sections))
    print(f"\nreading at {args.wpm:g} words a minute; {args.exercise_minutes:g} minutes per exercise; "
          "run time: the longer of the committed run's cells and the README's measured run")
    print(core_line(found, args.wpm, args.exercise_minutes))
    for path in extra:
        print(appendix_line(path, args.wpm))
    return 0
