"""The instructor's checks for understanding (docs/instructors/checks-for-understanding.md) quote
the lessons' numbers: every such number must still be in the lesson it is asked about, in its
text or its committed outputs, so that a lesson re-run with other results fails here until the
kit says the same.

A number worth checking is one a reader could get wrong: a count out of a total ("1 of 6", also
written "1/6", and pytest's "2 failed, 5 passed" counts as "5 of 7"), a percentage, a decimal
("48.5") or a whole number of three digits or more ("1,200", "482"). Section and lesson numbers
are not checked, nor a question marked ``<!-- worked example -->``, whose numbers are made up
for the calculation it asks for."""

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.release  # the kit's words against the lessons' committed text

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ROOT / "docs" / "instructors" / "checks-for-understanding.md"
NUMBER = re.compile(r"\d+ of \d+|\d+(?:\.\d+)?%|\d+\.\d+|\d{3,}")
NOT_A_RESULT = re.compile(r"\b(?:[Ss]ections?|[Ll]essons?|[Ee]xperiments?|[Ss]teps?) \d+[ab]?(?: and \d+[ab]?)?")
WORKED_EXAMPLE = "<!-- worked example -->"


def normal(text: str) -> str:
    """``text`` with one spelling per number: no thousands separators, "N/M" and pytest's
    "F failed, P passed" as "N of M", "61 %" as "61%", and single spaces."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(r"(\d+) failed, (\d+) passed", lambda m: f"{m[0]} {m[2]} of {int(m[1]) + int(m[2])}", text)
    text = re.sub(r"\b(\d+)\s*/\s*(\d+)(?![.\d])", r"\1 of \2", text)
    text = re.sub(r"(\d)\s+%", r"\1%", text)
    return " ".join(text.split())


def lesson_text(notebook: Path) -> str:
    """A lesson's Markdown and the text of its committed outputs, normalised."""
    parts = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        parts.append("".join(cell["source"]))
        for output in cell.get("outputs", []):
            parts.append("".join(output.get("text", "")))
            parts += ["".join(value) for kind, value in output.get("data", {}).items() if kind.startswith("text/")]
    return normal("\n".join(parts))


def questions() -> list[tuple[str, str]]:
    """(lesson notebook, question with its answer) for every question of the kit."""
    found = []
    for section in re.split(r"(?m)^## ", CHECKS.read_text(encoding="utf-8"))[1:]:
        linked = re.search(r"\]\(\.\./\.\./notebooks/([^)]+\.ipynb)\)", section.splitlines()[0])
        assert linked, f"a section of {CHECKS.name} links no lesson: {section.splitlines()[0]}"
        found += [(linked[1], question) for question in re.split(r"(?m)^\d+\. ", section)[1:]]
    return found


def numbers_in(question: str) -> list[str]:
    return NUMBER.findall(NOT_A_RESULT.sub("", normal(question)))


@pytest.mark.parametrize("lesson", sorted({lesson for lesson, _ in questions()}))
def test_every_number_a_check_for_understanding_quotes_is_in_its_lesson(lesson):
    text = lesson_text(ROOT / "notebooks" / lesson)
    missing = [(number, " ".join(question.split())[:100]) for name, question in questions() if name == lesson
               if WORKED_EXAMPLE not in question for number in numbers_in(question) if number not in text]
    assert not missing, f"{CHECKS.name} quotes numbers {lesson} does not say (now): {missing}"


def test_the_check_catches_a_number_the_lesson_does_not_say():
    lesson = lesson_text(ROOT / "notebooks" / "03_tool_calls.ipynb")
    assert "1 of 6" in lesson and "2 of 6" not in lesson  # the kit once said "right on 2 of 6" here
    assert numbers_in("*Right on 2 of 6 (section 9), 61% [41, 79], 1,060 s, lesson 8.*") == [
        "2 of 6", "61%", "1060"]
    assert normal("2 failed, 5 passed; 3/4; 12 %; 22 / 1.07 s") == "2 failed, 5 passed 5 of 7; 3 of 4; 12%; 22 / 1.07 s"
    assert sum(1 for _, question in questions()) >= 50
